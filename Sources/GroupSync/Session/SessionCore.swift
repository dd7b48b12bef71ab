import Foundation
import MQTT

/// The runtime of one session for one coordinator, shared by every typed ``GroupSession`` view of it.
/// Logic lives in ``SessionStateMachine`` (under `machine`'s lock); this class subscribes, publishes and
/// handles the session's messages. Its lifecycle (join, leave, end) is in `SessionCore+Lifecycle.swift`,
/// what it sends in `SessionCore+Sending.swift`.
final class SessionCore: Sendable {
    let id: String
    let activityType: String
    let context: SessionContext
    let machine: LockedValue<SessionStateMachine>
    let subscription = LockedValue<MessageHandlerSubscription?>(nil)
    /// How we number our messages here, with the outbox that re-sends them.
    let numbering: LockedValue<MessageNumbering>
    /// Where our messages to everyone go, as the one-element list `enqueue` publishes to.
    let broadcastDestinations: [String]
    /// The group clock of the session's playback coordinator, when one is attached: it answers `$ping`
    /// and takes `$pong`.
    let clockService = LockedValue<ClockService?>(nil)
    /// The session's playback coordinator, once made (until the session is over).
    let playback = LockedValue<PlaybackCoordinator?>(nil)
    /// The session's journal records, read while joined.
    let journal = LockedValue(JournalStateMachine())
    /// The session's journal, once made.
    let journalView = LockedValue<GroupSessionJournal?>(nil)
    /// Wakes the session when a request is due to be sent again or our position to be stated
    /// (``tick()``); cancelled when the session is over for us.
    let timer = WakeUp()

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
        context: SessionContext, announcement: Wire.Announcement, publisher: String, presence: [String: Int64],
        numbering: LockedValue<MessageNumbering>? = nil
    ) {
        self.numbering = numbering ?? LockedValue(MessageNumbering(outbox: context.outbox, positionInterval: context.positionInterval))
        self.id = announcement.session
        self.activityType = announcement.activity.type
        self.context = context
        self.broadcastDestinations = [context.topics.broadcast(announcement.session, from: context.me.id)]
        self.machine = LockedValue(
            SessionStateMachine(
                me: context.me.id, myEpoch: context.epoch, announcement: announcement, announcer: publisher, presence: presence))
        timer.onWake { [weak self] in self?.tick() }
    }

    var me: String { context.me.id }
    var topics: GroupTopics { context.topics }
    /// `groupsync/v2/<group>/s/<session>/`: every session topic starts with it.
    var sessionPrefix: String { "\(topics.root)/s/\(id)/" }
    var state: GroupSessionState { machine.withLock { $0.state } }
    var isJoined: Bool { state == .joined }
    var isInvalidated: Bool { state.isInvalidated }
    var announcement: Wire.Announcement { machine.withLock { $0.announcement } }
    /// How long our retained records of the session live after their last refresh.
    var lifetime: Duration { machine.withLock { $0.announcement.lifetime } }
    /// Our copy of the announcement.
    var ownCopyTopic: String { topics.announcement(id, by: me) }
    var activeParticipants: Set<Participant> { machine.withLock { $0.active } }
    var rejectedCount: Int { machine.withLock { $0.rejected } }

    /// Feeds one input to the state machine and sends the `$resend` requests it makes.
    @discardableResult
    func applyReceiving(_ input: (inout SessionStateMachine) -> SessionStateMachine.Action) -> SessionStateMachine.Action {
        let action = apply(input)
        for request in action.resend { sendControl(.resend, Wire.Resend(request.resend), to: request.sender) }
        if let due = action.retryAt { wake(atWallClock: due) }
        return action
    }

    /// Schedules the timer for wall-clock time `milliseconds` (the receiver's times are wall-clock).
    private func wake(atWallClock milliseconds: Int64) {
        timer.schedule(after: .milliseconds(max(milliseconds &- context.clock.milliseconds(), 0)))
    }

    /// Feeds one input to the state machine. Its values are handed over while the lock is held, so every
    /// sequence receives updates in the order the machine applied them (a consumer of `valueUpdates()` never
    /// ends on an older value than the machine holds); handing over never runs consumer code. Sequences
    /// are finished after the lock is released, since their termination handlers take it. Received
    /// clocks are merged before anything is handed over.
    @discardableResult
    func apply(_ input: (inout SessionStateMachine) -> SessionStateMachine.Action) -> SessionStateMachine.Action {
        let action = machine.withLock { machine in
            let action = input(&machine)
            if !action.clocks.isEmpty {
                let now = context.clock.milliseconds()
                context.hlc.withLock { clock in
                    for received in action.clocks { clock.observe(received, now: now) }
                }
            }
            action.deliver()
            return action
        }
        action.finishAll()
        return action
    }

    /// The inbox of a new sequence of the session, removed from the machine when it ends. With
    /// `keepingNewest`, a slow consumer skips to the newest updates.
    func listen(_ kind: SessionStateMachine.Listener.Kind, keepingNewest limit: Int? = nil) -> Inbox<SessionStateMachine.Update> {
        let inbox = Inbox<SessionStateMachine.Update>(keepingNewest: limit)
        var id: ListenerRegistry<SessionStateMachine.Listener>.ID?
        apply { machine in
            let (added, action) = machine.addListener(.init(kind: kind, inbox: inbox))
            id = added
            return action
        }
        if let id { inbox.onTermination { [machine] in machine.withLock { $0.removeListener(id) } } }
        return inbox
    }

    func onPresence(_ participant: String, epoch: Int64?) {
        let now = context.clock.milliseconds()
        // A member record held back for this epoch may take effect: the mark comes first, as for any
        // member seen (no message of ours falls between the two: the network thread sends none).
        if let epoch, machine.withLock({ $0.heldMembers[participant] == epoch }) {
            numbering.withLock { $0.outbox.memberSeen(participant, epoch: epoch) }
        }
        applyReceiving { $0.onPresence(participant, epoch: epoch, now: now) }
    }

    /// A copy of the announcement by `publisher`. When it is newer than ours, ours is updated too, so
    /// that the session's activity is the same whichever copy outlives the others.
    func onAnnouncement(_ announcement: Wire.Announcement, from publisher: String) {
        let before = machine.withLock { $0.announcement.revision }
        apply { $0.onAnnouncement(announcement, from: publisher) }
        let current = self.announcement
        guard current.revision > before, context.retained.owns(ownCopyTopic) else { return }
        let (retained, topic) = (context.retained, ownCopyTopic)
        context.tasks.spawn {
            guard let payload = try? Wire.encode(current) else { return }
            try? await retained.publish(topic, payload, lifetime: current.lifetime)
        }
    }

    // MARK: - Receiving

    /// Network thread: one message of the session's topics.
    func handle(_ message: MQTTMessage) {
        guard let onRejected = context.onRejected else { return process(message) }
        let before = rejectedCount
        process(message)
        // Once per rejection: a `$position` can show several held messages to be forged.
        let rejections = rejectedCount - before
        if rejections > 0 {
            let (topic, size) = (message.topic, message.payload.count)
            Task { for _ in 0..<rejections { onRejected(topic, size) } }  // app code: never on the network thread
        }
    }

    private func process(_ message: MQTTMessage) {
        let catchUpTo: String?
        switch topics.parse(message.topic) {
        case let .member(session, participant) where session == id:
            let now = context.clock.milliseconds()
            if message.payload.isEmpty {
                if participant == me { return restoreOwnMemberRecord() }
                numbering.withLock { $0.outbox.memberLeft(participant) }
                catchUpTo = applyReceiving { $0.onMember(participant, nil, retained: message.retain, now: now) }.catchUpTo
            } else if let record = Wire.decode(Wire.Member.self, from: message.payload), record.matches(participant: participant) {
                if participant == me {
                    if record.epoch == context.epoch {
                        let retainAvailable = context.client.retainAvailable
                        apply { $0.onBarrierPassed(retainAvailable: retainAvailable) }
                    } else {
                        restoreOwnMemberRecord()
                    }
                    return
                }
                // Owed what we send from now on (the mark is taken before the machine sees the member),
                // if the record takes effect: a record held back or rejected moves no mark.
                if machine.withLock({ $0.admitsMember(participant, epoch: record.epoch, now: now) }) {
                    numbering.withLock { $0.outbox.memberSeen(participant, epoch: record.epoch) }
                }
                catchUpTo = applyReceiving { $0.onMember(participant, record, retained: message.retain, now: now) }.catchUpTo
            } else {
                return reject()
            }
        case let .state(session, key, writer) where session == id:
            guard !message.payload.isEmpty else { return }
            guard let record = Wire.decode(Wire.StateRecord.self, from: message.payload) else { return reject() }
            let now = context.clock.milliseconds()
            // Shown at the end of the burst: records that arrive together make one visible change.
            catchUpTo =
                apply {
                    $0.onState(record, key: key, writer: writer, topic: message.topic, now: now, holdingValues: true)
                }.catchUpTo
        case let .journal(session, attachment, owner) where session == id:
            let record = message.payload.isEmpty ? nil : Wire.decode(Wire.JournalRecord.self, from: message.payload)
            let action = journal.withLock { journal in
                let action =
                    record == nil && !message.payload.isEmpty
                    ? journal.onMalformedRecord() : journal.onRecord(record, sha256: attachment, owner: owner)
                action.deliver()
                return action
            }
            if case .rejected = action { reject() }
            return
        case let .broadcast(session, sender) where session == id:
            catchUpTo = inbound(message.payload, from: sender, direct: false)
        case let .direct(session, recipient, sender) where session == id && recipient == me:
            catchUpTo = inbound(message.payload, from: sender, direct: true)
        default:
            return reject()
        }
        if let newcomer = catchUpTo { sendCatchUp(to: newcomer) }
    }

    /// An envelope on a message topic; returns the newcomer to send a catch-up to, if any.
    private func inbound(_ payload: Data, from sender: String, direct: Bool) -> String? {
        guard let envelope = Wire.decodeEnvelope(payload) else {
            reject()
            return nil
        }
        let now = context.clock.milliseconds()
        switch envelope.header.type {
        case Control.ping.rawValue where direct:
            let arrival = context.clock.nanoseconds()
            guard let ping = Wire.decode(Wire.Ping.self, from: payload[envelope.body]), machine.withLock({ $0.isMember(sender) }) else {
                reject()
                return nil
            }
            if let service = clockService.withLock({ $0 }), let received = service.groupTime(arrival),
                let replied = service.groupTime(context.clock.nanoseconds())
            {
                sendControl(.pong, Wire.Pong(t0: ping.t0, t1: received.milliseconds, t2: replied.milliseconds), to: sender)
            }
            return nil
        case Control.pong.rawValue where direct:
            let arrival = context.clock.nanoseconds()
            guard let pong = Wire.decode(Wire.Pong.self, from: payload[envelope.body]) else {
                reject()
                return nil
            }
            clockService.withLock({ $0 })?.pong(sender, pong, arrival)
            return nil
        case "$catchup":
            guard let catchUp = Wire.decode(Wire.CatchUp.self, from: payload[envelope.body]) else {
                reject()
                return nil
            }
            let (now, retainAvailable) = (context.clock.milliseconds(), context.client.retainAvailable)
            apply { $0.onCatchUp(catchUp, from: sender, retainAvailable: retainAvailable, now: now) }
            // Members known from a catch-up (where no member record is replayed) are owed what we send
            // from now on, as members whose record we read are.
            let members = machine.withLock { $0.members }
            numbering.withLock { numbering in
                for member in catchUp.members where member.participant != me && members[member.participant] == member.epoch {
                    numbering.outbox.memberSeen(member.participant, epoch: member.epoch)
                }
            }
            return nil
        case "$end":
            guard machine.withLock({ $0.isMember(sender) }) else {
                reject()
                return nil
            }
            onEnded(by: Participant(id: sender))
            return nil
        case Control.resend.rawValue where direct:
            guard let request = Wire.decode(Wire.Resend.self, from: payload[envelope.body]), machine.withLock({ $0.isMember(sender) })
            else {
                reject()
                return nil
            }
            answer(request.request, from: sender)
            return nil
        case Control.skip.rawValue where direct:
            guard let skip = Wire.decode(Wire.Skip.self, from: payload[envelope.body]) else {
                reject()
                return nil
            }
            applyReceiving { $0.onSkip(skip.skip, from: sender, epoch: envelope.header.epoch, now: now) }
            return nil
        case Control.position.rawValue:
            guard let position = Wire.decode(Wire.Position.self, from: payload[envelope.body]) else {
                reject()
                return nil
            }
            applyReceiving { $0.onPosition(position.position, from: sender, epoch: envelope.header.epoch, now: now) }
            return nil
        default:
            return applyReceiving { $0.onMessage(envelope, payload: payload, sender: sender, direct: direct, now: now) }.catchUpTo
        }
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

    /// Our connection is back: our position to everyone (a receiver behind it asks for the rest), and
    /// from every member what follows what we have of it.
    func onReconnected() {
        guard isJoined else { return }
        let position = numbering.withLock { $0.outbox.position }
        if position.all > 0 || !position.direct.isEmpty { sendControl(.position, Wire.Position(position), to: nil) }
        let now = context.clock.milliseconds()
        applyReceiving { $0.onReconnected(now: now) }
    }

    /// The timer's work: requests still unanswered are sent again, and after a quiet spell following our
    /// last reliable message we state our streams' position, so that a receiver that lost their tail (a
    /// broker's queue overflowed) asks for it. Then it sleeps until the next of either. While the
    /// connection is down (or the session not joined) nothing is sent, and requests still open are looked
    /// at again a retry interval later: a reconnect asks for everything anyway, but a request must not be
    /// forgotten because its moment fell in a gap.
    func tick() {
        let now = context.clock.milliseconds()
        guard isJoined, context.client.isConnected else {
            if machine.withLock({ $0.nextRetry }) != nil { timer.schedule(after: SessionCore.inactiveRecheck) }
            return
        }
        applyReceiving { $0.onTick(now: now) }
        let (position, nextPosition) = numbering.withLock { numbering in
            (numbering.isPositionDue(at: .now) ? numbering.outbox.position : nil, numbering.nextPositionDue)
        }
        if let position { sendControl(.position, Wire.Position(position), to: nil) }
        timer.schedule(at: nextPosition)
        if let retry = machine.withLock({ $0.nextRetry }) { wake(atWallClock: retry) }
    }

    /// How soon open requests are looked at again while the connection is down.
    static let inactiveRecheck = Duration.milliseconds(250)

    /// Network thread, at the end of each burst: shows the newest of the values held during it. Values
    /// are held only on this thread, so none can arrive in between.
    func releaseHeldValues() {
        apply { $0.releaseHeldValues() }
    }

    func reject() {
        machine.withLock { $0.onRejected() }
    }

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
