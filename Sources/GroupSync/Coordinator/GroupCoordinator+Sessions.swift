import MQTT

/// Sessions: announcing them, following the group's announcements, handing sessions to `sessions()`
/// sequences, and what sessions report back.
extension GroupCoordinator {
    /// Every session of activity type `A` in the group, starting with those already announced (once each),
    /// then each new one as it is announced — by anyone, including this participant's own `activate`.
    /// Survives reconnects; ends when the coordinator closes, when the iterating task is cancelled, or
    /// when the sequence is dropped. A session whose activity does not decode as `A` is skipped.
    public func sessions<A: GroupActivity>(of activity: A.Type = A.self) -> GroupSessions<A> {
        let inbox = Inbox<SessionCore>()
        listen(for: A.activityIdentifier, inbox)
        return GroupUpdates(inbox) { GroupSession<A>(core: $0) }
    }

    /// Every session of the activity `activityIdentifier` (nil: of every activity), with the activity
    /// as JSON. Same delivery rules as ``sessions(of:)``.
    public func sessions(activityIdentifier: String?) -> GroupSessions<AnyGroupActivity> {
        let inbox = Inbox<SessionCore>()
        listen(for: activityIdentifier ?? CoordinatorStateMachine.anyActivity, inbox)
        return GroupUpdates(inbox) { GroupSession<AnyGroupActivity>(core: $0) }
    }

    /// Feeds `inbox` the live sessions of `activityType`, now and as they are announced, until it ends.
    func listen(for activityType: String, _ inbox: Inbox<SessionCore>) {
        let cores = state.withLock { state in
            state.machine.addListener(.init(activityType: activityType, inbox: inbox))?.compactMap { state.cores[$0] }
                .filter { !$0.isInvalidated }
        }
        guard let cores else { return inbox.finish() }
        for core in cores { inbox.yield(core) }
        let id = ObjectIdentifier(inbox)
        inbox.onTermination { [weak self] in self?.state.withLock { $0.machine.removeListener(id) } }
    }

    /// The live sessions known now, of one activity (nil: of all). Right after ``connect(_:)`` this is
    /// every session the broker had announced.
    public func currentSessions(activityIdentifier: String?) -> [GroupSession<AnyGroupActivity>] {
        state.withLock { Array($0.cores.values) }
            .filter { !$0.isInvalidated && (activityIdentifier == nil || $0.activityType == activityIdentifier) }
            .sorted { $0.announcement.createdAt < $1.announcement.createdAt }
            .compactMap { GroupSession<AnyGroupActivity>(core: $0) }
    }

    /// Whether activating makes sense now: a live broker connection.
    public func prepareForActivation<A: GroupActivity>(_ activity: A) async -> GroupActivityActivationResult {
        if Task.isCancelled { return .cancelled }
        let closed = state.withLock { $0.machine.isClosed }
        return client.isConnected && !closed ? .activationPreferred : .activationDisabled
    }

    /// Announces a new session of `activity` to the group (a retained announcement that lives
    /// `A.sessionTimeToLive` after its participants are gone). Every participant, this one included,
    /// then receives it from ``sessions(of:)``. Returns the session ID once the broker holds it; a task
    /// cancelled meanwhile gets ``GroupSyncError/cancelled``, and the session, announced already, still
    /// arrives there.
    @discardableResult
    public func activate<A: GroupActivity>(_ activity: A) async throws(GroupSyncError) -> String {
        try Identifier.validate(A.activityIdentifier, kind: "activity identifier")
        return try await announce(
            .init(type: A.activityIdentifier, metadata: activity.metadata, data: try Wire.jsonValue(activity)),
            timeToLive: A.sessionTimeToLive)
    }

    /// Announces a session of an activity known only at run time. Returns the session ID.
    @discardableResult
    public func activate(
        activityIdentifier: String, value: JSONValue, metadata: GroupActivityMetadata? = nil,
        timeToLive: Duration = GroupActivityMetadata.defaultTimeToLive
    ) async throws(GroupSyncError) -> String {
        try Identifier.validate(activityIdentifier, kind: "activity identifier")
        return try await announce(
            .init(type: activityIdentifier, metadata: metadata ?? GroupActivityMetadata(title: activityIdentifier), data: value),
            timeToLive: timeToLive)
    }

    private func announce(_ activity: Wire.Announcement.Activity, timeToLive: Duration) async throws(GroupSyncError) -> String {
        let sessionID = GroupCoordinator.makeSessionID()
        let now = configuration.clock.milliseconds()
        let announcement = Wire.Announcement(
            session: sessionID, activity: activity, createdBy: localParticipant.id, createdAt: now,
            revision: hlc.withLock { $0.tick(now: now) },
            ttl: min(max(timeToLive.components.seconds, Wire.Bounds.ttl.lowerBound), Wire.Bounds.ttl.upperBound))
        try await retained.publish(
            topics.announcement(sessionID, by: localParticipant.id), try Wire.encode(wireAnnouncement(announcement)),
            lifetime: announcement.lifetime)
        return sessionID
    }

    /// An announcement as this coordinator publishes it: its activity sealed in a private group.
    func wireAnnouncement(_ announcement: Wire.Announcement) -> Wire.Announcement {
        sealer(for: announcement.session).map { announcement.sealed(by: $0) } ?? announcement
    }

    /// An announcement copy as this coordinator keeps it. In a private group it is opened; nil (rejected)
    /// when it comes in clear, or does not open with a key we have. Sealed with a key we do not have (or
    /// without a keyring), it is kept closed: the session is private to us (``GroupSyncError/privateSession(keyID:)``).
    func readable(_ announcement: Wire.Announcement) -> Wire.Announcement? {
        guard let sealer = sealer(for: announcement.session) else { return announcement }
        guard let keyID = announcement.activity.sealed else { return nil }
        return sealer.opens(keyID: keyID) ? announcement.opened(by: sealer) : announcement
    }

    /// The sealer of `session` in a private group (nil otherwise): its session object's when there is one,
    /// whose keys were derived and scheduled once, else one made now (a session not yet known here).
    private func sealer(for session: String) -> SessionSealer? {
        guard let keyring = configuration.keyring else { return nil }
        return state.withLock { $0.cores[session]?.sealer } ?? SessionSealer(keyring: keyring, group: configuration.group, session: session)
    }

    static func makeSessionID() -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789")
        return String((0..<16).map { _ in alphabet.randomElement()! })
    }

    /// Network thread: `publisher`'s copy of an announcement (an empty payload: cleared).
    func onAnnouncementMessage(_ sessionID: String, publisher: String, _ message: MQTTMessage) {
        if message.retain && !message.payload.isEmpty && publisher == localParticipant.id {
            _ = state.withLock { $0.replay?.announcements.insert(sessionID) }
        }
        let announcement = message.payload.isEmpty ? nil : Wire.decode(Wire.Announcement.self, from: message.payload)
        guard announcement != nil || message.payload.isEmpty else { return countRejection() }
        // A stored copy comes with what is left of its lifetime; a live one has all of it.
        let lifetime = message.properties.messageExpiry.map { Int64($0) } ?? announcement?.ttl ?? 0
        onCopy(sessionID, publisher: publisher, announcement, lifetime: lifetime)
    }

    /// `publisher`'s copy of an announcement (nil: cleared), which lives `lifetime` seconds from now.
    func onCopy(_ sessionID: String, publisher: String, _ copy: Wire.Announcement?, lifetime: Int64) {
        let announcement = copy.flatMap(readable)
        guard announcement != nil || copy == nil else { return countRejection() }
        // Still sealed: with a key we lack, nothing of it is authenticated to us (the machine lists it, no more).
        let closed = announcement?.activity.sealed != nil
        let (context, now) = (sessionContext, configuration.clock.milliseconds())
        typealias Outcome = (CoordinatorStateMachine.AnnouncementAction, SessionCore?, SessionCore?, CoordinatorStateMachine.WakeRequest)
        let (action, core, replaced, wake) = state.withLock { state -> Outcome in
            let action = state.machine.onAnnouncement(
                sessionID, publisher: publisher, announcement, expiresAt: now + lifetime * 1000, now: now)
            let wake = state.machine.takeWakeRequest()
            switch action {
            case let .new(_, presence), let .retyped(_, presence):
                guard let announcement else { return (action, nil, nil, wake) }
                let core = SessionCore(context: context, announcement: announcement, presence: presence)
                return (action, core, state.cores.updateValue(core, forKey: sessionID), wake)
            case .changed: return (action, state.cores[sessionID], nil, wake)
            case .ended: return (action, state.cores.removeValue(forKey: sessionID), nil, wake)
            case .none, .rejected, .settled: return (action, nil, nil, wake)
            }
        }
        armUpkeep(wake)
        switch (action, announcement) {
        case let (.new(listeners, _), announcement?), let (.retyped(listeners, _), announcement?):
            if !closed { hlc.withLock { $0.observe(announcement.revision, now: now) } }
            // A session object made from a foreign copy was never this session: it ends.
            replaced?.invalidate(.ended(by: nil))
            if let core { for inbox in listeners { inbox.yield(core) } }
        case let (.changed, announcement?):
            hlc.withLock { $0.observe(announcement.revision, now: now) }
            core?.onAnnouncement(announcement, from: publisher)
        case let (.ended(by, settled), _):
            core?.endedElsewhere(.ended(by: by.map(Participant.init(id:))))
            if settled { clearOwnEndedCopy(of: sessionID) }
        case (.settled, _): clearOwnEndedCopy(of: sessionID)
        case (.rejected, _): countRejection()
        default: break
        }
    }

    /// Nothing of the session is left but the ended copies: ours goes too.
    private func clearOwnEndedCopy(of sessionID: String) {
        let ours = topics.announcement(sessionID, by: localParticipant.id)
        if retained.owns(ours) { tasks.spawn { [retained] in await retained.clear(ours) } }
    }

    /// The coordinator's one timer: wakes when the machine says something may be due (a participant
    /// falling silent, a session's last copy expiring), does it, and sleeps until the next such moment.
    func startUpkeep() {
        upkeep.onWake { [weak self] in self?.performUpkeep() }
        performUpkeep()
    }

    private func performUpkeep() {
        let (now, connected) = (configuration.clock.milliseconds(), client.isConnected)
        let (presence, expired, next) = state.withLock { state in
            let (changes, republishOwn) = connected ? state.machine.expireSilent(now: .now, ownInterval: heartbeatInterval) : ([], false)
            let presence = changes + (republishOwn ? [.republishOwn] : [])
            let expired = state.machine.expireSessions(now: now).compactMap { state.cores.removeValue(forKey: $0) }
            _ = state.machine.takeWakeRequest()  // the whole state is scanned instead
            return (presence, expired, state.machine.nextWake(ownInterval: heartbeatInterval))
        }
        // While disconnected nobody is judged by silence: we hear nobody, and the reconnect gives everyone a
        // fresh grace period and asks for the next wake-up; a silence deadline already passed would wake us
        // at once, again and again.
        armUpkeep(connected ? next : .init(expiry: next.expiry))
        for action in presence { performPresence(action) }
        for core in expired { core.endedElsewhere(.expired) }
    }

    func armUpkeep(_ request: CoordinatorStateMachine.WakeRequest) {
        upkeep.schedule(at: request.silence)
        if let expiry = request.expiry {
            // Wall-clock ms to the monotonic clock; a millisecond late, so that the copy has expired by then.
            upkeep.schedule(after: .milliseconds(max(expiry &- configuration.clock.milliseconds(), 0) + 1))
        }
    }

    /// What a session object reports (outside its lock).
    func onSessionEvent(_ core: SessionCore, _ event: SessionContext.Event) {
        switch event {
        case .joined: state.withLock { $0.sharing.onJoined(core.id) }.perform()
        case let .invalidated(wasJoined):
            if wasJoined { state.withLock { $0.sharing.onLeft(core.id) }.perform() }
        case .left:
            // A fresh, waiting session object replaces the left one, for `sessions()` listeners from now
            // on and `currentSessions`; those that already got the session do not get it again, so an app
            // that joins every session it receives does not rejoin what the user left.
            let context = sessionContext
            state.withLock { state in
                guard state.cores[core.id] === core, !state.machine.isClosed else { return }
                state.cores[core.id] = SessionCore(
                    context: context, announcement: core.announcement, presence: state.machine.online,
                    numbering: core.read { $0.numbering })
            }
        case .ended:
            state.withLock { state in
                state.machine.forget(core.id)
                state.cores[core.id] = nil
            }
        }
    }

    /// After a reconnect in which the broker had lost our MQTT session (we were away longer than its
    /// expiry, or it restarted), the clears of sessions ended meanwhile never reached us. If the
    /// broker's retained store survived — our own presence record is in the replay — an announcement
    /// copy we own that is missing from the replay was cleared by whoever ended the session: drop it
    /// instead of republishing it.
    ///
    /// That proof holds because the connection resubscribes before it sends anything we publish on it
    /// (a presence published meanwhile comes back live, not in the replay), and only for a complete
    /// replay: one our echo followed. A replay this call does not see complete (the connection was lost
    /// again meanwhile) is left to the next connection's call. It does not hold when a publish of our
    /// presence was unacknowledged as the connection began (libmosquitto may send it before the
    /// resubscription), nor for a presence of another epoch (an earlier process's: a broker back from a
    /// crash holds its last save): those replays prove nothing.
    func forgetSessionsEndedWhileAway() async {
        // The replay is being recorded since the CONNACK (on the network thread, before any message).
        try? await publishPresenceAndAwaitEcho()
        guard
            let seen = state.withLock({ state -> Replay? in
                guard let replay = state.replay, replay.complete else { return nil }
                state.replay = nil
                return replay
            }), seen.ownPresence, seen.presenceSettled
        else { return }
        let (prefix, suffix) = ("\(topics.root)/session/", "/\(localParticipant.id)")
        let ended = retained.topics(under: prefix)
            .map { String($0.dropFirst(prefix.count).dropLast(suffix.count)) }
            .filter { !seen.announcements.contains($0) }
        for sessionID in ended {
            // Stop owning its records before the republish that follows, then clear what we had of it.
            let sessionTopics = retained.topics(under: "\(topics.root)/s/\(sessionID)/")
            retained.disown(topics.announcement(sessionID, by: localParticipant.id))
            for topic in sessionTopics { retained.disown(topic) }
            state.withLock { $0.cores[sessionID] }?.endedElsewhere(.ended(by: nil))
            for topic in sessionTopics { await retained.clear(topic) }
        }
    }
}
