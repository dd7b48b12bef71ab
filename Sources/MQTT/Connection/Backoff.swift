/// Reconnect delays: exponential growth from `initial` to `maximum`, with "equal jitter" (half fixed,
/// half random) so that many clients cut off together do not reconnect in lock-step.
public struct Backoff: Sendable, Hashable {
    /// Delay before the first reconnect attempt (before jitter).
    public var initial: Duration
    /// Upper bound of any delay.
    public var maximum: Duration

    public init(initial: Duration = .milliseconds(100), maximum: Duration = .seconds(10)) {
        self.initial = initial
        self.maximum = maximum
    }

    /// The delay before attempt `attempt` (1-based). `random` is a number in `0..<1`.
    public func delay(attempt: Int, random: Double) -> Duration {
        let exponent = min(max(attempt - 1, 0), 30)
        let base = min(initial * (1 << exponent), maximum)
        let half = base / 2
        return half + half * min(max(random, 0), 1)
    }
}
