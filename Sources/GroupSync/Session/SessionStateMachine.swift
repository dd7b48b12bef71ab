import Foundation
import MQTT

/// The logic of one session as seen by one participant: joining, membership, liveness, last-writer-wins
/// state, duplicate suppression and who answers a newcomer. A value type without side effects: every
/// input returns an ``Action`` that ``SessionCore`` performs.
struct SessionStateMachine {
    /// A message for the app, still encoded: it is decoded in the consumer's task.
    struct InboundMessage: Sendable, Equatable {
        var type: String
        var payload: Data
        /// Where the envelope's body is in `payload`.
        var body: Range<Int>
        var sender: Participant
        /// Read on our direct topic (not the sender's broadcast topic).
        var direct: Bool
    }

    /// What the session's inboxes receive: each sequence takes its own kind.
    enum Update: Sendable, Equatable {
        case state(GroupSessionState)
        case participants(Set<Participant>)
        case activity(JSONValue)
        case message(InboundMessage)
        case gap(GroupSessionMessenger.Gap)
        case value(Wire.StateRecord?)
        /// For `join()`: every retained message delivered on subscribe is in; whether to await a catch-up.
        case barrier(awaitCatchUp: Bool)
        /// For `join()`: `$catchup` arrived.
        case caughtUp
    }

    /// A sequence of the session, fed by the machine.
    struct Listener {
        enum Kind: Equatable {
            case state, participants, activity
            case messages(type: String)
            case values(key: String)
            case gaps
        }

        let kind: Kind
        let inbox: Inbox<Update>
    }

    /// Where the session stands for the local participant.
    enum Phase {
        case waiting
        case joining(Joining)
        case joined(Joined)
        case invalidated(GroupSessionState.InvalidationReason)
    }

    /// What a `join()` in progress waits on: its barrier (our own member record coming back after every
    /// retained message of the session; nil once it did), then maybe a catch-up.
    struct Joining {
        var barrier: Inbox<Update>?
        var caughtUp: Inbox<Update>

        var inboxes: [Inbox<Update>] { [barrier, caughtUp].compactMap { $0 } }
    }

    struct Joined {
        /// Reliable messages per sender and stream: in order, once, the missing ones asked for again.
        var receiver: StreamReceiver<InboundMessage>
        /// Value changes from received records, held until the connection reaches the end of the burst
        /// they arrived in: crossing writes that arrive together show as one change (per listener, the
        /// newest).
        var held: [ListenerRegistry<Listener>.ID: Wire.StateRecord] = [:]
    }

    /// What an input asks of the session's runtime.
    struct Action {
        /// Updates for inboxes, in the order the machine produced them.
        var deliveries: [(inbox: Inbox<Update>, update: Update)] = []
        /// Inboxes that end: sequences, or the waits of a `join()` that gives up.
        var finish: [Inbox<Update>] = []
        /// Send `$catchup` to this newcomer.
        var catchUpTo: String?
        /// Received clocks to merge into the participant's clock.
        var clocks: [HLCTimestamp] = []
        /// `$resend` requests to send.
        var resend: [StreamReceiver<InboundMessage>.Request] = []
        /// Wake up at this wall-clock time (ms) to send requests again that are still unanswered then
        /// (``onTick(now:)``).
        var retryAt: Int64?
        /// A member record held back took effect: the member is owed what we send from now on.
        var memberAdopted: (participant: String, epoch: Int64)?

        /// Hands updates over. An inbox never runs consumer code, so this may run under the session's
        /// lock — which keeps every sequence in the machine's order.
        func deliver() {
            for (inbox, update) in deliveries { inbox.yield(update) }
        }

        /// Ends inboxes: their termination handlers take the session's lock, so never under it.
        func finishAll() {
            for inbox in finish { inbox.finish() }
        }
    }

    let me: String
    let myEpoch: Int64
    /// The bounds of the stream receiver made at the join.
    let receiving: StreamReceiver<InboundMessage>.Configuration
    private(set) var phase: Phase = .waiting
    private(set) var announcement: Wire.Announcement
    /// Everyone who published a copy of the announcement, to clear them when the session ends.
    private(set) var announcers: Set<String>
    /// Joined participants and the connection epoch they joined with.
    private(set) var members: [String: Int64] = [:]
    /// Member records held back: an active member's record of another epoch than its live connection's
    /// (a forgery, or a new process whose presence has not come yet). It counts once the participant's
    /// connection has that epoch.
    private(set) var heldMembers: [String: Int64] = [:]
    /// Live connections: participant → epoch of its online presence.
    private(set) var presence: [String: Int64]
    /// The winning record per key.
    private(set) var states: [String: Wire.StateRecord] = [:]
    /// Every retained state topic seen, to clear them when the session ends.
    private(set) var stateTopics: Set<String> = []
    /// Members whose connection is the one they joined with (us too, once joined).
    private(set) var active: Set<Participant> = []
    /// Inputs rejected as forged or out of place, and messages that could not be read.
    private(set) var rejected = 0
    private var listeners = ListenerRegistry<Listener>()

    init(
        me: String, myEpoch: Int64, announcement: Wire.Announcement, announcer: String, presence: [String: Int64],
        receiving: StreamReceiver<InboundMessage>.Configuration = .init()
    ) {
        self.me = me
        self.myEpoch = myEpoch
        self.receiving = receiving
        self.announcement = announcement
        self.announcers = [announcer]
        self.presence = presence
    }

    /// The session's state as the app sees it.
    var state: GroupSessionState {
        switch phase {
        case .waiting, .joining: .waiting
        case .joined: .joined
        case let .invalidated(reason): .invalidated(reason: reason)
        }
    }

    // MARK: - Listeners

    /// A new sequence. It gets the current value first (state, participants, activity; a value listener
    /// once joined); on a session that is over it ends at once, after that value. Returns its ID for
    /// ``removeListener(_:)``.
    mutating func addListener(_ listener: Listener) -> (ListenerRegistry<Listener>.ID?, Action) {
        var action = Action()
        switch listener.kind {
        case .state: action.deliveries = [(listener.inbox, .state(state))]
        case .participants: action.deliveries = [(listener.inbox, .participants(active))]
        case .activity: action.deliveries = [(listener.inbox, .activity(announcement.activity.data))]
        case let .values(key):
            if case .joined = phase { action.deliveries = [(listener.inbox, .value(states[key]))] }
        case .messages, .gaps: break
        }
        if case .invalidated = phase {
            action.finish = [listener.inbox]
            return (nil, action)
        }
        return (listeners.add(listener), action)
    }

    mutating func removeListener(_ id: ListenerRegistry<Listener>.ID) {
        listeners.remove(id)
        modifyJoined { $0.held[id] = nil }
    }

    // MARK: - Joining

    /// `join()` was called. Returns false unless the session is waiting (not joined, over or joining).
    mutating func onJoinStarted(barrier: Inbox<Update>, caughtUp: Inbox<Update>) -> Bool {
        guard case .waiting = phase else { return false }
        phase = .joining(Joining(barrier: barrier, caughtUp: caughtUp))
        return true
    }

    /// A `join()` failed or was cancelled before completing: the session is as before it started.
    mutating func onJoinAbandoned() -> Action {
        guard case let .joining(joining) = phase else { return Action() }
        phase = .waiting
        return Action(finish: joining.inboxes)
    }

    /// Our own member record came back: every retained message delivered on subscribe is in. A
    /// catch-up is worth awaiting when someone else is active, or when the broker keeps no retained
    /// messages (then we cannot know who is there).
    mutating func onBarrierPassed(retainAvailable: Bool) -> Action {
        guard case .joining(var joining) = phase, let barrier = joining.barrier else { return Action() }
        joining.barrier = nil
        phase = .joining(joining)
        let others = members.keys.contains { $0 != me && presence[$0] == members[$0] }
        return Action(deliveries: [(barrier, .barrier(awaitCatchUp: others || !retainAvailable))])
    }

    /// The join completed (caught up, or nobody answered in time), at wall-clock time `now` (ms). Value
    /// listeners get their first element now: the caught-up value. Every member's reliable messages are
    /// followed from now on.
    mutating func onJoined(now: Int64) -> Action {
        var action = Action()
        guard case .joining = phase else { return action }
        var receiver = StreamReceiver<InboundMessage>(configuration: receiving)
        for (member, epoch) in members where member != me { _ = receiver.senderSeen(member, epoch: epoch, now: now) }
        phase = .joined(Joined(receiver: receiver))
        members[me] = myEpoch
        presence[me] = myEpoch
        listeners.forEach { _, listener in
            switch listener.kind {
            case .state: action.deliveries.append((listener.inbox, .state(.joined)))
            case let .values(key): action.deliveries.append((listener.inbox, .value(states[key])))
            default: break
            }
        }
        recomputeActive(into: &action)
        return action
    }

    /// The session is over for us: every sequence ends, after the new state.
    mutating func invalidate(_ reason: GroupSessionState.InvalidationReason) -> Action {
        var action = Action()
        switch phase {
        case .invalidated: return action
        case let .joining(joining): action.finish = joining.inboxes
        case .waiting, .joined: break
        }
        phase = .invalidated(reason)
        for listener in listeners.removeAll() {
            if listener.kind == .state { action.deliveries.append((listener.inbox, .state(state))) }
            action.finish.append(listener.inbox)
        }
        return action
    }

    // MARK: - Inputs from the wire

    /// Whether a member record of `participant` with `epoch` would take effect: plausible at `now`, and
    /// not replacing the record of an active member with another epoch than its live connection's.
    func admitsMember(_ participant: String, epoch: Int64, now: Int64) -> Bool {
        guard participant != me, CoordinatorStateMachine.isPlausible(epoch: epoch, now: now) else { return false }
        return !displacesActiveMember(participant, epoch: epoch)
    }

    private func displacesActiveMember(_ participant: String, epoch: Int64) -> Bool {
        members[participant] != epoch && active.contains(Participant(id: participant)) && presence[participant] != epoch
    }

    /// A member record (`nil`: cleared, the participant left), read at wall-clock time `now` (ms).
    /// `retained`: a stored copy replayed by the broker, not a live join — only a live join makes someone
    /// send a catch-up. A member's reliable messages are followed from its record on, and forgotten when
    /// it leaves (what is held of them comes out, with the gaps).
    ///
    /// A record that would replace an active member's epoch with another than its live connection's is
    /// held back until the connection has that epoch: a record alone (possibly forged) never makes an
    /// active participant inactive.
    mutating func onMember(_ participant: String, _ record: Wire.Member?, retained: Bool, now: Int64) -> Action {
        var action = Action()
        guard participant != me else { return action }
        if let record {
            guard CoordinatorStateMachine.isPlausible(epoch: record.epoch, now: now) else {
                rejected += 1
                return action
            }
            guard !displacesActiveMember(participant, epoch: record.epoch) else {
                heldMembers[participant] = record.epoch
                return action
            }
            heldMembers[participant] = nil
            guard members[participant] != record.epoch else { return action }
            adoptMember(participant, epoch: record.epoch, now: now, into: &action)
            if presence[participant] == nil && !retained {
                // A live join proves the connection is alive even when presence was not retained.
                presence[participant] = record.epoch
            }
            if !retained, case .joined = phase, isCatchUpResponder(for: participant) {
                action.catchUpTo = participant
            }
        } else {
            heldMembers[participant] = nil
            guard members.removeValue(forKey: participant) != nil else { return action }
            receive(into: &action) { $0.senderGone(participant) }
        }
        updateActive(participant, into: &action)
        return action
    }

    private mutating func adoptMember(_ participant: String, epoch: Int64, now: Int64, into action: inout Action) {
        members[participant] = epoch
        receive(into: &action) { $0.senderSeen(participant, epoch: epoch, now: now) }
    }

    /// The group's presence changed: `epoch` of the live connection, or nil when it is gone. A gone
    /// sender can re-send nothing: what is held of its messages comes out, with the gaps. A member record
    /// held back for this epoch takes effect now.
    mutating func onPresence(_ participant: String, epoch: Int64?, now: Int64) -> Action {
        var action = Action()
        guard participant != me, presence[participant] != epoch else { return action }
        presence[participant] = epoch
        if epoch == nil { receive(into: &action) { $0.senderLost(participant) } }
        if let epoch, heldMembers[participant] == epoch {
            heldMembers[participant] = nil
            adoptMember(participant, epoch: epoch, now: now, into: &action)
            action.memberAdopted = (participant, epoch)
        }
        updateActive(participant, into: &action)
        return action
    }

    /// A state record read on `topic`, the record of `key` by `writer`, at local wall-clock time `now`
    /// (ms). Accepted when it is what its topic says — a writer may only publish its own clock — and its
    /// clock is plausible; applied if its clock beats the current winner. With `holdingValues`, value
    /// listeners hear of it only at ``releaseHeldValues()``.
    mutating func onState(
        _ record: Wire.StateRecord, key: String, writer: String, topic: String, now: Int64, holdingValues: Bool = false
    ) -> Action {
        var action = Action()
        guard record.matches(key: key, writer: writer), record.clock.isPlausible(now: now) else {
            rejected += 1
            return action
        }
        stateTopics.insert(topic)
        action.clocks = [record.clock]
        applyIfNewer(record, into: &action, hold: holdingValues)
        return action
    }

    /// The connection's burst ended: each value listener gets the newest record held for it.
    mutating func releaseHeldValues() -> Action {
        var action = Action()
        let listeners = self.listeners
        modifyJoined { joined in
            guard !joined.held.isEmpty else { return }
            for (id, record) in joined.held {
                if let listener = listeners[id] { action.deliveries.append((listener.inbox, .value(record))) }
            }
            joined.held = [:]
        }
        return action
    }

    /// A local write: applied at once (optimistic), published by the caller.
    mutating func onLocalWrite(_ record: Wire.StateRecord, topic: String) -> Action {
        var action = Action()
        stateTopics.insert(topic)
        applyIfNewer(record, into: &action)
        return action
    }

    /// Whether `participant` joined the session (its member record is live).
    func isMember(_ participant: String) -> Bool {
        members[participant] != nil
    }

    /// `$catchup` addressed to us by `sender`: accepted only while joining, and only from a member —
    /// unless the broker keeps no retained messages, when members cannot be known before the catch-up.
    /// Records whose clock is implausible at `now` are left out.
    mutating func onCatchUp(_ catchUp: Wire.CatchUp, from sender: String, retainAvailable: Bool, now: Int64) -> Action {
        guard case let .joining(joining) = phase, members[sender] != nil || !retainAvailable else {
            rejected += 1
            return Action()
        }
        var action = Action()
        for record in catchUp.states where record.clock.isPlausible(now: now) {
            action.clocks.append(record.clock)
            applyIfNewer(record, into: &action)
        }
        for member in catchUp.members where member.participant != me {
            members[member.participant] = member.epoch
            if presence[member.participant] == nil { presence[member.participant] = member.epoch }
        }
        recomputeActive(into: &action)
        // A catch-up too large for one message comes in parts; the join waits for the last.
        if catchUp.more != true { action.deliveries.append((joining.caughtUp, .caughtUp)) }
        return action
    }

    /// An app message, for the sequences of its type, read on a broadcast topic or (`direct`) on our own
    /// direct topic at wall-clock time `now` (ms). Nothing while not joined. Only members send, from the
    /// connection they joined with. Reliable messages go through the stream receiver: in order per sender
    /// and stream, once, the missing ones asked for (``Action/resend``) and reported as gaps when they
    /// cannot come; unreliable ones are handed over as they come.
    mutating func onMessage(_ envelope: Wire.ScannedEnvelope, payload: Data, sender: String, direct: Bool, now: Int64) -> Action {
        var action = Action()
        guard case .joined = phase, sender != me else { return action }
        let header = envelope.header
        guard let epoch = members[sender], header.epoch == epoch, let seq = header.seq else {
            rejected += 1
            return action
        }
        let message = InboundMessage(
            type: header.type, payload: payload, body: envelope.body, sender: Participant(id: sender), direct: direct)
        guard header.reliable else {
            deliver(message, into: &action)
            return action
        }
        let stream: Reliable.StreamKind = direct && header.stream == nil ? .direct : .all
        receive(into: &action) { $0.receive(message, from: sender, epoch: epoch, stream: stream, seq: seq, now: now) }
        return action
    }

    /// `$skip` from a member: what of its stream will not be re-sent to us.
    mutating func onSkip(_ skip: Reliable.Skip, from sender: String, epoch: Int64, now: Int64) -> Action {
        fromMember(sender, epoch: epoch) { $0.skip(skip, from: sender, epoch: epoch, now: now) }
    }

    /// `$position` from a member: its latest seq per stream; what we miss of it is asked for.
    mutating func onPosition(_ position: Reliable.Position, from sender: String, epoch: Int64, now: Int64) -> Action {
        let direct = position.direct[me] ?? 0
        return fromMember(sender, epoch: epoch) { $0.position(from: sender, epoch: epoch, all: position.all, direct: direct, now: now) }
    }

    /// A control input of `sender`'s stream receiver, taken only from a member in its member epoch.
    private mutating func fromMember(
        _ sender: String, epoch: Int64,
        _ input: (inout StreamReceiver<InboundMessage>) -> StreamReceiver<InboundMessage>.Action
    ) -> Action {
        var action = Action()
        guard members[sender] == epoch else {
            rejected += 1
            return action
        }
        receive(into: &action, input)
        return action
    }

    /// Our connection is back: what was published meanwhile may be lost, so every member is asked for
    /// what follows what we have.
    mutating func onReconnected(now: Int64) -> Action {
        var action = Action()
        receive(into: &action) { $0.reconnected(now: now) }
        return action
    }

    /// When the next unanswered request is due to be sent again (wall-clock ms); nil when none is.
    var nextRetry: Int64? {
        if case let .joined(joined) = phase { return joined.receiver.nextRetry }
        return nil
    }

    /// Time passes: requests whose gap stayed open are sent again.
    mutating func onTick(now: Int64) -> Action {
        var action = Action()
        receive(into: &action) { $0.tick(now: now) }
        return action
    }

    /// Runs one input of the stream receiver (when joined) and hands its events to the sequences.
    private mutating func receive(
        into action: inout Action, _ input: (inout StreamReceiver<InboundMessage>) -> StreamReceiver<InboundMessage>.Action
    ) {
        guard
            let (result, rejections) = modifyJoined({ joined in
                let before = joined.receiver.rejected
                let result = input(&joined.receiver)
                return (result, joined.receiver.rejected - before)
            })
        else { return }
        rejected += rejections
        action.resend.append(contentsOf: result.requests)
        if let due = result.retryAt { action.retryAt = min(action.retryAt ?? due, due) }
        for event in result.events {
            switch event {
            case let .message(message, _, _, _):
                deliver(message, into: &action)
            case let .gap(sender, stream, seqs):
                let gap = GroupSessionMessenger.Gap(
                    source: Participant(id: sender), count: seqs.upperBound - seqs.lowerBound + 1, toEveryone: stream == .all)
                listeners.forEach { _, listener in
                    if listener.kind == .gaps { action.deliveries.append((listener.inbox, .gap(gap))) }
                }
            }
        }
    }

    private func deliver(_ message: InboundMessage, into action: inout Action) {
        let kind = Listener.Kind.messages(type: message.type)
        listeners.forEach { _, listener in
            if listener.kind == kind { action.deliveries.append((listener.inbox, .message(message))) }
        }
    }

    /// A copy of the announcement by `publisher`; a newer revision is an activity change. The session's
    /// kind of activity and its `ttl` never change: a copy that changes either is rejected.
    mutating func onAnnouncement(_ new: Wire.Announcement, from publisher: String) -> Action {
        var action = Action()
        guard new.activity.type == announcement.activity.type, new.ttl == announcement.ttl else {
            rejected += 1
            return action
        }
        announcers.insert(publisher)
        guard new.revision > announcement.revision else { return action }
        announcement = new
        listeners.forEach { _, listener in
            if listener.kind == .activity { action.deliveries.append((listener.inbox, .activity(new.activity.data))) }
        }
        return action
    }

    /// A message that could not be read.
    mutating func onRejected() {
        rejected += 1
    }

    // MARK: - Rules

    /// Whether we answer `newcomer`. The responder is, among the active participants other than the
    /// newcomer, the one with the largest ``rank(_:_:)`` (rendezvous hashing): every participant computes
    /// the same answer from the same view, and when that one is gone the next largest answers.
    func isCatchUpResponder(for newcomer: String) -> Bool {
        guard newcomer != me, active.contains(Participant(id: me)) else { return false }
        let mine = SessionStateMachine.rank(newcomer, me)
        return !active.contains { $0.id != newcomer && $0.id != me && SessionStateMachine.rank(newcomer, $0.id) > mine }
    }

    /// FNV-1a 64 of `"<newcomer>/<candidate>"`, then the candidate's ID: part of the protocol (PROTOCOL.md).
    static func rank(_ newcomer: String, _ candidate: String) -> (UInt64, String) {
        (FNV1a().adding(newcomer).adding(UInt8(ascii: "/")).adding(candidate).value, candidate)
    }

    /// FNV-1a, 64 bits, over UTF-8 bytes.
    struct FNV1a {
        private(set) var value: UInt64 = 0xcbf2_9ce4_8422_2325

        func adding(_ byte: UInt8) -> FNV1a {
            var next = self
            next.value = (next.value ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
            return next
        }

        func adding(_ text: String) -> FNV1a {
            var next = self
            for byte in text.utf8 { next = next.adding(byte) }
            return next
        }
    }

    /// What a newcomer needs: every key's winning record, and — only where the broker keeps no retained
    /// messages — the active members (with retained messages the newcomer read every member record
    /// before its barrier).
    ///
    /// It comes in as few parts as fit `budget` bytes each (the broker's packet limit less the envelope
    /// and topic), every part but the last marked `more`. A single record above the budget is sent alone:
    /// its writer could not have published it either.
    func catchUp(listingMembers: Bool, budget: Int = .max) -> [Wire.CatchUp] {
        let listed =
            listingMembers
            ? active.map { Wire.Member(participant: $0.id, epoch: members[$0.id] ?? 0) }.sorted { $0.participant < $1.participant }
            : []
        let used = listed.reduce(64) { $0 + ((try? Wire.encode($1).count) ?? 0) + 1 }
        let groups = Wire.groups(states.values.sorted { $0.key < $1.key }, budget: budget, used: used)
        return groups.enumerated().map { index, records in
            Wire.CatchUp(states: records, members: index == 0 ? listed : [], more: index < groups.count - 1 ? true : nil)
        }
    }

    private mutating func applyIfNewer(_ record: Wire.StateRecord, into action: inout Action, hold: Bool = false) {
        if let current = states[record.key], current.clock >= record.clock { return }
        states[record.key] = record
        let listeners = self.listeners
        modifyJoined { joined in
            let kind = Listener.Kind.values(key: record.key)
            listeners.forEach { id, listener in
                guard listener.kind == kind else { return }
                if hold {
                    joined.held[id] = record
                } else {
                    // Newer than anything held for this listener, which would only make it go back.
                    joined.held[id] = nil
                    action.deliveries.append((listener.inbox, .value(record)))
                }
            }
        }
    }

    /// Re-evaluates one participant after its member record or presence changed.
    private mutating func updateActive(_ participant: String, into action: inout Action) {
        let entry = Participant(id: participant)
        let isActive = members[participant] != nil && presence[participant] == members[participant]
        let changed = isActive ? active.insert(entry).inserted : active.remove(entry) != nil
        if changed { notifyParticipants(into: &action) }
    }

    private mutating func recomputeActive(into action: inout Action) {
        var now = Set<Participant>()
        for (participant, epoch) in members where presence[participant] == epoch {
            now.insert(Participant(id: participant))
        }
        guard now != active else { return }
        active = now
        notifyParticipants(into: &action)
    }

    private func notifyParticipants(into action: inout Action) {
        listeners.forEach { _, listener in
            if listener.kind == .participants { action.deliveries.append((listener.inbox, .participants(active))) }
        }
    }

    /// Changes the joined phase's data in place (the phase holds the only copy meanwhile, so nothing is
    /// copied); nil when not joined.
    @discardableResult
    private mutating func modifyJoined<Result>(_ body: (inout Joined) -> Result) -> Result? {
        guard case .joined(var joined) = phase else { return nil }
        phase = .waiting
        defer { phase = .joined(joined) }
        return body(&joined)
    }
}
