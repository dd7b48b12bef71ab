import Foundation
import GroupSync
import GroupSyncTestSupport

/// 4b. Late join without retained messages (`--no-retain`, `MQTTClient.Configuration.retainedMessages`
/// off), beside the retained figure of ``LateJoinBenchmark``: `present` participants hold a value in one
/// session; a fresh one connects (not timed: its welcome brings the session), then `join()` is timed
/// until it holds the value — from the catch-up, the only place it can come from. Every participant
/// present answers the join with `$member` to the newcomer (PROTOCOL.md, Brokers without retained
/// messages); the messages to the newcomer are counted, and member records of others (none expected).
/// No raw floor: the retained join is the reference.
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
        let direct = "\(cluster.topics.root)/s/\(cluster.sessionID)/to/+/+"
        let sniffer = try await WireSniffer.start(url: cluster.url, filters: [members, direct])
        var times: [Double] = []
        var (answers, republished) = (0, 0)
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
            answersPerJoin: Double(answers) / Double(max(samples, 1)), memberRecordsPerJoin: Double(republished) / Double(max(samples, 1)),
            staleAtReturn: stale)

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
                    let records = sniffer.records(from: mark)
                    answers += records.filter { $0.topic.contains("/to/\(name)/") }.count
                    // The newcomer's own member record is not one.
                    republished += records.filter { $0.topic.contains("/member/") && !$0.topic.hasSuffix("/\(name)") && $0.size > 0 }.count
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
