import Foundation
import GroupSync
import GroupSyncTestSupport

/// 6. Crash detection: a participant in another process (`groupsync join`, built next to this binary) is
/// killed with SIGKILL; timed until every participant of the cluster has dropped it from its
/// `activeParticipantUpdates()`. Without the `groupsync` binary, an in-process coordinator's
/// `simulateCrash()` (socket closed without DISCONNECT) stands in.
enum CrashDetectionBenchmark {
    static var groupsyncExecutable: String? {
        let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        let candidate = directory.appendingPathComponent("groupsync").path
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        // CommandLine.arguments[0] may be a bare name found through PATH: try the real executable's directory.
        if let real = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            let beside = URL(fileURLWithPath: real).deletingLastPathComponent().appendingPathComponent("groupsync").path
            if FileManager.default.isExecutableFile(atPath: beside) { return beside }
        }
        return nil
    }

    static func run(cluster: SessionCluster, samples: Int, executable: String?) async throws -> BenchResults.Crash {
        var times: [Double] = []
        for sample in 0..<samples {
            let victim = Participant(id: "victim\(sample)")
            let kill: @Sendable () async -> Void
            var process: Process?
            if let executable {
                let child = Process()
                child.executableURL = URL(fileURLWithPath: executable)
                child.arguments = [
                    "join", SessionCluster.activity, "--session", cluster.sessionID, "--as", victim.id,
                    "--broker", cluster.url, "--group", cluster.group, "--keepalive", "5",
                ]
                let input = Pipe()  // kept open: EOF on stdin would make it leave cleanly
                child.standardInput = input
                child.standardOutput = FileHandle.nullDevice
                child.standardError = FileHandle.nullDevice
                try child.run()
                process = child
                let pid = child.processIdentifier
                kill = {
                    _ = Foundation.kill(pid, SIGKILL)
                    _ = input
                }
            } else {
                let coordinator = try await GroupCoordinator.connect(
                    .init(broker: cluster.url, group: cluster.group, participant: victim.id))
                let session = try await SessionCluster.findSession(coordinator, id: cluster.sessionID)
                try await session.join()
                kill = { await coordinator.simulateCrash() }
            }
            do {
                try await waitUntil(timeout: .seconds(20), pollEvery: .microseconds(200), "\(victim.id) active for everyone") {
                    cluster.members.allSatisfy { $0.session.activeParticipants.contains(victim) }
                }
            } catch {
                await kill()  // never leave the child process behind
                throw error
            }
            let updates = cluster.members.map { $0.session.activeParticipantUpdates() }
            let start = MonotonicClock.nanoseconds()
            await kill()
            let last = try await withTimeLimit(.seconds(30), "everyone drops \(victim.id)") {
                try await withThrowingTaskGroup(of: UInt64.self) { group in
                    for stream in updates {
                        group.addTask {
                            for await participants in stream where !participants.contains(victim) {
                                return MonotonicClock.nanoseconds()
                            }
                            throw SessionCluster.Failure(description: "participant updates ended")
                        }
                    }
                    return try await group.reduce(0) { max($0, $1) }
                }
            }
            times.append(Double(last - start) / 1e9)
            if let process {
                await BlockingThread.run("reap") { process.waitUntilExit() }
            }
        }
        let stats = Percentiles(times)
        return .init(
            p50: stats.p50, max: stats.max, samples: samples, observers: cluster.members.count,
            method: executable == nil ? "in-process simulateCrash() (groupsync binary not found)" : "SIGKILL of a groupsync join process")
    }
}
