import Foundation
import GroupSync

/// 13. Private sessions: the same figures with a keyring (sealed) and without, on the same broker in the
/// same run — `send(Data)` QoS 0 one-way latency and throughput, rounds alternating between the two; late
/// join with `present` participants; the journal's fan-out (10 MiB to 10 receivers), rounds alternating —
/// each as the ratio sealed / in clear.
enum PrivateBenchmark {
    /// A fixed key: the figure is the cost of sealing, whatever the key.
    static let keyring = try! GroupKeyring([GroupKey(id: "bench", secret: [UInt8](repeating: 7, count: 32))])

    static func run(url: String, group: String, options: BenchOptions) async throws -> BenchResults.Private {
        var result = BenchResults.Private()
        result.envelope = envelopes(count: 20_000)
        try await latencyAndThroughput(url: url, group: group, options: options, into: &result)
        try await lateJoin(url: url, group: group, options: options, into: &result)
        try await journal(url: url, group: group, plan: options.journal, into: &result)
        return result
    }

    /// What writing and reading one message's envelope costs in this process, µs each, in clear and sealed:
    /// `send(Data)`'s body (5 bytes) put into its envelope (and sealed), then the envelope read as a receiver
    /// reads it (and opened).
    static func envelopes(count: Int) -> BenchResults.Private.Envelope {
        let sealer = SessionSealer(keyring: keyring, group: "g", session: "s")
        let body = Data(#""MTI=""#.utf8)
        func measure(_ sealer: SessionSealer?) -> (write: Double, read: Double) {
            let sealing = sealer.map { Wire.EnvelopeBytes.Sealing(sealer: $0, session: "s", sender: "p0", recipient: nil) }
            var payloads: [Data] = []
            payloads.reserveCapacity(count)
            let start = MonotonicClock.nanoseconds()
            for seq in 1...count {
                let bytes = Wire.EnvelopeBytes(encodedBody: body).finished(
                    type: "Data", epoch: 1, seq: Int64(seq), reliable: false, sealing: sealing)
                payloads.append(Data(bytes))
            }
            let written = MonotonicClock.nanoseconds()
            var read = 0
            for payload in payloads {
                if let envelope = Wire.decodeEnvelope(payload),
                    envelope.opened(payload, by: sealer, session: "s", sender: "p0", recipient: nil) != nil
                {
                    read += 1
                }
            }
            let end = MonotonicClock.nanoseconds()
            precondition(read == count)
            return (
                MonotonicClock.microseconds(from: start, to: written) / Double(count),
                MonotonicClock.microseconds(from: written, to: end) / Double(count)
            )
        }
        _ = (measure(nil), measure(sealer))  // warm-up
        let (clear, sealed) = (measure(nil), measure(sealer))
        return .init(clearWrite: clear.write, clearRead: clear.read, sealedWrite: sealed.write, sealedRead: sealed.read)
    }

    /// Pairs of participants, in clear and sealed, interleaved: each pair's connections land where they
    /// land (threads, cores), which moves a pair's figures by several percent, so each kind gets several.
    static let pairsPerKind = 3

    private static func latencyAndThroughput(url: String, group: String, options: BenchOptions, into result: inout BenchResults.Private)
        async throws
    {
        var pairs: [(sealed: Bool, pair: MessengerPingPong)] = []
        var streams: [(sealed: Bool, stream: MessengerStream)] = []
        func closeAll() async {
            for (_, pair) in pairs { await pair.close() }
            for (_, stream) in streams { await stream.close() }
        }
        do {
            for index in 0..<(2 * pairsPerKind) {
                let sealed = index % 2 == 1
                pairs.append(
                    (
                        sealed,
                        try await MessengerPingPong.make(
                            url: url, group: "\(group)-l\(index)", mode: .unreliable, keyring: sealed ? keyring : nil)
                    ))
                streams.append(
                    (
                        sealed,
                        try await MessengerStream.make(
                            url: url, group: "\(group)-t\(index)", mode: .unreliable, keyring: sealed ? keyring : nil)
                    ))
            }
            var latency: [Bool: [Double]] = [:]
            var next = 0
            for (_, pair) in pairs { _ = try await pair.run(first: 0, count: options.latencyWarmup, asData: true) }
            next += options.latencyWarmup
            let perRound = max(options.latencySamples / options.latencyRounds / pairs.count, 1)
            for _ in 0..<options.latencyRounds {
                for (sealed, pair) in pairs {
                    latency[sealed, default: []] += try await pair.run(first: next, count: perRound, asData: true)
                }
                next += perRound
            }
            (result.latencyP50, result.sealedLatencyP50) = (Percentiles(latency[false]!).p50, Percentiles(latency[true]!).p50)

            var rates: [Bool: [Double]] = [:]
            for (_, stream) in streams { _ = try await stream.run(count: options.throughputWarmup, window: options.window, asData: true) }
            for _ in 0..<options.throughputRounds {
                for (sealed, stream) in streams {
                    let round = try await stream.run(count: options.throughputMessages / pairsPerKind, window: options.window, asData: true)
                    rates[sealed, default: []].append(Double(round.received) / round.seconds)
                }
            }
            (result.throughput, result.sealedThroughput) = (Percentiles(rates[false]!).p50, Percentiles(rates[true]!).p50)
        } catch {
            await closeAll()
            throw error
        }
        await closeAll()
        Log.progress(
            "private: send(Data) QoS 0 p50 \(String(format: "%.1f", result.latencyP50)) µs, sealed \(String(format: "%.1f", result.sealedLatencyP50)) µs; "
                + "throughput \(Int(result.throughput)) msg/s, sealed \(Int(result.sealedThroughput)) msg/s")
    }

    /// Late joins into a session in clear and a sealed one of `present` participants each, one of each
    /// kind in turn (the first swapped every sample) so that a slow phase of the machine hits both alike;
    /// each join starts once both sessions are quiet. The median of each kind.
    private static func lateJoin(url: String, group: String, options: BenchOptions, into result: inout BenchResults.Private) async throws {
        var clusters: [(cluster: SessionCluster, sniffer: WireSniffer)] = []
        func closeAll() async {
            for (cluster, sniffer) in clusters {
                await sniffer.stop()
                await cluster.close()
            }
        }
        let expected = 7
        var times: [[Double]] = [[], []]
        do {
            for (index, keyring) in [nil, keyring].enumerated() {
                let cluster = try await SessionCluster.make(
                    url: url, group: "\(group)-j\(index)", prefix: "q", count: options.fanoutParticipants, sharedState: true,
                    keyring: keyring)
                let sniffer: WireSniffer
                do {
                    sniffer = try await WireSniffer.start(url: url, filters: ["\(cluster.topics.root)/s/\(cluster.sessionID)/#"])
                } catch {
                    await cluster.close()
                    throw error
                }
                clusters.append((cluster, sniffer))
                cluster.hub.expect(expected, from: Set(cluster.members.map(\.index)))
                try await cluster.members[0].state!.set(expected)
                _ = try await cluster.hub.wait(timeout: .seconds(10))
            }
            for sample in 0..<options.lateJoinSamples {
                for index in sample.isMultiple(of: 2) ? [0, 1] : [1, 0] {
                    for (_, sniffer) in clusters { try await sniffer.waitQuiet(.milliseconds(20)) }
                    times[index].append(
                        try await join(
                            clusters[index].cluster, as: "late\(sample)", keyring: index == 1 ? keyring : nil, expected: expected))
                }
            }
        } catch {
            await closeAll()
            throw error
        }
        await closeAll()
        (result.lateJoinP50, result.sealedLateJoinP50) = (Percentiles(times[0]).p50, Percentiles(times[1]).p50)
        result.present = options.fanoutParticipants
    }

    /// A newcomer connects (not timed) and joins `cluster`'s session, timed until it holds `expected`
    /// (ms); then it leaves and closes.
    private static func join(_ cluster: SessionCluster, as name: String, keyring: GroupKeyring?, expected: Int) async throws -> Double {
        var configuration = try GroupCoordinator.Configuration(broker: cluster.url, group: cluster.group, participant: name)
        configuration.keyring = keyring
        let coordinator = try await GroupCoordinator.connect(configuration)
        do {
            let session = try await SessionCluster.findSession(coordinator, id: cluster.sessionID)
            let milliseconds = try await LateJoinBenchmark.timedJoin(session, expected: expected).milliseconds
            await session.leave()
            await coordinator.close()
            return milliseconds
        } catch {
            await coordinator.close()
            throw error
        }
    }

    /// Fan-out rounds in clear and sealed, alternating (each its own session and owner); the median of each.
    private static func journal(url: String, group: String, plan: JournalBenchmark.Plan, into result: inout BenchResults.Private)
        async throws
    {
        var clusters: [SessionCluster] = []
        do {
            for (index, keyring) in [nil, keyring].enumerated() {
                clusters.append(
                    try await SessionCluster.make(
                        url: url, group: "\(group)-f\(index)", prefix: "g", count: plan.receivers + 1, sharedState: false, keyring: keyring)
                )
            }
            let owners = clusters.map { GroupSessionJournal(session: $0.members[0].session) }
            var times: [[Double]] = [[], []]
            for round in 0..<plan.rounds {
                let data = try JournalBenchmark.randomData(plan.fanoutBytes)
                for kind in round.isMultiple(of: 2) ? [0, 1] : [1, 0] {
                    let fanout = try await JournalBenchmark.fanoutRound(
                        clusters[kind], owner: owners[kind], data: data, name: "private-\(round)")
                    times[kind].append(fanout.total)
                    Log.progress(
                        "private journal round \(round + 1), \(kind == 1 ? "sealed" : "in clear"): \(String(format: "%.1f", fanout.total)) ms "
                            + "(CPU \(String(format: "%.0f", fanout.cpu)) ms)")
                }
            }
            (result.journal, result.sealedJournal) = (Percentiles(times[0]).p50, Percentiles(times[1]).p50)
        } catch {
            for cluster in clusters { await cluster.close() }
            throw error
        }
        for cluster in clusters { await cluster.close() }
        (result.journalBytes, result.journalReceivers) = (plan.fanoutBytes, plan.receivers)
    }
}
