import Foundation
import GroupSync
import GroupSyncTestSupport

/// 4b. Late join without retained messages (`--no-retain`, `MQTTClient.Configuration.retainedMessages`
/// off), beside the retained figure of ``LateJoinBenchmark``: `present` participants hold a value in one
/// session; a fresh one connects (not timed: its welcome brings the session), then `join()` is timed
/// until it holds the value — from the catch-up, the only place it can come from. Every participant
/// present answers the join with its member record again (PROTOCOL.md, Brokers without retained
/// messages); those deliveries are counted too. No raw floor: the retained join is the reference.
enum RetainlessLateJoinBenchmark {
    static func run(url: String, group: String, present: Int, samples: Int) async throws -> BenchResults.RetainlessLateJoin {
        let cluster = try await SessionCluster.make(
            url: url, group: group, prefix: "n", count: present, sharedState: true, retainedMessages: false)
        let outcome: Result<BenchResults.RetainlessLateJoin, any Error>
        do {
            outcome = .success(try await measure(cluster, present: present, samples: samples))
        } catch {
            outcome = .failure(error)
        }
        await cluster.close()
        return try outcome.get()
    }

    private static func measure(_ cluster: SessionCluster, present: Int, samples: Int) async throws -> BenchResults.RetainlessLateJoin {
        let expected = 7
        cluster.hub.expect(expected, from: Set(cluster.members.map(\.index)))
        try await cluster.members[0].state!.set(expected)
        _ = try await cluster.hub.wait(timeout: .seconds(10))
        let members = "\(cluster.topics.root)/s/\(cluster.sessionID)/member/+"
        let sniffer = try await WireSniffer.start(url: cluster.url, filters: [members])
        var times: [Double] = []
        var republished = 0
        var stale = 0
        do {
            try await joins()
        } catch {
            await sniffer.stop()
            throw error
        }
        await sniffer.stop()
        let percentiles = Percentiles(times)
        return BenchResults.RetainlessLateJoin(
            p50: percentiles.p50, p99: percentiles.p99, participants: present, samples: samples,
            memberRecordsPerJoin: Double(republished) / Double(max(samples, 1)), staleAtReturn: stale)

        func joins() async throws {
            for sample in 0..<samples {
                let name = "nlate\(sample)"
                let coordinator = try await GroupCoordinator.connect(
                    SessionCluster.configuration(url: cluster.url, group: cluster.group, participant: name, retainedMessages: false))
                let outcome: Result<Void, any Error>
                do {
                    let session = try await SessionCluster.findSession(coordinator, id: cluster.sessionID)
                    try await sniffer.waitQuiet(.milliseconds(20))
                    let mark = sniffer.count
                    let join = try await LateJoinBenchmark.timedJoin(session, expected: expected)
                    times.append(join.milliseconds)
                    if join.stale { stale += 1 }
                    try await sniffer.waitQuiet(.milliseconds(30))
                    // Member records of others during the join: the answers to it (the newcomer's own is not one).
                    republished += sniffer.records(from: mark).filter { !$0.topic.hasSuffix("/\(name)") && $0.size > 0 }.count
                    outcome = .success(())
                } catch {
                    outcome = .failure(error)
                }
                await coordinator.close()
                try outcome.get()
            }
        }
    }
}
