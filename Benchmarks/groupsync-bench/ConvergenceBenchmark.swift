import Foundation
import GroupSync
import GroupSyncTestSupport

/// 5. Convergence: every participant of the cluster writes the same key at once (a different value
/// each). Measured: from the last write until every participant shows the same value (the arrival of
/// each one's final value, as its `valueUpdates()` consumer saw it), and how many values each participant's
/// `valueUpdates()` yielded during the burst.
///
/// Beside it, the raw libmosquitto floor (``RawConvergence``): as many raw clients, each publishing one
/// message of a state record's size at once, timed until every client has all of them. GroupSync and raw
/// bursts alternate, one each, so that a slow phase of the machine hits both alike. The raw clients are
/// set up after the first GroupSync burst, which leaves the state records retained on the broker: the
/// record size is read from one of them, without adding a reader to any measured burst.
enum ConvergenceBenchmark {
    static func run(cluster: SessionCluster, bursts: Int, firstValue: Int) async throws -> BenchResults.Convergence {
        let members = cluster.members
        var times: [Double] = []
        var rawTimes: [Double] = []
        var maxChanges = 0, maxRemoteChanges = 0
        var raw: RawConvergence?
        var payloadSize = 0
        do {
            for burst in 0..<bursts {
                let outcome = try await groupSyncBurst(members, burst: burst, firstValue: firstValue)
                times.append(outcome.milliseconds)
                maxChanges = max(maxChanges, outcome.changes)
                maxRemoteChanges = max(maxRemoteChanges, outcome.remoteChanges)
                try await Task.sleep(for: .milliseconds(5))

                if raw == nil {
                    payloadSize = try await cluster.stateRecordSize(of: members[0])
                    let made = try await makeRaw(cluster, payloadSize: payloadSize)
                    raw = made
                    _ = try await BlockingThread.run("raw-conv-warmup") { Result { try made.burst() } }.get()
                    try await Task.sleep(for: .milliseconds(5))
                }
                let rawBurst = raw!
                rawTimes.append(try await BlockingThread.run("raw-conv") { Result { try rawBurst.burst() } }.get())
                try await Task.sleep(for: .milliseconds(5))
            }
        } catch {
            await close(raw)
            throw error
        }
        await close(raw)
        let stats = Percentiles(times), rawStats = Percentiles(rawTimes)
        return .init(
            p50: stats.p50, p99: stats.p99, max: stats.max, maxChanges: maxChanges, maxRemoteChanges: maxRemoteChanges,
            writers: members.count, bursts: bursts, rawP50: rawStats.p50, rawP99: rawStats.p99, rawMax: rawStats.max,
            payloadBytes: payloadSize)
    }

    /// One GroupSync burst: every member `set`s its own value in a task of its own, all at once.
    private static func groupSyncBurst(
        _ members: [ClusterMember], burst: Int, firstValue: Int
    ) async throws -> (milliseconds: Double, changes: Int, remoteChanges: Int) {
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
            try await waitUntil(timeout: .seconds(10), pollEvery: .microseconds(200), "burst \(burst) converges") {
                Set(members.map { $0.watcher!.latest }).count == 1
            }
            let counts = members.map { $0.watcher!.count }
            try await Task.sleep(for: .milliseconds(20))
            settled = counts == members.map { $0.watcher!.count } && Set(members.map { $0.watcher!.latest }).count == 1
        }
        let snapshots = members.map { $0.watcher!.current }
        let lastWrite = writeTimes.max()!
        let converged = snapshots.map(\.latestAt).max()!
        var changes = 0, remoteChanges = 0
        for (member, snapshot) in zip(members, snapshots) {
            let seen = snapshot.history[before[member.index]...]
            changes = max(changes, seen.count)
            remoteChanges = max(remoteChanges, seen.filter { $0 != values[member.index] }.count)
        }
        return (converged > lastWrite ? MonotonicClock.milliseconds(from: lastWrite, to: converged) : 0, changes, remoteChanges)
    }

    /// As many raw clients as members, on topics as long as GroupSync's state topics.
    private static func makeRaw(_ cluster: SessionCluster, payloadSize: Int) async throws -> RawConvergence {
        let address = try BrokerAddress(cluster.url)
        let root = cluster.rawStateRoot
        let count = cluster.members.count
        return try await BlockingThread.run("raw-conv-connect") {
            Result { try RawConvergence(host: address.host, port: address.port, root: root, count: count, payloadSize: payloadSize) }
        }.get()
    }

    /// Closes the raw clients on a thread of their own (it waits for PUBACKs and joins threads).
    private static func close(_ raw: RawConvergence?) async {
        guard let raw else { return }
        await BlockingThread.run("raw-conv-close") { raw.close() }
    }
}
