import BrokerSupport
import Foundation
// Every file of this target sees the test support (Collector, TestPKI, timeBound, …) through this import.
@_exported import GroupSyncTestSupport
import MQTT
import Synchronization
import Testing

/// The executable product `name` built next to the test bundle (`swift build --build-tests` builds every
/// product), or nil when it is not there.
func builtProduct(_ name: String) -> String? {
    var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    // swift-testing runs from .../debug/<Package>PackageTests.xctest or a helper binary beside it.
    for _ in 0..<4 {
        let candidate = directory.appendingPathComponent(name).path
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        directory.deleteLastPathComponent()
    }
    let fallback = FileManager.default.currentDirectoryPath + "/.build/debug/" + name
    return FileManager.default.isExecutableFile(atPath: fallback) ? fallback : nil
}

/// The `groupsync` executable built next to the test bundle.
let groupsyncExecutable = builtProduct("groupsync") ?? FileManager.default.currentDirectoryPath + "/.build/debug/groupsync"

/// A running `groupsync` child process (or another program's) with line-buffered access to its output.
final class CLIProcess: Sendable {
    let child: ChildProcess
    private let lines = LineBuffer()
    private let errorLines = LineBuffer()

    /// Starts `executable` (`groupsync` unless said otherwise) with `arguments`, and this process's
    /// environment overridden by `environment`. Its standard input is a pipe (see ``send(_:)``).
    init(_ arguments: [String], environment: [String: String] = [:], executable: String = groupsyncExecutable) throws {
        var env = ProcessInfo.processInfo.environment
        for (key, value) in environment { env[key] = value }
        let (lines, errorLines) = (lines, errorLines)
        child = try ChildProcess(
            executable, arguments, environment: env, input: .pipe,
            output: .handler { lines.receive($0) }, errors: .handler { errorLines.receive($0) })
    }

    var output: [String] { lines.lines }
    var errors: [String] { errorLines.lines }
    var pid: Int32 { child.pid }
    /// Whether the child has not exited yet.
    var isRunning: Bool { child.termination == nil }

    func send(_ line: String) {
        child.write(Array((line + "\n").utf8))
    }

    func closeInput() {
        child.closeInput()
    }

    func signal(_ number: Int32) {
        child.signal(number)
    }

    /// Waits for the process to exit and its output to be read to the end; returns its exit status (the
    /// signal's number if a signal killed it). Throws ``DeadlineExceeded`` if that takes longer than
    /// `timeout`.
    func wait(timeout: Duration = .seconds(10)) async throws -> Int32 {
        guard let termination = await child.wait(until: .after(timeout)) else {
            let what = child.termination == nil ? "exits" : "output reaches end-of-file after its exit"
            throw DeadlineExceeded(what: "\(name) \(what) (stderr: \(errors.suffix(3)))", timeout: timeout)
        }
        let status: Int32
        switch termination {
        case .exited(let code): status = code
        case .signalled(let signal): status = signal
        case .unknown: status = -1
        }
        if termination != .exited(0) {
            // The expectation on the status says only that it failed: say why (two rare failures under
            // the ThreadSanitizer suite's load could not be diagnosed without it).
            let how =
                switch termination {
                case .exited: "exit status"
                case .signalled: "signal"
                case .unknown: "unknown status"
                }
            FileHandle.standardError.write(
                Data(
                    "\(name) \(child.arguments.joined(separator: " ")) ended with \(how) \(status); last errors: \(errors.suffix(20))\n"
                        .utf8))
        }
        return status
    }

    /// `groupsync` or whichever program runs.
    private var name: String {
        URL(fileURLWithPath: child.executable).lastPathComponent
    }

    func waitForLine(timeout: Duration = .seconds(10), _ predicate: @escaping @Sendable (String) -> Bool) async throws -> String {
        try await waitUntil(timeout: timeout, "a matching output line (have: \(output.suffix(5)))") {
            self.output.contains(where: predicate)
        }
        return output.first(where: predicate)!
    }
}

/// Runs `groupsync` to completion.
func runCLI(
    _ arguments: [String], input: String? = nil, environment: [String: String] = [:], timeout: Duration = .seconds(30)
) async throws -> (status: Int32, output: [String], errors: [String]) {
    let child = try CLIProcess(arguments, environment: environment)
    if let input { child.send(input) }
    child.closeInput()
    let status = try await child.wait(timeout: timeout)
    return (status, child.output, child.errors)
}

/// Complete lines read from a pipe, safe from the pipe's reader thread and the test.
final class LineBuffer: Sendable {
    private let state = LockedValue<(lines: [String], pending: [UInt8], closed: Bool)>(([], [], false))

    var lines: [String] { state.withLock { $0.lines } }
    /// Whether the pipe reached end-of-file (the last line, even without a newline, is in `lines`).
    var isClosed: Bool { state.withLock { $0.closed } }

    /// Takes a chunk from a ``ChildProcess/Output/handler(_:)``: bytes, or an empty chunk at end-of-file.
    func receive(_ chunk: [UInt8]) {
        if chunk.isEmpty { close() } else { append(chunk) }
    }

    func close() {
        state.withLock { state in
            if !state.pending.isEmpty {
                state.lines.append(String(decoding: state.pending, as: UTF8.self))
                state.pending = []
            }
            state.closed = true
        }
    }

    func append(_ chunk: [UInt8]) {
        state.withLock { state in
            state.pending.append(contentsOf: chunk)
            var start = state.pending.startIndex
            while let newline = state.pending[start...].firstIndex(of: UInt8(ascii: "\n")) {
                state.lines.append(String(decoding: state.pending[start..<newline], as: UTF8.self))
                start = newline + 1
            }
            state.pending.removeSubrange(..<start)
        }
    }
}

extension Trait where Self == ConditionTrait {
    /// Skips the test when the suite runs against an external broker (`GROUPSYNC_TEST_BROKER`, see
    /// ``ExternalBroker``): it needs a mosquitto of its own, because of `why` ("restarts it").
    static func needsOwnBroker(_ why: String) -> Self {
        .disabled(if: ExternalBroker.isConfigured, Comment(rawValue: ExternalBroker.skipReason(why)))
    }

    /// For a test that spreads its clients over two brokers sharing the group's topics
    /// (``MosquittoBroker/withBridgedBrokers(isolation:_:)``): skipped against one external broker, run
    /// against two (`GROUPSYNC_TEST_BROKER=URL1,URL2`).
    static var needsTwoBrokers: Self {
        .disabled(
            if: ExternalBroker.isConfigured && !ExternalBroker.isPairConfigured,
            Comment(rawValue: "needs two brokers that share the group's topics: GROUPSYNC_TEST_BROKER=URL1,URL2, or none"))
    }
}
