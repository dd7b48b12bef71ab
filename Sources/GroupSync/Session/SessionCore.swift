import Foundation
import MQTT

/// The runtime of one session for one coordinator, shared by every typed ``GroupSession`` view of it.
/// Logic lives in ``SessionStateMachine``, under `locked`'s one lock with the handles of what the session
/// made; this class subscribes, publishes, handles the session's messages and performs what the machine
/// returns once the lock is released. Its lifecycle (join, leave, end) is in `SessionCore+Lifecycle.swift`,
/// what it sends in `SessionCore+Sending.swift`.
///
/// Locks taken while it is held, all leaves (whoever holds one calls into no session): the connection's and
/// libmosquitto's, to number a message and hand it to the connection in one hold (`enqueue`, which leaves
/// the write to the socket, and the callbacks libmosquitto runs in it, until the lock is released); the
/// participant's clock; a playback coordinator's timers', as it is made (``facet(_:make:)``).
final class SessionCore: Sendable {
    let id: String
    let activityType: String
    let context: SessionContext
    let broadcastTopic: String
    /// Seals and opens the session's payloads in a private group (``GroupCoordinator/Configuration/keyring``).
    let sealer: SessionSealer?
    let locked: LockedValue<State>
    /// Wakes the session when its machine asks (``tick()``); cancelled when the session is over for us.
    let timer = WakeUp()

    struct State {
        var machine: SessionStateMachine
        /// The subscription to the session's topics, while they are read.
        var subscription: MessageHandlerSubscription?
        /// The session's playback coordinator (until the session is over), and the configuration of its
        /// journal, once made.
        var playback: PlaybackCoordinator.Engine?
        var journal: GroupSessionJournal.Configuration?
        /// The group clock of the session's playback coordinator, once it follows the session.
        var clockService: ClockService?
        /// Hand-overs made while a thread performs earlier ones, which it performs next; nil while no
        /// thread performs any.
        var pending: [SessionStateMachine.Handover]?
    }

    /// What the session's clock messages go to.
    struct ClockService: Sendable {
        /// The group time at local time `local`, when we serve the group clock; nil otherwise (the ping
        /// is not answered).
        var groupTime: @Sendable (_ local: Int64) -> GroupInstant?
        /// A `$pong` from `sender`, which arrived at local time `arrival`. Called on the network thread: it
        /// must return at once.
        var pong: @Sendable (_ sender: String, _ pong: Wire.Pong, _ arrival: Int64) -> Void
    }

    /// `numbering`: the one of an earlier session object of the same session (left, then found again), so
    /// that our numbers go on where they were.
    init(
        context: SessionContext, announcement: Wire.Announcement, presence: [String: Int64],
        numbering: MessageNumbering? = nil
    ) {
        self.id = announcement.session
        self.activityType = announcement.activity.type
        self.context = context
        self.broadcastTopic = context.topics.broadcast(announcement.session, from: context.me.id)
        self.sealer = context.keyring.map { SessionSealer(keyring: $0, group: context.topics.group, session: announcement.session) }
        let machine = SessionStateMachine(
            me: context.me.id, myEpoch: context.epoch, announcement: announcement, presence: presence,
            numbering: numbering ?? MessageNumbering(outbox: context.outbox, positionInterval: context.positionInterval))
        self.locked = LockedValue(State(machine: machine))
        timer.onWake { [weak self] in self?.tick() }
    }

    var me: String { context.me.id }
    var topics: GroupTopics { context.topics }
    /// `groupsync/v2/<group>/s/<session>/`: every session topic starts with it.
    var sessionPrefix: String { "\(topics.root)/s/\(id)/" }
    var state: GroupSessionState { read { $0.state } }
    var isJoined: Bool { state == .joined }
    var isInvalidated: Bool { state.isInvalidated }
    var announcement: Wire.Announcement { read { $0.announcement } }
    /// How long our retained records of the session live after their last refresh.
    var lifetime: Duration { read { $0.announcement.lifetime } }
    var ownCopyTopic: String { topics.announcement(id, by: me) }
    var activeParticipants: Set<Participant> { read { $0.active } }
    var rejectedCount: Int { read { $0.rejected } }

    func read<Value, Failure: Error>(_ body: (SessionStateMachine) throws(Failure) -> Value) throws(Failure) -> Value {
        try locked.withLock { state throws(Failure) in try body(state.machine) }
    }

    /// Feeds one input to the machine, then performs what it returned: its hand-overs, behind those of
    /// earlier inputs not performed yet (so that every sequence gets updates in the order the machine made
    /// them, and a consumer of `valueUpdates()` never ends on an older value than the machine holds), by
    /// whichever thread performs hand-overs; then its messages, its timer, its lifecycle.
    @discardableResult
    func perform(_ input: (inout SessionStateMachine) -> SessionStateMachine.Action) -> SessionStateMachine.Action {
        var handovers: [SessionStateMachine.Handover]?
        let action = locked.withLock { state in
            let action = input(&state.machine)
            if !action.observed.isEmpty {
                let now = context.clock.milliseconds()
                context.hlc.withLock { clock in action.observed.forEach { clock.observe($0, now: now) } }
            }
            if state.pending != nil {
                state.pending?.append(contentsOf: action.handovers)
            } else if !action.handovers.isEmpty {
                (state.pending, handovers) = ([], action.handovers)  // no other thread performs any: this one does
            }
            return action
        }
        while let batch = handovers {
            for handover in batch {
                switch handover {
                case let .yield(inbox, update): inbox.yield(update)
                case let .finish(inbox): inbox.finish()
                case let .journal(action): action.perform()
                }
            }
            handovers = locked.withLock { state in
                let queued = state.pending.flatMap { $0.isEmpty ? nil : $0 }
                state.pending = queued == nil ? nil : []
                return queued
            }
        }
        for send in action.sends { self.send(send) }
        switch action.timer {
        case .unchanged: break
        // A millisecond late rather than early: the wall clock may have turned a millisecond since `due`
        // was reckoned, and a wake-up before it would find nothing due.
        case let .wake(due): timer.schedule(after: .milliseconds(max(due &- context.clock.milliseconds() &+ 1, 0)))
        case .cancel: timer.cancel()
        }
        if let previous = action.invalidatedFrom {
            stopReading()
            context.report(self, .invalidated(wasJoined: previous == .joined))
        }
        return action
    }

    /// The inbox of a new sequence of the session, removed from the machine when it ends. With
    /// `keepingNewest`, a slow consumer skips to the newest updates.
    func listen(_ kind: SessionStateMachine.Listener.Kind, keepingNewest limit: Int? = nil) -> Inbox<SessionStateMachine.Update> {
        let inbox = Inbox<SessionStateMachine.Update>(keepingNewest: limit)
        register(inbox, { $0.addListener(.init(kind: kind, inbox: inbox)) }, removal: { $0.removeListener($1) })
        return inbox
    }

    /// Adds a sequence's inbox to the machine through `add`; `removal` takes it out, by the inbox's
    /// identity, when the inbox ends (nothing to take out when the session was over and `add` ended it).
    func register<Element>(
        _ inbox: Inbox<Element>, _ add: (inout SessionStateMachine) -> SessionStateMachine.Action,
        removal: @escaping @Sendable (inout SessionStateMachine, ObjectIdentifier) -> Void
    ) {
        perform(add)
        let id = ObjectIdentifier(inbox)
        inbox.onTermination { [locked] in locked.withLock { removal(&$0.machine, id) } }
    }

    /// The facet at `keyPath` (the playback coordinator, the journal), made by `make` if there is none:
    /// under the lock, so `make` takes none of the session's. `made`: this call made it.
    func facet<Facet>(_ keyPath: WritableKeyPath<State, Facet?>, make: (SessionStateMachine) -> Facet) -> (Facet, made: Bool) {
        locked.withLock { state in
            if let existing = state[keyPath: keyPath] { return (existing, false) }
            let made = make(state.machine)
            state[keyPath: keyPath] = made
            return (made, true)
        }
    }

    /// The playback coordinator serves the group clock with `service` (`$ping`s are answered with it,
    /// `$pong`s go to it); nil: it is over (the session ended), and a new one may be made.
    func playbackServes(_ service: ClockService?) {
        locked.withLock { state in
            state.clockService = service
            if service == nil { state.playback = nil }
        }
    }

    /// An observer asked to be welcomed (see ``SessionStateMachine/onObserver(_:)``).
    func onObserver(_ observer: String) {
        perform { $0.onObserver(observer) }
    }

    func onPresence(_ participant: String, epoch: Int64?) {
        let now = context.clock.milliseconds()
        perform { $0.onPresence(participant, epoch: epoch, now: now) }
    }

    /// A copy of the announcement by `publisher`. When it is newer than ours, ours is updated too, so
    /// that the session's activity is the same whichever copy outlives the others.
    func onAnnouncement(_ announcement: Wire.Announcement, from publisher: String) {
        var replaced = false
        perform { machine in
            let before = machine.announcement.revision
            defer { replaced = machine.announcement.revision > before }
            return machine.onAnnouncement(announcement, from: publisher)
        }
        if replaced, context.retained.owns(ownCopyTopic) { publishOwnCopy(announcement) }
    }

    /// What seals and opens the chunks of `record`'s attachment: nil for one in clear, or one sealed with a
    /// key we lack.
    func chunkCipher(for record: Wire.JournalRecord) -> ChunkCipher? {
        guard let keyID = record.sealed, let salt = record.salt else { return nil }
        return sealer?.chunkCipher(keyID: keyID, salt: salt)
    }

    /// An announcement as it goes on the wire: its activity sealed in a private session.
    func wireAnnouncement(_ announcement: Wire.Announcement) -> Wire.Announcement {
        sealer.map { announcement.sealed(by: $0) } ?? announcement
    }

    /// Publishes `announcement` as our copy, in the background, unless the session is over by then.
    func publishOwnCopy(_ announcement: Wire.Announcement) {
        let (retained, topic) = (context.retained, ownCopyTopic)
        context.tasks.spawn { [self] in
            guard !isInvalidated, let payload = try? Wire.encode(wireAnnouncement(announcement)) else { return }
            try? await retained.publish(topic, payload, lifetime: announcement.lifetime)
        }
    }

    // MARK: - Receiving

    /// Network thread: one message of the session's topics.
    func handle(_ message: MQTTMessage) {
        let rejections = process(message)
        guard rejections > 0, let onRejected = context.onRejected else { return }
        // Once per rejection: a `$position` can show several held messages to be forged.
        let (topic, size) = (message.topic, message.payload.count)
        Task { for _ in 0..<rejections { onRejected(topic, size) } }  // app code: never on the network thread
    }

    /// Feeds one message to the machine; returns how many received values it rejected.
    private func process(_ message: MQTTMessage) -> Int {
        let now = context.clock.milliseconds()
        switch topics.parse(message.topic) {
        case let .member(session, participant) where session == id:
            let record = message.payload.isEmpty ? nil : Wire.decode(Wire.Member.self, from: message.payload)
            guard message.payload.isEmpty || record?.matches(participant: participant) == true else { return reject() }
            guard participant == me else {
                let retainAvailable = context.client.retainAvailable
                return perform { $0.onMember(participant, record, retained: message.retain, retainAvailable: retainAvailable, now: now) }
                    .rejected
            }
            guard record?.epoch == context.epoch else {
                restoreOwnMemberRecord()
                return 0
            }
            let retainAvailable = context.client.retainAvailable
            return perform { $0.onBarrierPassed(retainAvailable: retainAvailable) }.rejected
        case let .state(session, key, writer) where session == id:
            guard !message.payload.isEmpty else { return 0 }
            guard let record = Wire.decode(Wire.StateRecord.self, from: message.payload)?.opened(by: sealer, session: id) else {
                return reject()
            }
            // Shown at the end of the burst: records that arrive together make one visible change.
            return perform { $0.onState(record, key: key, writer: writer, topic: message.topic, now: now, holdingValues: true) }.rejected
        case let .journal(session, attachment, owner) where session == id:
            // In a private session a record opens, or is rejected as malformed (in clear, another key's, forged).
            let record =
                message.payload.isEmpty
                ? nil : Wire.decode(Wire.JournalRecord.self, from: message.payload)?.opened(by: sealer, session: id)
            let malformed = record == nil && !message.payload.isEmpty
            return perform { $0.onJournal { malformed ? $0.onMalformedRecord() : $0.onRecord(record, digest: attachment, owner: owner) } }
                .rejected
        case let .broadcast(session, sender) where session == id:
            return inbound(message.payload, from: sender, direct: false, now: now)
        case let .direct(session, recipient, sender) where session == id && recipient == me:
            return inbound(message.payload, from: sender, direct: true, now: now)
        default: return reject()
        }
    }

    /// An envelope on a message topic; returns how many received values it rejected.
    private func inbound(_ payload: Data, from sender: String, direct: Bool, now: Int64) -> Int {
        guard let scanned = Wire.decodeEnvelope(payload),
            let (envelope, payload) = scanned.opened(
                payload, by: sealer, session: id, sender: sender, recipient: direct && scanned.header.stream == nil ? me : nil)
        else { return reject() }
        let (body, epoch) = (payload[envelope.body], envelope.header.epoch)
        switch envelope.header.type {
        case Control.ping.rawValue where direct:
            let arrival = context.clock.nanoseconds()
            return feed(body) { (ping: Wire.Ping, machine) in machine.onPing(ping, from: sender, arrival: arrival) }
        case Control.pong.rawValue where direct:
            let arrival = context.clock.nanoseconds()
            guard let pong = Wire.decode(Wire.Pong.self, from: body) else { return reject() }
            locked.withLock { $0.clockService }?.pong(sender, pong, arrival)
            return 0
        case Control.catchUp.rawValue:
            guard var catchUp = Wire.decode(Wire.CatchUp.self, from: body) else { return reject() }
            // A state or journal record that does not open is left out and rejected, as a state with an
            // implausible clock is.
            let states = catchUp.states.compactMap { $0.opened(by: sealer, session: id) }
            let journal = catchUp.journal.map { records in records.compactMap { $0.opened(by: sealer, session: id) } }
            let left = catchUp.states.count - states.count + (catchUp.journal?.count ?? 0) - (journal?.count ?? 0)
            let unopened = (0..<left).reduce(0) { count, _ in count + reject() }
            (catchUp.states, catchUp.journal) = (states, journal)
            let retainAvailable = context.client.retainAvailable
            return unopened + perform { $0.onCatchUp(catchUp, from: sender, retainAvailable: retainAvailable, now: now) }.rejected
        case Control.end.rawValue:
            let action = perform { $0.onEnd(from: sender) }
            if action.invalidatedFrom != nil { clearOwnRecords() }
            return action.rejected
        case Control.resend.rawValue where direct:
            return feed(body) { (resend: Wire.Resend, machine) in machine.onResend(resend, from: sender) }
        case Control.skip.rawValue where direct:
            return feed(body) { (skip: Wire.Skip, machine) in machine.onSkip(skip, from: sender, epoch: epoch, now: now) }
        case Control.member.rawValue where direct:
            // The sender's member record, as an answer to our join (no join itself).
            let retainAvailable = context.client.retainAvailable
            let record = Wire.Member(participant: sender, epoch: epoch, again: true)
            return perform { $0.onMember(sender, record, retained: false, retainAvailable: retainAvailable, now: now) }.rejected
        case Control.have.rawValue:
            return feed(body) { (have: Wire.Have, machine) in machine.onHave(have, from: sender) }
        case Control.chunks.rawValue where direct:
            return feed(body) { (request: Wire.ChunkRequest, machine) in machine.onChunkRequest(request, from: sender) }
        case Control.position.rawValue:
            return feed(body) { (position: Wire.Position, machine) in machine.onPosition(position, from: sender, epoch: epoch, now: now) }
        default:
            return perform { $0.onMessage(envelope, payload: payload, sender: sender, direct: direct, now: now) }.rejected
        }
    }

    /// `data` read as a `Record` and fed to the machine, or rejected if it does not read; returns how many
    /// received values were rejected.
    private func feed<Record: Wire.Readable>(
        _ data: Data, _ input: (Record, inout SessionStateMachine) -> SessionStateMachine.Action
    ) -> Int {
        guard let record = Wire.decode(Record.self, from: data) else { return reject() }
        return perform { input(record, &$0) }.rejected
    }

    /// Network thread: our member record was overwritten or cleared by someone else (only possible
    /// without the ACL) while we keep it: publish it again, so that nobody — a newcomer reading the
    /// retained record included — takes us for gone.
    private func restoreOwnMemberRecord() {
        let topic = topics.member(id, me)
        guard isJoined, let payload = context.retained.keptPayload(of: topic) else { return }
        let (retained, lifetime) = (context.retained, lifetime)
        context.tasks.spawn { try? await retained.publish(topic, payload, lifetime: lifetime) }
    }

    /// Our connection is back (see ``SessionStateMachine/onReconnected(now:)``).
    func onReconnected() {
        let now = context.clock.milliseconds()
        perform { $0.onReconnected(now: now) }
    }

    /// The timer's work (see ``SessionStateMachine/onTick(now:at:connected:)``).
    func tick() {
        let (now, instant, connected) = (context.clock.milliseconds(), ContinuousClock.now, context.client.isConnected)
        perform { $0.onTick(now: now, at: instant, connected: connected) }
    }

    /// Network thread, at the end of each burst: shows the newest of the values held during it. Values
    /// are held only on this thread, so none can arrive in between.
    func releaseHeldValues() { perform { $0.releaseHeldValues() } }

    /// A received value that could not be read: counted. Returns 1, the rejections to report.
    @discardableResult
    func reject() -> Int { perform { $0.reject() }.rejected }

    /// A message handed to a consumer whose body did not decode as the consumer's type: counted and
    /// reported like every rejected message (the consumer's task, never the network thread).
    func rejectBody(of message: SessionStateMachine.InboundMessage) {
        reject()
        guard let onRejected = context.onRejected else { return }
        let topic =
            message.direct ? topics.direct(id, to: me, from: message.sender.id) : topics.broadcast(id, from: message.sender.id)
        onRejected(topic, message.payload.count)
    }
}
