import Testing

@testable import GroupSync

/// Coordinated playback's logic without a broker: clock records, exchanges, commands and suspensions fed
/// by hand, at chosen local times (nanoseconds). Every input's action is asserted whole.
@Suite struct PlaybackStateMachineTests {
    typealias Machine = PlaybackStateMachine
    typealias Action = PlaybackStateMachine.Action
    static let ms: Int64 = 1_000_000
    static let second: Int64 = 1_000_000_000
    static let lead = 40 * ms

    static func machine(_ me: String, initiator: String = "alice", lead: Duration? = .milliseconds(40)) -> Machine {
        Machine(
            me: me, initiator: initiator, waitingReasons: ["buffering"], lead: lead, pingInterval: .seconds(1),
            longestPingInterval: .seconds(8))
    }

    static func clock(_ reference: String, _ base: String = "b") -> Machine.Received<Wire.Clock> {
        .value(Wire.Clock(reference: reference, base: base))
    }

    /// `machine` following `reference` on `base`, with exchanges saying the group is `offset` ahead. It
    /// has not pinged yet: its next `$ping` is due at once.
    static func following(_ me: String, reference: String = "alice", offset: Int64, at local: Int64 = 10 * second) -> Machine {
        var machine = machine(me)
        #expect(machine.onActive([me, reference], atLocal: local) == Action(), "no clock yet, nothing to do")
        #expect(machine.onClockRecord(clock(reference), atLocal: local) == Action(timer: .wake(atLocal: 0)), "a ping at once")
        #expect(machine.burst == Machine.burstLength, "a new reference: a burst of exchanges")
        for _ in 0..<ClockEstimator.settlingExchanges {
            let action = machine.onPong(
                from: reference, sent: local, received: local + offset + ms, replied: local + offset + ms, back: local + 2 * ms)
            #expect(action == Action(timer: .wake(atLocal: 0)))
        }
        return machine
    }

    /// The timeline an action writes, if it writes one.
    static func written(_ action: Action) -> PlaybackTimeline? { action.writeTimeline }

    // MARK: - The group clock

    @Test func theInitiatorStartsTheClockAndTheOthersWaitForIt() {
        var alice = Self.machine("alice")
        #expect(
            alice.onClockRecord(.none, atLocal: 5 * Self.second) == Action(writeClock: .init(reference: "alice", base: "alice@5000")))
        #expect(alice.isReference && alice.offset(atLocal: 0) == 0)

        var bob = Self.machine("bob")
        #expect(bob.onActive(["bob"], atLocal: 0) == Action())
        let patience = Action(timer: .wake(atLocal: Machine.firstClaimPatience))
        #expect(bob.onClockRecord(.none, atLocal: 0) == patience, "the initiator may be about to")
        #expect(bob.onTick(atLocal: Machine.firstClaimPatience - 1) == patience)
        #expect(
            bob.onTick(atLocal: Machine.firstClaimPatience) == Action(writeClock: .init(reference: "bob", base: "bob@500")),
            "nobody did: bob starts one")
    }

    @Test func aFollowerTakesItsOffsetFromTheReferencesAnswers() throws {
        let offset = 600 * Self.second  // ten minutes behind
        let bob = Self.following("bob", offset: offset)
        let estimated = try #require(bob.offset(atLocal: 11 * Self.second))
        #expect(abs(estimated - offset) <= Self.ms)
        #expect(!bob.isReference)

        var carol = Self.machine("carol")
        #expect(carol.onClockRecord(Self.clock("alice"), atLocal: 0) == Action(timer: .wake(atLocal: 0)))
        #expect(carol.onPong(from: "mallory", sent: 0, received: 5, replied: 5, back: 10) == Action(timer: .wake(atLocal: 0)))
        #expect(carol.offset(atLocal: 0) == nil && carol.estimator.samples.isEmpty, "only the reference counts")
        // A command waits for the group clock; the answer that makes it known lets it go on.
        #expect(carol.waitForClock(atLocal: 0) == true)
        let answers = (0..<ClockEstimator.settlingExchanges).map { _ in
            carol.onPong(from: "alice", sent: 0, received: Self.ms / 2, replied: Self.ms / 2, back: Self.ms)
        }
        #expect(answers.dropLast().allSatisfy { $0 == Action(timer: .wake(atLocal: 0)) })
        #expect(answers.last == Action(waiters: .release, timer: .wake(atLocal: 0)))
        #expect(carol.waitForClock(atLocal: Self.ms) == false)
    }

    /// A ping that waited for the network thread before it was written (a busy machine) is timed as if it
    /// had not waited: the wait is not taken for a slower trip out, which would skew the offset by half of
    /// it. Its encoding, as long as the reference's, still counts. An answer to a ping whose wait is not
    /// known yet waits for it; one to a ping not remembered is timed from its `t0`.
    @Test func anExchangeIsTimedWithoutItsPingsWaitForTheNetworkThread() throws {
        let offset = 600 * Self.second, start = 10 * Self.second
        let encoding: Int64 = 50_000, trip: Int64 = 100_000
        var bob = Self.machine("bob")
        #expect(bob.onActive(["bob", "alice"], atLocal: start) == Action())
        #expect(bob.onClockRecord(Self.clock("alice"), atLocal: start) == Action(timer: .wake(atLocal: 0)))
        for i in 0..<Int64(ClockEstimator.settlingExchanges) {
            let t0 = start + i * Machine.burstSpacing
            let queued = t0 + encoding, left = queued + 3 * Self.ms  // 3 ms waiting for the network thread
            let t1 = left + trip + offset, t2 = t1
            // alice encodes her answer as long as bob did, and writes it at once.
            let t3 = t2 - offset + encoding + trip
            let next = Action(timer: .wake(atLocal: t0 + Machine.burstSpacing))
            var ping = next
            ping.ping = .send(to: "alice", t0: GroupInstant(nanoseconds: t0).milliseconds)
            #expect(bob.onTick(atLocal: t0) == ping, "a ping of the burst, the next one 5 ms later")
            // The three moments are told from different threads, in any order; the exchange counts once
            // all are known.
            var actions: [Action] = []
            switch i {
            case 0:
                actions.append(bob.onPingQueued(t0: t0, atLocal: queued))
                actions.append(bob.onPingLeft(t0: t0, atLocal: left))
                actions.append(bob.onPong(from: "alice", sent: t0, received: t1, replied: t2, back: t3))
            case 1:
                actions.append(bob.onPingLeft(t0: t0, atLocal: left))
                actions.append(bob.onPingQueued(t0: t0, atLocal: queued))
                actions.append(bob.onPong(from: "alice", sent: t0, received: t1, replied: t2, back: t3))
            default:
                actions.append(bob.onPingLeft(t0: t0, atLocal: left))
                actions.append(bob.onPong(from: "alice", sent: t0, received: t1, replied: t2, back: t3))
                #expect(bob.estimator.samples.count == Int(i), "an answer waits for its ping's wait to be known")
                actions.append(bob.onPingQueued(t0: t0, atLocal: queued))
            }
            #expect(actions == [next, next, next])
            #expect(bob.estimator.samples.count == Int(i) + 1)
        }
        let estimated = try #require(bob.offset(atLocal: start + 30 * Self.ms))
        #expect(estimated == offset, "exact: both ways took the same once the wait is left out")

        var carol = Self.machine("carol")
        #expect(carol.onActive(["carol", "alice"], atLocal: start) == Action())
        #expect(carol.onClockRecord(Self.clock("alice"), atLocal: start) == Action(timer: .wake(atLocal: 0)))
        let unremembered = carol.onPong(
            from: "alice", sent: start, received: start + offset, replied: start + offset, back: start + Self.ms)
        #expect(unremembered == Action(timer: .wake(atLocal: 0)))
        #expect(carol.estimator.samples.map(\.offset) == [offset - Self.ms / 2], "a ping not remembered: timed from t0")
        // An answer from anyone but the reference does not take the place of the reference's.
        let t0 = start + Self.second
        let next = Action(timer: .wake(atLocal: t0 + Machine.burstSpacing))
        var ping = next
        ping.ping = .send(to: "alice", t0: GroupInstant(nanoseconds: t0).milliseconds)
        #expect(carol.onTick(atLocal: t0) == ping)
        #expect(carol.onPingQueued(t0: t0, atLocal: t0) == next)
        #expect(carol.onPingLeft(t0: t0, atLocal: t0) == next)
        #expect(carol.onPong(from: "mallory", sent: t0, received: 0, replied: 0, back: t0 + Self.ms) == next)
        #expect(carol.onPong(from: "alice", sent: t0, received: t0 + offset, replied: t0 + offset, back: t0 + Self.ms) == next)
        #expect(carol.estimator.samples.count == 2 && carol.estimator.samples.allSatisfy { $0.offset == offset - Self.ms / 2 })
    }

    /// Exchanges too slow to settle the estimate keep the burst going; the one that settles it makes the
    /// clock known to the commands waiting for it.
    @Test func anUnsettledEstimateAsksForMoreExchanges() {
        let start = 10 * Self.second
        var bob = Self.machine("bob")
        #expect(bob.onActive(["bob", "alice"], atLocal: start) == Action())
        #expect(bob.onClockRecord(Self.clock("alice"), atLocal: start) == Action(timer: .wake(atLocal: 0)))
        #expect(bob.waitForClock(atLocal: start) == true)
        for i in 0..<Int64(ClockEstimator.settlingExchanges) {
            let t0 = start + i * 5 * Self.ms
            let action = bob.onPong(from: "alice", sent: t0, received: t0 + 9 * Self.ms, replied: t0 + 9 * Self.ms, back: t0 + 10 * Self.ms)
            #expect(bob.burst > 0 && action == Action(timer: .wake(atLocal: 0)), "a 10 ms round trip settles nothing")
        }
        let t0 = start + 30 * Self.ms
        let settled = bob.onPong(from: "alice", sent: t0, received: t0 + Self.ms / 2, replied: t0 + Self.ms / 2, back: t0 + Self.ms)
        #expect(settled == Action(waiters: .release, timer: .wake(atLocal: 0)), "a 1 ms one does: the group clock is known")
        #expect(bob.offset(atLocal: t0) != nil)
    }

    /// Our own timeline record coming back is the timeline we hold, to the nanosecond: else the player
    /// would be told to start a second time.
    @Test func ourOwnRecordComingBackIsTheSameTimeline() throws {
        // A wall clock of today: nanoseconds since 1970 have more digits than a double keeps in ms.
        let today: Int64 = 1_796_532_991_656_619_437
        var bob = Self.following("bob", offset: 600 * Self.second + 123_456_789, at: today)
        let local = today + 987_654_321
        let play = bob.command(.play, atLocal: local)
        let written = try #require(Self.written(play))
        #expect(play == Action(writeTimeline: written, timer: .wake(atLocal: 0)), "nothing handed out before the record is read")
        #expect(PlaybackTimeline(written.record) == written && bob.effectiveTimeline == written)
        let offset = try #require(bob.offset(atLocal: local + Self.ms))
        #expect(
            bob.onTimelineRecord(.value(written.record), atLocal: local + Self.ms)
                == Action(timelines: .yield(written), start: .wake(atLocal: written.anchor.nanoseconds - offset), timer: .wake(atLocal: 0)))
        #expect(bob.effectiveTimeline == written)
    }

    /// Once the estimate follows the drift, pings come every interval (here 1 s), and while the media does
    /// not play each exchange the estimate foresaw doubles the time to the next, up to the longest interval
    /// (8 s): a paused session wakes that much less. While it plays, every interval. An exchange it did not
    /// foresee (the reference's clock moved 1 ms) brings the pace back to the interval; the exchanges that
    /// follow move the estimate, and the pace backs off again.
    @Test func pingsBackOffWhileTheEstimateForeseesThem() throws {
        var bob = Self.machine("bob")
        #expect(bob.onActive(["alice", "bob"], atLocal: Self.ms) == Action())
        #expect(bob.onClockRecord(Self.clock("alice"), atLocal: Self.ms) == Action(timer: .wake(atLocal: 0)), "a ping at once")
        let drift = 50e-6, trip = Self.ms / 10
        var jump: Int64 = 0
        func offset(_ local: Int64) -> Int64 { 600 * Self.second + Int64(Double(local) * drift) + jump }
        // Each ping when due, answered at once (0.1 ms each way): the times the pings went out.
        var local = Self.ms
        var pings: [Int64] = []
        func exchange() throws {
            var tick = bob.onTick(atLocal: local)
            let due: Double? = if case .send(to: "alice", let t0) = tick.ping { t0 } else { nil }
            let t0 = GroupInstant(milliseconds: try #require(due, "a ping due at \(local): \(tick)")).nanoseconds
            tick.ping = .none
            #expect(bob.onPingQueued(t0: t0, atLocal: t0) == tick && bob.onPingLeft(t0: t0, atLocal: t0) == tick)
            let t1 = t0 + trip + offset(t0 + trip)
            let answered = bob.onPong(from: "alice", sent: t0, received: t1, replied: t1, back: t0 + 2 * trip)
            let wake: Int64? = if case let .wake(next) = answered.timer { next } else { nil }
            let next = try #require(wake, "a next ping after the answer at \(t0): \(answered)")
            #expect(answered == Action(timer: .wake(atLocal: next)))
            pings.append(t0)
            local = max(next, t0 + 2 * trip)
        }
        while !bob.estimator.fitsDrift { try exchange() }
        for _ in 0..<5 { try exchange() }
        func gaps() -> [Int64] { zip(pings.dropFirst(), pings).suffix(5).map { ($0 - $1) / Self.second } }
        #expect(gaps() == [1, 2, 4, 8, 8], "from the interval to the longest, doubling")
        // The media plays: every interval, the first one due a second after the last ping.
        let play = bob.command(.play, atLocal: local - 4 * Self.second)
        let playing = try #require(Self.written(play))
        #expect(play == Action(writeTimeline: playing, timer: .wake(atLocal: pings.last! + Self.second)))
        local = pings.last! + Self.second
        for _ in 0..<3 { try exchange() }
        #expect(gaps() == [8, 8, 1, 1, 1], "every second while it plays")
        let pause = bob.command(.pause, atLocal: local)
        #expect(pause == Action(writeTimeline: try #require(Self.written(pause)), timer: .wake(atLocal: pings.last! + 8 * Self.second)))
        local = pings.last! + 8 * Self.second
        jump = Self.ms
        for _ in 0..<2 { try exchange() }
        #expect(gaps().suffix(2) == [8, 1], "the jump, seen after 8 s: every second again")
        // The exchanges that follow move the estimate onto the new offset, and the pace backs off again.
        for _ in 0..<80 { try exchange() }
        #expect(gaps() == [8, 8, 8, 8, 8])
        let estimate = try #require(bob.offset(atLocal: local))
        #expect(abs(estimate - offset(local)) < 50_000, "within 50 µs of the new offset")
    }

    /// Intervals out of range are taken at the nearest bound, so that no configuration has a follower ping
    /// without pause (zero) or wrap the next ping's moment into the past (centuries).
    @Test func pingIntervalsAreTakenWithinTheirRange() {
        #expect(Duration.seconds(Int64.max).nanoseconds == .max && Duration.seconds(-Int64.max).nanoseconds == .min)
        #expect(Duration.milliseconds(-1_500).nanoseconds == -1_500_000_000 && Duration.seconds(3).nanoseconds == 3 * Self.second)
        let extremes = Machine(
            me: "bob", initiator: "alice", waitingReasons: [], lead: nil, pingInterval: .zero, longestPingInterval: .seconds(Int64.max))
        #expect(extremes.pingInterval == 10 * Self.ms && extremes.longestPingInterval == 3_600 * Self.second)
        let inverted = Machine(
            me: "bob", initiator: "alice", waitingReasons: [], lead: nil, pingInterval: .seconds(2), longestPingInterval: .seconds(1))
        #expect(inverted.pingInterval == 2 * Self.second && inverted.longestPingInterval == 2 * Self.second, "a fixed pace")
    }

    /// The machine names its next moment: a burst of pings 5 ms apart to a new reference, then one every
    /// 100 ms until the estimate follows the drift; nothing for the reference itself. A first claim that
    /// waits for the initiator's patience is a moment too.
    @Test func theMachineSaysWhenItNextHasSomethingToDo() throws {
        var alice = Self.machine("alice")
        let claim = alice.onClockRecord(.none, atLocal: Self.second)
        #expect(claim == Action(writeClock: .init(reference: "alice", base: "alice@1000")), "the reference waits for inputs")

        var bob = Self.machine("bob")
        #expect(bob.onActive(["alice", "bob"], atLocal: 0) == Action(), "no clock, none needed yet: nothing")
        #expect(
            bob.onClockRecord(.none, atLocal: 0) == Action(timer: .wake(atLocal: Machine.firstClaimPatience)), "the initiator's patience")
        #expect(bob.onClockRecord(Self.clock("alice"), atLocal: Self.ms) == Action(timer: .wake(atLocal: 0)), "a ping at once")
        var local = Self.ms
        var pings: [Int64] = []
        while pings.count < Machine.burstLength + 2 {
            let tick = bob.onTick(atLocal: local)
            #expect(tick.ping == .send(to: "alice", t0: GroupInstant(nanoseconds: local).milliseconds))
            #expect(
                tick.writeClock == nil && tick.writeTimeline == nil && tick.timelines == .none && tick.start == .none
                    && tick.waiters == .none)
            pings.append(local)
            guard case let .wake(next) = tick.timer else {
                Issue.record("no next ping: \(tick)")
                return
            }
            local = next
        }
        let gaps = zip(pings.dropFirst(), pings).map { $0 - $1 }
        #expect(
            gaps == Array(repeating: Machine.burstSpacing, count: Machine.burstLength - 1) + [
                Machine.fittingInterval, Machine.fittingInterval,
            ])
        #expect(bob.onTick(atLocal: local - 1) == Action(timer: .wake(atLocal: local)), "not due yet")
    }

    /// The reference leaves: a follower with an offset takes over at once, with the same clock; one
    /// without waits, then starts a new clock.
    @Test func theClockSurvivesItsReference() throws {
        var bob = Self.following("bob", offset: 7 * Self.second)
        let before = try #require(bob.groupTime(atLocal: 20 * Self.second))
        #expect(bob.onActive(["bob", "carol"], atLocal: 20 * Self.second) == Action(writeClock: .init(reference: "bob", base: "b")))
        #expect(bob.isReference && bob.groupTime(atLocal: 20 * Self.second) == before, "the same group time")

        var carol = Self.machine("carol")
        #expect(carol.onClockRecord(Self.clock("alice"), atLocal: 0) == Action(timer: .wake(atLocal: 0)))
        #expect(carol.onActive(["carol"], atLocal: Self.second) == Action(timer: .wake(atLocal: 0)), "pinging, not claiming yet")
        #expect(
            carol.onTick(atLocal: Self.second + Machine.takeoverPatience)
                == Action(writeClock: .init(reference: "carol", base: "carol@\(2 * Self.second / Self.ms)")),
            "a new clock: nobody synchronized took over, and carol pings no more")

        // A crossing claim that wins makes the loser follow again, keeping its offset meanwhile.
        #expect(bob.onClockRecord(Self.clock("carol"), atLocal: 21 * Self.second) == Action(timer: .wake(atLocal: 0)))
        #expect(bob.burst == Machine.burstLength && !bob.isReference)
        #expect(bob.groupTime(atLocal: 21 * Self.second) == before + .seconds(1))
    }

    // MARK: - Commands and starts

    @Test func playPauseSeekAndRateMakeOneTimelineAndPlayingOnesStart() throws {
        var alice = Self.machine("alice")
        #expect(alice.onClockRecord(.none, atLocal: 0) == Action(writeClock: .init(reference: "alice", base: "alice@0")))
        let initial = PlaybackTimeline.initial(base: "alice@0")
        #expect(alice.onTimelineRecord(.none, atLocal: 0) == Action(timelines: .yield(initial)), "both records read: handed out")
        #expect(alice.emitted == initial)
        let now: Int64 = 100 * Self.second
        /// Runs `command` at `now + seconds`: it writes a timeline and hands it out, and for one that plays
        /// asks for the start timer at its anchor (alice's clock is the group's).
        func run(_ command: Machine.Command, after seconds: Int64) throws -> PlaybackTimeline {
            let action = alice.command(command, atLocal: now + seconds * Self.second)
            let timeline = try #require(Self.written(action))
            let start: Action.Start = timeline.isPlaying ? .wake(atLocal: timeline.anchor.nanoseconds) : .none
            #expect(action == Action(writeTimeline: timeline, timelines: .yield(timeline), start: start), "\(command)")
            return timeline
        }
        let play = try run(.play, after: 0)
        #expect(play.rate == 1 && play.intendedRate == 1 && play.position == 0)
        #expect(play.anchor == GroupInstant(nanoseconds: now) + .milliseconds(40), "a lead ahead")
        #expect(play.mediaTime(at: GroupInstant(nanoseconds: now)) == 0, "nothing moves before the start")
        #expect(play.mediaTime(at: play.anchor + .seconds(2)) == 2)

        let pause = try run(.pause, after: 3)
        #expect(pause.rate == 0 && pause.intendedRate == 0)
        #expect(abs(pause.position - 2.96) < 1e-9, "where the timeline was")
        #expect(alice.onTick(atLocal: now + 3 * Self.second + Self.lead) == Action(), "a start replaced before its instant never comes")

        let seek = try run(.seek(to: 30), after: 4)
        #expect(seek.position == 30 && seek.rate == 0, "paused, it stays paused")
        let faster = try run(.rate(2), after: 5)
        #expect(faster.rate == 2 && faster.position == 30)
        // The start timer fires at the anchor: the start is handed out, once.
        let due = faster.anchor.nanoseconds
        let start = PlaybackStart(item: nil, mediaTime: 30, rate: 2, scheduled: faster.anchor, lateness: .zero)
        #expect(alice.onTick(atLocal: due) == Action(start: .deliver(start)))
        #expect(alice.onTick(atLocal: due + Self.ms) == Action(), "once")
        #expect(alice.lateStart(atLocal: due + Self.second)?.mediaTime == 32, "a sequence of starts made later starts late")

        let seekPlaying = try run(.seek(to: 10), after: 6)
        #expect(seekPlaying.rate == 2 && seekPlaying.anchor == GroupInstant(nanoseconds: now + 6 * Self.second) + .milliseconds(40))
        #expect(alice.lateStart(atLocal: now + 6 * Self.second) == nil, "its start is still to come")
        #expect(try run(.pause, after: 7).rate == 0)
        #expect(try run(.play, after: 8).rate == 2, "play resumes the last rate")
        let item = try run(.item("movie-2", position: 5), after: 9)
        #expect(item.item == "movie-2" && item.position == 5 && item.rate == 0)
    }

    @Test func theDefaultLeadFollowsTheRoundTrips() {
        var bob = Self.machine("bob", lead: nil)
        #expect(bob.lead == .milliseconds(50), "before any exchange")
        #expect(bob.onClockRecord(Self.clock("alice"), atLocal: 0) == Action(timer: .wake(atLocal: 0)))
        #expect(
            bob.onPong(from: "alice", sent: 0, received: Self.ms, replied: Self.ms, back: 2 * Self.ms) == Action(timer: .wake(atLocal: 0)))
        #expect(bob.lead == .milliseconds(31), "three 2 ms round trips plus 25 ms")
    }

    /// A command that arrives after its start (a slow link): the timeline is taken as it is, and the start
    /// delivered at once is as late as the command, at the position the timeline has then — not behind.
    @Test func aCommandReceivedAfterItsStartJumpsToTheRightPosition() throws {
        let offset = -600 * Self.second  // the group clock ten minutes behind bob's
        var bob = Self.following("bob", offset: offset)
        let local = 30 * Self.second
        let now = try #require(bob.groupTime(atLocal: local))
        var play = bob.effectiveTimeline
        play.position = 12
        play.anchor = now + .milliseconds(-300)  // alice scheduled it 300 ms ago
        play.rate = 2
        play.intendedRate = 2
        let received = bob.onTimelineRecord(.value(play.record), atLocal: local)
        guard case let .deliver(start) = received.start else {
            Issue.record("the start is due: \(received)")
            return
        }
        #expect(received == Action(timelines: .yield(play), start: .deliver(start), timer: .wake(atLocal: 0)), "followed, not rewritten")
        #expect(bob.effectiveTimeline == play)
        #expect(start.scheduled == play.anchor && start.rate == 2)
        #expect(start.lateness == .milliseconds(300))
        #expect(abs(start.mediaTime - 12.6) < 1e-9, "two media seconds per second for the 300 ms missed")
        #expect(start.mediaTime == play.mediaTime(at: now), "where everyone else is now")
    }

    /// Nothing is handed out before both records were read once: a timeline that plays, read before its
    /// clock, is not first shown paused. Then it comes with its start.
    @Test func theTimelineIsHandedOutOnceBothRecordsWereRead() throws {
        var bob = Self.machine("bob")
        #expect(bob.onActive(["alice", "bob"], atLocal: 0) == Action())
        var play = PlaybackTimeline.initial(base: "b")
        (play.rate, play.intendedRate, play.anchor) = (1, 1, GroupInstant(nanoseconds: 100 * Self.second))
        #expect(bob.onTimelineRecord(.value(play.record), atLocal: 0) == Action(), "its clock is not known yet")
        #expect(bob.emitted == nil)
        #expect(bob.onClockRecord(Self.clock("alice"), atLocal: 0) == Action(timelines: .yield(play), timer: .wake(atLocal: 0)))
        #expect(bob.emitted == play, "no start before the group clock is known")
    }

    /// A start still to come moves with every refinement of the offset: each input asks for the start
    /// timer at the anchor as the offset now puts it on our clock.
    @Test func aPendingStartFollowsTheOffset() throws {
        let offset = 5 * Self.second, local = 10 * Self.second
        var bob = Self.following("bob", offset: offset, at: local)
        #expect(bob.onTimelineRecord(.none, atLocal: local) == Action(timelines: .yield(.initial(base: "b")), timer: .wake(atLocal: 0)))
        var play = PlaybackTimeline.initial(base: "b")
        (play.rate, play.intendedRate, play.anchor) = (1, 1, GroupInstant(nanoseconds: local + offset + Self.second))
        #expect(
            bob.onTimelineRecord(.value(play.record), atLocal: local)
                == Action(timelines: .yield(play), start: .wake(atLocal: local + Self.second), timer: .wake(atLocal: 0)))
        // Later exchanges say the group is 2 ms further ahead: the start comes 2 ms earlier on our clock.
        var last = Action()
        for i in 1...ClockEstimator.settlingExchanges {
            let t0 = local + Int64(i) * Self.ms
            last = bob.onPong(
                from: "alice", sent: t0, received: t0 + offset + 3 * Self.ms, replied: t0 + offset + 3 * Self.ms, back: t0 + 2 * Self.ms)
        }
        #expect(bob.offset(atLocal: local + 5 * Self.ms) == offset + 2 * Self.ms)
        #expect(last == Action(start: .wake(atLocal: local + Self.second - 2 * Self.ms), timer: .wake(atLocal: 0)))
        let instant = GroupInstant(nanoseconds: local + Self.second - 2 * Self.ms + offset + 2 * Self.ms)
        #expect(bob.onTick(atLocal: local + Self.second - 2 * Self.ms).start == .deliver(play.start(at: instant)))
    }

    // MARK: - Records received

    /// What the strict reader refuses, as the coordinator reads it, is counted and changes nothing: the
    /// last valid timeline stays. Among the refused: `"item": null` (an optional field is absent or a
    /// string), a position below 0, a rate beyond 64, waiting while playing, numbers as strings.
    @Test func invalidRecordsAreRejectedAndTheLastValidTimelineStays() throws {
        var alice = Self.machine("alice")
        #expect(alice.onClockRecord(.none, atLocal: 0) == Action(writeClock: .init(reference: "alice", base: "alice@0")))
        let valid = try #require(Self.written(alice.command(.seek(to: 5), atLocal: Self.second)))
        #expect(alice.onTimelineRecord(.value(valid.record), atLocal: Self.second) == Action(timelines: .yield(valid)))
        let clock = HLCTimestamp(time: 1, counter: 0, participant: "bob")
        guard case let .object(fields) = try Wire.jsonValue(valid.record) else { throw Wire.Rejection.wrongShape }
        let changes: [(String, JSONValue?)] = [
            ("item", .null), ("item", .int(5)), ("position", .int(-1)), ("position", .string("5")), ("rate", .int(100)),
            ("rate", .null), ("intent", nil), ("at", .double(9.1e12)), ("waiting", .array([.string("bob")])),
            ("waiting", .array([.int(1)])), ("base", .string("")), ("base", nil),
        ]
        for (key, value) in changes {
            var changed = fields
            changed[key] = value
            changed["rate"] = key == "rate" ? value : .int(1)  // playing: nobody may be waited for
            let record = Wire.StateRecord(key: PlaybackCoordinator.timelineKey, value: .object(changed), clock: clock)
            #expect(Machine.Received<Wire.Timeline>(record) == .rejected, "\(key): \(String(describing: value))")
        }
        var playing = fields
        playing["rate"] = .int(1)
        let record = Wire.StateRecord(key: PlaybackCoordinator.timelineKey, value: .object(playing), clock: clock)
        #expect(Machine.Received<Wire.Timeline>(record) != .rejected, "the changes alone are refused")
        var rejected = 0
        for _ in 0..<3 {
            #expect(alice.onTimelineRecord(.rejected, atLocal: 2 * Self.second) == Action())
            rejected += 1
        }
        #expect(alice.onTimelineRecord(.value(valid.record), atLocal: 2 * Self.second) == Action(), "the same timeline: nothing new")
        #expect(alice.rejected == rejected && alice.effectiveTimeline == valid)
        // A clock claimed for someone else is refused too; a known clock stays.
        let forged = Wire.StateRecord(
            key: PlaybackCoordinator.clockKey, value: try Wire.jsonValue(Wire.Clock(reference: "alice", base: "x")), clock: clock)
        #expect(Machine.Received<Wire.Clock>(forged) { $0.matches(writer: $1) } == .rejected)
        #expect(alice.onClockRecord(.rejected, atLocal: 3 * Self.second) == Action())
        #expect(alice.rejected == rejected + 1 && alice.clock == Wire.Clock(reference: "alice", base: "alice@0"))
    }

    /// A timeline on another clock (its reference gone with everyone who knew it) is taken as paused.
    @Test func aTimelineOnAnotherClockIsPaused() {
        var bob = Self.machine("bob")
        #expect(bob.onClockRecord(Self.clock("alice", "new"), atLocal: 0) == Action(timer: .wake(atLocal: 0)))
        let old = PlaybackTimeline(
            item: "m", position: 12, rate: 1, anchor: GroupInstant(nanoseconds: 5), intendedRate: 1, waitingIDs: [], base: "old")
        var paused = old
        (paused.rate, paused.intendedRate, paused.base) = (0, 0, "new")
        #expect(bob.onTimelineRecord(.value(old.record), atLocal: 0) == Action(timelines: .yield(paused), timer: .wake(atLocal: 0)))
        #expect(bob.effectiveTimeline == paused)
    }

    // MARK: - Suspensions

    @Test func aWaitingSuspensionHoldsTheGroupUntilTheLastOneEnds() throws {
        var alice = Self.machine("alice")
        #expect(alice.onClockRecord(.none, atLocal: 0) == Action(writeClock: .init(reference: "alice", base: "alice@0")))
        #expect(alice.onActive(["alice", "bob"], atLocal: 0) == Action())
        let play = try #require(Self.written(alice.command(.play, atLocal: Self.second)))
        #expect(
            alice.onTimelineRecord(.value(play.record), atLocal: Self.second)
                == Action(timelines: .yield(play), start: .wake(atLocal: Self.second + Self.lead)))

        let held = alice.beginSuspension("buffering", atLocal: 3 * Self.second)
        let id = alice.lastSuspension
        let waiting = try #require(Self.written(held))
        #expect(held == Action(writeTimeline: waiting, timelines: .yield(waiting)), "paused: no start")
        #expect(waiting.waitingIDs == ["alice"] && waiting.rate == 0 && waiting.intendedRate == 1)
        #expect(abs(waiting.position - 1.96) < 1e-9, "paused where it was")
        let intent = alice.command(.play, atLocal: 4 * Self.second)
        #expect(Self.written(intent)?.rate == 0, "a play while waiting only intends")
        #expect(intent.start == .none)

        // bob holds the group too (his record wins; ours is dropped from it): we put ourselves back.
        var crossing = waiting
        crossing.waitingIDs = ["bob"]
        let back = alice.onTimelineRecord(.value(crossing.record), atLocal: 5 * Self.second)
        let both = try #require(Self.written(back))
        #expect(back == Action(writeTimeline: both, timelines: .yield(both)) && both.waitingIDs == ["alice", "bob"])

        let end = alice.endSuspension(id, atLocal: 6 * Self.second)
        let released = try #require(Self.written(end))
        #expect(end == Action(writeTimeline: released, timelines: .yield(released)))
        #expect(released.waitingIDs == ["bob"] && released.rate == 0, "bob still holds it")
        #expect(alice.endSuspension(id, atLocal: 6 * Self.second) == Action(), "ending it again changes nothing")
        // bob is gone: the reference lets go of him, and the group starts again after the lead.
        let gone = alice.onActive(["alice"], atLocal: 7 * Self.second)
        let restart = try #require(Self.written(gone))
        #expect(gone == Action(writeTimeline: restart, timelines: .yield(restart), start: .wake(atLocal: 7 * Self.second + Self.lead)))
        #expect(restart.waitingIDs.isEmpty && restart.rate == 1)
        #expect(restart.anchor == GroupInstant(nanoseconds: 7 * Self.second) + .milliseconds(40))
        #expect(restart.position == waiting.position)
        #expect(alice.onTick(atLocal: 7 * Self.second + Self.lead) == Action(start: .deliver(restart.start(at: restart.anchor))))

        // A suspension for a reason that does not trigger waiting is ours alone.
        #expect(alice.beginSuspension("scrubbing", atLocal: 8 * Self.second) == Action())
        #expect(alice.suspensions == [2: "scrubbing"])
    }

    /// The reference holds the group and is gone (left or crashed): the follower that takes over the clock
    /// also lets go of it, at once, so the group starts again from where it waited; the next one in line
    /// does the same after its stagger if no claim came.
    @Test func theParticipantThatTakesOverTheClockReleasesAGoneReference() throws {
        let local = 30 * Self.second
        var waiting = PlaybackTimeline.initial(base: "b")
        waiting.position = 42
        waiting.anchor = GroupInstant(nanoseconds: local)
        waiting.intendedRate = 1
        waiting.waitingIDs = ["alice"]
        let pinging = Action(timer: .wake(atLocal: 0))

        var bob = Self.following("bob", offset: 5 * Self.second)
        #expect(bob.onActive(["alice", "bob", "carol"], atLocal: local) == pinging)
        var handed = pinging
        handed.timelines = .yield(waiting)
        #expect(bob.onTimelineRecord(.value(waiting.record), atLocal: local) == handed, "not ours to release yet")
        let takeover = bob.onActive(["bob", "carol"], atLocal: local + Self.second)
        let released = try #require(Self.written(takeover))
        #expect(
            takeover
                == Action(
                    writeClock: .init(reference: "bob", base: "b"), writeTimeline: released, timelines: .yield(released),
                    start: .wake(atLocal: local + Self.second + Self.lead)))
        #expect(released.waitingIDs.isEmpty && released.rate == 1 && released.position == 42)
        let now = try #require(bob.groupTime(atLocal: local + Self.second))
        #expect(released.anchor == now + .milliseconds(40), "one start, a lead ahead")

        var carol = Self.following("carol", offset: 5 * Self.second)
        #expect(carol.onActive(["alice", "bob", "carol"], atLocal: local) == pinging)
        #expect(carol.onTimelineRecord(.value(waiting.record), atLocal: local) == handed)
        #expect(carol.onActive(["bob", "carol"], atLocal: local + Self.second) == pinging, "bob's turn first")
        let late = carol.onTick(atLocal: local + Self.second + Machine.takeoverStagger)
        let second = try #require(Self.written(late))
        #expect(
            late
                == Action(
                    writeClock: .init(reference: "carol", base: "b"), writeTimeline: second, timelines: .yield(second),
                    start: .wake(atLocal: local + Self.second + Machine.takeoverStagger + Self.lead)),
            "nobody claimed: carol does, and releases")

        // bob's claim was only slow: the two claims and releases cross, and carol's win. bob follows her
        // clock, keeping his offset, and her release: the same position, started one stagger later.
        #expect(second.anchor == released.anchor + .nanoseconds(Machine.takeoverStagger) && second.position == 42 && second.rate == 1)
        let bobsStart = local + Self.second + Self.lead
        #expect(bob.onTick(atLocal: bobsStart) == Action(start: .deliver(released.start(at: released.anchor))))
        #expect(bob.onClockRecord(Self.clock("carol"), atLocal: local + 2 * Self.second) == pinging)
        #expect(bob.burst == Machine.burstLength && !bob.isReference)
        let followed = bob.onTimelineRecord(.value(second.record), atLocal: local + 2 * Self.second)
        let instant = try #require(bob.groupTime(atLocal: local + 2 * Self.second))
        #expect(
            followed == Action(timelines: .yield(second), start: .deliver(second.start(at: instant)), timer: .wake(atLocal: 0)),
            "followed, not rewritten; its start came after its instant: at once, late")
        #expect(bob.effectiveTimeline == second)
    }

    // MARK: - The end

    /// The session is over: every sequence and waiting command ends, both timers stop, and later inputs
    /// ask for nothing.
    @Test func theEndEndsEverythingAndLaterInputsAskForNothing() throws {
        var bob = Self.following("bob", offset: Self.second)
        #expect(
            bob.onTimelineRecord(.none, atLocal: 11 * Self.second)
                == Action(timelines: .yield(.initial(base: "b")), timer: .wake(atLocal: 0)))
        #expect(bob.emitted == .initial(base: "b"))
        #expect(bob.end() == Action(timelines: .finish, start: .finish, waiters: .release, timer: .cancel))
        #expect(bob.isEnded && bob.emitted == nil && bob.lateStart(atLocal: 12 * Self.second) == nil)
        #expect(bob.waitForClock(atLocal: 12 * Self.second) == false, "a command does not wait for a session that is over")
        #expect(bob.onActive(["bob"], atLocal: 12 * Self.second) == Action(), "not even a takeover")
        #expect(bob.onTick(atLocal: 13 * Self.second) == Action())
        #expect(bob.beginSuspension("buffering", atLocal: 13 * Self.second) == Action())
    }
}
