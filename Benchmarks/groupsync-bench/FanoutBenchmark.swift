import Foundation
import GroupSync

/// 3. Fan-out: one participant sets the shared state; the time until the last of the others' `valueUpdates()`
/// consumers has the new value (each consumer notifies the ``ArrivalHub`` the moment it gets it).
///
/// Beside it, the raw libmosquitto floor (``RawFanout``): as many raw clients as participants, one of them
/// publishing one message of a state record's size, timed until the last of the others has it. GroupSync
/// and raw samples alternate, one each, so that a slow phase of the machine hits both alike; the same
/// warm-up and sample counts on each side. The raw clients are set up after the first GroupSync change,
/// which leaves the writer's state record retained on the broker: the record size is read from it,
/// without adding a reader to any measured change. They are closed before this returns (the late-join
/// section uses the same cluster, and needs its descriptors and a session with nothing extra retained).
enum FanoutBenchmark {
    static func run(cluster: SessionCluster, warmup: Int, samples: Int, firstValue: Int) async throws -> (
        BenchResults.Fanout, lastValue: Int
    ) {
        var times: [Double] = []
        var rawTimes: [Double] = []
        var value = firstValue
        var raw: RawFanout?
        var payloadSize = 0
        do {
            for round in 0..<(warmup + samples) {
                value = firstValue + round
                let time = try await groupSyncChange(cluster, value: value)
                if round >= warmup { times.append(time) }
                // A change every few milliseconds, not a back-to-back burst.
                try await Task.sleep(for: .milliseconds(2))

                if raw == nil {
                    payloadSize = try await cluster.stateRecordSize(of: cluster.members[0])
                    raw = try await makeRaw(cluster, payloadSize: payloadSize)
                }
                let rawFanout = raw!
                let rawTime = try await BlockingThread.run("raw-fanout") { Result { try rawFanout.sample() } }.get()
                if round >= warmup { rawTimes.append(rawTime) }
                try await Task.sleep(for: .milliseconds(2))
            }
        } catch {
            await close(raw)
            throw error
        }
        await close(raw)
        let stats = Percentiles(times), rawStats = Percentiles(rawTimes)
        return (
            .init(
                p50: stats.p50, p99: stats.p99, max: stats.max, participants: cluster.members.count, samples: stats.count,
                rawP50: rawStats.p50, rawP99: rawStats.p99, rawMax: rawStats.max, payloadBytes: payloadSize), value
        )
    }

    /// One GroupSync change: the first member `set`s `value`; the milliseconds until the last of the others'
    /// consumers had it.
    private static func groupSyncChange(_ cluster: SessionCluster, value: Int) async throws -> Double {
        let receivers = Set(cluster.members.dropFirst().map(\.index))
        cluster.hub.expect(value, from: receivers)
        let start = MonotonicClock.nanoseconds()
        try await cluster.members[0].state!.set(value)
        let last = try await cluster.hub.wait(timeout: .seconds(10))
        return MonotonicClock.milliseconds(from: start, to: last)
    }

    /// As many raw clients as members, on a topic as long as the writer's state topic.
    private static func makeRaw(_ cluster: SessionCluster, payloadSize: Int) async throws -> RawFanout {
        let address = try BrokerAddress(cluster.url)
        let topic = "\(cluster.rawStateRoot)/\(cluster.members[0].name)"
        let count = cluster.members.count
        return try await BlockingThread.run("raw-fanout-connect") {
            Result { try RawFanout(host: address.host, port: address.port, topic: topic, count: count, payloadSize: payloadSize) }
        }.get()
    }

    /// Clears the raw message and disconnects the raw clients, on a thread of their own (it waits for a
    /// PUBACK and joins libmosquitto's threads).
    private static func close(_ raw: RawFanout?) async {
        guard let raw else { return }
        await BlockingThread.run("raw-fanout-close") { raw.close() }
    }
}
