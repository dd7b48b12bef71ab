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

/// The system clock, optionally wrong: shifted by `offset` and running fast or slow by `drift` parts per
/// million (to simulate a device whose clock is off, as real ones are by up to minutes and tens of ppm).
///
/// ``milliseconds()`` is the system's wall clock (`CLOCK_REALTIME`): what the system says the time is,
/// which jumps when the clock is set. ``nanoseconds()``, the group clock's reading, never jumps: it is the
/// wall clock as it read when the process first asked, advanced since by `CLOCK_BOOTTIME`, which runs at
/// the rate the system gives its clock (NTP's) and on while the machine sleeps, but is never set. So a
/// clock set by NTP or by hand moves no participant's group time; the two readings differ by the sum of
/// the settings since the process started.
public struct SystemWallClock: WallClock {
    public var offset: Duration
    /// Parts per million: 100 gains 0.1 ms per second of real time, -100 loses it.
    public var drift: Double
    /// The real time (ns) from which the drift accumulates: when the clock was made.
    private let origin: Int64
    private let system: SystemTime

    public init(offset: Duration = .zero, drift: Double = 0) { self.init(offset: offset, drift: drift, system: .shared) }

    /// A clock on the system time `system` tells.
    init(offset: Duration = .zero, drift: Double = 0, system: SystemTime) {
        self.offset = offset
        self.drift = drift
        self.system = system
        self.origin = system.steady()
    }

    public func milliseconds() -> Int64 {
        let nanoseconds = nanoseconds(atSystemTime: system.wall())
        // Floor, not truncation toward zero, so that milliseconds and nanoseconds agree before 1970 too.
        return nanoseconds >= 0 ? nanoseconds / 1_000_000 : (nanoseconds &- 999_999) / 1_000_000
    }

    public func nanoseconds() -> Int64 { nanoseconds(atSystemTime: system.steady()) }

    /// What this clock reads when the system's time is `system` (nanoseconds since 1970), exactly: to
    /// compare several skewed clocks at one instant, read the system's time once (for example
    /// `SystemWallClock().nanoseconds()`) and ask each clock for its reading then.
    public func nanoseconds(atSystemTime system: Int64) -> Int64 {
        let shifted = system &+ offset.nanoseconds
        guard drift != 0 else { return shifted }
        return shifted &+ Int64((Double(system &- origin) * drift / 1_000_000).rounded())
    }
}

/// The system's time in nanoseconds since 1970, read two ways (see ``SystemWallClock``).
struct SystemTime: Sendable {
    /// The wall clock: jumps when it is set.
    let wall: @Sendable () -> Int64
    /// A clock that is never set, from an arbitrary origin (the time since the machine booted).
    private let boot: @Sendable () -> Int64
    private let origin: (wall: Int64, boot: Int64)

    init(wall: @escaping @Sendable () -> Int64, boot: @escaping @Sendable () -> Int64) {
        self.wall = wall
        self.boot = boot
        origin = (wall(), boot())
    }

    /// The wall clock as it read when this was made, advanced since by `boot`.
    func steady() -> Int64 { origin.wall &+ (boot() &- origin.boot) }

    /// The process's: `CLOCK_REALTIME` and `CLOCK_BOOTTIME`, from the first use on.
    static let shared = SystemTime(wall: { read(CLOCK_REALTIME) }, boot: { read(CLOCK_BOOTTIME) })

    private static func read(_ clock: clockid_t) -> Int64 {
        var now = timespec()
        clock_gettime(clock, &now)
        return Int64(now.tv_sec) &* 1_000_000_000 &+ Int64(now.tv_nsec)
    }
}
