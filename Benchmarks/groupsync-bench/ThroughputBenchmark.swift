import Foundation
import GroupSync

/// 2. Throughput from one sender to one receiver, messages per second received, GroupSync messenger vs
/// raw libmosquitto, with the same window of publishes in flight on both sides.
enum ThroughputBenchmark {
    static func run(url: String, group: String, qos: Int, warmup: Int, count: Int, window: Int, rounds: Int) async throws
        -> BenchResults.Throughput
    {
        let mode: GroupSessionMessenger.DeliveryMode = qos == 0 ? .unreliable : .reliable
        let address = try BrokerAddress(url)
        let groupSync = try await MessengerStream.make(url: url, group: group, mode: mode)
        let sniffer = try await WireSniffer.start(
            url: url, filters: [groupSync.cluster.topics.broadcast(groupSync.cluster.sessionID, from: groupSync.cluster.members[0].name)])
        _ = try await groupSync.run(count: warmup, window: window)
        _ = try await groupSync.run(count: warmup, window: window, asData: true)
        await sniffer.stop()
        let sizes = sniffer.records(from: 0).map(\.size)
        let payloadSize = sizes.isEmpty ? 64 : sizes[sizes.count / 2]

        let rawGroup = "r" + group.dropFirst()
        let raw = try RawStream(
            host: address.host, port: address.port,
            topic: "\(GroupTopics.protocolRoot)/\(rawGroup)/s/\(groupSync.cluster.sessionID)/all/t0",
            qos: Int32(qos), payloadSize: payloadSize, window: window)
        _ = try await BlockingThread.run("raw-warmup") { Result { try raw.run(count: warmup) } }.get()

        // Alternating rounds, who goes first swapped every round: the median round of each side is
        // reported, and beside it the ratio of each round on its own (a slow phase of the machine hits
        // both sides of one round alike).
        var rawRates: [Double] = []
        var rates: [Double] = []
        var dataRates: [Double] = []
        var roundRatios: [Double] = []
        var received = (groupSync: Int.max, raw: Int.max)
        for round in 0..<rounds {
            let groupSyncFirst = !round.isMultiple(of: 2)
            let early = groupSyncFirst ? try await groupSync.run(count: count, window: window) : nil
            let rawRun = try await BlockingThread.run("raw-stream") { Result { try raw.run(count: count) } }.get()
            let groupSyncRun: (received: Int, seconds: Double)
            if let early { groupSyncRun = early } else { groupSyncRun = try await groupSync.run(count: count, window: window) }
            let rate = Double(groupSyncRun.received) / groupSyncRun.seconds
            let rawRate = Double(rawRun.received) / rawRun.seconds
            rates.append(rate)
            rawRates.append(rawRate)
            roundRatios.append(rate / rawRate)
            let dataRun = try await groupSync.run(count: count, window: window, asData: true)
            dataRates.append(Double(dataRun.received) / dataRun.seconds)
            received = (min(received.groupSync, groupSyncRun.received), min(received.raw, rawRun.received))
        }
        raw.close()
        await groupSync.close()
        let perRoundRatio = Percentiles(roundRatios)
        return .init(
            rate: Percentiles(rates).p50, rawRate: Percentiles(rawRates).p50, dataRate: Percentiles(dataRates).p50,
            roundRatios: (perRoundRatio.percentile(25), perRoundRatio.p50, perRoundRatio.percentile(75), roundRatios.count),
            sent: count, received: received.groupSync, rawReceived: received.raw, window: window, payloadBytes: payloadSize)
    }
}
