import Foundation
import GroupSync

/// 10b. The journal's fan-out without retained messages (`--no-retain`): the same rounds as
/// ``JournalBenchmark``'s, every participant told to use none, so the owner serves the chunks on request
/// (`$chunks`) instead of the broker replaying them. The raw floor alternates as there.
enum RetainlessJournalBenchmark {
    static func run(url: String, group: String, plan: JournalBenchmark.Plan) async throws -> JournalBenchmark.Fanout {
        let cluster = try await SessionCluster.make(
            url: url, group: group, prefix: "k", count: plan.receivers + 1, sharedState: false, retainedMessages: false)
        let outcome: Result<JournalBenchmark.Fanout, any Error>
        do {
            outcome = .success(
                try await JournalBenchmark.fanout(cluster, owner: GroupSessionJournal(session: cluster.members[0].session), plan: plan))
        } catch {
            outcome = .failure(error)
        }
        await cluster.close()
        return try outcome.get()
    }
}
