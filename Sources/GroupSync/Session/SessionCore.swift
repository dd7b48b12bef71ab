import Foundation
import MQTT

/// The runtime of one session for one coordinator, shared by every typed ``GroupSession`` view of it.
/// Logic lives in ``SessionStateMachine`` (under `machine`'s lock); this class subscribes, publishes and
/// runs the task that reads the session's topics.
final class SessionCore: Sendable {
    let id: String
    let activityType: String
    let coordinator: GroupCoordinator
    let machine: LockedValue<SessionStateMachine>
    private let subscription = LockedValue<MessageHandlerSubscription?>(nil)
    /// Where our messages to everyone go, as the one-element list `enqueue` publishes to (built once:
    /// every send used to build the topic, then a list of targets).
    private let broadcastDestinations: [String]

    init(coordinator: GroupCoordinator, announcement: Wire.Announcement, presence: [String: Int64]) {
        self.id = announcement.session
        self.activityType = announcement.activity.type
        self.coordinator = coordinator
        self.broadcastDestinations = [coordinator.topics.broadcast(announcement.session, from: coordinator.localParticipant.id)]
        self.machine = LockedValue(SessionStateMachine(
            sessionID: announcement.session, me: coordinator.localParticipant.id, myEpoch: coordinator.epoch,
            announcement: announcement, presence: presence))
    }

    var me: String { coordinator.localParticipant.id }
    /// `groupsync/v1/<group>/s/<session>/`: every session topic starts with it.
    var sessionPrefix: String { "\(topics.root)/s/\(id)/" }
    var topics: GroupTopics { coordinator.topics }
    var state: GroupSessionState { machine.withLock { $0.state } }
    var isJoined: Bool { state == .joined }
    var isInvalidated: Bool { state.isInvalidated }
    var announcement: Wire.Announcement { machine.withLock { $0.announcement } }
    var activeParticipants: Set<Participant> { machine.withLock { $0.active } }
    var rejectedCount: Int { machine.withLock { $0.rejected } }

    // MARK: - Lifecycle

    func join() async throws(GroupSyncError) {
        let (barrierStream, barrier) = AsyncStream.makeStream(of: Bool.self)
        let (catchUpStream, catchUp) = AsyncStream.makeStream(of: Void.self)
        let started = machine.withLock { $0.onJoinStarted(barrier: barrier, catchUp: catchUp) }
        guard started else {
            switch state {
            case .joined: return
            case .invalidated: throw .sessionInvalidated
            case .waiting: throw .sessionInvalidated  // another join() is in progress and failed
            }
        }
        var memberPublished = false
        do {
            try await joinSteps(barrierStream, catchUpStream, memberPublished: &memberPublished)
        } catch {
            // A failed, cancelled or interrupted join leaves the session as it was (waiting, or
            // invalidated by a concurrent leave/end): no reading task, no subscription, no member record.
            let effects = machine.withLock { $0.onJoinAbandoned() }
            effects.perform()
            stopReading()
            if memberPublished && !isJoined { await coordinator.clearRetained(topics.member(id, me)) }
            throw Task.isCancelled && !state.isInvalidated ? .cancelled : error
        }
        coordinator.sharing.withLock { $0.onJoined(id) }.perform()
    }

    private func joinSteps(
        _ barrierStream: AsyncStream<Bool>, _ catchUpStream: AsyncStream<Void>, memberPublished: inout Bool
    ) async throws(GroupSyncError) {
        let filters = topics.sessionFilters(id, participant: me)
        let member = try Wire.encode(Wire.Member(participant: me, epoch: coordinator.epoch))
        // The session's messages are handled on the connection's network thread, as they are read: one
        // hand-off (to the app's sequences) instead of two. Handling never blocks and never runs app code.
        // Our member record goes out right behind the SUBSCRIBE packets, without waiting for their SUBACK:
        // the broker handles both in order, so its echo — the barrier — still comes after every retained
        // message of the session.
        var memberTicket: Result<MQTTClient.PublishTicket, GroupSyncError>?
        let messages: MessageHandlerSubscription
        do {
            messages = try await coordinator.client.subscribe(
                to: filters.shared.map { TopicSubscription($0, qos: .atLeastOnce) }
                    + [TopicSubscription(filters.broadcast, qos: .atLeastOnce, noLocal: true)],
                handler: { [weak self] message in self?.handle(message) },
                endOfBurst: { [weak self] in self?.releaseHeldValues() },
                whenSent: {
                    memberPublished = true
                    memberTicket = Result { () throws(GroupSyncError) in try coordinator.enqueueRetained(topics.member(id, me), member) }
                })
        } catch {
            if case let .success(ticket)? = memberTicket { coordinator.client.detach(ticket) }
            throw .connection(error)
        }
        subscription.withLock { $0 = messages }
        guard let memberTicket else { throw .sessionInvalidated }
        let ticket = try memberTicket.get()
        guard !isInvalidated else {  // left or ended while subscribing
            coordinator.client.detach(ticket)
            throw .sessionInvalidated
        }
        do throws(MQTTError) {
            _ = try await coordinator.client.acknowledgement(of: ticket)
        } catch {
            throw .connection(error)
        }
        var awaitCatchUp: Bool?
        for await value in barrierStream {
            awaitCatchUp = value
            break
        }
        guard let awaitCatchUp else { throw .sessionInvalidated }
        if awaitCatchUp {
            await GroupCoordinator.withTimeout(coordinator.configuration.catchUpTimeout) {
                for await _ in catchUpStream { return }
            }
        }
        let effects = machine.withLock { $0.onJoined() }
        effects.perform()
        guard state == .joined else { throw .sessionInvalidated }
    }

    /// Leaves: others see us go at once; our last state stays visible to them.
    func leave() async {
        guard invalidate(.left) else { return }
        await coordinator.clearRetained(topics.member(id, me))
        let fresh = SessionCore(coordinator: coordinator, announcement: announcement, presence: coordinator.state.withLock { $0.online })
        coordinator.state.withLock { $0.replace(self, with: fresh) }
    }

    /// Ends the session for everyone and removes every retained message of it from the broker.
    func end() async {
        let (members, stateTopics) = machine.withLock { (Array($0.members.keys), $0.stateTopics) }
        if isJoined {
            // Tell joined participants who ended it, before the announcement disappears.
            _ = try? await sendControl(type: "$end", body: JSONValue.null, to: .all)
        }
        guard invalidate(.ended(by: coordinator.localParticipant)) else { return }
        // Every record of the session we know of, and those we own (also from before an earlier leave).
        let records = Set((members + [me]).map { topics.member(id, $0) })
            .union(stateTopics)
            .union(coordinator.ownedTopics(under: sessionPrefix))
        await coordinator.clearRetained(topics.announcement(id))
        for topic in records.sorted() { await coordinator.clearRetained(topic) }
        coordinator.state.withLock { $0.forget(id) }
    }

    /// The session ended elsewhere: clear what we own of it (under a strict ACL only we can).
    func onEnded(by participant: Participant?) {
        let stateTopics = machine.withLock { $0.stateTopics }
        guard invalidate(.ended(by: participant)) else { return }
        let announcementTopic = topics.announcement(id)
        coordinator.state.withLock { state in
            state.forget(id)
            // If we created the session or last changed its activity, it must not come back after a reconnect.
            state.disown(announcementTopic)
        }
        // Everything we own of the session: member record and state records, also those written before
        // an earlier leave() of this session.
        let owned = Set(coordinator.ownedTopics(under: sessionPrefix) + [topics.member(id, me)])
            .union(stateTopics.filter { $0.hasSuffix("/\(me)") })
        coordinator.spawn { [coordinator] in
            for topic in owned.sorted() { await coordinator.clearRetained(topic) }
        }
    }

    /// Marks the session over locally: its sequences end, its topics are no longer read, and it no
    /// longer counts as shared. Returns false if it already was over.
    @discardableResult
    func invalidate(_ reason: GroupSessionState.InvalidationReason) -> Bool {
        var wasValid = false
        var wasJoined = false
        let effects = machine.withLock { machine -> SessionStateMachine.Effects in
            wasValid = !machine.state.isInvalidated
            wasJoined = machine.state == .joined
            return machine.invalidate(reason)
        }
        effects.perform()
        guard wasValid else { return false }
        stopReading()
        if wasJoined { coordinator.sharing.withLock { $0.onLeft(id) }.perform() }
        return true
    }

    private func stopReading() {
        subscription.withLock { $0?.unsubscribe() }
    }

    // MARK: - Inputs

    func onPresence(_ participant: String, epoch: Int64?) {
        apply { $0.onPresence(participant, epoch: epoch) }
    }

    func onAnnouncement(_ announcement: Wire.Announcement) {
        apply { $0.onAnnouncement(announcement) }
    }

    /// Network thread: one message of the session's topics.
    private func handle(_ message: MQTTMessage) {
        guard let onRejected = coordinator.configuration.onRejected else { return process(message) }
        let before = rejectionTotal
        process(message)
        if rejectionTotal > before {
            let (topic, size) = (message.topic, message.payload.count)
            Task { onRejected(topic, size) }  // app code: never on the network thread
        }
    }

    /// Rejections counted by this session and by the coordinator's decoder.
    private var rejectionTotal: Int { rejectedCount + coordinator.state.withLock { $0.rejected } }

    private func process(_ message: MQTTMessage) {
        // Only whether to answer a newcomer outlives each input's effects (kept apart: the effects are a
        // large value, and creating and destroying a spare one cost ≈ 1,000 instructions per message).
        let catchUpTo: String?
        switch topics.parse(message.topic) {
        case let .member(session, participant) where session == id:
            if message.payload.isEmpty {
                catchUpTo = apply { $0.onMember(participant, nil, retained: message.retain) }.catchUpTo
            } else if let record = coordinator.countingRejection(Wire.decode(Wire.Member.self, from: message.payload)), record.participant == participant {
                if participant == me {
                    if record.epoch == coordinator.epoch,
                       let (barrier, value) = machine.withLock({ $0.onBarrierPassed(retainAvailable: coordinator.client.retainAvailable) }) {
                        barrier.yield(value)
                    }
                    return
                }
                catchUpTo = apply { $0.onMember(participant, record, retained: message.retain) }.catchUpTo
            } else {
                return reject()
            }
        case let .state(session, key, writer) where session == id:
            guard !message.payload.isEmpty else { return }
            let now = coordinator.configuration.clock.milliseconds()
            guard let record = coordinator.countingRejection(Wire.decode(Wire.StateRecord.self, from: message.payload)), record.key == key,
                  record.clock.participant == writer, record.clock.isPlausible(now: now) else { return reject() }
            coordinator.hlc.withLock { $0.observe(record.clock, now: now) }
            // Shown at the end of the burst: records that arrive together make one visible change.
            catchUpTo = apply { $0.onState(record, writer: writer, topic: message.topic, holdingValues: true) }.catchUpTo
        case let .broadcast(session, sender) where session == id:
            catchUpTo = inbound(message.payload, from: sender)
        case let .direct(session, recipient, sender) where session == id && recipient == me:
            catchUpTo = inbound(message.payload, from: sender)
        default:
            return reject()
        }
        if let newcomer = catchUpTo {
            // Handed to the connection now, from the network thread; only the acknowledgement is awaited
            // elsewhere.
            let listingMembers = !coordinator.client.retainAvailable
            let catchUp = machine.withLock { $0.catchUp(listingMembers: listingMembers) }
            if let body = try? Wire.encode(catchUp), let tickets = try? enqueue(
                type: "$catchup", envelope: Wire.EnvelopeBytes(encodedBody: body), to: .only(Participant(id: newcomer)), reliable: true,
                limit: Wire.maximumPayload) {
                coordinator.spawn { [self] in try? await acknowledgements(of: tickets) }
            }
        }
    }

    /// An envelope on a message topic; returns the newcomer to send a catch-up to, if any.
    private func inbound(_ payload: Data, from sender: String) -> String? {
        guard let envelope = coordinator.countingRejection(Wire.decodeEnvelope(payload)) else { return nil }
        switch envelope.header.type {
        case "$catchup":
            guard var catchUp = Wire.decode(Wire.CatchUp.self, from: payload[envelope.body]) else {
                reject()
                return nil
            }
            let now = coordinator.configuration.clock.milliseconds()
            catchUp.states.removeAll { !$0.clock.isPlausible(now: now) }
            let retainAvailable = coordinator.client.retainAvailable
            let effects = apply { $0.onCatchUp(catchUp, from: sender, retainAvailable: retainAvailable) }
            if !effects.catchUpArrived.isEmpty {  // accepted: merge its clocks
                for record in catchUp.states { coordinator.hlc.withLock { $0.observe(record.clock, now: now) } }
            }
            return effects.catchUpTo
        case "$end":
            guard machine.withLock({ $0.isMember(sender) }) else {
                reject()
                return nil
            }
            onEnded(by: Participant(id: sender))
            return nil
        default:
            return apply { $0.onMessage(envelope, payload: payload, sender: sender) }.catchUpTo
        }
    }

    /// Network thread, at the end of each burst: shows the newest of the values held during it. Most
    /// bursts held none (messages only): then one look under the lock, no effects to build (≈ 1,000
    /// instructions a burst). Values are held only on this thread, so none can arrive in between.
    private func releaseHeldValues() {
        guard machine.withLock({ $0.hasHeldValues }) else { return }
        apply { $0.releaseHeldValues() }
    }

    private func reject() {
        machine.withLock { $0.onRejected() }
    }

    /// Feeds one input to the state machine. Its values are yielded while the lock is held, so every
    /// sequence receives updates in the order the machine applied them (a consumer of `values()` never
    /// ends on an older value than the machine holds); yielding never runs consumer code. Sequences
    /// are finished after the lock is released, since their termination handlers take it.
    @discardableResult
    func apply(_ input: (inout SessionStateMachine) -> SessionStateMachine.Effects) -> SessionStateMachine.Effects {
        let effects = machine.withLock { machine in
            let effects = input(&machine)
            effects.yieldAll()
            return effects
        }
        effects.finishAll()
        return effects
    }

    // MARK: - Outputs

    /// Publishes an envelope to `recipients`: numbered and handed to the connection atomically, so that
    /// a sender's reliable messages reach every receiver in send order.
    ///
    /// Returns once a reliable message was acknowledged by the broker, and at once for an unreliable one
    /// (handed to the connection: QoS 0 has no acknowledgement worth waiting for).
    func send(
        type: String, envelope: Wire.EnvelopeBytes, to recipients: Participants, reliable: Bool, limit: Int
    ) async throws(GroupSyncError) {
        let tickets = try enqueue(type: type, envelope: envelope, to: recipients, reliable: reliable, limit: limit)
        if reliable {
            try await acknowledgements(of: tickets)
        } else {
            for ticket in tickets { coordinator.client.detach(ticket) }
        }
    }

    /// The synchronous half of ``send(type:envelope:to:reliable:limit:)``: numbers the envelope and hands
    /// it to the connection.
    private func enqueue(
        type: String, envelope: Wire.EnvelopeBytes, to recipients: Participants, reliable: Bool, limit: Int
    ) throws(GroupSyncError) -> [MQTTClient.PublishTicket] {
        guard isJoined else { throw state.isInvalidated ? .sessionInvalidated : .notJoined }
        let destinations: [String]
        switch recipients.storage {
        case .all: destinations = broadcastDestinations
        case let .only(set):
            guard !set.isEmpty else { throw .noRecipients }
            var direct: [String] = []
            for participant in set.map(\.id).sorted() {
                try Identifier.validate(participant, kind: "participant")  // every one before anything is sent
                direct.append(topics.direct(id, to: participant, from: me))
            }
            destinations = direct
        }
        return try coordinator.sequencer.withLock { counters throws(GroupSyncError) -> [MQTTClient.PublishTicket] in
            let seq: Int64
            if reliable {
                counters.reliable += 1
                seq = counters.reliable
            } else {
                counters.unreliable += 1
                seq = counters.unreliable
            }
            let payload = envelope.finished(type: type, epoch: coordinator.epoch, seq: seq, reliable: reliable)
            guard payload.count <= limit else { throw .messageTooLarge(size: payload.count, limit: limit) }
            var tickets: [MQTTClient.PublishTicket] = []
            tickets.reserveCapacity(destinations.count)
            for topic in destinations {
                do throws(MQTTError) {
                    tickets.append(try coordinator.client.enqueuePublish(
                        to: topic, payload: payload, qos: reliable ? .atLeastOnce : .atMostOnce))
                } catch {
                    // The copies already handed over go out, but nobody will await them: their
                    // acknowledgements must not linger under IDs that later messages reuse.
                    for ticket in tickets { coordinator.client.detach(ticket) }
                    throw .connection(error)
                }
            }
            return tickets
        }
    }

    /// The asynchronous half: waits for every ticket, even after one failed, so that no acknowledgement
    /// is left unclaimed.
    private func acknowledgements(of tickets: [MQTTClient.PublishTicket]) async throws(GroupSyncError) {
        var failure: MQTTError?
        for ticket in tickets {
            do throws(MQTTError) {
                _ = try await coordinator.client.acknowledgement(of: ticket)
            } catch {
                failure = failure ?? error
            }
        }
        if let failure { throw .connection(failure) }
    }

    private func sendControl<Body: Codable & Sendable>(type: String, body: Body, to recipients: Participants) async throws(GroupSyncError) {
        try await send(type: type, envelope: try Wire.EnvelopeBytes(body: body), to: recipients, reliable: true, limit: Wire.maximumPayload)
    }

    /// Writes `value` under `key`: applied locally at once, then published retained on our writer topic.
    func write(key: String, value: JSONValue) -> Wire.StateRecord {
        let now = coordinator.configuration.clock.milliseconds()
        let clock = coordinator.hlc.withLock { $0.tick(now: now) }
        let record = Wire.StateRecord(key: key, value: value, clock: clock)
        let topic = topics.state(id, key: key, writer: me)
        apply { $0.onLocalWrite(record, topic: topic) }
        return record
    }

    func publish(_ record: Wire.StateRecord) async throws(GroupSyncError) {
        try await coordinator.publishRetained(topics.state(id, key: record.key, writer: me), try Wire.encode(record))
    }

    func updateActivity(_ activity: Wire.Announcement.Activity) {
        let now = coordinator.configuration.clock.milliseconds()
        let revision = coordinator.hlc.withLock { $0.tick(now: now) }
        let updated = machine.withLock { machine -> Wire.Announcement in
            var announcement = machine.announcement
            announcement.activity = activity
            announcement.revision = revision
            _ = machine.onAnnouncement(announcement)
            return announcement
        }
        let coordinator = self.coordinator
        let topic = topics.announcement(id)
        coordinator.spawn { [self] in
            guard !isInvalidated, let payload = try? Wire.encode(updated) else { return }
            try? await coordinator.publishRetained(topic, payload)
        }
    }
}
