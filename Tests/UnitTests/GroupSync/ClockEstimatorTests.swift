import Testing

@testable import GroupSync

/// The group clock's filter, without a broker: exchanges made by hand with known delays.
@Suite struct ClockEstimatorTests {
    /// One exchange at local time `local` with a clock `offset` ahead, `out` and `back` nanoseconds of
    /// one-way delay and `service` between receipt and answer.
    @discardableResult
    static func exchange(
        _ estimator: inout ClockEstimator, local: Int64, offset: Int64, out: Int64, back: Int64, service: Int64 = 10_000
    ) -> ClockEstimator.Outcome {
        let t0 = local
        let t1 = local + out + offset
        let t2 = t1 + service
        let t3 = t2 - offset + back
        return estimator.add(sent: t0, received: t1, replied: t2, back: t3)
    }

    @Test func symmetricDelaysGiveTheExactOffset() {
        var estimator = ClockEstimator()
        #expect(estimator.offset(atLocal: 0) == nil)
        for i in 1...4 {
            Self.exchange(&estimator, local: Int64(i) * 5_000_000, offset: 600_000_000_000, out: 150_000, back: 150_000)
        }
        #expect(estimator.offset(atLocal: 21_000_000) == 600_000_000_000)
        #expect(estimator.shortestRoundTrip == 300_000)
    }

    /// One exchange delayed one way is off by half the delay: a first estimate waits for a few, and the
    /// shortest of them wins.
    @Test func aFirstEstimateWaitsForEnoughExchanges() {
        var estimator = ClockEstimator()
        let offset: Int64 = 42_000_000_000
        Self.exchange(&estimator, local: 0, offset: offset, out: 200_000, back: 14_000_000)
        for i in 1..<ClockEstimator.settlingExchanges {
            #expect(estimator.offset(atLocal: Int64(i) * 5_000_000) == nil, "\(i) exchanges")
            Self.exchange(&estimator, local: Int64(i) * 5_000_000, offset: offset, out: 200_000, back: 200_000)
        }
        #expect(estimator.offset(atLocal: 20_000_000) == offset, "the delayed exchange does not count")
    }

    /// A stalled thread holds a whole burst up on one way, each ping less than the one before (the pings
    /// queue and go at once): no estimate until one exchange is short enough to bound the error.
    @Test func aStalledBurstIsNotAnEstimate() throws {
        var estimator = ClockEstimator()
        let offset: Int64 = 7_000_000_000
        for i in 0..<8 {
            let stall = Int64(40 - 5 * i) * 1_000_000
            Self.exchange(&estimator, local: Int64(i) * 5_000_000, offset: offset, out: 200_000 + stall, back: 200_000)
            #expect(estimator.offset(atLocal: Int64(i) * 5_000_000) == nil, "exchange \(i), \(stall / 1_000_000) ms stalled")
        }
        Self.exchange(&estimator, local: 45_000_000, offset: offset, out: 200_000, back: 200_000)
        let estimate = try #require(estimator.offset(atLocal: 46_000_000))
        #expect(estimate == offset, "only the quiet exchange counts")
    }

    /// Over a distant broker no round trip is short: enough exchanges settle the estimate anyway.
    @Test func aDistantReferenceSettlesAfterMoreExchanges() {
        var estimator = ClockEstimator()
        for i in 0..<ClockEstimator.patientExchanges {
            #expect(estimator.offset(atLocal: Int64(i) * 5_000_000) == nil)
            Self.exchange(&estimator, local: Int64(i) * 5_000_000, offset: 5_000_000, out: 20_000_000, back: 20_000_000)
        }
        #expect(estimator.offset(atLocal: 80_000_000) == 5_000_000)
    }

    /// An exchange delayed one way (a queue, a late task) is off by half its extra delay: the shortest
    /// round trips win, so it does not count.
    @Test func theShortestRoundTripsWin() {
        var estimator = ClockEstimator()
        let offset: Int64 = -123_456_789
        for i in 0..<8 { Self.exchange(&estimator, local: Int64(i) * 1_000_000, offset: offset, out: 200_000, back: 200_000) }
        for i in 8..<16 { Self.exchange(&estimator, local: Int64(i) * 1_000_000, offset: offset, out: 200_000, back: 5_000_000) }
        #expect(estimator.offset(atLocal: 20_000_000) == offset)
    }

    /// Two clocks drifting 100 ppm apart: the fitted line keeps the offset within microseconds between
    /// exchanges a second apart.
    @Test func driftIsFollowed() throws {
        var estimator = ClockEstimator()
        let drift = 100e-6
        for second in 0..<10 {
            let local = Int64(second) * 1_000_000_000
            Self.exchange(&estimator, local: local, offset: Int64(Double(local) * drift), out: 100_000, back: 100_000)
        }
        let later: Int64 = 10_500_000_000
        let estimate = try #require(estimator.offset(atLocal: later))
        #expect(abs(estimate - Int64(Double(later) * drift)) < 5_000, "\(estimate)")
    }

    /// The first burst's exchanges, made on a quiet machine, are shorter than every later one: later ones
    /// still count (each is judged against its own moment), so the drift is followed all the same — soon
    /// after the burst too, with exchanges 100 ms apart as a follower makes them before its drift is
    /// fitted (stuck with the burst, the estimate would be 400 µs off two seconds later, at 200 ppm).
    @Test(arguments: [(every: Int64(1_000_000_000), oneWay: Int64(300_000)), (every: 100_000_000, oneWay: 150_000)])
    func aCalmStartDoesNotOutshineLaterExchanges(every interval: Int64, oneWay: Int64) throws {
        var estimator = ClockEstimator()
        let drift = 200e-6
        for i in 0..<8 {
            let local = Int64(i) * 5_000_000
            Self.exchange(&estimator, local: local, offset: Int64(Double(local) * drift), out: 50_000, back: 50_000)
        }
        for n in 1...20 {
            let local = Int64(n) * interval
            Self.exchange(&estimator, local: local, offset: Int64(Double(local) * drift), out: oneWay, back: oneWay)
        }
        #expect(estimator.fitsDrift)
        let later = 20 * interval + interval / 2
        let estimate = try #require(estimator.offset(atLocal: later))
        #expect(abs(estimate - Int64(Double(later) * drift)) < 20_000, "\(estimate)")
    }

    /// Once the estimate follows the drift, each exchange says whether the estimate foresaw it: within half
    /// its round trip (its own error) plus 0.25 ms. A slow exchange, whose error is large, contradicts
    /// nothing; a clock that was set is not foreseen.
    @Test func anExchangeConfirmsOrContradictsTheEstimate() {
        var estimator = ClockEstimator()
        let drift = 100e-6
        func offset(_ local: Int64) -> Int64 { 7_000_000_000 + Int64(Double(local) * drift) }
        var outcomes: [ClockEstimator.Outcome] = []
        for n in 0..<13 {  // the samples span the 1 s that fitting the drift takes at the 11th
            let local = Int64(n) * 100_000_000
            outcomes.append(Self.exchange(&estimator, local: local, offset: offset(local), out: 100_000, back: 100_000))
        }
        #expect(outcomes.prefix(11).allSatisfy { $0 == .added } && outcomes.suffix(2) == [.confirmed, .confirmed], "\(outcomes)")
        // Seconds later, the drift foreseen.
        #expect(Self.exchange(&estimator, local: 9_000_000_000, offset: offset(9_000_000_000), out: 100_000, back: 100_000) == .confirmed)
        // One way 2 ms slower: off by 1 ms, but within half of its round trip.
        #expect(Self.exchange(&estimator, local: 9_500_000_000, offset: offset(9_500_000_000), out: 2_100_000, back: 100_000) == .confirmed)
        // The clock 0.4 ms further than its drift says, on a quick exchange.
        #expect(
            Self.exchange(&estimator, local: 10_000_000_000, offset: offset(10_000_000_000) + 400_000, out: 100_000, back: 100_000)
                == .contradicted)
    }

    @Test func impossibleExchangesAreIgnored() {
        var estimator = ClockEstimator()
        let negative = estimator.add(sent: 10, received: 100, replied: 100, back: 5)
        let backwards = estimator.add(sent: 0, received: 100, replied: 50, back: 200)
        #expect(negative == .ignored, "a negative round trip")
        #expect(backwards == .ignored, "answered before received")
        // Times in range (±9×10¹⁸ ns) whose sums are not: a forged answer 7×10¹⁸ ns ahead, which wrapping
        // arithmetic turned into an offset of the other sign.
        let now: Int64 = 1_796_000_000_000_000_000
        let far = now + 7_000_000_000_000_000_000
        #expect(estimator.add(sent: now, received: far, replied: far, back: now + 1_000) == .ignored, "an offset beyond 64 bits")
        #expect(estimator.add(sent: now, received: -9_000_000_000_000_000_000, replied: far, back: now + 1_000) == .ignored)
        #expect(estimator.samples.isEmpty)
        for i in 0..<(ClockEstimator.capacity + 8) { Self.exchange(&estimator, local: Int64(i), offset: 0, out: 1, back: 1) }
        #expect(estimator.samples.count == ClockEstimator.capacity)
    }
}
