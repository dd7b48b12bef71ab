/// Estimates the offset from the local clock to the group clock (group − local) from NTP-style exchanges
/// with the reference participant: we send at local `t0`, it receives at group `t1` and answers at group
/// `t2`, we receive at local `t3`. One exchange gives the offset `((t1 − t0) + (t2 − t3)) / 2`, wrong by
/// at most half the round trip `(t3 − t0) − (t2 − t1)`, and by less the more symmetric the two trips.
///
/// Filter: an exchange counts only if its round trip is close to the shortest one, those least delayed by
/// queues and scheduling. Each is judged against its own moment: another exchange's round trip weighs in
/// lengthened by twice ``typicalDrift`` times the time between the two (what the clocks may have drifted
/// apart meanwhile, both ways), so that a calm start does not outshine the exchanges of a busier time a
/// little later. Once the counted exchanges span ``driftSpan``, a least-squares line through their offsets
/// gives the offset and follows the drift between the two clocks (up to ``maximumDrift``); before, the
/// newest of them are averaged.
///
/// There is no estimate until it is settled (``isSettled``): ``settlingExchanges`` exchanges, one of which
/// took at most ``settledRoundTrip``. One exchange alone may have been delayed one way (a busy machine, a
/// bridge between brokers) and be off by milliseconds, and a stalled thread can delay a whole burst by
/// tens of milliseconds; a late joiner would start that far from the others. An estimate is wrong by at
/// most half its best round trip, so a short one bounds the error. Over a distant broker, where no round
/// trip is that short, ``patientExchanges`` settle it whatever they took. The estimate is computed when
/// an exchange is added, so reading it costs nothing. All times in nanoseconds.
///
/// Once the estimate follows the drift, each exchange says whether it was foreseen (``Outcome``): the
/// true offset lies within half the exchange's round trip of its own, so an estimate further off than
/// that is wrong, whatever delayed the exchange.
struct ClockEstimator: Sendable, Equatable {
    struct Sample: Sendable, Equatable {
        /// When the answer arrived (local `t3`).
        var local: Int64
        var offset: Int64
        var roundTrip: Int64
    }

    /// The estimate: `offset + slope × (local − anchor)`.
    private struct Line: Sendable, Equatable {
        var anchor: Int64
        var offset: Double
        var slope: Double
        /// Whether the slope was fitted (else it is 0 for want of samples).
        var fitted: Bool
    }

    /// The newest samples, oldest first.
    private(set) var samples: [Sample] = []
    private var line: Line?

    static let capacity = 64
    /// The fewest exchanges for a first estimate: half of the burst a follower starts with (5 ms apart).
    static let settlingExchanges = 4
    /// A round trip short enough to settle the estimate: its error is then at most 1 ms.
    static let settledRoundTrip: Int64 = 2_000_000
    /// The exchanges that settle the estimate whatever their round trips.
    static let patientExchanges = 16
    /// A sample counts when its round trip exceeds the shortest (as judged from its moment) by at most this
    /// share (or 50 µs, if more).
    static let roundTripSlack = 0.25
    /// Drift is fitted once the counted samples span at least this long.
    static let driftSpan: Int64 = 1_000_000_000
    /// The largest drift believed between two clocks: 500 ppm (real clocks stay within 100).
    static let maximumDrift = 500e-6
    /// The drift between two real clocks, each within 100 ppm of real time.
    static let typicalDrift = 200e-6

    /// What one exchange said of the estimate made before it.
    enum Outcome: Sendable, Equatable {
        /// Ignored: a negative round trip (clocks that jumped), one longer than ten seconds, an answer
        /// sent before it was received, or times too far apart for their sums in 64-bit nanoseconds.
        case ignored
        /// Added while the estimate did not follow the drift yet: nothing to judge it by.
        case added
        /// Added, and the estimate had foreseen its offset: within half its round trip (the exchange's own
        /// error) plus ``agreement``.
        case confirmed
        /// Added, and the estimate was further off: a clock was set or changed its rate, the path to the
        /// reference changed, or a busy machine stamped the exchange late.
        case contradicted
    }

    /// What an estimate that follows the drift may be off by and still count as confirmed, beyond the
    /// exchange's own error: about what estimates are off by on a loaded machine (50 followers in one
    /// process on 2 cores: 0.24 ms at the 90th percentile).
    static let agreement: Int64 = 250_000

    /// Adds one exchange and says how it compares with the estimate made before it.
    @discardableResult
    mutating func add(sent t0: Int64, received t1: Int64, replied t2: Int64, back t3: Int64) -> Outcome {
        // Each time is in range (±9×10¹⁸ ns), but a received one may be as far from ours as the range allows.
        func difference(_ a: Int64, _ b: Int64) -> Int64? {
            let (difference, overflow) = a.subtractingReportingOverflow(b)
            return overflow ? nil : difference
        }
        guard let outward = difference(t1, t0), let back = difference(t2, t3), let held = difference(t2, t1),
            let elapsed = difference(t3, t0), let roundTrip = difference(elapsed, held),
            case let (twice, false) = outward.addingReportingOverflow(back),
            roundTrip >= 0, roundTrip < 10_000_000_000, held >= 0
        else { return .ignored }
        let sample = Sample(local: t3, offset: twice / 2, roundTrip: roundTrip)
        var outcome = Outcome.added
        if fitsDrift, let foreseen = offset(atLocal: t3) {
            // The true offset lies within half the round trip of the sample's. In `Double`: the offsets
            // come from received times, and their difference may not fit in 64 bits.
            let off = abs(Double(sample.offset) - Double(foreseen))
            outcome = off <= Double(roundTrip / 2 + ClockEstimator.agreement) ? .confirmed : .contradicted
        }
        samples.append(sample)
        if samples.count > ClockEstimator.capacity { samples.removeFirst(samples.count - ClockEstimator.capacity) }
        line = ClockEstimator.fit(samples)
        return outcome
    }

    /// Whether the estimate follows the drift (its counted samples span ``driftSpan``).
    var fitsDrift: Bool { line?.fitted ?? false }

    var shortestRoundTrip: Int64? { samples.map(\.roundTrip).min() }

    var longestRoundTrip: Int64? { samples.map(\.roundTrip).max() }

    /// Whether there is an estimate (see the type's documentation).
    var isSettled: Bool {
        samples.count >= ClockEstimator.patientExchanges
            || samples.count >= ClockEstimator.settlingExchanges && (shortestRoundTrip ?? .max) <= ClockEstimator.settledRoundTrip
    }

    /// The estimated offset (group − local) at local time `local`; nil until ``isSettled``.
    func offset(atLocal local: Int64) -> Int64? {
        guard isSettled, let line else { return nil }
        return Int64((line.offset + line.slope * Double(local &- line.anchor)).rounded())
    }

    /// The samples that count (see the type's documentation).
    static func counted(_ samples: [Sample]) -> [Sample] {
        samples.filter { sample in
            let shortest =
                samples.lazy.map { other in
                    other.roundTrip &+ Int64(2 * typicalDrift * Double(abs(other.local &- sample.local)))
                }.min() ?? sample.roundTrip
            return sample.roundTrip <= shortest + max(Int64(Double(shortest) * roundTripSlack), 50_000)
        }
    }

    private static func fit(_ samples: [Sample]) -> Line? {
        let good = counted(samples)
        guard let first = good.first, let last = good.last else { return nil }
        guard good.count >= 4, last.local &- first.local >= driftSpan else {
            let newest = good.suffix(4)
            let mean = newest.reduce(0.0) { $0 + Double($1.offset &- last.offset) } / Double(newest.count)
            return Line(anchor: last.local, offset: Double(last.offset) + mean, slope: 0, fitted: false)
        }
        let count = Double(good.count)
        let meanX = good.reduce(0.0) { $0 + Double($1.local &- last.local) } / count
        let meanY = good.reduce(0.0) { $0 + Double($1.offset &- last.offset) } / count
        var covariance = 0.0, variance = 0.0
        for sample in good {
            let x = Double(sample.local &- last.local) - meanX
            covariance += x * (Double(sample.offset &- last.offset) - meanY)
            variance += x * x
        }
        let slope = variance > 0 ? min(max(covariance / variance, -maximumDrift), maximumDrift) : 0
        // The line through the means, written from the newest sample's time.
        return Line(anchor: last.local, offset: Double(last.offset) + meanY - slope * meanX, slope: slope, fitted: true)
    }
}
