import Foundation
import GroupSync
import GroupSyncTestSupport

/// The journal section's receiver in a process of its own (this binary with `--journal-child`), so that
/// its resident size counts nothing but one participant loading one attachment to disk: neither the
/// owner's copy of the bytes nor the other measurements.
///
/// The child connects, joins the session, waits until the attachment is listed, and takes its resident
/// size (the baseline). It then resets its peak resident size (`5` to /proc/self/clear_refs, Linux ≥
/// 4.0), loads the attachment with `load(_:to:)`, and prints the peak (`VmHWM`) and the load's time.
enum JournalReceiver {
    /// What the child loads: `--journal-child GROUP,SESSION,NAME,FILE` (the file's path last: it may hold commas).
    struct Request: Sendable {
        var group: String
        var session: String
        var name: String
        var file: String

        var argument: String { [group, session, name, file].joined(separator: ",") }

        init(group: String, session: String, name: String, file: String) {
            (self.group, self.session, self.name, self.file) = (group, session, name, file)
        }

        init?(argument: String) {
            let fields = argument.split(separator: ",", maxSplits: 3).map(String.init)
            guard fields.count == 4 else { return nil }
            self.init(group: fields[0], session: fields[1], name: fields[2], file: fields[3])
        }
    }

    /// What the child measured; sizes in bytes.
    struct Measurement: Sendable {
        static let none = Measurement(baselineBytes: 0, peakBytes: 0, peakReset: false, loadMilliseconds: .nan)

        var baselineBytes: Int
        var peakBytes: Int
        /// Whether the peak was reset after the baseline (otherwise it may include joining's peak).
        var peakReset: Bool
        var loadMilliseconds: Double
        var growthBytes: Int { peakBytes - baselineBytes }
    }

    /// Runs the child for attachment `name` of the session (`size` bytes), waits for it, checks and removes
    /// the file it loaded to, and returns what it measured.
    static func spawn(url: String, group: String, session: String, name: String, size: Int) async throws -> Measurement {
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        let file = FileManager.default.temporaryDirectory
            .appendingPathComponent("groupsync-bench-journal-\(UInt32.random(in: 0...UInt32.max)).bin").path
        defer {
            try? FileManager.default.removeItem(atPath: file)
            try? FileManager.default.removeItem(atPath: file + ".partial")
        }
        let request = Request(group: group, session: session, name: name, file: file)
        let output = LockedValue<[UInt8]>([])
        let child = try ChildProcess(
            executable, ["--journal-child", request.argument, "--broker", url],
            output: .handler { chunk in output.withLock { $0 += chunk } },
            errors: .handler { chunk in FileHandle.standardError.write(Data(chunk)) })
        let termination = await child.wait(until: .after(.seconds(600)))
        let text = String(decoding: output.withLock { $0 }, as: UTF8.self)
        func field(_ key: String) -> String? {
            text.split(separator: "\n").first { $0.hasPrefix(key + " ") }.map { String($0.dropFirst(key.count + 1)) }
        }
        guard termination == .exited(0), let baseline = field("baseline_rss_bytes").flatMap(Int.init),
            let peak = field("peak_rss_bytes").flatMap(Int.init), let reset = field("peak_reset"),
            let load = field("load_ms").flatMap(Double.init)
        else {
            if termination == nil { child.signal(SIGKILL) }
            throw JournalBenchmark.Failure(
                description: "journal receiver child ended with \(termination.map { "\($0)" } ?? "no exit in 600 s"): \(text)")
        }
        let written = (try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? nil
        guard written == size else {
            throw JournalBenchmark.Failure(
                description: "journal receiver child left \(written.map { "\($0) bytes" } ?? "no file") at \(file), not \(size) bytes")
        }
        return Measurement(baselineBytes: baseline, peakBytes: peak, peakReset: reset == "1", loadMilliseconds: load)
    }

    /// The child's side: prints `baseline_rss_bytes`, `peak_rss_bytes`, `peak_reset`, `load_ms`; returns
    /// the exit status.
    static func child(_ request: Request, url: String) async -> Int32 {
        do {
            let coordinator = try await GroupCoordinator.connect(
                .init(broker: url, group: request.group, participant: "jr\(String(UInt32.random(in: 0...UInt32.max), radix: 36))"))
            let outcome: Result<Measurement, any Error>
            do {
                let session = try await SessionCluster.findSession(coordinator, id: request.session)
                try await session.join()
                let journal = GroupSessionJournal(session: session)
                let attachment = try await JournalBenchmark.firstAttachment(named: request.name, in: journal.attachmentUpdates())
                let baseline = SystemInfo.residentBytes()
                let reset = SystemInfo.resetPeakResident()
                let start = MonotonicClock.nanoseconds()
                try await journal.load(attachment, to: URL(fileURLWithPath: request.file))
                let end = MonotonicClock.nanoseconds()
                let peak = SystemInfo.peakResidentBytes() ?? 0
                await session.leave()
                outcome = .success(
                    Measurement(
                        baselineBytes: baseline, peakBytes: peak, peakReset: reset,
                        loadMilliseconds: MonotonicClock.milliseconds(from: start, to: end)))
            } catch {
                outcome = .failure(error)
            }
            await coordinator.close()
            let measured = try outcome.get()
            print(
                "baseline_rss_bytes \(measured.baselineBytes)\npeak_rss_bytes \(measured.peakBytes)\n"
                    + "peak_reset \(measured.peakReset ? 1 : 0)\nload_ms \(measured.loadMilliseconds)")
            return 0
        } catch {
            FileHandle.standardError.write(Data("journal receiver child failed: \(error)\n".utf8))
            return 1
        }
    }
}
