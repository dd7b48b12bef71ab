import Foundation
import GroupSync

/// 1. One-way messenger latency (half a ping-pong round trip), GroupSync vs raw libmosquitto, QoS 0 and
/// QoS 1. Both run on the same broker with the same payload size (the GroupSync envelope's) and topics of
/// the same length, alternating in rounds so that a slow phase of the machine hits both alike. At QoS 1 a
/// third side runs in the same rounds: raw libmosquitto awaiting each PUBACK as GroupSync's `send` does.
/// GroupSync runs twice per round: with a Codable ``Ping`` and with the same sequence number as `Data`,
/// whose difference is set against Foundation's own encode + decode of a `Ping`, measured in the run.
enum LatencyBenchmark {
    static func run(url: String, group: String, qos: Int, warmup: Int, samples: Int, rounds: Int) async throws -> BenchResults.Latency {
        let mode: GroupSessionMessenger.DeliveryMode = qos == 0 ? .unreliable : .reliable
        let address = try BrokerAddress(url)
        let groupSync = try await MessengerPingPong.make(url: url, group: group, mode: mode)
        var raws: [RawPingPong] = []
        func closeAll() async {
            for raw in raws { raw.close() }
            await groupSync.close()
        }
        do {
            _ = try await groupSync.run(first: 0, count: warmup)
            _ = try await groupSync.run(first: 0, count: warmup, asData: true)
            // Same number of digits as the measured exchanges' sequence numbers.
            let payloadSize = try await groupSync.envelopeSize(sequence: warmup + samples / 2)
            var next = warmup + 1

            // Topics as long as GroupSync's: groupsync/v2/<group>/s/<session>/all/<participant>.
            let rawGroup = "r" + group.dropFirst()
            let rawRoot = "\(GroupTopics.protocolRoot)/\(rawGroup)/s/\(groupSync.cluster.sessionID)/all"
            let raw = try RawPingPong(
                host: address.host, port: address.port, pingTopic: "\(rawRoot)/p0", pongTopic: "\(rawRoot)/p1",
                qos: Int32(qos), payloadSize: payloadSize)
            raws.append(raw)
            _ = try await BlockingThread.run("raw-warmup") { Result { try raw.run(first: 0, count: warmup) } }.get()
            var acknowledged: RawPingPong?
            if qos > 0 {
                let reference = try RawPingPong(
                    host: address.host, port: address.port, pingTopic: "\(rawRoot)/a0", pongTopic: "\(rawRoot)/a1",
                    qos: Int32(qos), payloadSize: payloadSize, awaitsAcknowledgement: true)
                raws.append(reference)
                acknowledged = reference
                _ = try await BlockingThread.run("raw-warmup") { Result { try reference.run(first: 0, count: warmup) } }.get()
            }

            var groupSyncSamples: [Double] = []
            var dataSamples: [Double] = []
            var rawSamples: [Double] = []
            var acknowledgedSamples: [Double] = []
            var roundRatios: [Double] = []
            var codableOverData: [Double] = []
            let perRound = max(samples / rounds, 1)
            for round in 0..<rounds {
                let first = next
                let rawRound = try await BlockingThread.run("raw-ping") { Result { try raw.run(first: first, count: perRound) } }.get()
                // Codable and Data in turn, the first swapped every round: neither always runs in the other's wake.
                let dataFirst = round.isMultiple(of: 2)
                let early = dataFirst ? try await groupSync.run(first: next, count: perRound, asData: true) : []
                let groupSyncRound = try await groupSync.run(first: next, count: perRound)
                let dataRound = dataFirst ? early : try await groupSync.run(first: next, count: perRound, asData: true)
                dataSamples += dataRound
                rawSamples += rawRound
                groupSyncSamples += groupSyncRound
                roundRatios.append(Percentiles(groupSyncRound).p50 / Percentiles(rawRound).p50)
                codableOverData.append(Percentiles(groupSyncRound).p50 - Percentiles(dataRound).p50)
                if let acknowledged {
                    acknowledgedSamples += try await BlockingThread.run("raw-ping") {
                        Result { try acknowledged.run(first: first, count: perRound) }
                    }.get()
                }
                next += perRound
            }
            await closeAll()
            let measured = Percentiles(groupSyncSamples), baseline = Percentiles(rawSamples), data = Percentiles(dataSamples)
            let reference = acknowledged.map { _ in Percentiles(acknowledgedSamples) }
            let perRoundRatio = Percentiles(roundRatios)
            return .init(
                p50: measured.p50, p99: measured.p99, rawP50: baseline.p50, rawP99: baseline.p99,
                rawAcknowledged: reference.map { ($0.p50, $0.p99) }, data: (data.p50, data.p99),
                codecMicroseconds: try codecMicroseconds(), codableOverData: Percentiles(codableOverData).p50,
                roundRatios: (perRoundRatio.percentile(25), perRoundRatio.p50, perRoundRatio.percentile(75), roundRatios.count),
                payloadBytes: payloadSize, samples: measured.count)
        } catch {
            await closeAll()  // later sections must not share the machine with these connections and threads
            throw error
        }
    }

    /// Foundation's own cost of one `Ping` through `JSONEncoder` and back through `JSONDecoder` (configured
    /// as the messenger's), in µs: the median of 21 batches of 1,000.
    static func codecMicroseconds() throws -> Double {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let decoder = JSONDecoder()
        var batches: [Double] = []
        for batch in 0..<21 {
            let start = MonotonicClock.nanoseconds()
            for sequence in 0..<1_000 {
                let ping = try decoder.decode(Ping.self, from: try encoder.encode(Ping(seq: batch * 1_000 + sequence)))
                guard ping.seq == batch * 1_000 + sequence else { throw SessionCluster.Failure(description: "codec round trip") }
            }
            batches.append(MonotonicClock.microseconds(from: start, to: MonotonicClock.nanoseconds()) / 1_000)
        }
        return Percentiles(batches).p50
    }
}
