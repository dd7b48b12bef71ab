import MQTT

/// One participant's membership in one group, over one broker connection — the analogue of being in a
/// FaceTime call: everyone connected with the same `group` sees the same sessions.
///
/// ```swift
/// let coordinator = try await GroupCoordinator.connect(.init(broker: "mqtt://127.0.0.1:1883", group: "family", participant: "alice"))
/// GroupCoordinator.setShared(coordinator)          // so that MyActivity.sessions() and activate() work
/// for await session in MyActivity.sessions() { try await session.join() }
/// ```
///
/// Liveness is per connection: the coordinator publishes a retained online presence and registers an MQTT
/// will that marks it lost, so a crashed process disappears from every session within about a second
/// (socket closed) or 1.5 × keepalive (frozen or cut off). Reconnects are automatic; after each one the
/// coordinator republishes the retained messages it owns. ``close()`` ends everything it started.
public final class GroupCoordinator: Sendable {
    public let group: String
    public let localParticipant: Participant
    package let topics: GroupTopics
    /// This connection's epoch (ms since 1970 when it was made).
    package let epoch: Int64
    let client: MQTTClient
    let configuration: Configuration
    let hlc: LockedValue<HybridLogicalClock>
    let state: LockedValue<CoordinatorState>
    let retained: RetainedRecords
    let tasks = BackgroundTasks()
    /// The one timer of the coordinator's machine (see ``startUpkeep()``).
    let upkeep = WakeUp()

    /// What the retained replay of a connection whose MQTT session the broker had lost showed of our own
    /// records; complete once our presence came back live on it (see ``forgetSessionsEndedWhileAway()``).
    struct Replay {
        var announcements: Set<String> = []
        var ownPresence = false
        var complete = false
        /// No publish of our presence awaited its acknowledgement when the connection began: one that did
        /// may have reached the broker on this connection, ahead of the resubscription, and come back in
        /// the replay without proving anything.
        var presenceSettled: Bool
    }

    /// Everything of the coordinator that changes, under one lock.
    struct CoordinatorState {
        var machine: CoordinatorStateMachine
        var cores: [String: SessionCore] = [:]
        var sharing = SharingGate()
        var rejected = 0
        var groupSubscription: MessageHandlerSubscription?
        /// Set while `connect()` waits for its own presence to come back.
        var presenceEcho: Inbox<Void>?
        /// Set while `connect()` waits for a welcome (on a broker without retained messages).
        var welcomed: Inbox<Void>?
        /// Newcomers we are to welcome once that wait is over (until then we know too little to tell), and
        /// whether each is an observer.
        var owedWelcomes: [(newcomer: String, observer: Bool)] = []
        /// What the broker replayed as retained after a reconnect without session, while it is collected.
        var replay: Replay?
    }

    private init(configuration: Configuration, client: MQTTClient, epoch: Int64) {
        self.configuration = configuration
        self.group = configuration.group
        self.localParticipant = Participant(id: configuration.participant)
        self.topics = GroupTopics(group: configuration.group)
        self.epoch = epoch
        self.client = client
        self.hlc = LockedValue(HybridLogicalClock(participant: configuration.participant))
        self.state = LockedValue(CoordinatorState(machine: CoordinatorStateMachine(me: configuration.participant, myEpoch: epoch)))
        self.retained = RetainedRecords(client: client)
    }

    /// Connects to the broker, announces this participant as online and starts following the group.
    /// Throws ``GroupSyncError/connection(_:)`` when the broker cannot be reached or refuses us.
    ///
    /// Cancelling the calling task stops the attempt and throws ``GroupSyncError/cancelled``: before the
    /// broker accepted, once the connection's thread has ended; after, once the coordinator left cleanly
    /// (no will, no records left). Either way nothing stays connected.
    public static func connect(_ configuration: Configuration) async throws(GroupSyncError) -> GroupCoordinator {
        try Identifier.validate(configuration.group, kind: "group")
        try Identifier.validate(configuration.participant, kind: "participant")
        let topics = GroupTopics(group: configuration.group)
        // Epochs are 0…9×10¹² on the wire: a clock before 1970 (a test's) counts from 0.
        let epoch = max(configuration.clock.milliseconds(), 0)
        var mqtt = configuration.mqtt
        if mqtt.clientID.isEmpty {
            mqtt.clientID = "gs-\(configuration.participant)-\(String(UInt32.random(in: 0...UInt32.max), radix: 36))"
        }
        let lost = Wire.Presence(participant: configuration.participant, status: .lost, epoch: epoch, name: configuration.displayName)
        mqtt.will = MQTTClient.Will(
            topic: topics.presence(configuration.participant), payload: Array(try Wire.encode(lost)), qos: .atLeastOnce,
            retain: mqtt.retainedMessages,
            messageExpiry: UInt32(clamping: max(configuration.presenceTimeToLive.components.seconds, 1)))
        let client = try await GroupSyncError.awaitOverConnection { () async throws(MQTTError) in try await connectClient(mqtt) }
        let coordinator = GroupCoordinator(configuration: configuration, client: client, epoch: epoch)
        do {
            try await coordinator.start()
        } catch {
            // Our presence handed to the connection already: the coordinator leaves as close() leaves,
            // taking it back. Before that, nothing of ours is on the broker to take back.
            if coordinator.retained.owns(topics.presence(configuration.participant)) {
                await coordinator.close()
            } else {
                await client.disconnect()
            }
            throw error
        }
        if Task.isCancelled {
            await coordinator.close()
            throw .cancelled
        }
        return coordinator
    }

    /// Connects; a broker with `retain_available false` refuses a retained will (reason 154), so then
    /// the will is sent without retain.
    private static func connectClient(_ configuration: MQTTClient.Configuration) async throws(MQTTError) -> MQTTClient {
        let client = try MQTTClient(configuration: configuration)
        do {
            try await client.connect()
            return client
        } catch .connectionRefused(reasonCode: 154, _) where configuration.will?.retain == true {
            var withoutRetain = configuration
            withoutRetain.will?.retain = false
            let retry = try MQTTClient(configuration: withoutRetain)
            try await retry.connect()
            return retry
        }
    }

    private func start() async throws(GroupSyncError) {
        let events = client.events()
        // Handled on the network thread, in the broker's order with the sessions' messages.
        let subscription = try await GroupSyncError.awaitOverConnection { () async throws(MQTTError) in
            // Observers ask only where nothing is retained: elsewhere an ACL need not let us read their requests.
            try await client.subscribe(
                to: [
                    TopicSubscription(topics.presenceFilter, qos: .atLeastOnce),
                    TopicSubscription(topics.heartbeatFilter, qos: .atLeastOnce),
                    TopicSubscription(topics.announcementFilter, qos: .atLeastOnce),
                    TopicSubscription(topics.welcomeFilter(for: configuration.participant), qos: .atLeastOnce),
                ] + (client.retainAvailable ? [] : [TopicSubscription(topics.observeFilter, qos: .atLeastOnce)]),
                handler: { [weak self] message in self?.handleGroupMessage(message) },
                connected: { [weak self] sessionPresent in
                    // Before the retained replay of the new connection: record it if the broker lost our
                    // MQTT session (see forgetSessionsEndedWhileAway).
                    guard let self else { return }
                    let settled = !retained.awaitsAcknowledgement(topics.presence(localParticipant.id))
                    state.withLock { $0.replay = sessionPresent ? nil : Replay(presenceSettled: settled) }
                })
        }
        state.withLock { $0.groupSubscription = subscription }
        tasks.spawn { [self] in
            for await event in events {
                guard case let .connected(_, sessionPresent) = event else { continue }
                let next = state.withLock { state in
                    state.machine.onReconnected(now: .now)
                    return state.machine.nextWake(ownInterval: heartbeatInterval)
                }
                armUpkeep(next)
                if !sessionPresent { await forgetSessionsEndedWhileAway() }
                await retained.republishAll()
                // The broker may have lost messages meanwhile: recover them end to end.
                for core in state.withLock({ Array($0.cores.values) }) { core.onReconnected() }
            }
        }
        // After connect() returns, the coordinator knows the group as the broker does — or, on a broker
        // without retained messages, as the participant that welcomes us does.
        try await publishPresenceAndAwaitWelcome()
        if let interval = heartbeatInterval { startHeartbeats(every: interval) }
        retained.startRefreshing()
        startUpkeep()
    }

    /// Leaves every joined session, removes this participant's presence (a clean exit, not a crash), ends
    /// every `sessions()` sequence and closes the connection. Idempotent. Returns within the
    /// ``Configuration/farewellTimeout`` and the disconnect; a cancelled task cuts the farewell wait short
    /// (what it sends is handed to the connection first, and still goes out before the disconnect).
    public func close() async {
        let (listeners, open) = state.withLock { state in
            let listeners = state.machine.close().listeners
            defer { state.cores = [:] }
            return (listeners, Array(state.cores.values))
        }
        for inbox in listeners { inbox.finish() }
        // Say goodbye (leave sessions, clear presence) while the connection allows, all at once, so that
        // one acknowledgement a frozen broker holds back does not keep the others from being sent; what a
        // gone or frozen broker did not take within the farewell timeout expires (and the will tells a
        // broker that sees the connection die).
        let presence = topics.presence(localParticipant.id)
        await withTimeout(configuration.farewellTimeout) { [retained] in
            await withTaskGroup(of: Void.self) { group in
                for core in open where core.isJoined { group.addTask { await core.leave() } }
                group.addTask { await retained.clear(presence) }
            }
        }
        for core in open { core.invalidate(.coordinatorClosed) }
        state.withLock { $0.groupSubscription }?.unsubscribe()
        await client.disconnect(expireSession: true)
        tasks.cancelAll()
        upkeep.cancel()
        retained.stopRefreshing()
        state.withLock { $0.sharing.close() }.perform()
    }

    /// Dies as a crashed process would: no leave, no clean disconnect; the broker publishes the will.
    package func simulateCrash() async {
        await client.abort()
        tasks.cancelAll()
        upkeep.cancel()
        retained.stopRefreshing()
    }

    /// Messages from the wire that were malformed, forged or stale and so ignored.
    public var rejectedMessageCount: Int {
        let (own, cores) = state.withLock { ($0.rejected, Array($0.cores.values)) }
        return own + cores.reduce(0) { $0 + $1.rejectedCount }
    }

    /// Network thread: one message of the group's topics.
    private func handleGroupMessage(_ message: MQTTMessage) {
        guard let onRejected = configuration.onRejected else { return process(message) }
        let before = state.withLock { $0.rejected }
        process(message)
        if state.withLock({ $0.rejected }) > before {
            let (topic, size) = (message.topic, message.payload.count)
            Task { onRejected(topic, size) }  // app code: never on the network thread
        }
    }

    private func process(_ message: MQTTMessage) {
        switch topics.parse(message.topic) {
        case let .presence(participant): onPresenceMessage(participant, message)
        case let .heartbeat(participant): onHeartbeatMessage(participant, message)
        case let .welcome(recipient, sender) where recipient == localParticipant.id: onWelcomeMessage(from: sender, message)
        case let .observe(observer): onObserveMessage(observer, message)
        case let .announcement(sessionID, publisher): onAnnouncementMessage(sessionID, publisher: publisher, message)
        default: countRejection()  // not a group topic of this protocol
        }
    }

    func countRejection() { state.withLock { $0.rejected += 1 } }

    /// What the sessions found by this coordinator see of it.
    var sessionContext: SessionContext {
        SessionContext(
            client: client, topics: topics, me: localParticipant, epoch: epoch, clock: configuration.clock, hlc: hlc,
            outbox: configuration.outbox, catchUpTimeout: configuration.catchUpTimeout, farewellTimeout: configuration.farewellTimeout,
            positionInterval: .milliseconds(heartbeatInterval ?? Int64(min(max(configuration.mqtt.keepAlive, 1), 65_535)) * 500),
            onRejected: configuration.onRejected, keyring: configuration.keyring,
            retained: retained, announcers: { [weak self] id in self?.state.withLock { $0.machine.publishers(of: id) } ?? [] },
            tasks: tasks, report: { [weak self] core, event in self?.onSessionEvent(core, event) })
    }
}
