import Foundation
import MQTT

/// The logic of one session as seen by one participant: joining, membership, liveness, last-writer-wins
/// state, duplicate suppression, who answers a newcomer, how our messages are numbered and what the
/// session's journal lists. A value type without side effects: every input returns what ``SessionCore``
/// does, in order.
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

        var isJoiningOrJoined: Bool {
            switch self {
            case .joining, .joined: true
            case .waiting, .invalidated: false
            }
        }
    }

    /// What a `join()` in progress waits on: its barrier (our own member record coming back after every
    /// retained message of the session; nil once it did), then maybe a catch-up.
    struct Joining {
        var barrier: Inbox<Update>?
        var caughtUp: Inbox<Update>
        /// Newcomers whose catch-up is ours to send once we are joined: others count us as active already.
        var owedCatchUps: [String] = []
        /// Whether a whole catch-up came.
        var isCaughtUp = false

        var inboxes: [Inbox<Update>] { [barrier, caughtUp].compactMap { $0 } }
    }

    struct Joined {
        /// Reliable messages per sender and stream: in order, once, the missing ones asked for again.
        var receiver: StreamReceiver<InboundMessage>
        /// Value changes from received records, held until the end of the connection's burst they arrived
        /// in: crossing writes that arrive together show as one change (per listener, the newest).
        var held: [ListenerRegistry<Listener>.ID: Wire.StateRecord] = [:]
        /// Until when (wall clock, ms) a catch-up from a member is still expected: a responder that was
        /// joining itself answers once joined, within a catch-up timeout of our join's end.
        var catchUpsUntil: Int64
        /// No whole catch-up came yet: one is still applied (a second responder's is ignored).
        var awaitsCatchUp: Bool
    }

    /// What an input asks of the session's runtime, which performs its parts in the order declared here
    /// once its lock is released.
    struct Action {
        /// Received clocks to merge into the participant's clock, in the same hold of the session's lock
        /// as the input (the clock's lock is a leaf): a value the machine holds — read through
        /// ``SharedState/value`` as much as handed over — is older than what its reader writes next.
        var observed: [HLCTimestamp] = []
        /// For the sequences, in the machine's order: performed behind the hand-overs of earlier inputs.
        var handovers: [Handover] = []
        var sends: [Send] = []
        var timer = Timer.unchanged
        /// The session is over for us, coming from this state: its topics are no longer read, and the
        /// coordinator is told.
        var invalidatedFrom: GroupSessionState?
        /// Received values refused (forged, out of place or unreadable: PROTOCOL.md), each to be reported.
        /// A refused value changed nothing.
        var rejected = 0

        /// Asks for a wake-up at wall-clock time `due` (ms), unless one before it is asked already.
        mutating func wake(atWallClock due: Int64) {
            if case let .wake(current) = timer, current <= due { return }
            timer = .wake(atWallClock: due)
        }
    }

    /// One hand-over. Never under the session's lock: an ending sequence's termination handler takes it.
    enum Handover {
        case yield(Inbox<Update>, Update)
        case finish(Inbox<Update>)
        /// For the journal's sequences.
        case journal(JournalStateMachine.Action)
    }

    enum Send: Hashable {
        /// `$catchup` to this newcomer, in the parts of ``catchUp(listingMembers:listingJournal:budget:sealing:)``.
        case catchUp(to: String)
        /// `$catchup` to this observer (``onObserver(_:)``), listing the members.
        case observerCatchUp(to: String)
        /// Start serving the chunks asked of an attachment we hold, live on their chunk topics, taking them
        /// from ``nextChunkToServe(_:)`` (``onChunkRequest(_:from:)``).
        case serveChunks(HeldAttachment)
        /// `$member` to this newcomer: we are a member (it may have subscribed after our record went out).
        case memberAnswer(to: String)
        case resend(StreamReceiver<InboundMessage>.Request)
        /// Our streams' position, to a member or (nil) everyone.
        case position(Reliable.Position, to: String?)
        case skip(Reliable.Skip, to: String)
        /// One of our envelopes again, unchanged, on the direct topic of the member that asked for it.
        case resent(OutboxStateMachine.Entry, to: String)
        /// `$pong` to a `$ping` that arrived at local time `arrival` (ns), if we serve the group clock.
        case pong(Wire.Ping, to: String, arrival: Int64)
    }

    enum Timer: Equatable {
        case unchanged
        /// Wake at this wall-clock time (ms) unless a wake-up before it is pending, for ``onTick(now:at:connected:)``.
        case wake(atWallClock: Int64)
        /// The session is over for us: no wake-up any more.
        case cancel
    }

    /// What `join()` does after ``onJoinStarted(barrier:caughtUp:)``: subscribe and publish our member
    /// record; nothing, joined already; or fail (the session is over, or another `join()` is in progress,
    /// which joins or fails on its own).
    enum JoinStart: Equatable {
        case proceed, joined, refused
    }

    let me: String
    let myEpoch: Int64
    /// The bounds of the stream receiver made at the join.
    let receiving: StreamReceiver<InboundMessage>.Configuration
    private(set) var phase: Phase = .waiting
    private(set) var announcement: Wire.Announcement
    /// Every participant the session knows of: the connection epoch it joined with, and its live
    /// connection's (see ``Peer``).
    private(set) var peers: [String: Peer]
    /// Member records held back until their participant's connection has their epoch (a forgery, or a new
    /// process whose presence has not come yet): see ``onMember(_:_:retained:retainAvailable:now:)``.
    private(set) var heldMembers: [String: Int64] = [:]
    /// The winning record per key.
    private(set) var states: [String: Wire.StateRecord] = [:]
    /// Every retained state topic seen, to clear them when the session ends.
    private(set) var stateTopics: Set<String> = []
    /// Active members (us too, once joined), built from ``peers`` when asked: no second table of them is kept.
    var active: Set<Participant> { Set(peers.compactMap { $0.value.isActive ? Participant(id: $0.key) : nil }) }
    /// Inputs rejected as forged or out of place, and messages that could not be read.
    private(set) var rejected = 0
    private var listeners = ListenerRegistry<Listener>()
    /// How we number our messages, with the outbox that re-sends them: the runtime numbers a message as it
    /// hands it to the connection; the machine marks members in it as it adopts them.
    var numbering: MessageNumbering
    /// The session's journal records, read while joined.
    private(set) var journal = JournalStateMachine()

    init(
        me: String, myEpoch: Int64, announcement: Wire.Announcement, presence: [String: Int64],
        numbering: MessageNumbering = .init(), receiving: StreamReceiver<InboundMessage>.Configuration = .init()
    ) {
        self.me = me
        self.myEpoch = myEpoch
        self.receiving = receiving
        self.announcement = announcement
        self.peers = presence.mapValues { Peer(online: $0) }
        self.numbering = numbering
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
    /// once joined); on a session that is over it ends at once, after that value (it is not added then).
    /// Its sequence removes it by its inbox (``removeListener(_:)``).
    mutating func addListener(_ listener: Listener) -> Action {
        let first: Update?
        switch listener.kind {
        case .state: first = .state(state)
        case .participants: first = .participants(active)
        case .activity: first = .activity(announcement.activity.data)
        case let .values(key): if case .joined = phase { first = .value(states[key]) } else { first = nil }
        case .messages, .gaps: first = nil
        }
        var action = Action(handovers: first.map { [.yield(listener.inbox, $0)] } ?? [])
        guard case .invalidated = phase else {
            listeners.add(listener, id: ObjectIdentifier(listener.inbox))
            return action
        }
        action.handovers.append(.finish(listener.inbox))
        return action
    }

    /// The sequence of the inbox `id` ended.
    mutating func removeListener(_ id: ListenerRegistry<Listener>.ID) {
        listeners.remove(id)
        modifyJoined { $0.held[id] = nil }
    }

    /// A new sequence of the journal's lists: the current list first, then every change (as ``addListener(_:)``).
    mutating func addJournalListener(_ inbox: Inbox<[JournalAttachment]>) -> Action {
        Action(handovers: [.journal(journal.addListener(inbox))])  // its list, and its end if the journal is over
    }

    mutating func removeJournalListener(_ inbox: ObjectIdentifier) { journal.removeListener(inbox) }

    // MARK: - Joining

    /// `join()` was called; it proceeds only from waiting. Nobody is owed what we sent before: a member
    /// is owed what we send from when this join sees it.
    mutating func onJoinStarted(barrier: Inbox<Update>, caughtUp: Inbox<Update>) -> JoinStart {
        switch phase {
        case .joined: return .joined
        case .joining, .invalidated: return .refused
        case .waiting:
            phase = .joining(Joining(barrier: barrier, caughtUp: caughtUp))
            numbering.outbox.forgetMembers()
            return .proceed
        }
    }

    /// A `join()` failed or was cancelled before completing: the session is as before it started (or
    /// stays over, when it was invalidated meanwhile).
    mutating func onJoinAbandoned() -> Action {
        if case .invalidated = phase { return Action() }
        guard case let .joining(joining) = phase else { preconditionFailure("a join was abandoned that had not started or had completed") }
        phase = .waiting
        return Action(handovers: joining.inboxes.map(Handover.finish))
    }

    /// Our own member record came back: every retained message delivered on subscribe is in. A
    /// catch-up is worth awaiting when someone else is active, or when the broker keeps no retained
    /// messages (then we cannot know who is there). Nothing unless a join waits for it.
    mutating func onBarrierPassed(retainAvailable: Bool) -> Action {
        guard case .joining(var joining) = phase, let barrier = joining.barrier else { return Action() }
        joining.barrier = nil
        phase = .joining(joining)
        let others = peers.contains { $0.key != me && $0.value.isActive }
        return Action(handovers: [.yield(barrier, .barrier(awaitCatchUp: others || !retainAvailable))])
    }

    /// The join completed (caught up, or nobody answered in time). Value listeners get their first element
    /// now: the caught-up value. Members' reliable messages are followed from now on, each sender from its
    /// first message (``StreamReceiver/senderSeen(_:epoch:now:)``). Nothing if the session was invalidated
    /// meanwhile.
    mutating func onJoined(acceptingCatchUpsUntil catchUpsUntil: Int64) -> Action {
        var action = Action()
        if case .invalidated = phase { return action }
        guard case let .joining(joining) = phase else { preconditionFailure("a join completed that had not started or had completed") }
        phase = .joined(
            Joined(
                receiver: StreamReceiver<InboundMessage>(configuration: receiving), catchUpsUntil: catchUpsUntil,
                awaitsCatchUp: !joining.isCaughtUp))
        let wasActive = peers[me]?.isActive == true
        peers[me] = Peer(joined: myEpoch, online: myEpoch)
        // Not judged again on what we know now: who joined after the newcomer never saw its join, and a
        // second answer costs the newcomer nothing (it ignores it).
        action.sends = joining.owedCatchUps.filter { peers[$0]?.isActive == true }.map(Send.catchUp)
        listeners.forEach { _, listener in
            switch listener.kind {
            case .state: action.handovers.append(.yield(listener.inbox, .state(.joined)))
            case let .values(key): action.handovers.append(.yield(listener.inbox, .value(states[key])))
            default: break
            }
        }
        updateActive(me, wasActive: wasActive, into: &action)
        return action
    }

    /// The session is over for us: every sequence ends after the new state (the journal's too), and the
    /// timer stops. Nothing if it already was over.
    mutating func invalidate(_ reason: GroupSessionState.InvalidationReason) -> Action {
        var action = Action(timer: .cancel, invalidatedFrom: state)
        switch phase {
        case .invalidated: return Action()
        case let .joining(joining): action.handovers = joining.inboxes.map(Handover.finish)
        case .waiting, .joined: break
        }
        phase = .invalidated(reason)
        for listener in listeners.removeAll() {
            if listener.kind == .state { action.handovers.append(.yield(listener.inbox, .state(state))) }
            action.handovers.append(.finish(listener.inbox))
        }
        let ended = journal.end()
        if case .finish = ended { action.handovers.append(.journal(ended)) }
        return action
    }

    // MARK: - Inputs from the wire

    /// A member record of another participant (`nil`: cleared, the participant left), read at wall-clock
    /// time `now` (ms), or its `$member` (marked `again`). `retained`: a stored copy replayed by the
    /// broker, not a live join — only a live join (not a `$member` nor a record marked `again`) makes
    /// someone send a catch-up and, on a broker without retained messages, `$member` to the newcomer. A member's reliable messages are followed from its record on, and
    /// forgotten when it leaves (what is held of them comes out, with the gaps); it is owed what we send
    /// from its record on. An implausible epoch is rejected.
    ///
    /// A record that would replace an active member's epoch with another than its live connection's is
    /// held back until the connection has that epoch: a record alone (possibly forged) never makes an
    /// active participant inactive.
    mutating func onMember(_ participant: String, _ record: Wire.Member?, retained: Bool, retainAvailable: Bool, now: Int64) -> Action {
        var action = Action()
        guard participant != me else { return action }
        let wasActive = peers[participant]?.isActive == true
        if let record {
            guard CoordinatorStateMachine.isPlausible(epoch: record.epoch, now: now) else { return reject() }
            let peer = peers[participant] ?? Peer()
            if peer.joined != record.epoch, peer.isActive, peer.online != record.epoch {
                heldMembers[participant] = record.epoch
                return action
            }
            heldMembers[participant] = nil
            numbering.outbox.memberSeen(participant, epoch: record.epoch)
            guard peer.joined != record.epoch else { return action }
            adoptMember(participant, epoch: record.epoch, now: now, into: &action)
            if peer.online == nil && !retained {
                // A live join proves the connection is alive even when presence was not retained.
                peers[participant]?.online = record.epoch
            }
            let join = !retained && record.again != true
            if join, ranksFirst(for: participant) {
                switch phase {
                case .joined: action.sends.append(.catchUp(to: participant))
                case var .joining(joining) where !joining.owedCatchUps.contains(participant):
                    joining.owedCatchUps.append(participant)
                    phase = .joining(joining)
                case .joining, .waiting, .invalidated: break
                }
            }
            // Without retained messages the newcomer may have subscribed after our record went out, and
            // a catch-up lists us only if its responder knows us: we tell it, and only it.
            if join, !retainAvailable, phase.isJoiningOrJoined { action.sends.append(.memberAnswer(to: participant)) }
        } else {
            heldMembers[participant] = nil
            numbering.outbox.memberLeft(participant)
            guard peers[participant]?.joined != nil else { return action }
            update(participant) { $0.joined = nil }
            receive(into: &action) { $0.senderGone(participant) }
        }
        updateActive(participant, wasActive: wasActive, into: &action)
        return action
    }

    private mutating func adoptMember(_ participant: String, epoch: Int64, now: Int64, into action: inout Action) {
        peers[participant, default: Peer()].joined = epoch
        receive(into: &action) { $0.senderSeen(participant, epoch: epoch, now: now) }
    }

    /// A member asks for chunks of an attachment we hold (where nothing is retained, its owner and whoever
    /// loaded it serve it): answered while we are joined and hold its bytes, for a range within it. A
    /// request from someone not active here, or for chunks past the end, is rejected; one for an
    /// attachment we no longer hold (removed meanwhile) is ignored.
    mutating func onChunkRequest(_ request: Wire.ChunkRequest, from sender: String) -> Action {
        guard case .joined = phase, peers[sender]?.isActive == true else { return reject() }
        guard let held = journal.heldAttachment(request.id) else { return Action() }
        let count = Int64(held.record.chunks.count)
        guard request.from < count, request.count <= count - request.from else { return reject() }
        let range = Int(request.from)..<Int(request.from + request.count)
        guard journal.onChunksAsked(request.id, range) else { return Action() }  // its serving task takes them
        return Action(sends: [.serveChunks(held)])
    }

    /// For the serving task of `digest` (``Send/serveChunks(_:)``): the next chunk to publish, nil when it
    /// is done.
    mutating func nextChunkToServe(_ digest: String) -> Int? { journal.nextToServe(digest) }

    /// We can no longer read what we held of `digest`: we serve it no more.
    mutating func releaseHeld(_ digest: String) { journal.release(digest) }

    /// A member holds the bytes of attachment `have.id` and serves them (`$have`): a loader may ask it
    /// for chunks. From someone not active here it is rejected.
    mutating func onHave(_ have: Wire.Have, from sender: String) -> Action {
        guard case .joined = phase, peers[sender]?.isActive == true else { return reject() }
        journal.onHave(have.id, from: sender)
        return Action()
    }

    /// An observer asked to be welcomed: if we are joined and rank first for it among the active members,
    /// it gets a catch-up that lists them, as a newcomer on a broker without retained messages does. It
    /// changes nothing here: an observer never becomes a member.
    func onObserver(_ observer: String) -> Action {
        guard case .joined = phase, isCatchUpResponder(for: observer), peers[observer] == nil else { return Action() }
        return Action(sends: [.observerCatchUp(to: observer)])
    }

    /// The group's presence changed: `epoch` of the live connection, or nil when it is gone. A gone
    /// sender can re-send nothing: what is held of its messages comes out, with the gaps. A member record
    /// held back for this epoch takes effect now (and the member is owed what we send from now on).
    mutating func onPresence(_ participant: String, epoch: Int64?, now: Int64) -> Action {
        var action = Action()
        guard participant != me, peers[participant]?.online != epoch else { return action }
        let wasActive = peers[participant]?.isActive == true
        update(participant) { $0.online = epoch }
        if epoch == nil { receive(into: &action) { $0.senderLost(participant) } }
        if let epoch, heldMembers[participant] == epoch {
            heldMembers[participant] = nil
            numbering.outbox.memberSeen(participant, epoch: epoch)
            adoptMember(participant, epoch: epoch, now: now, into: &action)
        }
        updateActive(participant, wasActive: wasActive, into: &action)
        return action
    }

    /// A state record read on `topic`, the record of `key` by `writer`, at local wall-clock time `now`
    /// (ms). Accepted when it is what its topic says — a writer may only publish its own clock — and its
    /// clock is plausible; applied if its clock beats the current winner. With `holdingValues`, value
    /// listeners hear of it only at ``releaseHeldValues()``.
    mutating func onState(
        _ record: Wire.StateRecord, key: String, writer: String, topic: String, now: Int64, holdingValues: Bool = false
    ) -> Action {
        guard record.matches(key: key, writer: writer), record.clock.isPlausible(now: now) else { return reject() }
        stateTopics.insert(topic)
        var action = Action(observed: [record.clock])
        applyIfNewer(record, into: &action, hold: holdingValues)
        return action
    }

    /// The connection's burst ended: each value listener gets the newest record held for it.
    mutating func releaseHeldValues() -> Action {
        var action = Action()
        let listeners = self.listeners
        modifyJoined { joined in
            for (id, record) in joined.held {
                if let listener = listeners[id] { action.handovers.append(.yield(listener.inbox, .value(record))) }
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

    /// `$catchup` addressed to us by `sender`: accepted from a member while joining and until the time
    /// ``onJoined(acceptingCatchUpsUntil:)`` names (a responder that was joining itself answers once
    /// joined; after one came whole, another is ignored) — and from anyone while joining if the broker
    /// keeps no retained messages, when members cannot be known before the catch-up. Records whose clock
    /// is implausible at `now` are left out, each counted and reported as rejected; the rest applies. The
    /// members it lists (where no member record is replayed) are owed what we send from now on, as
    /// members whose record we read are.
    mutating func onCatchUp(_ catchUp: Wire.CatchUp, from sender: String, retainAvailable: Bool, now: Int64) -> Action {
        switch phase {
        case .joining where peers[sender]?.joined != nil || !retainAvailable: break
        case let .joined(joined) where peers[sender]?.joined != nil && now <= joined.catchUpsUntil:
            // A second responder's answer (views differ while people join): nothing wrong, nothing new.
            guard joined.awaitsCatchUp else { return Action() }
        default: return reject()
        }
        let records = catchUp.states.filter { $0.clock.isPlausible(now: now) }
        var action = Action(observed: records.map(\.clock), rejected: catchUp.states.count - records.count)
        rejected += action.rejected
        for record in records { applyIfNewer(record, into: &action) }
        for record in catchUp.journal ?? [] {
            let listed = onJournal { $0.onRecord(record, digest: record.id, owner: record.added.participant) }
            action.handovers += listed.handovers
            action.rejected += listed.rejected
        }
        for holders in catchUp.holders ?? [] {
            for participant in holders.participants where participant != me { journal.onHave(holders.id, from: participant) }
        }
        let before = listensForParticipants ? active : nil
        let joined = if case .joined = phase { true } else { false }
        for member in catchUp.members where member.participant != me {
            // Once joined, a late catch-up only adds members we have no record of: what their own records
            // said since (a leave, another epoch held back) stands.
            if joined && (peers[member.participant]?.joined != nil || heldMembers[member.participant] != nil) { continue }
            update(member.participant) { peer in
                peer.joined = member.epoch
                if peer.online == nil { peer.online = member.epoch }
            }
            numbering.outbox.memberSeen(member.participant, epoch: member.epoch)
        }
        if let before, before != active { notifyParticipants(into: &action) }
        // A catch-up too large for one message comes in parts; the join waits for the last.
        guard catchUp.more != true else { return action }
        switch phase {
        case var .joining(joining):
            joining.isCaughtUp = true
            phase = .joining(joining)
            action.handovers.append(.yield(joining.caughtUp, .caughtUp))
        case var .joined(joined):
            joined.awaitsCatchUp = false
            phase = .joined(joined)
        case .waiting, .invalidated: break
        }
        return action
    }

    /// An app message, for the sequences of its type, read on a broadcast topic or (`direct`) on our own
    /// direct topic at wall-clock time `now` (ms). Nothing while not joined. Only members send, from the
    /// connection they joined with. Reliable messages go through the ``StreamReceiver`` (its requests
    /// as ``Send/resend(_:)``); unreliable ones are handed over as they come.
    mutating func onMessage(_ envelope: Wire.ScannedEnvelope, payload: Data, sender: String, direct: Bool, now: Int64) -> Action {
        var action = Action()
        guard case .joined = phase, sender != me else { return action }
        let header = envelope.header
        guard let epoch = peers[sender]?.joined, header.epoch == epoch, let seq = header.seq else { return reject() }
        let message = InboundMessage(
            type: header.type, payload: payload, body: envelope.body, sender: Participant(id: sender), direct: direct)
        guard header.reliable else {
            notify(.messages(type: message.type), .message(message), into: &action)
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
        guard peers[sender]?.joined == epoch else { return reject() }
        var action = Action()
        receive(into: &action, input)
        return action
    }

    /// `$resend` from a member: answered from the outbox — what it is not owed or we no longer have as a
    /// `$skip`, then the envelopes themselves; or our position, when the request does not fit our streams.
    mutating func onResend(_ request: Reliable.ResendRequest, from requester: String) -> Action {
        guard peers[requester]?.joined != nil else { return reject() }
        switch numbering.outbox.answer(request, from: requester) {
        case let .position(position): return Action(sends: [.position(position, to: requester)])
        case let .resend(skip, entries):
            return Action(sends: (skip.map { [.skip($0, to: requester)] } ?? []) + entries.map { .resent($0, to: requester) })
        }
    }

    /// `$ping` from `sender`, arrived at local time `arrival` (ns): answered to a member only.
    mutating func onPing(_ ping: Wire.Ping, from sender: String, arrival: Int64) -> Action {
        peers[sender]?.joined == nil ? reject() : Action(sends: [.pong(ping, to: sender, arrival: arrival)])
    }

    /// `$end` from `sender`: the session ended, if a member says so.
    mutating func onEnd(from sender: String) -> Action {
        peers[sender]?.joined == nil ? reject() : invalidate(.ended(by: Participant(id: sender)))
    }

    /// A record on `owner`'s journal topic of `digest`, or a malformed one: see ``JournalStateMachine``.
    mutating func onJournal(_ input: (inout JournalStateMachine) -> JournalStateMachine.Action) -> Action {
        switch input(&journal) {
        case .none: Action()
        case .rejected: reject()
        case let handover: Action(handovers: [.journal(handover)])
        }
    }

    /// Our connection is back, at wall-clock time `now` (ms): our position to everyone (a receiver behind
    /// it asks for the rest), and every member is asked for what follows what we have of it (what was
    /// published meanwhile may be lost). Nothing unless joined.
    mutating func onReconnected(now: Int64) -> Action {
        var action = Action()
        guard case .joined = phase else { return action }
        let position = numbering.outbox.position
        if position.all > 0 || !position.direct.isEmpty { action.sends = [.position(position, to: nil)] }
        let others = members.filter { $0.key != me }
        receive(into: &action) { $0.reconnected(now: now, members: others) }
        return action
    }

    /// How long open requests wait to be looked at again while the connection is down (ms).
    static let inactiveRecheck: Int64 = 250

    /// The timer fired, at wall-clock time `now` (ms) and `instant`: unanswered requests are sent again,
    /// our position is stated when ``MessageNumbering`` says it is due, and the timer is asked for the
    /// next of either. While the connection is down (or the session not joined) nothing is sent, and open
    /// requests and statements still due are looked at again ``inactiveRecheck`` later: a reconnect asks
    /// for everything anyway, but neither may be forgotten because its moment fell in a gap.
    mutating func onTick(now: Int64, at instant: ContinuousClock.Instant, connected: Bool) -> Action {
        var action = Action()
        guard case .joined = phase, connected else {
            if case let .joined(joined) = phase, joined.receiver.nextRetry != nil || numbering.nextPositionDue != nil {
                action.timer = .wake(atWallClock: now &+ Self.inactiveRecheck)
            }
            return action
        }
        receive(into: &action) { $0.tick(now: now) }
        if numbering.isPositionDue(at: instant) { action.sends.append(.position(numbering.outbox.position, to: nil)) }
        if let due = numbering.nextPositionDue {  // in wall-clock ms, rounded up: a wake-up before it finds nothing due
            action.wake(atWallClock: now &+ Int64(((due - instant) / .milliseconds(1)).rounded(.up)))
        }
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
        action.rejected += rejections
        action.sends += result.requests.map(Send.resend)
        if let due = result.retryAt { action.wake(atWallClock: due) }
        for event in result.events {
            switch event {
            case let .message(message, _, _, _): notify(.messages(type: message.type), .message(message), into: &action)
            case let .gap(sender, stream, seqs):
                let gap = GroupSessionMessenger.Gap(
                    source: Participant(id: sender), count: seqs.upperBound - seqs.lowerBound + 1, toEveryone: stream == .all)
                notify(.gaps, .gap(gap), into: &action)
            }
        }
    }

    private func notify(_ kind: Listener.Kind, _ update: Update, into action: inout Action) {
        listeners.forEach { _, listener in
            if listener.kind == kind { action.handovers.append(.yield(listener.inbox, update)) }
        }
    }

    /// A copy of the announcement by `publisher`; a newer revision is an activity change. The session's
    /// kind of activity and its `ttl` never change: a copy that changes either is rejected.
    mutating func onAnnouncement(_ new: Wire.Announcement, from publisher: String) -> Action {
        // A closed announcement (sealed with a key we lack) is replaced by the first open copy.
        let closed = announcement.activity.sealed != nil && new.activity.sealed == nil
        guard new.activity.type == announcement.activity.type, new.ttl == announcement.ttl else { return reject() }
        var action = Action()
        guard new.revision > announcement.revision || closed else { return action }
        announcement = new
        notify(.activity, .activity(new.activity.data), into: &action)
        return action
    }

    /// A received value refused as unreadable (or a body that did not decode as its consumer's type), and
    /// every input refused as forged or out of place: counted and reported; it changes nothing else.
    mutating func reject() -> Action {
        rejected += 1
        return Action(rejected: 1)
    }

    // MARK: - Rules

    /// Whether we answer `newcomer`. The responder is, among the active participants other than the
    /// newcomer, the one with the largest ``rank(_:_:)`` (rendezvous hashing): every participant computes
    /// the same answer from the same view, and when that one is gone the next largest answers.
    func isCatchUpResponder(for newcomer: String) -> Bool { peers[me]?.isActive == true && ranksFirst(for: newcomer) }

    /// Whether we rank first among the active participants for `newcomer`'s catch-up, counting ourselves
    /// whether or not we are active yet.
    private func ranksFirst(for newcomer: String) -> Bool {
        guard newcomer != me else { return false }
        let mine = SessionStateMachine.rank(newcomer, me)
        return !peers.contains {
            $0.value.isActive && $0.key != newcomer && $0.key != me && SessionStateMachine.rank(newcomer, $0.key) > mine
        }
    }

    /// FNV-1a 64 over the UTF-8 of `"<newcomer>/<candidate>"`, then the candidate's ID: part of the
    /// protocol (PROTOCOL.md).
    static func rank(_ newcomer: String, _ candidate: String) -> (UInt64, String) {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        func add(_ byte: UInt8) { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        newcomer.utf8.forEach(add)
        add(UInt8(ascii: "/"))
        candidate.utf8.forEach(add)
        return (hash, candidate)
    }

    /// What a newcomer needs: every key's winning record, and — only where the broker keeps no retained
    /// messages — the active members (with retained messages the newcomer read every member record
    /// before its barrier) and, with `listingJournal`, the journal's records and who holds them.
    ///
    /// It comes in as few parts as fit `budget` bytes each (the broker's packet limit less the envelope
    /// and topic), every part but the last marked `more`: the members in the first, then the journal's
    /// records, its holders, and the states, each in parts of their own. A single record above the budget
    /// is sent alone: its writer could not have published it either. The states are as `sealing` makes them
    /// (sealed, in a private session), measured so.
    func catchUp(
        listingMembers: Bool, listingJournal: Bool = false, budget: Int = .max, sealing: (Wire.StateRecord) -> Wire.StateRecord = { $0 }
    ) -> [Wire.CatchUp] {
        let listed =
            listingMembers
            ? peers.compactMap { $0.value.isActive ? Wire.Member(participant: $0.key, epoch: $0.value.joined ?? 0) : nil }
                .sorted { $0.participant < $1.participant }
            : []
        var used = listed.reduce(64) { $0 + ((try? Wire.encode($1).count) ?? 0) + 1 }
        var parts: [Wire.CatchUp] = []
        // `Wire.groups` makes one empty group of nothing: only the states' may stand for an empty catch-up.
        func append<Item: Encodable>(_ items: [Item], _ part: ([Item]) -> Wire.CatchUp) {
            guard !items.isEmpty else { return }
            parts += Wire.groups(items, budget: budget, used: used).map(part)
            used = 64
        }
        if listingJournal {
            append(journal.attachments.map(\.record)) { Wire.CatchUp(states: [], members: [], journal: $0) }
            append(journal.listedHolders(me: me)) { Wire.CatchUp(states: [], members: [], holders: $0) }
        }
        let states = states.values.sorted { $0.key < $1.key }.map(sealing)  // measured as they go out
        if !states.isEmpty || parts.isEmpty {
            parts += Wire.groups(states, budget: budget, used: used).map { Wire.CatchUp(states: $0, members: []) }
        }
        return parts.enumerated().map { index, part in
            var part = part
            if index == 0 { part.members = listed }
            part.more = index < parts.count - 1 ? true : nil
            return part
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
                    action.handovers.append(.yield(listener.inbox, .value(record)))
                }
            }
        }
    }

    /// Joined participants and the connection epoch they joined with.
    var members: [String: Int64] { peers.compactMapValues(\.joined) }

    /// Changes what we know of `participant`, and forgets it once we know nothing.
    private mutating func update(_ participant: String, _ body: (inout Peer) -> Void) {
        var peer = peers[participant] ?? Peer()
        body(&peer)
        peers[participant] = peer.isEmpty ? nil : peer
    }

    /// Tells the participants' listeners if `participant`, who `wasActive` before its member record or
    /// presence changed, is active now or the other way round.
    private func updateActive(_ participant: String, wasActive: Bool, into action: inout Action) {
        if (peers[participant]?.isActive == true) != wasActive { notifyParticipants(into: &action) }
    }

    private var listensForParticipants: Bool { !listeners.filter { $0.kind == .participants }.isEmpty }

    /// The active participants to each participants' listener (the set is built only if there is one).
    private func notifyParticipants(into action: inout Action) {
        guard listensForParticipants else { return }
        notify(.participants, .participants(active), into: &action)
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
