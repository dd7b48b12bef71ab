/// Estimates the offset from the local clock to the group clock (group − local) from NTP-style exchanges
/// with the reference participant: we send at local `t0`, it receives at group `t1` and answers at group
/// `t2`, we receive at local `t3`. One exchange gives the offset `((t1 − t0) + (t2 − t3)) / 2`, wrong by
/// at most half the round trip `(t3 − t0) − (t2 − t1)`, and by less the more symmetric the two trips.
///
/// Filter: only the exchanges with the shortest round trips count (those least delayed by queues and
/// scheduling); with enough of them spread over time, a least-squares line through their offsets also
/// follows the drift between the two clocks (up to ``maximumDrift``). All times in nanoseconds.
struct ClockEstimator: Sendable, Equatable {
    struct Sample: Sendable, Equatable {
        /// When the answer arrived (local `t3`).
        var local: Int64
        var offset: Int64
        var roundTrip: Int64
    }

    /// The newest samples, oldest first.
    private(set) var samples: [Sample] = []

    /// How many samples are kept.
    static let capacity = 32
    /// Samples whose round trip exceeds the shortest by more than this share (or 50 µs, if more) are
    /// left out of the estimate.
    static let roundTripSlack = 0.5
    /// Drift is fitted once the kept samples span at least this long.
    static let driftSpan: Int64 = 2_000_000_000
    /// The largest drift believed between two clocks: 500 ppm (real clocks stay within 100).
    static let maximumDrift = 500e-6

    /// Adds one exchange; returns false (and ignores it) when its round trip is negative (clocks that
    /// jumped) or longer than ten seconds.
    @discardableResult
    mutating func add(sent t0: Int64, received t1: Int64, replied t2: Int64, back t3: Int64) -> Bool {
        let roundTrip = (t3 &- t0) &- (t2 &- t1)
        guard roundTrip >= 0, roundTrip < 10_000_000_000, t2 >= t1 else { return false }
        let offset = ((t1 &- t0) &+ (t2 &- t3)) / 2
        samples.append(Sample(local: t3, offset: offset, roundTrip: roundTrip))
        if samples.count > ClockEstimator.capacity { samples.removeFirst(samples.count - ClockEstimator.capacity) }
        return true
    }

    mutating func reset() { samples = [] }

    var isEmpty: Bool { samples.isEmpty }

    /// The shortest round trip among the kept samples.
    var shortestRoundTrip: Int64? { samples.map(\.roundTrip).min() }

    /// The longest round trip among the kept samples.
    var longestRoundTrip: Int64? { samples.map(\.roundTrip).max() }

    /// The estimated offset (group − local) at local time `local`; nil without samples.
    func offset(atLocal local: Int64) -> Int64? {
        guard let shortest = shortestRoundTrip else { return nil }
        let limit = shortest + max(Int64(Double(shortest) * ClockEstimator.roundTripSlack), 50_000)
        let good = samples.filter { $0.roundTrip <= limit }
        guard let first = good.first, let last = good.last else { return nil }
        let meanLocal = good.reduce(0.0) { $0 + Double($1.local &- first.local) } / Double(good.count)
        let meanOffset = good.reduce(0.0) { $0 + Double($1.offset &- first.offset) } / Double(good.count)
        var slope = 0.0
        if good.count >= 3, last.local &- first.local >= ClockEstimator.driftSpan {
            var covariance = 0.0, variance = 0.0
            for sample in good {
                let x = Double(sample.local &- first.local) - meanLocal
                covariance += x * (Double(sample.offset &- first.offset) - meanOffset)
                variance += x * x
            }
            if variance > 0 { slope = min(max(covariance / variance, -ClockEstimator.maximumDrift), ClockEstimator.maximumDrift) }
        }
        let x = Double(local &- first.local) - meanLocal
        return first.offset &+ Int64((meanOffset + slope * x).rounded())
    }
}
