/// An instant of the group's time: nanoseconds since 1970 on the clock the session's participants agree
/// on (see ``PlaybackCoordinator``), whatever their own clocks say.
public struct GroupInstant: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var nanoseconds: Int64

    public init(nanoseconds: Int64) { self.nanoseconds = nanoseconds }

    /// Milliseconds since 1970 with a fraction, as on the wire (exact to a quarter of a microsecond);
    /// clamped to ±``maximumMilliseconds``, the range of nanoseconds in 64 bits.
    public init(milliseconds: Double) {
        let clamped = milliseconds.isNaN ? 0 : min(max(milliseconds, -GroupInstant.maximumMilliseconds), GroupInstant.maximumMilliseconds)
        self.nanoseconds = Int64((clamped * 1_000_000).rounded())
    }

    /// The largest instant a group instant holds, either side of 1970, in milliseconds: 9·10¹² (the
    /// year 2255). Times on the wire beyond it are rejected.
    public static let maximumMilliseconds = 9e12
    public var milliseconds: Double { Double(nanoseconds) / 1_000_000 }

    public static func < (lhs: GroupInstant, rhs: GroupInstant) -> Bool { lhs.nanoseconds < rhs.nanoseconds }

    public static func + (instant: GroupInstant, duration: Duration) -> GroupInstant {
        GroupInstant(nanoseconds: instant.nanoseconds &+ duration.nanoseconds)
    }

    public static func - (lhs: GroupInstant, rhs: GroupInstant) -> Duration { .nanoseconds(lhs.nanoseconds &- rhs.nanoseconds) }

    public var description: String { "\(milliseconds) ms" }
}

extension Duration {
    /// Whole nanoseconds (sub-nanosecond parts dropped); beyond 292 years, `Int64`'s bound of that sign.
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        let (sum, overflowAgain) = whole.addingReportingOverflow(attoseconds / 1_000_000_000)
        return overflow || overflowAgain ? (seconds < 0 ? .min : .max) : sum
    }

    var seconds: Double { Double(nanoseconds) / 1_000_000_000 }
}
