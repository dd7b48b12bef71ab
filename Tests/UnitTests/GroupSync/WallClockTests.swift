import Synchronization
import Testing

@testable import GroupSync

/// The system clock's two readings: the wall clock for records and clocks of the protocol, and a reading
/// for the group clock of playback that a clock being set (NTP, a user) does not move.
@Suite struct WallClockTests {
    /// A system time the test sets: a wall clock and a boot-time counter.
    final class FakeSystem: Sendable {
        let wall = Atomic<Int64>(1_800_000_000_000_000_000)
        let boot = Atomic<Int64>(5_000_000_000)

        var time: SystemTime {
            SystemTime(wall: { self.wall.load(ordering: .relaxed) }, boot: { self.boot.load(ordering: .relaxed) })
        }

        /// Real time passes.
        func advance(_ nanoseconds: Int64) {
            wall.add(nanoseconds, ordering: .relaxed)
            boot.add(nanoseconds, ordering: .relaxed)
        }
    }

    @Test func settingTheSystemClockMovesMillisecondsButNotTheGroupClocksNanoseconds() {
        let system = FakeSystem()
        let clock = SystemWallClock(offset: .milliseconds(100), system: system.time)
        #expect(clock.milliseconds() == 1_800_000_000_100 && clock.nanoseconds() == 1_800_000_000_100_000_000)
        system.advance(1_000_000_000)
        #expect(clock.milliseconds() == 1_800_000_001_100 && clock.nanoseconds() == 1_800_000_001_100_000_000)

        system.wall.add(250_000_000, ordering: .relaxed)  // NTP steps the clock 250 ms ahead
        #expect(clock.milliseconds() == 1_800_000_001_350, "the wall clock follows the setting")
        #expect(clock.nanoseconds() == 1_800_000_001_100_000_000, "the group clock's reading does not jump")
        system.advance(500_000_000)
        #expect(clock.nanoseconds() == 1_800_000_001_600_000_000, "and goes on at the same rate")
        system.wall.add(-2_000_000_000, ordering: .relaxed)  // set back 2 s
        #expect(clock.nanoseconds() == 1_800_000_001_600_000_000, "the group clock's reading does not go back")
    }

    /// A simulated drift accumulates on both readings from when the clock was made.
    @Test func aDriftingClockGainsFromItsCreation() {
        let system = FakeSystem()
        let clock = SystemWallClock(drift: 100, system: system.time)
        system.advance(10_000_000_000)
        #expect(clock.nanoseconds() == 1_800_000_010_001_000_000, "100 ppm of 10 s: 1 ms")
        #expect(clock.milliseconds() == 1_800_000_010_001)
    }
}
