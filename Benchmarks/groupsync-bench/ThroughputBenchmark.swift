import Foundation
import GroupSync

/// 2. Throughput from one sender to one receiver, messages per second received, GroupSync messenger vs
/// raw libmosquitto, with the same window of publishes in flight on both sides.
enum ThroughputBenchmark {
    static func run(url: String, group: String, qos: Int, warmup: Int, count: Int, window: Int, rounds: Int) async throws -> BenchResults.Throughput {
        let mode: GroupSessionMessenger.DeliveryMode = qos == 0 ? .unreliable : .reliable
        let address = try BrokerAddress(url)
        let groupSync = try await MessengerStream.make(url: url, group: group, mode: mode)
        let sniffer = try await WireSniffer.start(
            url: url, filters: [groupSync.cluster.topics.broadcast(groupSync.cluster.sessionID, from: groupSync.cluster.members[0].name)])
        _ = try await groupSync.run(count: warmup, window: window)
        await sniffer.stop()
        let sizes = sniffer.records(from: 0).map(\.size)
        let payloadSize = sizes.isEmpty ? 64 : sizes[sizes.count / 2]

        let rawGroup = "r" + group.dropFirst()
        let raw = try RawStream(
            host: address.host, port: address.port,
            topic: "\(GroupTopics.protocolRoot)/\(rawGroup)/s/\(groupSync.cluster.sessionID)/msg/all/t0",
            qos: Int32(qos), payloadSize: payloadSize, window: window)
        _ = try await BlockingThread.run("raw-warmup") { Result { try raw.run(count: warmup) } }.get()

        // Alternating rounds; the median round of each side is reported.
        var rawRuns: [(received: Int, seconds: Double)] = []
        var groupSyncRuns: [(received: Int, seconds: Double)] = []
        for _ in 0..<rounds {
            rawRuns.append(try await BlockingThread.run("raw-stream") { Result { try raw.run(count: count) } }.get())
            groupSyncRuns.append(try await groupSync.run(count: count, window: window))
        }
        raw.close()
        await groupSync.close()
        let rawMedian = rawRuns.sorted { Double($0.received) / $0.seconds < Double($1.received) / $1.seconds }[rounds / 2]
        let median = groupSyncRuns.sorted { Double($0.received) / $0.seconds < Double($1.received) / $1.seconds }[rounds / 2]
        return .init(
            rate: Double(median.received) / median.seconds, rawRate: Double(rawMedian.received) / rawMedian.seconds,
            sent: count, received: median.received, rawReceived: rawMedian.received, window: window, payloadBytes: payloadSize)
    }
}
