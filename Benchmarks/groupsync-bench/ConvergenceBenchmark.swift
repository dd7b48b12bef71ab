import Foundation

/// 5. Convergence: every participant of the cluster writes the same key at once (a different value
/// each). Measured: from the last write until every participant shows the same value (the arrival of
/// each one's final value, as its `values()` consumer saw it), and how many values each participant's
/// `values()` yielded during the burst.
enum ConvergenceBenchmark {
    static func run(cluster: SessionCluster, bursts: Int, firstValue: Int) async throws -> BenchResults.Convergence {
        let members = cluster.members
        var times: [Double] = []
        var maxChanges = 0, maxRemoteChanges = 0
        for burst in 0..<bursts {
            let before = members.map { $0.watcher!.count }
            let values = members.map { firstValue + burst * 1_000 + $0.index }
            let writeTimes = try await withThrowingTaskGroup(of: UInt64.self) { group in
                for member in members {
                    let value = values[member.index]
                    group.addTask {
                        let time = MonotonicClock.nanoseconds()
                        try await member.state!.set(value)
                        return time
                    }
                }
                return try await group.reduce(into: [UInt64]()) { $0.append($1) }
            }
            // Settled: everyone shows the same value, and nothing changes for 20 ms (every write was
            // acknowledged by the broker, so every record is on its way; a later one would only lose).
            var settled = false
            while !settled {
                try await SessionCluster.waitUntil(seconds: 10, "burst \(burst) converges") {
                    Set(members.map { $0.watcher!.latest }).count == 1
                }
                let counts = members.map { $0.watcher!.count }
                try await Task.sleep(for: .milliseconds(20))
                settled = counts == members.map { $0.watcher!.count } && Set(members.map { $0.watcher!.latest }).count == 1
            }
            let snapshots = members.map { $0.watcher!.current }
            let lastWrite = writeTimes.max()!
            let converged = snapshots.map(\.latestAt).max()!
            times.append(converged > lastWrite ? MonotonicClock.milliseconds(from: lastWrite, to: converged) : 0)
            for (member, snapshot) in zip(members, snapshots) {
                let seen = snapshot.history[before[member.index]...]
                maxChanges = max(maxChanges, seen.count)
                maxRemoteChanges = max(maxRemoteChanges, seen.filter { $0 != values[member.index] }.count)
            }
            try await Task.sleep(for: .milliseconds(5))
        }
        let stats = Percentiles(times)
        return .init(
            p50: stats.p50, p99: stats.p99, max: stats.max, maxChanges: maxChanges, maxRemoteChanges: maxRemoteChanges,
            writers: members.count, bursts: bursts)
    }
}
