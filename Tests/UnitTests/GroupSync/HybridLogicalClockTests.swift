import Testing

@testable import GroupSync

/// The clock that orders shared-state writes, without a broker.
@Suite struct HybridLogicalClockTests {
    @Test func ticksIncreaseWithinAMillisecondAndWhenTheWallClockGoesBack() {
        var clock = HybridLogicalClock(participant: "alice")
        let first = clock.tick(now: 100)
        let second = clock.tick(now: 100)
        let third = clock.tick(now: 90)
        #expect(first == HLCTimestamp(time: 100, counter: 0, participant: "alice"))
        #expect(second == HLCTimestamp(time: 100, counter: 1, participant: "alice"))
        #expect(third == HLCTimestamp(time: 100, counter: 2, participant: "alice"), "a clock going back never reorders")
        #expect(clock.tick(now: 101) == HLCTimestamp(time: 101, counter: 0, participant: "alice"))
    }

    @Test func aTimestampFromAFasterClockPullsOursForward() {
        var clock = HybridLogicalClock(participant: "slow")
        #expect(clock.tick(now: 100) == HLCTimestamp(time: 100, counter: 0, participant: "slow"))
        let remote = HLCTimestamp(time: 5_000, counter: 3, participant: "fast")
        clock.observe(remote, now: 100)
        let next = clock.tick(now: 101)
        #expect(next > remote, "our next write beats what we have seen")
        #expect(next == HLCTimestamp(time: 5_000, counter: 5, participant: "slow"))
    }

    @Test func observingMergesCountersOfTheSameMillisecond() {
        var clock = HybridLogicalClock(participant: "a")
        #expect(clock.tick(now: 100) == HLCTimestamp(time: 100, counter: 0, participant: "a"))
        #expect(clock.tick(now: 100) == HLCTimestamp(time: 100, counter: 1, participant: "a"))
        clock.observe(HLCTimestamp(time: 100, counter: 7, participant: "b"), now: 50)
        #expect(clock.latest == HLCTimestamp(time: 100, counter: 8, participant: "a"))
        clock.observe(HLCTimestamp(time: 90, counter: 50, participant: "b"), now: 50)
        #expect(clock.latest == HLCTimestamp(time: 100, counter: 9, participant: "a"), "an older remote time only counts")
        clock.observe(HLCTimestamp(time: 10, counter: 0, participant: "b"), now: 200)
        #expect(clock.latest == HLCTimestamp(time: 200, counter: 0, participant: "a"), "the wall clock is ahead of both")
    }

    /// A received counter at its maximum moves our clock to the next millisecond instead of past the
    /// counter's range: every later stamp stays one that readers accept.
    @Test func aCounterAtItsMaximumMovesToTheNextMillisecond() {
        let remote = HLCTimestamp(time: 5_000, counter: HybridLogicalClock.maximumCounter, participant: "mallory")
        #expect(remote.isPlausible(now: 100))
        var clock = HybridLogicalClock(participant: "alice")
        clock.observe(remote, now: 100)
        #expect(clock.latest == HLCTimestamp(time: 5_001, counter: 0, participant: "alice"))
        let next = clock.tick(now: 100)
        #expect(next > remote && next.isPlausible(now: 100))
        var ticking = HybridLogicalClock(participant: "bob")
        ticking.observe(HLCTimestamp(time: 5_000, counter: HybridLogicalClock.maximumCounter - 1, participant: "carol"), now: 100)
        #expect(ticking.latest == HLCTimestamp(time: 5_000, counter: HybridLogicalClock.maximumCounter, participant: "bob"))
        #expect(ticking.tick(now: 100) == HLCTimestamp(time: 5_001, counter: 0, participant: "bob"), "a tick too")
    }

    @Test func timestampsOrderByTimeCounterThenParticipant() {
        let a = HLCTimestamp(time: 1, counter: 0, participant: "b")
        #expect(a < HLCTimestamp(time: 1, counter: 1, participant: "a"))
        #expect(a < HLCTimestamp(time: 2, counter: 0, participant: "a"))
        #expect(HLCTimestamp(time: 1, counter: 0, participant: "a") < a, "ties broken by participant")
    }

    @Test func implausibleTimestampsAreRecognised() {
        let now: Int64 = 1_000_000
        #expect(HLCTimestamp(time: now + HLCTimestamp.maximumSkew, counter: 0, participant: "p").isPlausible(now: now))
        #expect(!HLCTimestamp(time: now + HLCTimestamp.maximumSkew + 1, counter: 0, participant: "p").isPlausible(now: now))
        #expect(!HLCTimestamp(time: -1, counter: 0, participant: "p").isPlausible(now: now))
        #expect(!HLCTimestamp(time: 1, counter: 1 << 32, participant: "p").isPlausible(now: now))
        #expect(!HLCTimestamp(time: .max, counter: .max, participant: "p").isPlausible(now: .max), "no overflow")
    }
}
