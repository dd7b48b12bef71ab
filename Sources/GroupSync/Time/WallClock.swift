import Foundation

/// Where wall-clock time comes from. Inject one to test clock skew and drift. It is read for every
/// received state record, on the connection's network thread: it must return at once and never block.
public protocol WallClock: Sendable {
    /// Milliseconds since 1970.
    func milliseconds() -> Int64
    /// Nanoseconds since 1970, for what needs finer time than milliseconds (the group clock of
    /// playback). The default is ``milliseconds()`` × 10⁶; a clock that can, gives finer.
    func nanoseconds() -> Int64
}

extension WallClock {
    public func nanoseconds() -> Int64 { milliseconds() &* 1_000_000 }
}

/// The system clock (`CLOCK_REALTIME`), optionally wrong: shifted by `offset` and running fast or slow by
/// `drift` parts per million (to simulate a device whose clock is off, as real ones are by up to minutes
/// and tens of ppm).
public struct SystemWallClock: WallClock {
    public var offset: Duration
    /// Parts per million: 100 gains 0.1 ms per second of real time, -100 loses it.
    public var drift: Double
    /// The real time (ns) from which the drift accumulates: when the clock was made.
    private let origin: Int64

    public init(offset: Duration = .zero, drift: Double = 0) {
        self.offset = offset
        self.drift = drift
        self.origin = SystemWallClock.realNanoseconds()
    }

    public func milliseconds() -> Int64 {
        let nanoseconds = nanoseconds()
        // Floor, not truncation toward zero, so that milliseconds and nanoseconds agree before 1970 too.
        return nanoseconds >= 0 ? nanoseconds / 1_000_000 : (nanoseconds &- 999_999) / 1_000_000
    }

    public func nanoseconds() -> Int64 { nanoseconds(atSystemTime: SystemWallClock.realNanoseconds()) }

    /// What this clock reads when the system clock reads `system` (nanoseconds since 1970), exactly: to
    /// compare several skewed clocks at one instant, read the system clock once (for example
    /// `SystemWallClock().nanoseconds()`) and ask each clock for its reading then.
    public func nanoseconds(atSystemTime system: Int64) -> Int64 {
        let shifted = system &+ offset.nanoseconds
        guard drift != 0 else { return shifted }
        return shifted &+ Int64((Double(system &- origin) * drift / 1_000_000).rounded())
    }

    private static func realNanoseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) &* 1_000_000_000 &+ Int64(now.tv_nsec)
    }
}
