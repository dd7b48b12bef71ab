/// One participant's side of coordinated playback, as a value: the group clock (which participant serves
/// it, and our offset to it), the shared timeline with the commands and suspensions that change it, and
/// what the player has been handed of it. Each input returns an ``Action``: the records to write, the
/// `$ping` to send, what the player's sequences get, and when the two timers should fire (``onTick(atLocal:)``
/// is the input for that moment). It never publishes, sleeps, yields or resumes anything;
/// ``PlaybackCoordinator`` does, as the action says.
///
/// Times: `local` is this participant's wall clock in nanoseconds, group instants are `local + offset`.
/// Once ``end()`` has ended it, inputs ask for nothing.
struct PlaybackStateMachine {
    enum Role: Equatable {
        /// No clock record seen yet.
        case undecided
        /// We serve the group clock: group time is our local time plus `offset`, frozen while we serve.
        case reference(offset: Int64)
        /// We follow `reference`. `provisional`: the offset to use until our exchanges with it give one
        /// (the one we had on the same clock base before, when the reference changed).
        case follower(reference: String, provisional: Int64?)
    }

    /// What to do after an input, in the order of the fields (``PlaybackCoordinator/input(publishing:_:)``
    /// says what it does under its lock, and why). A timer's `wake` keeps an earlier wake-up already set:
    /// that one asks again.
    struct Action: Equatable {
        /// Records to write as ours: the clock, then the timeline.
        var writeClock: Wire.Clock?
        var writeTimeline: PlaybackTimeline?
        var timelines = Timelines.none
        var start = Start.none
        var ping = Ping.none
        var waiters = Waiters.none
        var timer = Timer.none

        /// The sequences of ``PlaybackCoordinator/timelineUpdates()``: `yield` a timeline to them (as
        /// ``Handout`` says), or `finish` them (the session is over).
        enum Timelines: Equatable { case none, yield(PlaybackTimeline), finish }

        /// For the sequences of ``PlaybackCoordinator/starts()``: `wake` the start timer at the instant on
        /// our clock (as the offset puts it now), `deliver` a start now (its instant came), or `finish`
        /// (none comes any more: the timer stops for good, the sequences end).
        enum Start: Equatable { case none, wake(atLocal: Int64), deliver(PlaybackStart), finish }

        /// A `$ping` to `send` to the reference; its `t0` (ms, as sent) in nanoseconds names it to
        /// ``onPingQueued(t0:atLocal:)`` and ``onPingLeft(t0:atLocal:)``.
        enum Ping: Equatable { case none, send(to: String, t0: Double) }

        /// Commands waiting for the group clock (``waitForClock(atLocal:)``): `release` them (known, or the end).
        enum Waiters: Equatable { case none, release }

        /// The timer of everything but the start (a `$ping` due, a takeover whose patience runs out):
        /// `none` until the next input, `wake` at a local time, or `cancel` for good.
        enum Timer: Equatable { case none, wake(atLocal: Int64), cancel }
    }

    /// One of playback's records as read once joined: `none` written, a `value`, or one `rejected` (the
    /// strict reader refused it, or its writer may not write it): counted, it changes nothing.
    enum Received<Value: Equatable>: Equatable { case none, value(Value), rejected }

    /// The records whose first value the player waits for.
    enum Record: Hashable { case clock, timeline }

    /// What the player has been handed.
    enum Handout: Equatable {
        /// Nothing yet: these records were not read once. The timeline is handed out only once both
        /// were, so that a timeline that plays is not first shown paused for want of its clock.
        case reading(unread: Set<Record>)
        /// `emitted`: the last timeline handed out; `start`: its start, if it plays on a known clock.
        case following(emitted: PlaybackTimeline, start: Scheduled?)
        /// The session is over: everything handed out has ended.
        case ended
    }

    /// A timeline's start, once per timeline: still to come, or handed out.
    enum Scheduled: Equatable { case pending(PlaybackTimeline), delivered(PlaybackTimeline) }

    let me: String
    /// Who started the session: the one to start a clock when there is none; the others give it
    /// ``firstClaimPatience`` to do so before they do.
    let initiator: String
    /// Suspension reasons that make the whole group wait.
    let waitingReasons: Set<String>
    /// The lead of a scheduled start; nil: derived from the round trips to the reference.
    let fixedLead: Duration?
    /// How often a follower exchanges with the reference once its estimate follows the drift while the
    /// media plays: the estimate extrapolates from recent exchanges, and sparser ones spread the
    /// participants' positions (nanoseconds).
    let pingInterval: Int64
    /// The longest ``pace`` while the media does not play (nanoseconds, at least ``pingInterval``).
    let longestPingInterval: Int64
    /// The intervals a configuration may set: a shorter one would have a follower ping without pause, and
    /// a clock checked less than hourly is hardly followed.
    static let pingIntervals: ClosedRange<Int64> = 10_000_000...3_600_000_000_000
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
    private(set) var clock: Wire.Clock?
    private(set) var estimator = ClockEstimator()
    /// The last valid timeline received or written.
    private(set) var timeline: PlaybackTimeline?
    private(set) var active: Set<String> = []
    /// This participant's suspensions, by ID: their reasons.
    private(set) var suspensions: [Int: String] = [:]
    /// The ID of the suspension begun last (0: none yet).
    private(set) var lastSuspension = 0
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
    /// The time between two `$ping`s once the estimate follows the drift while the media does not play:
    /// from ``pingInterval`` to ``longestPingInterval`` (see ``exchange(sent:_:)``).
    private(set) var pace: Int64
    private(set) var handout = Handout.reading(unread: [.clock, .timeline])
    /// Commands waiting for the group clock: released by the input that makes it known.
    private var waitingCommands = 0
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
        /// The `$pong`'s sender and times (see ``onPong(from:sent:received:replied:back:)``).
        var answer: Answer?
    }

    private typealias Answer = (sender: String, received: Int64, replied: Int64, back: Int64)

    init(
        me: String, initiator: String, waitingReasons: Set<String>, lead: Duration?, pingInterval: Duration,
        longestPingInterval: Duration
    ) {
        self.me = me
        self.initiator = initiator
        self.waitingReasons = waitingReasons
        self.fixedLead = lead
        let intervals = Self.pingIntervals
        self.pingInterval = min(max(pingInterval.nanoseconds, intervals.lowerBound), intervals.upperBound)
        self.longestPingInterval = min(max(longestPingInterval.nanoseconds, self.pingInterval), intervals.upperBound)
        pace = self.pingInterval
    }

    // MARK: - What is handed out

    /// The action of an input whose own changes are made (`claimed` the clock, `wrote` a timeline, a
    /// `ping` to send). First what holds after every input: a takeover whose moment came is claimed, and
    /// the timeline says who holds the group (the last timeline written is the one to write). Then what
    /// the player gets, as the state now says: the timeline when it differs from the last one handed out;
    /// for one that plays, one start at its anchor on our clock as the offset puts it now.
    private mutating func act(
        atLocal local: Int64, claimed: Wire.Clock? = nil, wrote: PlaybackTimeline? = nil, ping: Action.Ping = .none
    ) -> Action {
        if isEnded { return Action() }
        let claimed = checkReference(atLocal: local) ?? claimed
        var action = Action(writeClock: claimed, writeTimeline: reconcileWaiting(atLocal: local) ?? wrote, ping: ping)
        let offset = offset(atLocal: local)
        if offset != nil && waitingCommands > 0 { (action.waiters, waitingCommands) = (.release, 0) }
        if let next = nextWake(atLocal: local) { action.timer = .wake(atLocal: next) }
        if case let .reading(unread) = handout, !unread.isEmpty { return action }
        var (emitted, scheduled): (PlaybackTimeline?, Scheduled?) = (nil, nil)
        if case let .following(last, start) = handout { (emitted, scheduled) = (last, start) }
        let timeline = effectiveTimeline
        if timeline != emitted { action.timelines = .yield(timeline) }
        if offset == nil || !timeline.isPlaying {
            scheduled = nil
        } else if scheduled != .pending(timeline) && scheduled != .delivered(timeline) {
            scheduled = .pending(timeline)
        }
        if case let .pending(timeline) = scheduled, let offset {
            let due = timeline.anchor.nanoseconds &- offset
            if due > local {
                action.start = .wake(atLocal: due)
            } else {
                action.start = .deliver(timeline.start(at: GroupInstant(nanoseconds: local &+ offset)))
                scheduled = .delivered(timeline)
            }
        }
        handout = .following(emitted: timeline, start: scheduled)
        return action
    }

    var isEnded: Bool { handout == .ended }

    /// The timeline handed out last: what a new sequence of timelines gets first.
    var emitted: PlaybackTimeline? { if case let .following(emitted, _) = handout { emitted } else { nil } }

    /// The start a new sequence of starts gets at local `local`: the current timeline's, late, when it
    /// plays and its start was handed out already (a pending one comes to every sequence).
    func lateStart(atLocal local: Int64) -> PlaybackStart? {
        guard case let .following(_, .delivered(timeline)) = handout, timeline == effectiveTimeline,
            let now = groupTime(atLocal: local)
        else { return nil }
        return timeline.start(at: now)
    }

    /// A command asks whether to wait for the group clock (until ``Action/Waiters-swift.enum/release``): false when it
    /// is known, or the session is over.
    mutating func waitForClock(atLocal local: Int64) -> Bool {
        guard offset(atLocal: local) == nil, !isEnded else { return false }
        waitingCommands += 1
        return true
    }

    /// The session is over: the sequences end, waiting commands go on, the timers stop. Only once: a
    /// session ends once, and its coordinator sees that once.
    mutating func end() -> Action {
        precondition(!isEnded, "a playback coordinator ends once")
        handout = .ended
        waitingCommands = 0
        return Action(timelines: .finish, start: .finish, waiters: .release, timer: .cancel)
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

    var isReference: Bool { if case .reference = role { true } else { false } }

    /// Our answer to a `$ping` received at local `local`: the group time, when we serve it.
    func answerPing(atLocal local: Int64) -> GroupInstant? { isReference ? groupTime(atLocal: local) : nil }

    /// The connection took the `$ping` carrying `t0` at local time `local`.
    mutating func onPingQueued(t0: Int64, atLocal local: Int64) -> Action {
        pings[t0]?.queued = local
        return timeAnsweredPing(t0, atLocal: local)
    }

    /// The `$ping` carrying `t0` was written to the socket at local time `local`.
    mutating func onPingLeft(t0: Int64, atLocal local: Int64) -> Action {
        pings[t0]?.left = local
        return timeAnsweredPing(t0, atLocal: local)
    }

    /// A `$pong` from `sender` to our `$ping` carrying `t0`: the reference received it at group `t1`
    /// and answered at group `t2`, and the answer arrived at local `t3`. One exchange with the reference
    /// (ignored from anyone else), timed from `t0` moved by the ping's wait for the network thread
    /// (``PendingPing``), once that wait is known; an answer to a ping we do not remember is timed from
    /// its `t0`.
    mutating func onPong(from sender: String, sent t0: Int64, received t1: Int64, replied t2: Int64, back t3: Int64) -> Action {
        let answer: Answer = (sender, t1, t2, t3)
        if pings[t0] == nil {
            exchange(sent: t0, answer)
        } else if case .follower(sender, _) = role {
            pings[t0]?.answer = answer
        }
        return timeAnsweredPing(t0, atLocal: t3)
    }

    /// The exchange of the `$ping` carrying `t0` once it was answered and its wait is known; the action.
    private mutating func timeAnsweredPing(_ t0: Int64, atLocal local: Int64) -> Action {
        if let ping = pings[t0], let queued = ping.queued, let left = ping.left, let answer = ping.answer {
            pings[t0] = nil
            exchange(sent: t0 &+ max(0, left &- queued), answer)
        }
        return act(atLocal: local)
    }

    /// One exchange, sent at local `sent`: a sample for the estimate when it answers the reference. While
    /// the estimate is not settled, one more exchange follows at the burst's pace. Once it follows the
    /// drift, an exchange it foresaw doubles the ``pace`` (up to ``longestPingInterval``: clocks that
    /// keep their rates need few exchanges, and a paused session wakes that much less); one it did not
    /// brings the pace back to ``pingInterval``, and the samples that follow move the estimate (not a
    /// fresh start: a busy machine stamps exchanges late, and would start it again and again).
    private mutating func exchange(sent: Int64, _ answer: Answer) {
        guard case .follower(answer.sender, _) = role else { return }
        switch estimator.add(sent: sent, received: answer.received, replied: answer.replied, back: answer.back) {
        case .ignored: return
        case .added: break
        case .confirmed: pace = pace > longestPingInterval / 2 ? longestPingInterval : pace * 2
        case .contradicted: pace = pingInterval
        }
        if !estimator.isSettled { burst = max(burst, 1) }
    }

    /// The lead of a scheduled start (``PlaybackCoordinator/Configuration/lead``).
    var lead: Duration {
        if let fixedLead { return fixedLead }
        guard let longest = estimator.longestRoundTrip else { return .milliseconds(50) }
        return min(.nanoseconds(3 * longest) + .milliseconds(25), .seconds(1))
    }

    /// The `groupsync.clock` record changed. One rejected is counted and ignored — taken as none while
    /// no clock is known.
    mutating func onClockRecord(_ received: Received<Wire.Clock>, atLocal local: Int64) -> Action {
        markRead(.clock)
        if received == .rejected { rejected += 1 }
        guard case let .value(record) = received else {
            // Nobody serves a clock yet: the initiator starts one on its own clock; anyone else after a
            // while (two that do at once converge on the record that wins).
            guard clock == nil else { return act(atLocal: local) }
            if me == initiator { return act(atLocal: local, claimed: claim(base: "\(me)@\(local / 1_000_000)", offset: 0)) }
            referenceGoneSince = referenceGoneSince ?? local
            return act(atLocal: local)
        }
        let current = offset(atLocal: local)
        let sameBase = record.base == clock?.base
        clock = record
        if record.reference == me {
            if !isReference { role = .reference(offset: sameBase ? (current ?? 0) : 0) }
        } else {
            switch role {
            case .follower(record.reference, _) where sameBase: break
            default:
                role = .follower(reference: record.reference, provisional: sameBase ? current : nil)
                estimator = ClockEstimator()
                burst = Self.burstLength
                pace = pingInterval
            }
        }
        referenceGoneSince = nil
        return act(atLocal: local)
    }

    mutating func onActive(_ participants: Set<String>, atLocal local: Int64) -> Action {
        active = participants
        return act(atLocal: local)
    }

    /// Time passes (at a moment an action named): a takeover whose patience ran out, a `$ping` due (to
    /// the reference that holds after the takeover), a start whose instant came.
    mutating func onTick(atLocal local: Int64) -> Action {
        act(atLocal: local, claimed: checkReference(atLocal: local), ping: takePing(atLocal: local))
    }

    /// When (local) this participant next has something to do without an input: a `$ping` due (once the
    /// estimate follows the drift, every ``pingInterval`` while the media plays, else every ``pace``), a
    /// takeover whose patience runs out. nil: nothing until the next input.
    private func nextWake(atLocal local: Int64) -> Int64? { [nextPing(), nextTakeover(atLocal: local)].compactMap { $0 }.min() }

    /// When the next `$ping` to the reference is due; nil when we follow no reference.
    private func nextPing() -> Int64? {
        guard case .follower = role else { return nil }
        guard let lastPing else { return 0 }  // at once
        if burst > 0 { return lastPing &+ Self.burstSpacing }
        guard estimator.fitsDrift else { return lastPing &+ Self.fittingInterval }
        return lastPing &+ (effectiveTimeline.isPlaying ? pingInterval : pace)
    }

    /// The `$ping` to send at `local`, when one is due (see ``nextPing()``), remembered by its `t0`.
    private mutating func takePing(atLocal local: Int64) -> Action.Ping {
        guard case let .follower(reference, _) = role, let due = nextPing(), local >= due else { return .none }
        if burst > 0 { burst -= 1 }
        lastPing = local
        let t0 = GroupInstant(nanoseconds: local).milliseconds
        pings[GroupInstant(milliseconds: t0).nanoseconds] = PendingPing()
        if pings.count > Self.rememberedPings, let oldest = pings.keys.min() { pings[oldest] = nil }
        return .send(to: reference, t0: t0)
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

    /// Takes over the clock when its reference is gone: at once with the clock we follow, after
    /// ``takeoverPatience`` with a new one when we have none (a synchronized participant may do better).
    /// Returns the claim to write.
    private mutating func checkReference(atLocal local: Int64) -> Wire.Clock? {
        if let clock {
            guard clock.reference != me, !active.isEmpty, !active.contains(clock.reference) else {
                referenceGoneSince = nil
                return nil
            }
            referenceGoneSince = referenceGoneSince ?? local
        }
        guard let due = nextTakeover(atLocal: local), local >= due else { return nil }
        if let clock, let offset = offset(atLocal: local) { return claim(base: clock.base, offset: offset) }
        return claim(base: "\(me)@\(local / 1_000_000)", offset: 0)
    }

    private mutating func claim(base: String, offset: Int64) -> Wire.Clock {
        let record = Wire.Clock(reference: me, base: base)
        clock = record
        role = .reference(offset: offset)
        referenceGoneSince = nil
        burst = 0
        return record
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

    /// The shared timeline's record changed. One rejected is counted: the timeline stays.
    mutating func onTimelineRecord(_ received: Received<Wire.Timeline>, atLocal local: Int64) -> Action {
        markRead(.timeline)
        guard case let .value(record) = received else {
            if received == .rejected { rejected += 1 }
            return act(atLocal: local)
        }
        let received = PlaybackTimeline(record)
        timeline = received
        if received.intendedRate != 0 { playRate = received.intendedRate }
        return act(atLocal: local)
    }

    private mutating func markRead(_ record: Record) {
        guard case var .reading(unread) = handout else { return }
        unread.remove(record)
        handout = .reading(unread: unread)
    }

    /// Writes `timeline` as ours: applied here at once, exactly as the others read it from the record
    /// (the anchor goes out in milliseconds with a fraction, finer than a double keeps), so that our own
    /// record coming back is the same timeline, not a new one to start again. Returns it.
    private mutating func write(_ new: PlaybackTimeline) -> PlaybackTimeline {
        let new = PlaybackTimeline(new.record)
        timeline = new
        if new.intendedRate != 0 { playRate = new.intendedRate }
        return new
    }

    enum Command: Equatable {
        case play
        case pause
        case seek(to: Double)
        case rate(Double)
        case item(String?, position: Double)
    }

    /// A local command: the new timeline, written by us. The group clock must be known (the caller checks
    /// ``offset(atLocal:)`` under the same lock): without it there is no instant to write.
    mutating func command(_ command: Command, atLocal local: Int64) -> Action {
        guard let now = groupTime(atLocal: local), let clock else { preconditionFailure("a command before the group clock is known") }
        let current = effectiveTimeline
        let start = now + lead
        var next = current
        next.base = clock.base
        switch command {
        case .play: next = started(from: current, at: start, rate: playRate)
        case .rate(let rate) where rate != 0: next = started(from: current, at: start, rate: rate)
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
        return act(atLocal: local, wrote: write(next))
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

    /// A local suspension begins, under the ID ``lastSuspension`` names then.
    mutating func beginSuspension(_ reason: String, atLocal local: Int64) -> Action {
        lastSuspension += 1
        suspensions[lastSuspension] = reason
        return act(atLocal: local)
    }

    /// A local suspension ends; ending it again changes nothing. `id` is one ``beginSuspension(_:atLocal:)``
    /// gave: any other is a programming error.
    mutating func endSuspension(_ id: Int, atLocal local: Int64) -> Action {
        precondition(id >= 1 && id <= lastSuspension, "a suspension this machine never began")
        suspensions.removeValue(forKey: id)
        return act(atLocal: local)
    }

    /// Whether one of our suspensions makes the group wait.
    var holdsTheGroup: Bool { suspensions.values.contains(where: waitingReasons.contains) }

    /// Makes the shared timeline say who holds the group: we add ourselves while one of our suspensions
    /// makes it wait (pausing everyone at one position) and remove ourselves when none does; the reference
    /// also removes participants that are gone (left or crashed). When nobody is left and the group
    /// intends to play, it starts again after the lead, from where it waited. Crossing writes may drop an
    /// entry; every participant puts its own back on the next change. Returns the timeline it writes.
    private mutating func reconcileWaiting(atLocal local: Int64) -> PlaybackTimeline? {
        let current = effectiveTimeline
        guard let now = groupTime(atLocal: local) else { return nil }
        var next = current
        if holdsTheGroup { next.waitingIDs.insert(me) } else { next.waitingIDs.remove(me) }
        if isReference && !active.isEmpty { next.waitingIDs = next.waitingIDs.filter { active.contains($0) || $0 == me } }
        guard next.waitingIDs != current.waitingIDs else { return nil }
        if next.waitingIDs.contains(me) && !current.waitingIDs.contains(me) {
            next.position = current.mediaTime(at: now)
            next.anchor = now
            next.rate = 0
        } else if next.waitingIDs.isEmpty && current.intendedRate != 0 {
            next.anchor = now + lead
            next.rate = current.intendedRate
        }
        return write(next)
    }
}

extension PlaybackStateMachine.Received where Value: Wire.Record {
    /// `record`'s value as the strict reader reads it (docs/PROTOCOL.md, "Playback"): rejected when it is
    /// not a `Value`, or not one its writer may write (`valid`).
    init(_ record: Wire.StateRecord?, valid: (Value, _ writer: String) -> Bool = { _, _ in true }) {
        self =
            record.map { record in
                (try? Value(json: record.value)).map { valid($0, record.clock.participant) ? .value($0) : .rejected } ?? .rejected
            } ?? .none
    }
}
