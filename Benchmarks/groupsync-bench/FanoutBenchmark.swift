import Foundation

/// 3. Fan-out: one participant sets the shared state; the time until the last of the others' `values()`
/// consumers has the new value (each consumer notifies the ``ArrivalHub`` the moment it gets it).
enum FanoutBenchmark {
    static func run(cluster: SessionCluster, warmup: Int, samples: Int, firstValue: Int) async throws -> (BenchResults.Fanout, lastValue: Int) {
        let writer = cluster.members[0]
        let receivers = Set(cluster.members.dropFirst().map(\.index))
        var times: [Double] = []
        var value = firstValue
        for round in 0..<(warmup + samples) {
            value = firstValue + round
            cluster.hub.expect(value, from: receivers)
            let start = MonotonicClock.nanoseconds()
            try await writer.state!.set(value)
            let last = try await cluster.hub.wait(timeout: .seconds(10))
            if round >= warmup { times.append(MonotonicClock.milliseconds(from: start, to: last)) }
            // A change every few milliseconds, not a back-to-back burst.
            try await Task.sleep(for: .milliseconds(2))
        }
        let stats = Percentiles(times)
        return (.init(p50: stats.p50, p99: stats.p99, max: stats.max, participants: cluster.members.count, samples: stats.count), value)
    }
}
