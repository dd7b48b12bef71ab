/// One participant's side of coordinated playback, as a value: the group clock (which participant serves
/// it, and our offset to it) and the shared timeline, with the commands and suspensions that change it.
/// Each input returns an ``Action``: records to write and whether the timeline the player follows
/// changed. It also says when it next has something to do (``nextWake(atLocal:pingInterval:)``: a
/// `$ping` due, a takeover whose patience runs out), and ``onTick(atLocal:)`` is the input for that
/// moment. It never publishes, sleeps or resumes anything; ``PlaybackCoordinator`` does, outside its lock.
///
/// Times: `local` is this participant's wall clock in nanoseconds, group instants are `local + offset`.
struct PlaybackStateMachine {
    /// The `groupsync.clock` record: who serves the group clock, and which clock it is (`base`).
    struct ClockRecord: Codable, Equatable, Sendable {
        var reference: String
        var base: String

        /// Whether a record written by `writer` can be one: a participant claims the clock for itself,
        /// and a base is 1 to 256 bytes.
        func isValid(writtenBy writer: String) -> Bool {
            reference == writer && Identifier.isValid(reference) && !base.isEmpty && base.utf8.count <= 256
        }
    }

    enum Role: Equatable {
        /// No clock record seen yet.
        case undecided
        /// We serve the group clock: group time is our local time plus `offset`, frozen while we serve.
        case reference(offset: Int64)
        /// We follow `reference`. `provisional`: the offset to use until our exchanges with it give one
        /// (the one we had on the same clock base before, when the reference changed).
        case follower(reference: String, provisional: Int64?)
    }

    /// What to do after an input.
    struct Action: Equatable {
        var writeClock: ClockRecord?
        var writeTimeline: PlaybackTimeline?
        /// The timeline the player follows (``effectiveTimeline``) may have changed, or became usable.
        var timelineChanged = false

        mutating func merge(_ other: Action) {
            writeClock = other.writeClock ?? writeClock
            writeTimeline = other.writeTimeline ?? writeTimeline
            timelineChanged = timelineChanged || other.timelineChanged
        }
    }

    let me: String
    /// Who started the session: the one to start a clock when there is none; the others give it
    /// ``firstClaimPatience`` to do so before they do.
    let initiator: String
    /// Suspension reasons that make the whole group wait.
    let waitingReasons: Set<String>
    /// The lead of a scheduled start; nil: derived from the round trips to the reference.
    let fixedLead: Duration?
    /// How long a participant without a clock waits for a synchronized one to take over from a reference
    /// that is gone, before it starts a new clock.
    static let takeoverPatience: Int64 = 1_000_000_000
    /// How long a participant that did not start the session waits for a clock to appear before it
    /// starts one (the initiator may not coordinate playback, or may be gone).
    static let firstClaimPatience: Int64 = 500_000_000
    /// When the reference is gone, the active participants take over in the order of their IDs, this
    /// long apart, so that the first one's claim usually arrives before the others make theirs.
    static let takeoverStagger: Int64 = 100_000_000

    private(set) var role = Role.undecided
    private(set) var clock: ClockRecord?
    private(set) var estimator = ClockEstimator()
    /// The last valid timeline received or written.
    private(set) var timeline: PlaybackTimeline?
    private(set) var active: Set<String> = []
    /// This participant's suspensions, by ID: their reasons.
    private(set) var suspensions: [Int: String] = [:]
    private var nextSuspension = 0
    /// The rate `play()` uses: the last non-zero rate the group played or intended.
    private(set) var playRate = 1.0
    /// Since when (local) the reference has been seen gone while we could not take over, or no clock
    /// record existed.
    private var referenceGoneSince: Int64?
    /// Timeline and clock records rejected as invalid.
    private(set) var rejected = 0
    /// Our `$ping`s not answered yet, by the `t0` they carry (nanoseconds).
    private var pings: [Int64: PendingPing] = [:]
    /// Exchanges with the reference left to make at the burst's pace: ``burstLength`` when the reference
    /// is new to us, one more after each answer while the estimate is not settled.
    private(set) var burst = 0
    /// When (local) our last `$ping` was due; nil before the first.
    private var lastPing: Int64?
    static let burstLength = 8
    /// The pace of a burst. Not faster: pings spread over time are likelier to find a quiet moment than
    /// a chain of them caught in the same stall.
    static let burstSpacing: Int64 = 5_000_000
    /// The pace after a burst until the estimate follows the drift between the clocks.
    static let fittingInterval: Int64 = 100_000_000
    /// The most `$ping`s remembered: an older one's answer is timed from its `t0` alone.
    static let rememberedPings = 16

    /// A `$ping` of ours, with when (local) the connection took it and when it was written to the socket,
    /// once known. The wait between the two is the network thread's: milliseconds on a busy machine, and
    /// on the way out only, since the reference answers from its network thread. Counted as a slower trip
    /// out, it would skew the offset by half of it, so an exchange is timed from `t0` moved by that wait.
    /// The rest of sending (encoding, the write itself) happens both ways and cancels out. An answer can
    /// come before both moments are recorded (they are told from two threads): it waits here for them.
    private struct PendingPing {
        var queued: Int64?
        var left: Int64?
        var answer: Answer?
    }

    /// A `$pong`'s times (see ``onPong(from:sent:received:replied:back:)``).
    private struct Answer {
        var sender: String
        var received: Int64
        var replied: Int64
        var back: Int64
    }

    init(me: String, initiator: String, waitingReasons: Set<String>, lead: Duration?) {
        self.me = me
        self.initiator = initiator
        self.waitingReasons = waitingReasons
        self.fixedLead = lead
    }

    // MARK: - The group clock

    /// Group − local, in nanoseconds, at local time `local`; nil until we know it.
    func offset(atLocal local: Int64) -> Int64? {
        switch role {
        case .undecided: return nil
        case let .reference(offset): return offset
        case let .follower(_, provisional): return estimator.offset(atLocal: local) ?? provisional
        }
    }

    func groupTime(atLocal local: Int64) -> GroupInstant? {
        offset(atLocal: local).map { GroupInstant(nanoseconds: local &+ $0) }
    }

    var isReference: Bool {
        if case .reference = role { return true }
        return false
    }

    /// Our answer to a `$ping` received at local `local`: the group time, when we serve it.
    func answerPing(atLocal local: Int64) -> GroupInstant? {
        guard case let .reference(offset) = role else { return nil }
        return GroupInstant(nanoseconds: local &+ offset)
    }

    /// We sent a `$ping` carrying `t0`.
    mutating func onPingSent(t0: Int64) {
        pings[t0] = PendingPing()
        if pings.count > PlaybackStateMachine.rememberedPings, let oldest = pings.keys.min() { pings[oldest] = nil }
    }

    /// The connection took the `$ping` carrying `t0` at local time `local`.
    mutating func onPingQueued(t0: Int64, atLocal local: Int64) -> Action {
        pings[t0]?.queued = local
        return timeAnsweredPing(t0)
    }

    /// The `$ping` carrying `t0` was written to the socket at local time `local`.
    mutating func onPingLeft(t0: Int64, atLocal local: Int64) -> Action {
        pings[t0]?.left = local
        return timeAnsweredPing(t0)
    }

    /// A `$pong` from `sender` to our `$ping` carrying `t0`: the reference received it at group `t1`
    /// and answered at group `t2`, and the answer arrived at local `t3`. One exchange with the reference
    /// (ignored from anyone else), timed from `t0` moved by the ping's wait for the network thread
    /// (``PendingPing``), once that wait is known; an answer to a ping we do not remember is timed from
    /// its `t0`.
    mutating func onPong(from sender: String, sent t0: Int64, received t1: Int64, replied t2: Int64, back t3: Int64) -> Action {
        guard case let .follower(reference, _) = role, sender == reference else { return Action() }
        let answer = Answer(sender: sender, received: t1, replied: t2, back: t3)
        guard pings[t0] != nil else { return exchange(sent: t0, answer) }
        pings[t0]?.answer = answer
        return timeAnsweredPing(t0)
    }

    /// The exchange of the `$ping` carrying `t0`, once it was answered and its wait is known.
    private mutating func timeAnsweredPing(_ t0: Int64) -> Action {
        guard let ping = pings[t0], let queued = ping.queued, let left = ping.left, let answer = ping.answer else {
            return Action()
        }
        pings[t0] = nil
        return exchange(sent: t0 &+ max(0, left &- queued), answer)
    }

    /// One exchange, sent at local `sent`: a sample for the estimate when it answers the reference.
    private mutating func exchange(sent: Int64, _ answer: Answer) -> Action {
        guard case let .follower(reference, provisional) = role, answer.sender == reference else { return Action() }
        let t3 = answer.back
        let hadOffset = estimator.offset(atLocal: t3) != nil || provisional != nil
        guard estimator.add(sent: sent, received: answer.received, replied: answer.replied, back: t3) else { return Action() }
        guard estimator.isSettled else {
            burst = max(burst, 1)
            return Action()
        }
        guard !hadOffset, estimator.offset(atLocal: t3) != nil else { return Action() }
        // The group clock became known: a start may be scheduled, a waiting state written.
        var action = Action(timelineChanged: true)
        action.merge(reconcileWaiting(atLocal: t3))
        return action
    }

    /// The lead of a scheduled start: the configured one, else three longest round trips to the
    /// reference plus 25 ms (50 ms before any exchange), at most a second.
    var lead: Duration {
        if let fixedLead { return fixedLead }
        guard let longest = estimator.longestRoundTrip else { return .milliseconds(50) }
        return min(.nanoseconds(3 * longest) + .milliseconds(25), .seconds(1))
    }

    /// The `groupsync.clock` record changed (nil: none exists; we are joined and caught up). An invalid
    /// one (`valid` false: it does not decode, or it is not a claim by its writer) is counted and
    /// ignored — taken as none while no clock is known.
    mutating func onClockRecord(_ record: ClockRecord?, valid: Bool = true, atLocal local: Int64) -> Action {
        if !valid {
            rejected += 1
            guard clock == nil else { return Action() }
        }
        guard valid, let record else {
            // Nobody serves a clock yet: the initiator starts one on its own clock; anyone else after a
            // while (two that do at once converge on the record that wins).
            guard clock == nil else { return Action() }
            if me == initiator { return claim(base: "\(me)@\(local / 1_000_000)", offset: 0) }
            referenceGoneSince = referenceGoneSince ?? local
            return Action()
        }
        let current = offset(atLocal: local)
        let sameBase = record.base == clock?.base
        clock = record
        var action = Action(timelineChanged: true)
        if record.reference == me {
            if !isReference { role = .reference(offset: sameBase ? (current ?? 0) : 0) }
        } else {
            switch role {
            case .follower(record.reference, _) where sameBase:
                break
            default:
                role = .follower(reference: record.reference, provisional: sameBase ? current : nil)
                estimator.reset()
                burst = Self.burstLength
            }
        }
        referenceGoneSince = nil
        action.merge(checkReference(atLocal: local))
        return action
    }

    /// The session's active participants changed.
    mutating func onActive(_ participants: Set<String>, atLocal local: Int64) -> Action {
        active = participants
        var action = checkReference(atLocal: local)
        action.merge(dropDepartedWaiters(atLocal: local))
        return action
    }

    /// When (local) this participant next has something to do without an input: a `$ping` due (every
    /// `pingInterval` once the estimate follows the drift), a takeover whose patience runs out. nil:
    /// nothing until the next input.
    func nextWake(atLocal local: Int64, pingInterval: Int64) -> Int64? {
        [nextPing(interval: pingInterval), nextTakeover(atLocal: local)].compactMap { $0 }.min()
    }

    /// When the next `$ping` to the reference is due; nil when we follow no reference.
    func nextPing(interval: Int64) -> Int64? {
        guard case .follower = role else { return nil }
        guard let lastPing else { return 0 }  // at once
        if burst > 0 { return lastPing &+ Self.burstSpacing }
        return lastPing &+ (estimator.fitsDrift ? interval : Self.fittingInterval)
    }

    /// The reference to send a `$ping` to at `local`, when one is due (see ``nextPing(interval:)``); it
    /// counts as sent (its `t0` is given to ``onPingSent(t0:)``).
    mutating func takePing(atLocal local: Int64, interval: Int64) -> String? {
        guard case let .follower(reference, _) = role, let due = nextPing(interval: interval), local >= due else { return nil }
        if burst > 0 { burst -= 1 }
        lastPing = local
        return reference
    }

    /// When ``checkReference(atLocal:)`` claims the clock, if nothing changes meanwhile: with no clock, the
    /// initiator's patience after it was found missing; with its reference gone, our rank's stagger when
    /// we know its clock, else the takeover patience; nil while the reference is there.
    private func nextTakeover(atLocal local: Int64) -> Int64? {
        guard let clock else { return referenceGoneSince.map { $0 &+ PlaybackStateMachine.firstClaimPatience } }
        guard clock.reference != me, !active.isEmpty, !active.contains(clock.reference) else { return nil }
        let since = referenceGoneSince ?? local
        guard offset(atLocal: local) != nil else { return since &+ PlaybackStateMachine.takeoverPatience }
        let rank = Int64(active.sorted().firstIndex(of: me) ?? 0)
        return since &+ rank * PlaybackStateMachine.takeoverStagger
    }

    /// Time passes (at the moment ``nextWake(atLocal:pingInterval:)`` named): a takeover that waited for
    /// patience, a waiting state not yet written.
    mutating func onTick(atLocal local: Int64) -> Action {
        var action = checkReference(atLocal: local)
        action.merge(reconcileWaiting(atLocal: local))
        action.merge(dropDepartedWaiters(atLocal: local))
        return action
    }

    /// Takes over the clock when its reference is gone: at once with the clock we follow, after
    /// ``takeoverPatience`` with a new one when we have none (a synchronized participant may do better).
    private mutating func checkReference(atLocal local: Int64) -> Action {
        if let clock {
            guard clock.reference != me, !active.isEmpty, !active.contains(clock.reference) else {
                referenceGoneSince = nil
                return Action()
            }
            referenceGoneSince = referenceGoneSince ?? local
        }
        guard let due = nextTakeover(atLocal: local), local >= due else { return Action() }
        if let clock, let offset = offset(atLocal: local) { return claim(base: clock.base, offset: offset) }
        return claim(base: "\(me)@\(local / 1_000_000)", offset: 0)
    }

    private mutating func claim(base: String, offset: Int64) -> Action {
        let record = ClockRecord(reference: me, base: base)
        clock = record
        role = .reference(offset: offset)
        referenceGoneSince = nil
        burst = 0
        return Action(writeClock: record, timelineChanged: true)
    }

    // MARK: - The timeline

    /// The timeline the player follows: the shared one, or — when it is on another clock than the one
    /// served now, or there is none — paused where it was.
    var effectiveTimeline: PlaybackTimeline {
        let base = clock?.base ?? ""
        guard var timeline else { return .initial(base: base) }
        if timeline.base != base {
            timeline.rate = 0
            timeline.intendedRate = 0
            timeline.base = base
        }
        return timeline
    }

    /// The shared timeline's record changed (nil: none written yet).
    mutating func onTimelineRecord(_ record: PlaybackTimeline.Record?, valid: Bool, atLocal local: Int64) -> Action {
        guard valid else {
            rejected += 1
            return Action()
        }
        guard let record else { return Action(timelineChanged: timeline != nil) }
        guard let received = PlaybackTimeline(record) else {
            rejected += 1
            return Action()
        }
        timeline = received
        if received.intendedRate != 0 { playRate = received.intendedRate }
        var action = Action(timelineChanged: true)
        action.merge(reconcileWaiting(atLocal: local))
        action.merge(dropDepartedWaiters(atLocal: local))
        return action
    }

    /// Writes `timeline` as ours: applied here at once, exactly as the others read it from the record
    /// (the anchor goes out in milliseconds with a fraction, finer than a double keeps), so that our own
    /// record coming back is the same timeline, not a new one to start again.
    private mutating func write(_ new: PlaybackTimeline) -> Action {
        let new = PlaybackTimeline(new.record) ?? new
        timeline = new
        if new.intendedRate != 0 { playRate = new.intendedRate }
        return Action(writeTimeline: new, timelineChanged: true)
    }

    enum CommandError: Error, Equatable {
        /// No group clock yet: nobody answered, or no clock record arrived.
        case noClock
    }

    enum Command: Equatable {
        case play
        case pause
        case seek(to: Double)
        case rate(Double)
        case item(String?, position: Double)
    }

    /// A local command: the new timeline, written by us.
    mutating func command(_ command: Command, atLocal local: Int64) throws(CommandError) -> Action {
        guard let now = groupTime(atLocal: local), let clock else { throw .noClock }
        let current = effectiveTimeline
        let start = now + lead
        var next = current
        next.base = clock.base
        switch command {
        case .play:
            return write(started(from: current, at: start, rate: playRate))
        case .rate(let rate) where rate != 0:
            return write(started(from: current, at: start, rate: rate))
        case .pause, .rate:
            next.position = current.mediaTime(at: now)
            next.anchor = now
            next.rate = 0
            next.intendedRate = 0
        case let .seek(position):
            let playing = current.intendedRate != 0 && current.waitingIDs.isEmpty
            next.position = position
            next.anchor = playing ? start : now
            next.rate = playing ? current.intendedRate : 0
        case let .item(item, position):
            next = PlaybackTimeline(
                item: item, position: position, rate: 0, anchor: now, intendedRate: 0, waitingIDs: current.waitingIDs, base: clock.base)
        }
        return write(next)
    }

    /// `current` set to play at `rate` from `start` (or only to intend it, while the group waits).
    private func started(from current: PlaybackTimeline, at start: GroupInstant, rate: Double) -> PlaybackTimeline {
        var next = current
        next.base = clock?.base ?? current.base
        next.position = current.mediaTime(at: start)
        next.anchor = start
        next.intendedRate = rate
        next.rate = current.waitingIDs.isEmpty ? rate : 0
        return next
    }

    // MARK: - Suspensions

    /// A local suspension begins; returns its ID.
    mutating func beginSuspension(_ reason: String, atLocal local: Int64) -> (id: Int, action: Action) {
        nextSuspension += 1
        suspensions[nextSuspension] = reason
        return (nextSuspension, reconcileWaiting(atLocal: local))
    }

    mutating func endSuspension(_ id: Int, atLocal local: Int64) -> Action {
        guard suspensions.removeValue(forKey: id) != nil else { return Action() }
        return reconcileWaiting(atLocal: local)
    }

    /// Whether one of our suspensions makes the group wait.
    var holdsTheGroup: Bool { suspensions.values.contains(where: waitingReasons.contains) }

    /// Makes the shared timeline say whether we hold the group, as our suspensions do: we add ourselves
    /// (pausing everyone at one position) or remove ourselves (the last one out schedules the start).
    /// Crossing writes may drop an entry; every participant puts its own back on the next change.
    private mutating func reconcileWaiting(atLocal local: Int64) -> Action {
        let current = effectiveTimeline
        let holding = holdsTheGroup
        guard holding != current.waitingIDs.contains(me), let now = groupTime(atLocal: local) else { return Action() }
        if holding {
            var next = current
            next.position = current.mediaTime(at: now)
            next.anchor = now
            next.rate = 0
            next.waitingIDs.insert(me)
            return write(next)
        }
        return write(released(current, removing: [me], at: now))
    }

    /// The reference removes participants that hold the group but are gone (left or crashed).
    private mutating func dropDepartedWaiters(atLocal local: Int64) -> Action {
        let current = effectiveTimeline
        guard isReference, !active.isEmpty, let now = groupTime(atLocal: local) else { return Action() }
        let gone = current.waitingIDs.filter { !active.contains($0) && $0 != me }
        guard !gone.isEmpty else { return Action() }
        return write(released(current, removing: gone, at: now))
    }

    /// `current` without `participants` among those it waits for; when nobody is left and the group
    /// intends to play, it starts again after the lead, from where it waited.
    private func released(_ current: PlaybackTimeline, removing participants: Set<String>, at now: GroupInstant) -> PlaybackTimeline {
        var next = current
        next.waitingIDs.subtract(participants)
        if next.waitingIDs.isEmpty && current.intendedRate != 0 {
            next.anchor = now + lead
            next.rate = current.intendedRate
        }
        return next
    }
}
