import Testing

@testable import GroupSync

/// Coordinated playback's logic without a broker: clock records, exchanges, commands and suspensions fed
/// by hand, at chosen local times (nanoseconds).
@Suite struct PlaybackStateMachineTests {
    typealias Machine = PlaybackStateMachine
    static let ms: Int64 = 1_000_000
    static let second: Int64 = 1_000_000_000

    static func machine(_ me: String, initiator: String = "alice", lead: Duration? = .milliseconds(40)) -> Machine {
        Machine(me: me, initiator: initiator, waitingReasons: ["buffering"], lead: lead)
    }

    /// `machine` following `reference` on `base`, with an exchange saying the group is `offset` ahead.
    static func following(_ me: String, reference: String = "alice", offset: Int64, at local: Int64 = 10 * second) -> Machine {
        var machine = machine(me)
        _ = machine.onActive([me, reference], atLocal: local)
        _ = machine.onClockRecord(.init(reference: reference, base: "b"), atLocal: local)
        #expect(machine.burst == Machine.burstLength, "a new reference: a burst of exchanges")
        for _ in 0..<ClockEstimator.settlingExchanges {
            _ = machine.onPong(
                from: reference, sent: local, received: local + offset + ms, replied: local + offset + ms, back: local + 2 * ms)
        }
        return machine
    }

    static func record(_ timeline: PlaybackTimeline) -> PlaybackTimeline.Record { timeline.record }

    // MARK: - The group clock

    @Test func theInitiatorStartsTheClockAndTheOthersWaitForIt() {
        var alice = Self.machine("alice")
        let claimed = alice.onClockRecord(nil, atLocal: 5 * Self.second)
        #expect(claimed.writeClock == .init(reference: "alice", base: "alice@5000"))
        #expect(alice.isReference && alice.offset(atLocal: 0) == 0)

        var bob = Self.machine("bob")
        _ = bob.onActive(["bob"], atLocal: 0)
        #expect(bob.onClockRecord(nil, atLocal: 0).writeClock == nil, "the initiator may be about to")
        #expect(bob.onTick(atLocal: Machine.firstClaimPatience - 1).writeClock == nil)
        #expect(bob.onTick(atLocal: Machine.firstClaimPatience).writeClock?.reference == "bob", "nobody did: bob starts one")
    }

    @Test func aFollowerTakesItsOffsetFromTheReferencesAnswers() throws {
        let offset = 600 * Self.second  // ten minutes behind
        let bob = Self.following("bob", offset: offset)
        let estimated = try #require(bob.offset(atLocal: 11 * Self.second))
        #expect(abs(estimated - offset) <= Self.ms)
        #expect(!bob.isReference)
        var carol = Self.machine("carol")
        _ = carol.onClockRecord(.init(reference: "alice", base: "b"), atLocal: 0)
        let ignored = carol.onPong(from: "mallory", sent: 0, received: 5, replied: 5, back: 10)
        #expect(ignored == Machine.Action(), "only the reference counts")
        #expect(carol.offset(atLocal: 0) == nil)
        #expect(throws: Machine.CommandError.noClock) { try carol.command(.play, atLocal: 0) }
    }

    /// A ping that waited for the network thread before it was written (a busy machine) is timed as if it
    /// had not waited: the wait is not taken for a slower trip out, which would skew the offset by half of
    /// it. Its encoding, as long as the reference's, still counts. An answer to a ping whose wait is not
    /// known yet waits for it; one to a ping not remembered is timed from its `t0`.
    @Test func anExchangeIsTimedWithoutItsPingsWaitForTheNetworkThread() throws {
        let offset = 600 * Self.second, start = 10 * Self.second
        let encoding: Int64 = 50_000, trip: Int64 = 100_000
        var bob = Self.machine("bob")
        _ = bob.onActive(["bob", "alice"], atLocal: start)
        _ = bob.onClockRecord(.init(reference: "alice", base: "b"), atLocal: start)
        for i in 0..<Int64(ClockEstimator.settlingExchanges) {
            let t0 = start + i * 5 * Self.ms
            let queued = t0 + encoding, left = queued + 3 * Self.ms  // 3 ms waiting for the network thread
            let t1 = left + trip + offset, t2 = t1
            // alice encodes her answer as long as bob did, and writes it at once.
            let t3 = t2 - offset + encoding + trip
            bob.onPingSent(t0: t0)
            // The three moments are told from different threads, in any order; the exchange counts once
            // all are known.
            switch i {
            case 0:
                _ = bob.onPingQueued(t0: t0, atLocal: queued)
                _ = bob.onPingLeft(t0: t0, atLocal: left)
                _ = bob.onPong(from: "alice", sent: t0, received: t1, replied: t2, back: t3)
            case 1:
                _ = bob.onPingLeft(t0: t0, atLocal: left)
                _ = bob.onPingQueued(t0: t0, atLocal: queued)
                _ = bob.onPong(from: "alice", sent: t0, received: t1, replied: t2, back: t3)
            default:
                _ = bob.onPingLeft(t0: t0, atLocal: left)
                _ = bob.onPong(from: "alice", sent: t0, received: t1, replied: t2, back: t3)
                #expect(bob.estimator.samples.count == Int(i), "an answer waits for its ping's wait to be known")
                _ = bob.onPingQueued(t0: t0, atLocal: queued)
            }
            #expect(bob.estimator.samples.count == Int(i) + 1)
        }
        let estimated = try #require(bob.offset(atLocal: start + 30 * Self.ms))
        #expect(estimated == offset, "exact: both ways took the same once the wait is left out")

        var carol = Self.machine("carol")
        _ = carol.onActive(["carol", "alice"], atLocal: start)
        _ = carol.onClockRecord(.init(reference: "alice", base: "b"), atLocal: start)
        _ = carol.onPong(from: "alice", sent: start, received: start + offset, replied: start + offset, back: start + Self.ms)
        #expect(carol.estimator.samples.map(\.offset) == [offset - Self.ms / 2], "a ping not remembered: timed from t0")
        // An answer from anyone but the reference does not take the place of the reference's.
        carol.onPingSent(t0: start + Self.second)
        _ = carol.onPingQueued(t0: start + Self.second, atLocal: start + Self.second)
        _ = carol.onPingLeft(t0: start + Self.second, atLocal: start + Self.second)
        _ = carol.onPong(from: "mallory", sent: start + Self.second, received: 0, replied: 0, back: start + Self.second + Self.ms)
        _ = carol.onPong(
            from: "alice", sent: start + Self.second, received: start + Self.second + offset, replied: start + Self.second + offset,
            back: start + Self.second + Self.ms)
        #expect(carol.estimator.samples.count == 2 && carol.estimator.samples.allSatisfy { $0.offset == offset - Self.ms / 2 })
    }

    /// Exchanges too slow to settle the estimate keep the burst going.
    @Test func anUnsettledEstimateAsksForMoreExchanges() {
        let start = 10 * Self.second
        var bob = Self.machine("bob")
        _ = bob.onActive(["bob", "alice"], atLocal: start)
        _ = bob.onClockRecord(.init(reference: "alice", base: "b"), atLocal: start)
        for i in 0..<Int64(ClockEstimator.settlingExchanges) {
            let t0 = start + i * 5 * Self.ms
            let action = bob.onPong(from: "alice", sent: t0, received: t0 + 9 * Self.ms, replied: t0 + 9 * Self.ms, back: t0 + 10 * Self.ms)
            #expect(bob.burst > 0 && !action.timelineChanged, "a 10 ms round trip settles nothing")
        }
        let t0 = start + 30 * Self.ms
        let settled = bob.onPong(from: "alice", sent: t0, received: t0 + Self.ms / 2, replied: t0 + Self.ms / 2, back: t0 + Self.ms)
        #expect(settled.timelineChanged, "a 1 ms one does: the group clock is known")
        #expect(bob.offset(atLocal: t0) != nil)
    }

    /// Our own timeline record coming back is the timeline we hold, to the nanosecond: else the player
    /// would be told to start a second time.
    @Test func ourOwnRecordComingBackIsTheSameTimeline() throws {
        // A wall clock of today: nanoseconds since 1970 have more digits than a double keeps in ms.
        let today: Int64 = 1_796_532_991_656_619_437
        var bob = Self.following("bob", offset: 600 * Self.second + 123_456_789, at: today)
        let local = today + 987_654_321
        let written = try #require(try bob.command(.play, atLocal: local).writeTimeline)
        let echo = try #require(PlaybackTimeline(written.record))
        #expect(echo == written && bob.effectiveTimeline == written)
        _ = bob.onTimelineRecord(written.record, valid: true, atLocal: local + Self.ms)
        #expect(bob.effectiveTimeline == written)
    }

    /// The machine names its next moment: a burst of pings 5 ms apart to a new reference, then one every
    /// 100 ms until the estimate follows the drift; nothing for the reference itself. A first claim that
    /// waits for the initiator's patience is a moment too.
    @Test func theMachineSaysWhenItNextHasSomethingToDo() {
        var alice = Self.machine("alice")
        _ = alice.onClockRecord(nil, atLocal: Self.second)
        #expect(
            alice.isReference && alice.nextWake(atLocal: Self.second, pingInterval: Self.second) == nil, "the reference waits for inputs")

        var bob = Self.machine("bob")
        _ = bob.onActive(["alice", "bob"], atLocal: 0)
        #expect(bob.nextWake(atLocal: 0, pingInterval: Self.second) == nil, "no clock, none needed yet: nothing")
        _ = bob.onClockRecord(nil, atLocal: 0)
        #expect(bob.nextWake(atLocal: 0, pingInterval: Self.second) == Machine.firstClaimPatience, "the initiator's patience")
        _ = bob.onClockRecord(.init(reference: "alice", base: "b"), atLocal: Self.ms)
        #expect(bob.nextPing(interval: Self.second) == 0, "at once")
        var local = Self.ms
        var pings: [Int64] = []
        while pings.count < Machine.burstLength + 2, let due = bob.nextPing(interval: Self.second) {
            local = max(local, due)
            #expect(bob.takePing(atLocal: local, interval: Self.second) == "alice")
            pings.append(local)
        }
        let gaps = zip(pings.dropFirst(), pings).map { $0 - $1 }
        #expect(
            gaps == Array(repeating: Machine.burstSpacing, count: Machine.burstLength - 1) + [
                Machine.fittingInterval, Machine.fittingInterval,
            ])
        #expect(bob.takePing(atLocal: local + Machine.fittingInterval - 1, interval: Self.second) == nil, "not due yet")
        #expect(bob.nextWake(atLocal: local, pingInterval: Self.second) == local + Machine.fittingInterval)
    }

    /// The reference leaves: a follower with an offset takes over at once, with the same clock; one
    /// without waits, then starts a new clock.
    @Test func theClockSurvivesItsReference() throws {
        var bob = Self.following("bob", offset: 7 * Self.second)
        let before = try #require(bob.groupTime(atLocal: 20 * Self.second))
        let takeover = bob.onActive(["bob", "carol"], atLocal: 20 * Self.second)
        #expect(takeover.writeClock == .init(reference: "bob", base: "b"))
        #expect(bob.isReference && bob.groupTime(atLocal: 20 * Self.second) == before, "the same group time")

        var carol = Self.machine("carol")
        _ = carol.onClockRecord(.init(reference: "alice", base: "b"), atLocal: 0)
        #expect(carol.onActive(["carol"], atLocal: Self.second).writeClock == nil)
        #expect(carol.onTick(atLocal: Self.second + Machine.takeoverPatience).writeClock?.base == "carol@\(2 * Self.second / Self.ms)")

        // A crossing claim that wins makes the loser follow again, keeping its offset meanwhile.
        let lost = bob.onClockRecord(.init(reference: "carol", base: "b"), atLocal: 21 * Self.second)
        #expect(lost.timelineChanged && bob.burst == Machine.burstLength && !bob.isReference)
        #expect(bob.groupTime(atLocal: 21 * Self.second) == before + .seconds(1))
    }

    // MARK: - Commands

    @Test func playPauseSeekAndRateMakeOneTimeline() throws {
        var alice = Self.machine("alice")
        _ = alice.onClockRecord(nil, atLocal: 0)
        let now: Int64 = 100 * Self.second
        let play = try #require(try alice.command(.play, atLocal: now).writeTimeline)
        #expect(play.rate == 1 && play.intendedRate == 1 && play.position == 0)
        #expect(play.anchor == GroupInstant(nanoseconds: now) + .milliseconds(40), "a lead ahead")
        #expect(play.mediaTime(at: GroupInstant(nanoseconds: now)) == 0, "nothing moves before the start")
        #expect(play.mediaTime(at: play.anchor + .seconds(2)) == 2)

        let pause = try #require(try alice.command(.pause, atLocal: now + 3 * Self.second).writeTimeline)
        #expect(pause.rate == 0 && pause.intendedRate == 0)
        #expect(abs(pause.position - 2.96) < 1e-9, "where the timeline was")

        let seek = try #require(try alice.command(.seek(to: 30), atLocal: now + 4 * Self.second).writeTimeline)
        #expect(seek.position == 30 && seek.rate == 0, "paused, it stays paused")
        let faster = try #require(try alice.command(.rate(2), atLocal: now + 5 * Self.second).writeTimeline)
        #expect(faster.rate == 2 && faster.position == 30)
        let seekPlaying = try #require(try alice.command(.seek(to: 10), atLocal: now + 6 * Self.second).writeTimeline)
        #expect(seekPlaying.rate == 2 && seekPlaying.anchor == GroupInstant(nanoseconds: now + 6 * Self.second) + .milliseconds(40))
        _ = try alice.command(.pause, atLocal: now + 7 * Self.second)
        #expect(try alice.command(.play, atLocal: now + 8 * Self.second).writeTimeline?.rate == 2, "play resumes the last rate")
        let item = try #require(try alice.command(.item("movie-2", position: 5), atLocal: now + 9 * Self.second).writeTimeline)
        #expect(item.item == "movie-2" && item.position == 5 && item.rate == 0)
    }

    @Test func theDefaultLeadFollowsTheRoundTrips() {
        var bob = Self.machine("bob", lead: nil)
        #expect(bob.lead == .milliseconds(50), "before any exchange")
        _ = bob.onClockRecord(.init(reference: "alice", base: "b"), atLocal: 0)
        _ = bob.onPong(from: "alice", sent: 0, received: Self.ms, replied: Self.ms, back: 2 * Self.ms)
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
        let received = bob.onTimelineRecord(play.record, valid: true, atLocal: local)
        #expect(received.timelineChanged && received.writeTimeline == nil, "followed, not rewritten")
        #expect(bob.effectiveTimeline == play)

        let start = PlaybackCoordinator.start(of: bob.effectiveTimeline, atGroup: now.nanoseconds)
        #expect(start.scheduled == play.anchor && start.rate == 2)
        #expect(start.lateness == .milliseconds(300))
        #expect(abs(start.mediaTime - 12.6) < 1e-9, "two media seconds per second for the 300 ms missed")
        #expect(start.mediaTime == play.mediaTime(at: now), "where everyone else is now")
    }

    // MARK: - Records received

    @Test func invalidRecordsAreRejectedAndTheLastValidTimelineStays() throws {
        var alice = Self.machine("alice")
        _ = alice.onClockRecord(nil, atLocal: 0)
        let valid = try #require(try alice.command(.play, atLocal: Self.second).writeTimeline)
        var bad = valid.record
        bad.position = -1
        let rejected = alice.onTimelineRecord(bad, valid: true, atLocal: 2 * Self.second)
        #expect(rejected == Machine.Action())
        bad = valid.record
        bad.rate = 100
        _ = alice.onTimelineRecord(bad, valid: true, atLocal: 2 * Self.second)
        bad = valid.record
        bad.waiting = ["bob"]  // waiting while playing
        _ = alice.onTimelineRecord(bad, valid: true, atLocal: 2 * Self.second)
        _ = alice.onTimelineRecord(nil, valid: false, atLocal: 2 * Self.second)  // not a timeline at all
        #expect(alice.rejected == 4)
        #expect(alice.effectiveTimeline == valid)
    }

    /// A timeline on another clock (its reference gone with everyone who knew it) is taken as paused.
    @Test func aTimelineOnAnotherClockIsPaused() {
        var bob = Self.machine("bob")
        _ = bob.onClockRecord(.init(reference: "alice", base: "new"), atLocal: 0)
        let old = PlaybackTimeline(
            item: "m", position: 12, rate: 1, anchor: GroupInstant(nanoseconds: 5), intendedRate: 1, waitingIDs: [], base: "old")
        _ = bob.onTimelineRecord(old.record, valid: true, atLocal: 0)
        #expect(bob.effectiveTimeline.rate == 0 && bob.effectiveTimeline.position == 12 && bob.effectiveTimeline.item == "m")
    }

    // MARK: - Suspensions

    @Test func aWaitingSuspensionHoldsTheGroupUntilTheLastOneEnds() throws {
        var alice = Self.machine("alice")
        _ = alice.onClockRecord(nil, atLocal: 0)
        _ = alice.onActive(["alice", "bob"], atLocal: 0)
        _ = try alice.command(.play, atLocal: Self.second)
        let (id, held) = alice.beginSuspension("buffering", atLocal: 3 * Self.second)
        let waiting = try #require(held.writeTimeline)
        #expect(waiting.waitingIDs == ["alice"] && waiting.rate == 0 && waiting.intendedRate == 1)
        #expect(abs(waiting.position - 1.96) < 1e-9, "paused where it was")
        #expect(try alice.command(.play, atLocal: 4 * Self.second).writeTimeline?.rate == 0, "a play while waiting only intends")

        // bob holds the group too (his record wins; ours is dropped from it): we put ourselves back.
        var crossing = waiting
        crossing.waitingIDs = ["bob"]
        let back = try #require(alice.onTimelineRecord(crossing.record, valid: true, atLocal: 5 * Self.second).writeTimeline)
        #expect(back.waitingIDs == ["alice", "bob"])

        let released = try #require(alice.endSuspension(id, atLocal: 6 * Self.second).writeTimeline)
        #expect(released.waitingIDs == ["bob"] && released.rate == 0, "bob still holds it")
        // bob is gone: the reference lets go of him, and the group starts again after the lead.
        let restart = try #require(alice.onActive(["alice"], atLocal: 7 * Self.second).writeTimeline)
        #expect(restart.waitingIDs.isEmpty && restart.rate == 1)
        #expect(restart.anchor == GroupInstant(nanoseconds: 7 * Self.second) + .milliseconds(40))
        #expect(restart.position == waiting.position)

        // A suspension for a reason that does not trigger waiting is ours alone.
        let (_, alone) = alice.beginSuspension("scrubbing", atLocal: 8 * Self.second)
        #expect(alone.writeTimeline == nil)
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

        var bob = Self.following("bob", offset: 5 * Self.second)
        _ = bob.onActive(["alice", "bob", "carol"], atLocal: local)
        #expect(bob.onTimelineRecord(waiting.record, valid: true, atLocal: local).writeTimeline == nil, "not ours to release yet")
        let takeover = bob.onActive(["bob", "carol"], atLocal: local + Self.second)
        #expect(takeover.writeClock == .init(reference: "bob", base: "b"))
        let released = try #require(takeover.writeTimeline)
        #expect(released.waitingIDs.isEmpty && released.rate == 1 && released.position == 42)
        let now = try #require(bob.groupTime(atLocal: local + Self.second))
        #expect(released.anchor == now + .milliseconds(40), "one start, a lead ahead")

        var carol = Self.following("carol", offset: 5 * Self.second)
        _ = carol.onActive(["alice", "bob", "carol"], atLocal: local)
        _ = carol.onTimelineRecord(waiting.record, valid: true, atLocal: local)
        #expect(carol.onActive(["bob", "carol"], atLocal: local + Self.second) == Machine.Action(), "bob's turn first")
        let late = carol.onTick(atLocal: local + Self.second + Machine.takeoverStagger)
        #expect(late.writeClock?.reference == "carol" && late.writeTimeline?.waitingIDs == [], "nobody claimed: carol does, and releases")

        // bob's claim was only slow: the two claims and releases cross, and carol's win. bob follows her
        // clock, keeping his offset, and her release: the same position, started one stagger later.
        let second = try #require(late.writeTimeline)
        #expect(second.anchor == released.anchor + .nanoseconds(Machine.takeoverStagger) && second.position == 42 && second.rate == 1)
        _ = bob.onClockRecord(.init(reference: "carol", base: "b"), atLocal: local + 2 * Self.second)
        #expect(bob.burst == Machine.burstLength && !bob.isReference)
        #expect(bob.onTimelineRecord(second.record, valid: true, atLocal: local + 2 * Self.second).writeTimeline == nil)
        #expect(bob.effectiveTimeline == second)
    }
}
