import Foundation

/// The logic of one session as seen by one participant: membership, liveness, last-writer-wins state,
/// duplicate suppression and who answers a newcomer. A value type without side effects: every input
/// returns the effects to perform; ``SessionCore`` performs them after releasing its lock.
struct SessionStateMachine {
    typealias StateContinuation = AsyncStream<GroupSessionState>.Continuation
    typealias ParticipantsContinuation = AsyncStream<Set<Participant>>.Continuation
    typealias MessageContinuation = Inbox<InboundMessage>
    typealias ValueContinuation = Inbox<Wire.StateRecord?>

    /// A message for the app, still encoded: it is decoded in the consumer's task.
    struct InboundMessage: Sendable {
        var payload: Data
        /// Where the envelope's body is in `payload` (nil: decode the whole envelope).
        var body: Range<Int>?
        var sender: Participant
    }

    let sessionID: String
    let me: String
    let myEpoch: Int64
    private(set) var state: GroupSessionState = .waiting
    private(set) var announcement: Wire.Announcement
    /// Joined participants and the connection epoch they joined with.
    private(set) var members: [String: Int64] = [:]
    /// Live connections: participant → epoch of its online presence.
    private(set) var presence: [String: Int64]
    /// The winning record per key.
    private(set) var states: [String: Wire.StateRecord] = [:]
    /// Every retained state topic seen, to clear them when the session ends.
    private(set) var stateTopics: Set<String> = []
    private(set) var active: Set<Participant> = []
    private var lastReliableSeq: [String: (epoch: Int64, seq: Int64)] = [:]
    private(set) var rejected = 0
    private var nextID: UInt64 = 0
    private var stateListeners: [UInt64: StateContinuation] = [:]
    private var participantListeners: [UInt64: ParticipantsContinuation] = [:]
    private var messageListeners: [UInt64: (type: String, continuation: MessageContinuation)] = [:]
    private var valueListeners: [UInt64: (key: String, continuation: ValueContinuation)] = [:]
    /// Value changes from received records, held until the connection reaches the end of the burst they
    /// arrived in: crossing writes that arrive together show as one change (per listener, the newest).
    private var heldValues: [UInt64: Wire.StateRecord] = [:]
    private var activityListeners: [UInt64: AsyncStream<JSONValue>.Continuation] = [:]
    /// While joining: told when our own member record comes back (every retained message delivered on
    /// subscribe is in by then), with whether a catch-up should be awaited.
    private var barrier: AsyncStream<Bool>.Continuation?
    /// While joining: told when `$catchup` arrives.
    private var catchUpArrived: AsyncStream<Void>.Continuation?

    init(sessionID: String, me: String, myEpoch: Int64, announcement: Wire.Announcement, presence: [String: Int64]) {
        self.sessionID = sessionID
        self.me = me
        self.myEpoch = myEpoch
        self.announcement = announcement
        self.presence = presence
    }

    struct Effects {
        var states: [(StateContinuation, GroupSessionState)] = []
        var participants: [(ParticipantsContinuation, Set<Participant>)] = []
        var messages: [(MessageContinuation, InboundMessage)] = []
        var values: [(ValueContinuation, Wire.StateRecord?)] = []
        var activities: [(AsyncStream<JSONValue>.Continuation, JSONValue)] = []
        var finish = false
        var finishing: (states: [StateContinuation], participants: [ParticipantsContinuation],
                        messages: [MessageContinuation], values: [ValueContinuation],
                        activities: [AsyncStream<JSONValue>.Continuation]) = ([], [], [], [], [])
        /// Send `$catchup` to this newcomer.
        var catchUpTo: String?
        /// The activity changed.
        var activityChanged = false
        // The join's continuations are kept in arrays (empty or one), not optionals:
        // `AsyncStream.Continuation` is resilient, so every copy or nil check of an optional one went
        // through the runtime's value witnesses — three per received message, ~2,000 instructions.
        /// A joining `join()` waits on this for the catch-up (empty: nothing arrived for it).
        var catchUpArrived: [AsyncStream<Void>.Continuation] = []
        /// A `join()` in progress must give up: its barrier and catch-up waits end.
        var abandonJoin: (barrier: [AsyncStream<Bool>.Continuation], catchUp: [AsyncStream<Void>.Continuation]) = ([], [])

        func perform() {
            yieldAll()
            finishAll()
        }

        /// Hands values to sequences: never runs consumer code, so it may happen under the lock.
        /// (The `isEmpty` checks skip setting up iterators over empty arrays: most inputs yield to one
        /// kind of sequence, and every received message comes through here.)
        func yieldAll() {
            if !states.isEmpty { for (continuation, value) in states { continuation.yield(value) } }
            if !participants.isEmpty { for (continuation, value) in participants { continuation.yield(value) } }
            if !messages.isEmpty { for (continuation, value) in messages { continuation.yield(value) } }
            if !values.isEmpty { for (continuation, value) in values { continuation.yield(value) } }
            if !activities.isEmpty { for (continuation, value) in activities { continuation.yield(value) } }
            for continuation in catchUpArrived { continuation.yield() }
        }

        /// Ends sequences: their termination handlers take the session's lock, so never under it.
        func finishAll() {
            if !abandonJoin.barrier.isEmpty { abandonJoin.barrier.forEach { $0.finish() } }
            if !abandonJoin.catchUp.isEmpty { abandonJoin.catchUp.forEach { $0.finish() } }
            guard !(finishing.states.isEmpty && finishing.participants.isEmpty && finishing.messages.isEmpty
                    && finishing.values.isEmpty && finishing.activities.isEmpty) else { return }
            finishing.states.forEach { $0.finish() }
            finishing.participants.forEach { $0.finish() }
            finishing.messages.forEach { $0.finish() }
            finishing.values.forEach { $0.finish() }
            finishing.activities.forEach { $0.finish() }
        }
    }

    private mutating func makeID() -> UInt64 {
        nextID += 1
        return nextID
    }

    // MARK: - Joining

    /// `join()` was called. Returns false unless the session is waiting and not already joining.
    mutating func onJoinStarted(barrier: AsyncStream<Bool>.Continuation, catchUp: AsyncStream<Void>.Continuation) -> Bool {
        guard state == .waiting, self.barrier == nil else { return false }
        self.barrier = barrier
        self.catchUpArrived = catchUp
        return true
    }

    /// Whether a `join()` is in progress (waiting for its barrier or the catch-up).
    var isJoining: Bool { barrier != nil || catchUpArrived != nil }

    /// A `join()` failed or was cancelled before completing: the session is as before it started.
    mutating func onJoinAbandoned() -> Effects {
        var effects = Effects()
        effects.abandonJoin = (barrier.map { [$0] } ?? [], catchUpArrived.map { [$0] } ?? [])
        barrier = nil
        catchUpArrived = nil
        return effects
    }

    /// Our own member record came back: every retained message delivered on subscribe is in.
    /// Returns whom to tell, and whether a catch-up from someone else should be awaited.
    mutating func onBarrierPassed(retainAvailable: Bool) -> (AsyncStream<Bool>.Continuation, Bool)? {
        guard let barrier else { return nil }
        self.barrier = nil
        let others = members.keys.contains { $0 != me && presence[$0] == members[$0] }
        // Without retained messages we cannot know who is there: a catch-up may come in any case.
        return (barrier, others || !retainAvailable)
    }

    /// The join completed (caught up, or nobody answered in time).
    mutating func onJoined() -> Effects {
        var effects = Effects()
        catchUpArrived = nil
        guard state == .waiting else { return effects }
        state = .joined
        members[me] = myEpoch
        presence[me] = myEpoch
        effects.states = stateListeners.values.map { ($0, .joined) }
        recomputeActive(into: &effects)
        // Value listeners wait for the join to yield their first element: the caught-up value.
        heldValues = [:]
        for (_, listener) in valueListeners {
            effects.values.append((listener.continuation, states[listener.key]))
        }
        return effects
    }

    // MARK: - Inputs from the wire

    /// A member record (`nil`: cleared, the participant left). `retained`: a stored copy replayed by the
    /// broker, not a live join — only a live join makes someone send a catch-up.
    mutating func onMember(_ participant: String, _ record: Wire.Member?, retained: Bool) -> Effects {
        var effects = Effects()
        if participant == me {
            return effects
        }
        if let record {
            guard members[participant] != record.epoch else { return effects }
            members[participant] = record.epoch
            if presence[participant] == nil && !retained {
                // A live join proves the connection is alive even when presence was not retained.
                presence[participant] = record.epoch
            }
            if !retained, state == .joined, isCatchUpResponder(for: participant) {
                effects.catchUpTo = participant
            }
        } else {
            guard members.removeValue(forKey: participant) != nil else { return effects }
        }
        updateActive(participant, into: &effects)
        return effects
    }

    /// The group's presence changed: `epoch` of the live connection, or nil when it is gone.
    mutating func onPresence(_ participant: String, epoch: Int64?) -> Effects {
        var effects = Effects()
        guard participant != me, presence[participant] != epoch else { return effects }
        presence[participant] = epoch
        updateActive(participant, into: &effects)
        return effects
    }

    /// A state record from `writer` on `topic`. Applies it if its clock beats the current winner.
    /// A received state record. With `holdingValues`, value listeners hear of it only at
    /// ``releaseHeldValues()`` (the end of the connection's burst).
    mutating func onState(_ record: Wire.StateRecord, writer: String, topic: String, holdingValues: Bool = false) -> Effects {
        var effects = Effects()
        stateTopics.insert(topic)
        guard record.clock.participant == writer else {
            rejected += 1  // a writer may only publish its own clock: forged
            return effects
        }
        applyIfNewer(record, into: &effects, hold: holdingValues)
        return effects
    }

    /// Whether ``releaseHeldValues()`` has anything to show.
    var hasHeldValues: Bool { !heldValues.isEmpty }

    /// The connection's burst ended: the newest held value of each listener is yielded.
    mutating func releaseHeldValues() -> Effects {
        var effects = Effects()
        guard !heldValues.isEmpty else { return effects }
        for (id, record) in heldValues {
            if let listener = valueListeners[id] { effects.values.append((listener.continuation, record)) }
        }
        heldValues = [:]
        return effects
    }

    /// A local write: applied at once (optimistic), published by the caller.
    mutating func onLocalWrite(_ record: Wire.StateRecord, topic: String) -> Effects {
        var effects = Effects()
        stateTopics.insert(topic)
        applyIfNewer(record, into: &effects)
        return effects
    }

    /// Whether `participant` joined the session (its member record is live).
    func isMember(_ participant: String) -> Bool {
        members[participant] != nil
    }

    /// `$catchup` addressed to us by `sender`: accepted only while joining, and only from a member —
    /// unless the broker keeps no retained messages, when members cannot be known before the catch-up.
    mutating func onCatchUp(_ catchUp: Wire.CatchUp, from sender: String, retainAvailable: Bool) -> Effects {
        var effects = Effects()
        guard catchUpArrived != nil, members[sender] != nil || !retainAvailable else {
            rejected += 1
            return effects
        }
        for record in catchUp.states { applyIfNewer(record, into: &effects) }
        for member in catchUp.members where member.participant != me {
            members[member.participant] = member.epoch
            if presence[member.participant] == nil { presence[member.participant] = member.epoch }
        }
        recomputeActive(into: &effects)
        effects.catchUpArrived = catchUpArrived.map { [$0] } ?? []
        return effects
    }

    /// An app message. Returns nothing when it is a redelivery of a reliable message already seen.
    mutating func onMessage(_ envelope: Wire.ScannedEnvelope, payload: Data, sender: String) -> Effects {
        let header = envelope.header
        var effects = Effects()
        guard state == .joined, sender != me else { return effects }
        guard members[sender] != nil else {
            rejected += 1  // only participants that joined the session may message it
            return effects
        }
        if header.reliable {
            if let last = lastReliableSeq[sender] {
                if last.epoch == header.epoch && header.seq <= last.seq { return effects }  // a redelivery
                if header.epoch < last.epoch { return effects }  // from an older connection of the sender
            }
            lastReliableSeq[sender] = (header.epoch, header.seq)
        }
        let message = InboundMessage(payload: payload, body: envelope.body, sender: Participant(id: sender))
        for listener in messageListeners.values where listener.type == header.type {
            effects.messages.append((listener.continuation, message))
        }
        return effects
    }

    mutating func onAnnouncement(_ new: Wire.Announcement) -> Effects {
        var effects = Effects()
        guard new.revision > announcement.revision else { return effects }
        guard new.activity.type == announcement.activity.type else {
            rejected += 1  // a session's kind of activity never changes
            return effects
        }
        announcement = new
        effects.activityChanged = true
        effects.activities = activityListeners.values.map { ($0, new.activity.data) }
        return effects
    }

    mutating func onRejected() {
        rejected += 1
    }

    /// The session is over for us.
    mutating func invalidate(_ reason: GroupSessionState.InvalidationReason) -> Effects {
        var effects = Effects()
        guard !state.isInvalidated else { return effects }
        state = .invalidated(reason: reason)
        effects.states = stateListeners.values.map { ($0, state) }
        effects.finishing = (
            Array(stateListeners.values), Array(participantListeners.values),
            messageListeners.values.map(\.continuation), valueListeners.values.map(\.continuation),
            Array(activityListeners.values)
        )
        activityListeners = [:]
        stateListeners = [:]
        participantListeners = [:]
        messageListeners = [:]
        valueListeners = [:]
        heldValues = [:]
        effects.abandonJoin = (barrier.map { [$0] } ?? [], catchUpArrived.map { [$0] } ?? [])
        barrier = nil
        catchUpArrived = nil
        return effects
    }

    // MARK: - Listeners

    mutating func addStateListener(_ continuation: StateContinuation) -> (UInt64, Effects) {
        var effects = Effects()
        let id = makeID()
        effects.states = [(continuation, state)]
        if state.isInvalidated {
            effects.finishing.states = [continuation]
        } else {
            stateListeners[id] = continuation
        }
        return (id, effects)
    }

    mutating func addParticipantsListener(_ continuation: ParticipantsContinuation) -> (UInt64, Effects) {
        var effects = Effects()
        let id = makeID()
        effects.participants = [(continuation, active)]
        if state.isInvalidated {
            effects.finishing.participants = [continuation]
        } else {
            participantListeners[id] = continuation
        }
        return (id, effects)
    }

    mutating func addMessageListener(type: String, _ continuation: MessageContinuation) -> (UInt64, Effects) {
        var effects = Effects()
        let id = makeID()
        if state.isInvalidated {
            effects.finishing.messages = [continuation]
        } else {
            messageListeners[id] = (type, continuation)
        }
        return (id, effects)
    }

    mutating func addValueListener(key: String, _ continuation: ValueContinuation) -> (UInt64, Effects) {
        var effects = Effects()
        let id = makeID()
        if state.isInvalidated {
            effects.finishing.values = [continuation]
            return (id, effects)
        }
        valueListeners[id] = (key, continuation)
        if state == .joined {
            effects.values = [(continuation, states[key])]
        }
        return (id, effects)
    }

    mutating func addActivityListener(_ continuation: AsyncStream<JSONValue>.Continuation) -> (UInt64, Effects) {
        var effects = Effects()
        let id = makeID()
        effects.activities = [(continuation, announcement.activity.data)]
        if state.isInvalidated {
            effects.finishing.activities = [continuation]
        } else {
            activityListeners[id] = continuation
        }
        return (id, effects)
    }

    mutating func removeListener(_ id: UInt64) {
        activityListeners[id] = nil
        stateListeners[id] = nil
        participantListeners[id] = nil
        messageListeners[id] = nil
        valueListeners[id] = nil
        heldValues[id] = nil
    }

    // MARK: - Rules

    /// Whether we answer `newcomer`. The responder is, among the active participants other than the
    /// newcomer, the one with the largest ``rank(_:_:)`` — FNV-1a 64 of `"<newcomer>/<candidate>"`, then
    /// the ID (rendezvous hashing): every participant computes the same answer from the same view, and
    /// when that one is gone the next largest answers. Decided as soon as any candidate outranks us: only
    /// the responder itself hashes every candidate, each of the others stops at the first one above it —
    /// about ln N hashes instead of N (with 100 present, a full scan by everyone cost each join ~10,000
    /// hashes, ~2 million instructions, on the newcomer's critical path). `"<newcomer>/"` is hashed once.
    func isCatchUpResponder(for newcomer: String) -> Bool {
        // Our entry as `active` holds it: its bytes are what the other participants hash for us.
        guard newcomer != me, let index = active.firstIndex(of: Participant(id: me)) else { return false }
        let myself = active[index].id
        let prefix = FNV1a().adding(newcomer).adding(UInt8(ascii: "/"))
        let mine = (prefix.adding(myself).value, myself)
        for candidate in active where candidate.id != newcomer && candidate.id != myself {
            if (prefix.adding(candidate.id).value, candidate.id) > mine { return false }
        }
        return true
    }

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
            var text = text  // `withUTF8` needs a variable; a native string is not copied
            text.withUTF8 { bytes in
                for byte in bytes { next.value = (next.value ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
            }
            return next
        }
    }

    /// What a newcomer needs: every key's winning record, and — only where the broker keeps no retained
    /// messages — the active members. With retained messages the newcomer has read every member record
    /// before its barrier, so listing them again only made the catch-up grow with the session (5 KB
    /// with 100 present, encoded, sent and read on the newcomer's critical path).
    func catchUp(listingMembers: Bool) -> Wire.CatchUp {
        Wire.CatchUp(
            states: states.values.sorted { $0.key < $1.key },
            members: listingMembers
                ? active.map { Wire.Member(participant: $0.id, epoch: members[$0.id] ?? 0) }.sorted { $0.participant < $1.participant }
                : [])
    }

    private mutating func applyIfNewer(_ record: Wire.StateRecord, into effects: inout Effects, hold: Bool = false) {
        if let current = states[record.key], current.clock >= record.clock { return }
        states[record.key] = record
        guard state == .joined else { return }
        for (id, listener) in valueListeners where listener.key == record.key {
            if hold {
                heldValues[id] = record
            } else {
                // Newer than anything held for this listener, which would only make it go back.
                heldValues[id] = nil
                effects.values.append((listener.continuation, record))
            }
        }
    }

    /// Re-evaluates one participant after its member record or presence changed: O(1), where a full
    /// recompute made a newcomer's replay of N member records O(N²).
    private mutating func updateActive(_ participant: String, into effects: inout Effects) {
        let entry = Participant(id: participant)
        let isActive = members[participant] != nil && presence[participant] == members[participant]
            && (participant != me || state == .joined)
        let changed = isActive ? active.insert(entry).inserted : active.remove(entry) != nil
        if changed { effects.participants = participantListeners.values.map { ($0, active) } }
    }

    private mutating func recomputeActive(into effects: inout Effects) {
        var now = Set<Participant>()
        for (participant, epoch) in members where presence[participant] == epoch {
            now.insert(Participant(id: participant))
        }
        if state != .joined { now.remove(Participant(id: me)) }
        guard now != active else { return }
        active = now
        effects.participants = participantListeners.values.map { ($0, now) }
    }
}
