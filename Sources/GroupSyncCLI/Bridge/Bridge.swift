import Foundation
import GroupSync
import MQTT

/// What `groupsync bridge` does with each request (docs/BRIDGE.md): one coordinator, connected at the
/// first request that needs it; at most one joined session at a time; follower tasks that turn the
/// library's sequences into events.
///
/// Requests are handled one at a time, in order (the command awaits each `handle`). The follower tasks
/// are detached and write through ``BridgeEvents``; they call back into the actor only to report keys
/// found on the wire and sessions that ended on their own.
actor Bridge {
    /// A request that could not be carried out; becomes the `message` of an `error` answer.
    struct Failure: Error, Sendable {
        let message: String
        init(_ message: String) { self.message = message }
    }

    /// The session the bridge joined, and what follows it.
    struct Joined {
        let session: GroupSession<AnyGroupActivity>
        let messenger: GroupSessionMessenger
        var states: [String: SharedState<JSONValue>] = [:]
        var tasks: [Task<Void, Never>] = []
        /// State records of the session seen by the observer connection: how keys written by others are found.
        var discovery: MQTTSubscription?
        /// The session's media timeline, once the host asked for it (Bridge+Playback.swift).
        var playback: PlaybackCoordinator?
        /// This bridge's suspensions under way, by the ID its `suspend` answer gave.
        var suspensions: [String: PlaybackSuspension] = [:]
        var suspensionCount = 0
        /// The session's journal, followed from the join on (Bridge+Journal.swift).
        var journal: GroupSessionJournal?
        /// Loads started, for their `load` IDs.
        var loadCount = 0
    }

    private var options: CommonOptions
    let events: BridgeEvents
    /// How long a request waits for the broker's answer to the connection, and for an announcement
    /// (`--timeout`): `start` for its own, `join` unless it gives its own `timeout`.
    private let timeout: Duration
    /// Ctrl-C, SIGTERM or SIGHUP: ends a connection attempt at once, even one to a broker that never answers.
    private let interruption: Interruption
    private var coordinator: GroupCoordinator?
    /// A plain MQTT connection (not a participant) that sees which state keys exist in the session.
    private var observer: MQTTClient?
    private var observerUnavailable = false
    /// Activities whose announcements are followed, with the following task.
    private var followed: [String: Task<Void, Never>] = [:]
    var current: Joined?
    private var closing = false
    /// Work a request started that must report after its answer (a load's events carry the answer's
    /// `load` ID): released once the answer is written.
    var afterAnswer: [AsyncStream<Void>.Continuation] = []

    init(options: CommonOptions, events: BridgeEvents, timeout: Duration, interruption: Interruption) {
        self.options = options
        self.events = events
        self.timeout = timeout
        self.interruption = interruption
    }

    /// Carries out `request` and writes its answer.
    func handle(_ request: BridgeRequest) async {
        do throws(Failure) {
            events.ok(request.id, try await perform(request.operation))
        } catch {
            events.error(error.message, id: request.id)
        }
        for waiting in afterAnswer { waiting.finish() }
        afterAnswer = []
    }

    private func perform(_ operation: BridgeRequest.Operation) async throws(Failure) -> [String: JSONValue] {
        guard !closing else { throw Failure("the bridge is shutting down") }
        switch operation {
        case .ping:
            return [:]
        case let .configure(broker, group, participant, keepAlive):
            return try configure(broker: broker, group: group, participant: participant, keepAlive: keepAlive)
        case let .watch(activity):
            let coordinator = try await connect()
            follow(activity, coordinator)
            let live = coordinator.currentSessions(activityIdentifier: activity)
            for session in live { events.announce(session) }
            return ["activity": .string(activity), "sessions": .array(live.map { .string($0.id) })]
        case let .start(activity, metadata, value, keys, playback):
            try leaveNothingBehind()
            let coordinator = try await connect()
            follow(activity, coordinator)
            let id: String
            do {
                id = try await coordinator.activate(activityIdentifier: activity, value: value, metadata: metadata)
            } catch {
                throw Failure("could not start a session of \(activity): \(error)")
            }
            guard let session = await find(coordinator, activity: activity, session: id, within: timeout) else {
                throw Failure("session \(id) was announced but did not come back within \(Bridge.seconds(timeout))")
            }
            return try await join(session, keys: keys, playback: playback)
        case let .join(activity, sessionID, keys, requested, playback):
            let timeout = requested ?? timeout
            try leaveNothingBehind()
            let coordinator = try await connect()
            if let activity { follow(activity, coordinator) }
            guard let session = await find(coordinator, activity: activity, session: sessionID, within: timeout) else {
                if Task.isCancelled { throw Failure("interrupted: the bridge is shutting down") }
                if let sessionID {
                    throw Failure(
                        "no live session \(sessionID)\(activity.map { " of \($0)" } ?? "") was announced within \(Bridge.seconds(timeout))")
                }
                throw Failure("no live session of \(activity ?? "-") within \(Bridge.seconds(timeout)): start one")
            }
            follow(session.activityIdentifier, coordinator)
            return try await join(session, keys: keys, playback: playback)
        case .leave:
            let joined = try requireSession()
            await joined.session.leave()
            events.state(of: joined.session)
            stopFollowing(joined.session.id)
            return ["session": .string(joined.session.id)]
        case .end:
            let joined = try requireSession()
            await joined.session.end()
            events.state(of: joined.session)
            stopFollowing(joined.session.id)
            return ["session": .string(joined.session.id)]
        case let .set(key, value):
            let joined = try requireSession()
            guard let state = track(key, in: joined.session.id) else { throw Failure("invalid key '\(key)'") }
            do {
                try await state.set(value)
            } catch {
                throw Failure("could not set \(key): \(error)")
            }
            events.value(of: state, in: joined.session)
            return ["session": .string(joined.session.id), "key": .string(key)]
        case let .send(value, to):
            let joined = try requireSession()
            let recipients = to.map { Participants.only(Set($0.map(Participant.init(id:)))) } ?? .all
            do {
                try await joined.messenger.send(BridgeMessage(value: value), to: recipients)
            } catch {
                throw Failure("could not send: \(error)")
            }
            return ["session": .string(joined.session.id)]
        case let .playback(action):
            return try await playback(action)
        case let .suspend(reason):
            return try await suspend(reason)
        case let .resume(suspension):
            return try await resume(suspension)
        case .position:
            return try await position()
        case let .attach(path, name, mediaType, metadata):
            return try await attach(path: path, name: name, mediaType: mediaType, metadata: metadata)
        case .attachments:
            return try attachments()
        case let .load(digest, owner, path):
            return try load(digest: digest, owner: owner, path: path)
        case let .detach(digest, owner):
            return try await detach(digest: digest, owner: owner)
        }
    }

    // MARK: - Connection

    private func configure(broker: String?, group: String?, participant: String?, keepAlive: Int?) throws(Failure) -> [String: JSONValue] {
        guard coordinator == nil else {
            throw Failure(
                "configure must come before the first start, join or watch: already connected as \(options.participant) in group \(options.group)"
            )
        }
        var updated = options
        if let broker { updated.broker = broker }
        if let group { updated.group = group }
        if let participant { updated.participant = participant }
        if let keepAlive { updated.keepAlive = keepAlive }
        do {
            // Checks the broker URL now rather than at the first connection.
            _ = try updated.coordinatorConfiguration()
        } catch {
            throw Failure("invalid broker: \(error)")
        }
        options = updated
        return ["group": .string(options.group), "participant": .string(options.participant)]
    }

    private func connect() async throws(Failure) -> GroupCoordinator {
        if let coordinator { return coordinator }
        let options = self.options
        // Every message the participant rejects is a `rejected` event, besides GROUPSYNC_LOG_REJECTED's log.
        let events = self.events
        let report: @Sendable (String, Int) -> Void = { topic, size in events.rejected(topic: topic, size: size) }
        do {
            // At most --timeout (a broker that never answers). The race cancels the attempt and waits for
            // it to end (up to its grace); one that connects all the same is closed at once, so it does not
            // stay as a second participant under this one's ID. The next request that needs the broker
            // makes a fresh attempt.
            let connected = try await interruption.race(timeout: timeout, waitingFor: "the broker", discard: CommonOptions.close) {
                try await options.connect(reportingRejections: report)
            }
            coordinator = connected
            return connected
        } catch {
            throw Failure("\(error)")
        }
    }

    /// Writes a `session` event for every session of `activity`, from now until shutdown.
    private func follow(_ activity: String, _ coordinator: GroupCoordinator) {
        guard followed[activity] == nil else { return }
        let sessions = coordinator.sessions(activityIdentifier: activity)
        followed[activity] = Task.detached { [events] in
            for await session in sessions { events.announce(session) }
        }
    }

    /// The session `session` (of `activity` when given), or else the oldest live session of `activity`;
    /// waits for its announcement at most `timeout`.
    private func find(
        _ coordinator: GroupCoordinator, activity: String?, session id: String?, within timeout: Duration
    ) async -> GroupSession<AnyGroupActivity>? {
        let wanted = { @Sendable (session: GroupSession<AnyGroupActivity>) in
            (id == nil || session.id == id) && !session.state.isInvalidated
        }
        if let known = coordinator.currentSessions(activityIdentifier: activity).first(where: wanted) { return known }
        let announced = coordinator.sessions(activityIdentifier: activity)
        return await withTimeout(timeout) {
            for await session in announced where wanted(session) { return session }
            return nil
        }
    }

    // MARK: - The joined session

    /// Joins `session` and starts following it. Before answering, brings its state, participants and the
    /// values of the known keys up to date.
    private func join(_ session: GroupSession<AnyGroupActivity>, keys: [String], playback: Bool) async throws(Failure) -> [String:
        JSONValue]
    {
        let id = session.id
        let messenger = GroupSessionMessenger(session: session)
        // Registered before join(): no message (nor gap) that arrives once joined is missed.
        let messages = messenger.messages(of: BridgeMessage.self)
        let gaps = messenger.gaps()
        let stateUpdates = session.stateUpdates()
        let events = self.events
        events.open(session)
        events.state(of: session)
        var joined = Joined(session: session, messenger: messenger)
        joined.tasks.append(
            Task.detached { [weak self] in
                for await _ in stateUpdates { events.state(of: session) }
                await self?.sessionOver(id)
            })
        joined.tasks.append(
            Task.detached {
                for await (message, context) in messages { events.message(message.value, from: context.source.id, in: session) }
            })
        joined.tasks.append(
            Task.detached {
                for await gap in gaps { events.gap(gap, in: session) }
            })
        current = joined
        // Made before join(): the timeline and a start under way come with the join's catch-up.
        let priming = playback ? followPlayback() : nil
        do {
            try await session.join()
        } catch {
            events.state(of: session)
            stopFollowing(id)
            throw Failure("could not join session \(id): \(error)")
        }
        guard current?.session.id == id, session.state == .joined else {
            events.state(of: session)
            stopFollowing(id)
            throw Failure("session \(id) ended while joining")
        }
        let participants = session.activeParticipantUpdates()
        current?.tasks.append(
            Task.detached {
                for await _ in participants { events.participants(of: session) }
            })
        for key in keys { _ = track(key, in: id) }
        await discoverKeys(of: session)
        events.state(of: session)
        events.participants(of: session)
        followJournal()
        for state in current?.states.values.sorted(by: { $0.key < $1.key }) ?? [] { events.value(of: state, in: session) }
        if let priming { await timelineKnown(priming) }
        return [
            "session": .string(id), "activity": .string(session.activityIdentifier),
            "participant": .string(session.localParticipant.id),
        ]
    }

    /// The shared state of `key` in the joined session `id`, followed from now on (created on first use).
    private func track(_ key: String, in id: String) -> SharedState<JSONValue>? {
        guard let joined = current, joined.session.id == id else { return nil }
        if let state = joined.states[key] { return state }
        guard let state = try? SharedState(joined.session, key: key, initialValue: BridgeEvents.unset) else { return nil }
        let values = state.valueUpdates()
        let session = joined.session
        let events = self.events
        current?.states[key] = state
        current?.tasks.append(
            Task.detached {
                for await _ in values { events.value(of: state, in: session) }
            })
        return state
    }

    /// Follows the retained state records of `session` on the observer connection, so that keys written
    /// by others are reported without being named in advance. Without the observer (refused by the
    /// broker, say) only the keys named in requests are followed.
    private func discoverKeys(of session: GroupSession<AnyGroupActivity>) async {
        guard !observerUnavailable else { return }
        let id = session.id
        let client: MQTTClient
        if let observer {
            client = observer
        } else {
            do {
                // Bounded as the coordinator's connect is: a broker that takes the connection and never
                // answers is tried again only until --timeout.
                let options = self.options
                client = try await interruption.race(timeout: timeout, waitingFor: "the broker", discard: CommonOptions.disconnect) {
                    try await options.connectObserver()
                }
                observer = client
            } catch {
                observerUnavailable = true
                events.error("keys written by others are not discovered (only those named in keys or set): \(error)")
                return
            }
        }
        let topics = GroupTopics(group: options.group)
        let subscription: MQTTSubscription
        do {
            subscription = try await client.subscribe(to: [TopicSubscription("\(topics.root)/s/\(id)/state/+/+", qos: .atLeastOnce)])
        } catch {
            events.error("keys written by others are not discovered in session \(id): \(error)")
            return
        }
        guard current?.session.id == id else { return subscription.unsubscribe() }
        current?.discovery = subscription
        current?.tasks.append(
            Task.detached { [weak self] in
                for await message in subscription where !message.payload.isEmpty {
                    guard case let .state(session, key, _) = topics.parse(message.topic), session == id else { continue }
                    await self?.discovered(key, in: id)
                }
            })
    }

    private func discovered(_ key: String, in id: String) {
        guard let joined = current, joined.session.id == id, joined.states[key] == nil else { return }
        if let state = track(key, in: id) { events.value(of: state, in: joined.session) }
    }

    /// The joined session, still live; otherwise a failure saying why not.
    func requireSession() throws(Failure) -> Joined {
        guard let joined = current else { throw Failure("not in a session: start or join one first") }
        if case let .invalidated(reason) = joined.session.state {
            stopFollowing(joined.session.id)
            throw Failure("session \(joined.session.id) is over (\(Bridge.describe(reason))): start or join another one")
        }
        guard joined.session.state == .joined else { throw Failure("session \(joined.session.id) is not joined yet") }
        return joined
    }

    /// Refuses to start or join while a live session is joined; forgets one that is over.
    private func leaveNothingBehind() throws(Failure) {
        guard let joined = current else { return }
        guard joined.session.state.isInvalidated else {
            throw Failure("already in session \(joined.session.id): leave or end it first")
        }
        stopFollowing(joined.session.id)
    }

    /// A session's state sequence ended: it is over (ended by someone, or the coordinator closed).
    private func sessionOver(_ id: String) {
        guard let joined = current, joined.session.id == id, joined.session.state.isInvalidated else { return }
        stopFollowing(id)
    }

    private func stopFollowing(_ id: String) {
        guard let joined = current, joined.session.id == id else { return }
        current = nil
        joined.discovery?.unsubscribe()
        for task in joined.tasks { task.cancel() }
    }

    // MARK: - Shutdown

    /// Leaves the joined session and closes the connections, together: within the coordinator's
    /// farewell timeout (2 s) and a second for each DISCONNECT, whatever the broker does.
    func shutdown() async {
        closing = true
        let left = current.flatMap { $0.session.state.isInvalidated ? nil : $0.session }
        if let joined = current { stopFollowing(joined.session.id) }
        for task in followed.values { task.cancel() }
        followed = [:]
        let (observer, coordinator) = (self.observer, self.coordinator)
        (self.observer, self.coordinator) = (nil, nil)
        async let observerClosed: Void = observer?.disconnect() ?? ()
        await coordinator?.close()  // leaves the joined session
        await observerClosed
        if let left { events.state(of: left) }
    }

    // MARK: - Helpers

    static func seconds(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        let milliseconds = seconds * 1_000 + attoseconds / 1_000_000_000_000_000
        return milliseconds % 1_000 == 0 ? "\(milliseconds / 1_000) s" : "\(Double(milliseconds) / 1_000) s"
    }

    static func describe(_ reason: GroupSessionState.InvalidationReason) -> String {
        switch reason {
        case .left: return "left"
        case let .ended(by): return "ended by \(by?.id ?? "someone")"
        case .coordinatorClosed: return "connection closed"
        case .expired: return "expired (nobody kept it)"
        }
    }
}
