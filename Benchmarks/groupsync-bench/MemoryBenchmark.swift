import Foundation
import GroupSync
import GroupSyncTestSupport
import Synchronization

/// 7. Memory: the resident size a process gains by holding N participants in one session (N
/// coordinators, N connections, all joined), and by holding one participant in N sessions. Each is
/// measured in a fresh child process (this binary with `--memory-child`), so that nothing allocated by
/// the other measurements blurs it: baseline RSS at the child's start, then RSS once everything joined.
enum MemoryBenchmark {
    enum Kind: String, Sendable {
        case participants, sessions
    }

    /// Both scenarios; one failing does not keep the other from being measured (its error is returned).
    static func run(url: String, participants: Int, sessions: Int, cleanExit: Bool) async -> (BenchResults.Memory, [String]) {
        var memory = BenchResults.Memory(participants: participants, sessions: sessions)
        var failures: [String] = []
        do {
            let child = try await spawnChild(.participants, count: participants, url: url, cleanExit: cleanExit)
            memory.participantsBytes = child.bytes
            memory.participantsReached = child.reached
        } catch {
            failures.append("memory, \(participants) participants: \(error)")
        }
        do {
            let child = try await spawnChild(.sessions, count: sessions, url: url, cleanExit: cleanExit)
            memory.sessionsBytes = child.bytes
            memory.sessionsReached = child.reached
        } catch {
            failures.append("memory, \(sessions) sessions: \(error)")
        }
        return (memory, failures)
    }

    private static func spawnChild(_ kind: Kind, count: Int, url: String, cleanExit: Bool) async throws -> (bytes: Int, reached: Int) {
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        let child = Process()
        child.executableURL = URL(fileURLWithPath: executable)
        child.arguments =
            ["--memory-child", kind.rawValue, "--count", String(count), "--broker", url] + (cleanExit ? ["--clean-exit"] : [])
        let output = Pipe()
        child.standardOutput = output
        child.standardError = FileHandle.standardError
        try child.run()
        // A child that hangs (a connection that never completes, say) is killed after 15 minutes.
        let pid = child.processIdentifier
        let watchdog = Task {
            do { try await Task.sleep(for: .seconds(900)) } catch { return }
            _ = kill(pid, SIGKILL)
        }
        defer { watchdog.cancel() }
        let text = await BlockingThread.run("memory-child") { () -> String in
            let data = output.fileHandleForReading.readDataToEndOfFile()
            return String(decoding: data, as: UTF8.self)
        }
        child.waitUntilExit()
        func field(_ name: String) -> Int? {
            text.split(separator: "\n").first(where: { $0.hasPrefix(name + " ") }).flatMap { Int($0.split(separator: " ")[1]) }
        }
        guard child.terminationStatus == 0, let bytes = field("rss_increase_bytes"), let reached = field("reached") else {
            throw SessionCluster.Failure(
                description: "memory child (\(kind.rawValue), \(count)) failed with status \(child.terminationStatus): \(text)")
        }
        return (bytes, reached)
    }

    /// The child's side: builds the scenario, prints `rss_increase_bytes N`, returns the exit status.
    static func child(kind: Kind, count: Int, url: String, cleanExit: Bool) async -> Int32 {
        let baseline = SystemInfo.residentBytes()
        let group = "mem-\(String(UInt32.random(in: 0...UInt32.max), radix: 36))"
        do {
            switch kind {
            case .participants:
                // Connects until `count` or until a connection does not come up within 15 s (then measures
                // the participants it has: see `reached`).
                let stop = Atomic<Bool>(false)
                let connected = try await Parallel.map(count, width: 8) { index -> GroupCoordinator? in
                    if stop.load(ordering: .acquiring) { return nil }
                    do {
                        return try await withTimeLimit(.seconds(15), "participant \(index) connects") {
                            try await GroupCoordinator.connect(
                                .init(
                                    broker: url, group: group, participant: "m\(index)", catchUpTimeout: .milliseconds(200),
                                    presenceHeartbeats: false))  // a thousand-member group relies on wills
                        }
                    } catch {
                        if !stop.exchange(true, ordering: .acquiringAndReleasing) {
                            let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
                            FileHandle.standardError.write(
                                Data(
                                    "memory child: participant \(index) did not connect (\(error)); \(descriptors) file descriptors open; measuring the participants connected so far\n"
                                        .utf8))
                        }
                        return nil
                    }
                }
                let coordinators = connected.compactMap { $0 }
                guard !coordinators.isEmpty else { throw SessionCluster.Failure(description: "no participant connected") }
                let id = try await coordinators[0].activate(activityIdentifier: SessionCluster.activity, value: .object([:]))
                let sessions = try await Parallel.map(coordinators.count, width: 16) { index in
                    try await SessionCluster.findSession(coordinators[index], id: id)
                }
                _ = try await Parallel.map(coordinators.count, width: 16) { index in
                    try await withTimeLimit(.seconds(60), "participant \(index) joins") { try await sessions[index].join() }
                }
                let reached = coordinators.count
                try? await waitUntil(timeout: .seconds(120), pollEvery: .microseconds(200), "everyone sees \(reached) participants") {
                    sessions[0].activeParticipants.count == reached && sessions[reached - 1].activeParticipants.count == reached
                }
                try await Task.sleep(for: .milliseconds(500))
                report(baseline: baseline, reached: reached)
                if cleanExit {
                    await sessions[0].end()
                    _ = try? await Parallel.map(reached, width: 32) { index in await coordinators[index].close() }
                }
            case .sessions:
                let coordinator = try await connectPatiently(.init(broker: url, group: group, participant: "solo"))
                let ids = try await Parallel.map(count, width: 16) { _ in
                    try await coordinator.activate(activityIdentifier: SessionCluster.activity, value: .object([:]))
                }
                let sessions = try await Parallel.map(count, width: 16) { index in
                    try await SessionCluster.findSession(coordinator, id: ids[index])
                }
                _ = try await Parallel.map(count, width: 16) { index in try await sessions[index].join() }
                try await Task.sleep(for: .milliseconds(500))
                report(baseline: baseline, reached: count)
                if cleanExit {
                    _ = try await Parallel.map(count, width: 16) { index in await sessions[index].end() }
                    await coordinator.close()
                }
            }
            return 0
        } catch {
            FileHandle.standardError.write(Data("memory child failed: \(error)\n".utf8))
            return 1
        }
    }

    /// Connects, trying three times: the broker can stay busy for seconds with the previous child's
    /// thousand connections going away, and a CONNACK later than the keepalive fails the attempt (seen
    /// once in six full runs). What is measured here is memory, not how soon a busy broker answers.
    private static func connectPatiently(_ configuration: GroupCoordinator.Configuration) async throws -> GroupCoordinator {
        var attempt = 1
        while true {
            do {
                return try await GroupCoordinator.connect(configuration)
            } catch {
                guard attempt < 3 else { throw error }
                FileHandle.standardError.write(Data("memory child: connect attempt \(attempt) failed (\(error)); trying again\n".utf8))
                attempt += 1
            }
        }
    }

    private static func report(baseline: Int, reached: Int) {
        let now = SystemInfo.residentBytes()
        FileHandle.standardOutput.write(
            Data("rss_increase_bytes \(now - baseline)\nrss_baseline_bytes \(baseline)\nreached \(reached)\n".utf8))
    }
}
