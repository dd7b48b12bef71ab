import MQTT

/// Presence: who is online, by connection epoch; our own record, heartbeats and expiry.
extension GroupCoordinator {
    /// Network thread: a presence record (an empty payload: cleared, a clean exit).
    func onPresenceMessage(_ participant: String, _ message: MQTTMessage) {
        let presence = message.payload.isEmpty ? nil : Wire.decode(Wire.Presence.self, from: message.payload)
        guard presence != nil || message.payload.isEmpty else { return countRejection() }
        if participant == localParticipant.id {
            // Only a record of our epoch (our presence, or our will): an earlier process's proves nothing of ours.
            if message.retain, presence?.epoch == epoch {
                state.withLock { $0.replay?.ownPresence = true }
            } else if presence?.epoch == epoch, presence?.status == .online {
                // Our own publish coming back live.
                state.withLock { state in
                    state.replay?.complete = true
                    return state.presenceEcho
                }?.yield(())
            }
        }
        let wallNow = configuration.clock.milliseconds()
        let (action, welcomes, wake) = state.withLock { state in
            let action = state.machine.onPresence(participant, presence, wallNow: wallNow, now: .now)
            let wake = state.machine.takeWakeRequest()
            // A new connection came online where nothing is retained: it cannot know the group unless told.
            guard !client.retainAvailable, case .changed(_, _?) = action, presence?.status == .online,
                state.machine.isWelcomeResponder(for: participant)
            else { return (action, false, wake) }
            return (action, state.welcomesNow(participant, observer: false), wake)
        }
        armUpkeep(wake)
        performPresence(action)
        if welcomes { tasks.spawn { [self] in await welcome(participant) } }
    }

    /// Network thread: an observer asks what a newcomer would be told. The participant that ranks first
    /// for it among those online welcomes it, and in each session the member that ranks first among the
    /// active ones sends it a catch-up that lists the members. A stored record is no request: it would
    /// be answered again on every replay.
    func onObserveMessage(_ observer: String, _ message: MQTTMessage) {
        guard !message.retain, observer != localParticipant.id, Wire.decode(Wire.Observe.self, from: message.payload) != nil else {
            return countRejection()
        }
        let (welcomes, cores) = state.withLock { state in
            (state.machine.isWelcomeResponder(for: observer) && state.welcomesNow(observer, observer: true), Array(state.cores.values))
        }
        if welcomes { tasks.spawn { [self] in await welcome(observer) } }
        for core in cores { core.onObserver(observer) }
    }

    /// Tells `newcomer` what a broker with retained messages would have: who is online and which
    /// sessions are live, as we know them.
    private func welcome(_ newcomer: String) async {
        let (online, cores) = state.withLock { ($0.machine.connections, Array($0.cores.values)) }
        let others = online.filter { $0.key != localParticipant.id && $0.key != newcomer }.map {
            Wire.Presence(participant: $0.key, status: .online, epoch: $0.value.epoch, name: nil, interval: $0.value.interval)
        }
        let sessions = cores.filter { !$0.isInvalidated }.map { $0.wireAnnouncement($0.announcement) }.sorted { $0.session < $1.session }
        // As many welcomes as the broker's packet limit takes: the presences in the first.
        let first = Wire.Welcome(presences: ([onlinePresence] + others).sorted { $0.participant < $1.participant }, sessions: [])
        let groups = Wire.groups(
            sessions, budget: Wire.budget(maximumPacketSize: client.maximumPacketSize), used: (try? Wire.encode(first).count) ?? 0)
        let topic = topics.welcome(to: newcomer, from: localParticipant.id)
        for (index, sessions) in groups.enumerated() {
            let part = Wire.Welcome(
                presences: index == 0 ? first.presences : [], sessions: sessions, more: index < groups.count - 1 ? true : nil)
            guard let payload = try? Wire.encode(part) else { continue }
            _ = try? await client.publish(to: topic, payload: payload, qos: .atLeastOnce)
        }
    }

    /// Network thread: a welcome addressed to us. Its records are applied as if the broker had replayed
    /// them: the presences as the participants' own, the sessions as copies of the welcomer's.
    func onWelcomeMessage(from sender: String, _ message: MQTTMessage) {
        guard let welcome = Wire.decode(Wire.Welcome.self, from: message.payload) else { return countRejection() }
        let wallNow = configuration.clock.milliseconds()
        for presence in welcome.presences where presence.participant != localParticipant.id {
            performPresence(presenceInput { $0.onPresence(presence.participant, presence, wallNow: wallNow, now: .now) })
        }
        for announcement in welcome.sessions {
            onCopy(announcement.session, publisher: sender, announcement, lifetime: announcement.ttl)
        }
        if welcome.more != true { state.withLock { $0.welcomed }?.yield(()) }  // the last part
    }

    /// Publishes our presence and waits until it comes back; on a broker without retained messages, then
    /// also (at most the catch-up timeout) for someone to welcome us — nobody does when we are the first.
    /// Newcomers we answer meanwhile are welcomed once the wait is over, with what it brought.
    func publishPresenceAndAwaitWelcome() async throws(GroupSyncError) {
        guard !client.retainAvailable else { return try await publishPresenceAndAwaitEcho() }
        let inbox = Inbox<Void>()
        state.withLock { $0.welcomed = inbox }
        // The wait is over: what it brought decides whom we still answer (those online, if we rank first).
        func endWait() -> [String] {
            state.withLock { state in
                state.welcomed = nil
                defer { state.owedWelcomes = [] }
                return state.owedWelcomes.filter {
                    ($0.observer || state.machine.connections[$0.newcomer] != nil) && state.machine.isWelcomeResponder(for: $0.newcomer)
                }.map(\.newcomer)
            }
        }
        do {
            try await publishPresenceAndAwaitEcho()
        } catch {
            _ = endWait()
            throw error
        }
        await withTimeout(configuration.catchUpTimeout) { _ = await inbox.next() }
        for newcomer in endWait() { tasks.spawn { [self] in await welcome(newcomer) } }
    }

    /// Network thread: a heartbeat.
    func onHeartbeatMessage(_ participant: String, _ message: MQTTMessage) {
        guard let heartbeat = Wire.decode(Wire.Heartbeat.self, from: message.payload) else { return countRejection() }
        let wallNow = configuration.clock.milliseconds()
        performPresence(presenceInput { $0.onHeartbeat(participant, heartbeat, wallNow: wallNow, now: .now) })
    }

    /// Feeds one presence input to the machine and arms the timer for what it asks.
    private func presenceInput(
        _ input: (inout CoordinatorStateMachine) -> CoordinatorStateMachine.PresenceAction
    ) -> CoordinatorStateMachine.PresenceAction {
        let (action, wake) = state.withLock { state in (input(&state.machine), state.machine.takeWakeRequest()) }
        armUpkeep(wake)
        return action
    }

    func performPresence(_ action: CoordinatorStateMachine.PresenceAction) {
        switch action {
        case .none: break
        case .rejected: countRejection()
        case let .changed(participant, epoch):
            for core in state.withLock({ Array($0.cores.values) }) { core.onPresence(participant, epoch: epoch) }
        case .republishOwn: tasks.spawn { try? await self.publishPresence() }
        }
    }

    /// Our heartbeat interval (ms): keepalive / 2 (``Configuration/presenceHeartbeats``); nil without heartbeats.
    var heartbeatInterval: Int64? {
        // Within the interval's range (PROTOCOL.md): a keepalive above MQTT's 65,535 s is not one.
        configuration.presenceHeartbeats ? Int64(min(max(configuration.mqtt.keepAlive, 1), 65_535)) * 500 : nil
    }

    /// Sends a heartbeat every interval while connected.
    func startHeartbeats(every interval: Int64) {
        let heartbeat = Wire.Heartbeat(epoch: epoch, interval: interval)
        tasks.spawn { [self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(interval))
                // Not once close() began: a heartbeat after the goodbye would bring us back for a while.
                guard client.isConnected, !state.withLock({ $0.machine.isClosed }), let payload = try? Wire.encode(heartbeat)
                else { continue }
                _ = try? await client.publish(to: topics.heartbeat(localParticipant.id), payload: payload, qos: .atMostOnce)
            }
        }
    }

    var onlinePresence: Wire.Presence {
        Wire.Presence(
            participant: localParticipant.id, status: .online, epoch: epoch, name: configuration.displayName, interval: heartbeatInterval)
    }

    private func publishPresence() async throws(GroupSyncError) {
        try await retained.publish(
            topics.presence(localParticipant.id), try Wire.encode(onlinePresence), lifetime: configuration.presenceTimeToLive)
    }

    /// Publishes our presence and waits (at most 5 s) until it comes back: every retained presence and
    /// announcement the broker delivered on (re)subscribing is in by then.
    func publishPresenceAndAwaitEcho() async throws(GroupSyncError) {
        let echo = Inbox<Void>()
        state.withLock { $0.presenceEcho = echo }
        defer { state.withLock { $0.presenceEcho = nil } }
        try await publishPresence()
        await withTimeout(.seconds(5)) { _ = await echo.next() }
    }
}

extension GroupCoordinator.CoordinatorState {
    /// Whether to welcome `newcomer` now: not while our own welcome wait runs — it is owed until then.
    mutating func welcomesNow(_ newcomer: String, observer: Bool) -> Bool {
        guard welcomed != nil else { return true }
        if !owedWelcomes.contains(where: { $0.newcomer == newcomer }) { owedWelcomes.append((newcomer, observer)) }
        return false
    }
}
