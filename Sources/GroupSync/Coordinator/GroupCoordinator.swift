import Foundation
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
    /// How to reach the broker and who we are.
    public struct Configuration: Sendable {
        /// The broker connection. Its client ID is derived from the participant unless set explicitly.
        public var mqtt: MQTTClient.Configuration
        public var group: String
        public var participant: String
        public var displayName: String?
        /// Where wall-clock time comes from (inject a skewed one in tests).
        public var clock: any WallClock
        /// How long `join()` waits for a catch-up from an existing participant.
        public var catchUpTimeout: Duration
        /// Called for every message rejected as malformed, forged or stale (they are also counted in
        /// ``GroupCoordinator/rejectedMessageCount``), from a task of its own (never from the network
        /// thread, so in no guaranteed order). By default rejections
        /// are logged to standard error when the environment variable `GROUPSYNC_LOG_REJECTED` is set.
        public var onRejected: (@Sendable (_ topic: String, _ payloadSize: Int) -> Void)?
        /// Publish our presence every keepalive / 2 (not retained) and drop a participant not heard of
        /// for 1.5 × keepalive. This is what makes a frozen or cut-off participant disappear within
        /// 1.5 × keepalive: brokers check keepalives coarsely (mosquitto 2.0.11 every ~5 s, so ~11 s for
        /// a keepalive of 5). It costs one small message per participant and interval, delivered to
        /// everyone in the group: turn it off for very large groups and rely on the broker's wills.
        public var presenceHeartbeats: Bool

        /// - Parameters:
        ///   - broker: `mqtt://[user[:password]@]host[:port]` (or `mqtts://` with `tls`).
        ///   - keepAlive: seconds; a frozen participant disappears after 1.5 × this (minimum 5).
        public init(
            broker: String = "mqtt://127.0.0.1:1883", group: String, participant: String, displayName: String? = nil,
            tls: MQTTClient.TLS? = nil, keepAlive: Int = 5, clock: any WallClock = SystemWallClock(),
            catchUpTimeout: Duration = .seconds(1), presenceHeartbeats: Bool = true
        ) throws(GroupSyncError) {
            do {
                var mqtt = try MQTTClient.Configuration(url: broker, clientID: "", tls: tls)
                mqtt.keepAlive = keepAlive
                // The broker keeps our subscriptions and queues reliable messages for us while we
                // reconnect (it must persist them to survive its own restart); close() ends it.
                mqtt.cleanStart = false
                mqtt.sessionExpiry = 120
                // GroupSync never subscribes at QoS 2, the case that needs MQTTClient's wide default
                // window; with 65,535 a process of 1,000 participants kept mosquitto busy for seconds
                // (it walks each client's in-flight list per acknowledgement). libmosquitto's own 20.
                mqtt.receiveMaximum = 20
                self.mqtt = mqtt
            } catch {
                throw .connection(error)
            }
            self.group = group
            self.participant = participant
            self.displayName = displayName
            self.clock = clock
            self.catchUpTimeout = catchUpTimeout
            self.presenceHeartbeats = presenceHeartbeats
            if getenv("GROUPSYNC_LOG_REJECTED") != nil {  // one variable, not a copy of the environment
                onRejected = { topic, size in
                    FileHandle.standardError.write(Data("groupsync: rejected \(size) bytes on \(topic)\n".utf8))
                }
            }
        }
    }

    public let group: String
    public let localParticipant: Participant
    public let topics: GroupTopics
    /// This connection's epoch (ms since 1970 when it was made).
    public let epoch: Int64
    let client: MQTTClient
    let configuration: Configuration
    let hlc: LockedValue<HybridLogicalClock>
    let state: LockedValue<CoordinatorStateMachine>
    let sharing = LockedValue(SharingGate())
    /// This participant's message sequence numbers (reliable, unreliable), for all sessions: they never
    /// restart while the coordinator lives, so a receiver's duplicate filter never drops a message sent
    /// after a leave and rejoin. Held while a message is numbered *and* handed to the connection, so that
    /// numbering order is wire order. Never taken by the network thread.
    let sequencer = LockedValue<(reliable: Int64, unreliable: Int64)>((0, 0))
    private let tasks = LockedValue<[Task<Void, Never>]>([])
    private let groupSubscription = LockedValue<MessageHandlerSubscription?>(nil)
    /// Set while `connect()` waits for its own presence to come back.
    private let presenceEcho = LockedValue<AsyncStream<Void>.Continuation?>(nil)
    /// What the broker replayed as retained after a reconnect without session, while it is collected.
    private struct Replay {
        var announcements: Set<String> = []
        var ownPresence = false
    }
    private let replay = LockedValue<Replay?>(nil)

    private init(configuration: Configuration, client: MQTTClient, epoch: Int64) {
        self.configuration = configuration
        self.group = configuration.group
        self.localParticipant = Participant(id: configuration.participant)
        self.topics = GroupTopics(group: configuration.group)
        self.epoch = epoch
        self.client = client
        self.hlc = LockedValue(HybridLogicalClock(participant: configuration.participant))
        self.state = LockedValue(CoordinatorStateMachine(me: configuration.participant, myEpoch: epoch))
    }

    /// Connects to the broker, announces this participant as online and starts following the group.
    /// Throws ``GroupSyncError/connection(_:)`` when the broker cannot be reached or refuses us.
    public static func connect(_ configuration: Configuration) async throws(GroupSyncError) -> GroupCoordinator {
        try Identifier.validate(configuration.group, kind: "group")
        try Identifier.validate(configuration.participant, kind: "participant")
        let topics = GroupTopics(group: configuration.group)
        let epoch = configuration.clock.milliseconds()
        var mqtt = configuration.mqtt
        if mqtt.clientID.isEmpty {
            mqtt.clientID = "gs-\(configuration.participant)-\(String(UInt32.random(in: 0...UInt32.max), radix: 36))"
        }
        let lost = Wire.Presence(participant: configuration.participant, status: .lost, epoch: epoch, name: configuration.displayName)
        mqtt.will = MQTTClient.Will(
            topic: topics.presence(configuration.participant), payload: Array(try Wire.encode(lost)), qos: .atLeastOnce, retain: true)
        let client: MQTTClient
        do {
            client = try await connectClient(mqtt)
        } catch {
            throw .connection(error)
        }
        let coordinator = GroupCoordinator(configuration: configuration, client: client, epoch: epoch)
        do {
            try await coordinator.start()
        } catch {
            await client.disconnect()
            throw error
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
        let subscription: MessageHandlerSubscription
        do {
            // Handled on the network thread, in the broker's order with the sessions' messages.
            subscription = try await client.subscribe(
                to: [
                    TopicSubscription(topics.presenceFilter, qos: .atLeastOnce),
                    TopicSubscription(topics.announcementFilter, qos: .atLeastOnce),
                ],
                handler: { [weak self] message in self?.handleGroupMessage(message) },
                connected: { [weak self] sessionPresent in
                    // Before the retained replay of the new connection: record it if the broker lost our
                    // MQTT session (see forgetSessionsEndedWhileAway).
                    self?.replay.withLock { $0 = sessionPresent ? nil : Replay() }
                })
        } catch {
            throw .connection(error)
        }
        groupSubscription.withLock { $0 = subscription }
        let reconnects = Task { [self] in
            for await event in events {
                guard case let .connected(sessionPresent) = event else { continue }
                state.withLock { $0.onReconnected(now: .now) }
                if !sessionPresent { await forgetSessionsEndedWhileAway() }
                await republishOwnedRetained()
            }
        }
        tasks.withLock { $0.append(reconnects) }
        // After connect() returns, the coordinator knows the group as the broker does.
        try await publishPresenceAndAwaitEcho()
        if configuration.presenceHeartbeats { startHeartbeats() }
    }

    /// Publishes our presence every keepalive / 2 and expires participants not heard of for 1.5 ×
    /// keepalive, while connected.
    private func startHeartbeats() {
        let keepAlive = Duration.seconds(configuration.mqtt.keepAlive)
        let heartbeat = Task { [self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: keepAlive / 2)
                // Not once close() began: a heartbeat after the goodbye would bring us back for a while.
                guard client.isConnected, !state.withLock({ $0.closed }), let payload = try? Wire.encode(onlinePresence) else { continue }
                _ = try? await client.publish(to: topics.presence(localParticipant.id), payload: payload, qos: .atMostOnce)
            }
        }
        let expiry = Task { [self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(250))
                guard client.isConnected else { continue }
                // Silent for 1.5 × keepalive less two checks: gone within 1.5 × keepalive of its last heartbeat.
                let effects = state.withLock { $0.expireSilent(now: .now, timeout: keepAlive * 3 / 2 - .milliseconds(500)) }
                forwardPresence(effects)
            }
        }
        tasks.withLock { $0 += [heartbeat, expiry] }
    }

    private var onlinePresence: Wire.Presence {
        Wire.Presence(participant: localParticipant.id, status: .online, epoch: epoch, name: configuration.displayName)
    }

    private func forwardPresence(_ effects: CoordinatorStateMachine.Effects) {
        guard !effects.presenceChanges.isEmpty else { return }
        let cores = state.withLock { Array($0.cores.values) }
        for (participant, epoch) in effects.presenceChanges {
            for core in cores { core.onPresence(participant, epoch: epoch) }
        }
    }

    /// Publishes our presence and waits (at most 5 s) until it comes back: every retained presence and
    /// announcement the broker delivered on (re)subscribing is in by then.
    private func publishPresenceAndAwaitEcho() async throws(GroupSyncError) {
        let (echo, continuation) = AsyncStream.makeStream(of: Void.self)
        presenceEcho.withLock { $0 = continuation }
        defer { presenceEcho.withLock { $0 = nil } }
        try await publishPresence()
        await GroupCoordinator.withTimeout(.seconds(5)) {
            for await _ in echo { return }
        }
    }

    /// After a reconnect in which the broker had lost our MQTT session (we were away longer than its
    /// expiry, or it restarted), the clears of sessions ended meanwhile never reached us. If the
    /// broker's retained store survived — our own presence record is in the replay — an announcement
    /// we own that is missing from the replay was ended: drop it instead of republishing it.
    private func forgetSessionsEndedWhileAway() async {
        // The replay is being recorded since the CONNACK (on the network thread, before any message).
        try? await publishPresenceAndAwaitEcho()
        guard let seen = replay.withLock({ replay in defer { replay = nil }; return replay }), seen.ownPresence else { return }
        let prefix = "\(topics.root)/session/"
        let ended = state.withLock { $0.ownedRetained.keys }
            .filter { $0.hasPrefix(prefix) }
            .map { String($0.dropFirst(prefix.count)) }
            .filter { !seen.announcements.contains($0) }
        for sessionID in ended {
            // Stop owning its records before the republish that follows, then clear what we had of it.
            let sessionTopics = ownedTopics(under: "\(topics.root)/s/\(sessionID)/")
            let core = state.withLock { state -> SessionCore? in
                state.disown(topics.announcement(sessionID))
                for topic in sessionTopics { state.disown(topic) }
                return state.cores[sessionID]
            }
            core?.onEnded(by: nil)
            for topic in sessionTopics { await clearRetained(topic) }
        }
    }

    /// Leaves every joined session, removes this participant's presence (a clean exit, not a crash), ends
    /// every `sessions()` sequence and closes the connection. Idempotent.
    public func close() async {
        let (effects, open) = state.withLock { $0.close() }
        effects.perform()
        // Say goodbye (leave sessions, clear presence) while the connection allows; a broker that is
        // down gets two seconds, after which the will reports us lost instead.
        await GroupCoordinator.withTimeout(.seconds(2)) { [self] in
            for core in open where core.isJoined { await core.leave() }
            try? await publishRetained(topics.presence(localParticipant.id), Data())
        }
        for core in open { core.invalidate(.coordinatorClosed) }
        groupSubscription.withLock { $0?.unsubscribe() }
        await client.disconnect(expireSession: true)
        let running = tasks.withLock { tasks in
            defer { tasks = [] }
            return tasks
        }
        for task in running { task.cancel() }
        sharing.withLock { $0.close() }.perform()
    }

    // MARK: - Sessions

    /// Every session of activity type `A` in the group, starting with those already announced (once each),
    /// then each new one as it is announced — by anyone, including this participant's own `activate`.
    /// Survives reconnects; ends when the coordinator closes. Cancelling the iterating task ends it.
    public func sessions<A: GroupActivity>(of activity: A.Type = A.self) -> GroupSessions<A> {
        let (stream, continuation) = AsyncStream.makeStream(of: SessionCore.self)
        let (id, effects) = state.withLock { $0.addListener(type: A.activityIdentifier, continuation) }
        continuation.onTermination = { [weak self] _ in self?.state.withLock { $0.removeListener(id) } }
        effects.perform()
        return GroupSessions(cores: stream)
    }

    /// Every session of the activity `activityIdentifier` (nil: of every activity), with the activity
    /// as JSON. Same delivery rules as ``sessions(of:)``.
    public func sessions(activityIdentifier: String?) -> GroupSessions<AnyGroupActivity> {
        let (stream, continuation) = AsyncStream.makeStream(of: SessionCore.self)
        let (id, effects) = state.withLock { $0.addListener(type: activityIdentifier ?? CoordinatorStateMachine.anyActivity, continuation) }
        continuation.onTermination = { [weak self] _ in self?.state.withLock { $0.removeListener(id) } }
        effects.perform()
        return GroupSessions(cores: stream)
    }

    /// Announces a session of an activity known only at run time. Returns the session ID.
    @discardableResult
    public func activate(
        activityIdentifier: String, value: JSONValue, metadata: GroupActivityMetadata? = nil
    ) async throws(GroupSyncError) -> String {
        try Identifier.validate(activityIdentifier, kind: "activity identifier")
        return try await announce(.init(
            type: activityIdentifier, metadata: metadata ?? GroupActivityMetadata(title: activityIdentifier), data: value))
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
        let closed = state.withLock { $0.closed }
        return client.isConnected && !closed ? .activationPreferred : .activationDisabled
    }

    /// Announces a new session of `activity` to the group (a retained announcement). Every participant,
    /// this one included, then receives it from ``sessions(of:)``. Returns the session ID.
    @discardableResult
    public func activate<A: GroupActivity>(_ activity: A) async throws(GroupSyncError) -> String {
        try Identifier.validate(A.activityIdentifier, kind: "activity identifier")
        return try await announce(.init(type: A.activityIdentifier, metadata: activity.metadata, data: try Wire.jsonValue(activity)))
    }

    private func announce(_ activity: Wire.Announcement.Activity) async throws(GroupSyncError) -> String {
        let sessionID = GroupCoordinator.makeSessionID()
        let now = configuration.clock.milliseconds()
        let announcement = Wire.Announcement(
            session: sessionID, activity: activity, createdBy: localParticipant.id, createdAt: now,
            revision: hlc.withLock { $0.tick(now: now) })
        try await publishRetained(topics.announcement(sessionID), try Wire.encode(announcement))
        return sessionID
    }

    /// Dies as a crashed process would: no leave, no clean disconnect; the broker publishes the will.
    package func simulateCrash() async {
        await client.abort()
        for task in tasks.withLock({ $0 }) { task.cancel() }
    }

    static func makeSessionID() -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789")
        return String((0..<16).map { _ in alphabet.randomElement()! })
    }

    /// Messages from the wire that were malformed, forged or stale and so ignored.
    public var rejectedMessageCount: Int {
        state.withLock { $0.rejected } + state.withLock { $0.cores.values }.reduce(0) { $0 + $1.rejectedCount }
    }

    // MARK: - Wire

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
        case let .presence(participant):
            let presence = message.payload.isEmpty ? nil : countingRejection(Wire.decode(Wire.Presence.self, from: message.payload))
            if !message.payload.isEmpty && presence == nil { return }
            if participant == localParticipant.id {
                if message.retain {
                    replay.withLock { $0?.ownPresence = true }
                } else if presence?.epoch == epoch, presence?.status == .online {
                    presenceEcho.withLock { $0 }?.yield()  // our own publish coming back live
                }
            }
            let effects = state.withLock { $0.onPresence(participant, presence) }
            effects.perform()
            forwardPresence(effects)
            if effects.republishPresence {
                spawn { try? await self.publishPresence() }
            }
        case let .announcement(sessionID):
            if message.retain && !message.payload.isEmpty { _ = replay.withLock { $0?.announcements.insert(sessionID) } }
            let announcement = message.payload.isEmpty ? nil : decoded(Wire.Announcement.self, message.payload)
            if !message.payload.isEmpty && announcement == nil { return }
            if let announcement {
                let now = configuration.clock.milliseconds()
                guard announcement.revision.isPlausible(now: now), Identifier.isValid(announcement.activity.type) else {
                    state.withLock { $0.countRejected() }
                    return
                }
                hlc.withLock { $0.observe(announcement.revision, now: now) }
            }
            let effects = state.withLock { machine in
                let online = machine.online
                return machine.onAnnouncement(sessionID, announcement) { announcement in
                    SessionCore(coordinator: self, announcement: announcement, presence: online)
                }
            }
            effects.perform()
            for core in effects.invalidate { core.onEnded(by: nil) }
            for (core, announcement) in effects.announcementChanged { core.onAnnouncement(announcement) }
        default:
            state.withLock { $0.countRejected() }  // not a group topic of this protocol
        }
    }

    /// Decodes a payload of protocol version 1, counting anything else as rejected.
    func decoded<T: Wire.Readable & Sendable>(_ type: T.Type, _ payload: Data) -> T? {
        countingRejection(Wire.decode(type, from: payload))
    }

    /// `value`, counting it as a rejected message when it is nil (it could not be read).
    func countingRejection<T>(_ value: T?) -> T? {
        if value == nil { state.withLock { $0.countRejected() } }
        return value
    }

    private func publishPresence() async throws(GroupSyncError) {
        try await publishRetained(topics.presence(localParticipant.id), try Wire.encode(onlinePresence))
    }

    /// Publishes a retained message this participant owns (QoS 1) and remembers it for republishing
    /// after reconnects; an empty payload clears it. On a broker without retained messages it is sent
    /// as a plain message.
    func publishRetained(_ topic: String, _ payload: Data) async throws(GroupSyncError) {
        let ticket = try enqueueRetained(topic, payload)
        do {
            _ = try await client.acknowledgement(of: ticket)
        } catch {
            throw .connection(error)
        }
    }

    /// The synchronous half of ``publishRetained(_:_:)``: the record is ours and handed to the connection.
    func enqueueRetained(_ topic: String, _ payload: Data) throws(GroupSyncError) -> MQTTClient.PublishTicket {
        state.withLock { $0.own(topic, payload) }
        do {
            return try client.enqueuePublish(to: topic, payload: payload, qos: .atLeastOnce, retain: client.retainAvailable)
        } catch {
            throw .connection(error)
        }
    }

    /// Clears a retained message owned by someone else (only when the broker's ACL lets us).
    /// Without retained messages the empty payload still tells live subscribers.
    func clearRetained(_ topic: String) async {
        state.withLock { $0.own(topic, Data()) }
        _ = try? await client.publish(to: topic, payload: Data(), qos: .atLeastOnce, retain: client.retainAvailable)
    }

    /// The retained topics this participant owns that start with `prefix`.
    func ownedTopics(under prefix: String) -> [String] {
        state.withLock { $0.ownedRetained.keys.filter { $0.hasPrefix(prefix) }.sorted() }
    }

    private func republishOwnedRetained() async {
        let owned = state.withLock { $0.ownedRetained }
        // Presence first, then announcements, members and state: the order a newcomer needs them in.
        for (topic, payload) in owned.sorted(by: { GroupCoordinator.republishOrder($0.key) < GroupCoordinator.republishOrder($1.key) }) {
            _ = try? await client.publish(to: topic, payload: payload, qos: .atLeastOnce, retain: client.retainAvailable)
        }
    }

    private static func republishOrder(_ topic: String) -> Int {
        if topic.contains("/presence/") { return 0 }
        if topic.contains("/session/") { return 1 }
        if topic.contains("/member/") { return 2 }
        return 3
    }

    /// Runs `work`, giving up on it after `timeout`.
    static func withTimeout(_ timeout: Duration, _ work: @escaping @Sendable () async -> Void) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await work() }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
        }
    }

    /// Runs background work owned by the coordinator (cancelled by ``close()``).
    func spawn(_ work: @escaping @Sendable () async -> Void) {
        let task = Task { await work() }
        tasks.withLock { tasks in
            tasks.removeAll { $0.isCancelled }
            tasks.append(task)
        }
    }

    // MARK: - The process-wide coordinator

    private static let current = LockedValue<GroupCoordinator?>(nil)
    private static let waiters = LockedValue<[CheckedContinuation<GroupCoordinator, Never>]>([])

    /// The coordinator used by `MyActivity.sessions()`, `activity.prepareForActivation()` and
    /// `activity.activate()`.
    public static var shared: GroupCoordinator? { current.withLock { $0 } }

    /// Makes `coordinator` the process-wide one; sequences from `MyActivity.sessions()` started before
    /// follow it from now on.
    public static func setShared(_ coordinator: GroupCoordinator?) {
        current.withLock { $0 = coordinator }
        guard let coordinator else { return }
        let waiting = waiters.withLock { waiters in
            defer { waiters = [] }
            return waiters
        }
        for waiter in waiting { waiter.resume(returning: coordinator) }
    }

    /// Waits until a shared coordinator is set.
    static func awaitShared() async -> GroupCoordinator {
        if let coordinator = shared { return coordinator }
        return await withCheckedContinuation { waiter in
            let now = current.withLock { current -> GroupCoordinator? in
                if let current { return current }
                waiters.withLock { $0.append(waiter) }
                return nil
            }
            if let now { waiter.resume(returning: now) }
        }
    }
}
