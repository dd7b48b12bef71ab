import MQTT
import BrokerSupport
import Foundation
import Synchronization

/// The `groupsync` executable built next to the test bundle (`swift build --build-tests` builds it).
let groupsyncExecutable: String = {
    var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    // swift-testing runs from .../debug/<Package>PackageTests.xctest or a helper binary beside it.
    for _ in 0..<4 {
        let candidate = directory.appendingPathComponent("groupsync").path
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        directory.deleteLastPathComponent()
    }
    let fallback = FileManager.default.currentDirectoryPath + "/.build/debug/groupsync"
    return fallback
}()

/// A running `groupsync` child process with line-buffered access to its output.
final class CLIProcess: Sendable {
    let process: Process
    private let stdinPipe = Pipe()
    private let lines = LineBuffer()
    private let errorLines = LineBuffer()

    init(_ arguments: [String], environment: [String: String] = [:]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: groupsyncExecutable)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        for (key, value) in environment { env[key] = value }
        process.environment = env
        let out = Pipe(), err = Pipe()
        process.standardInput = stdinPipe
        process.standardOutput = out
        process.standardError = err
        self.process = process
        CLIProcess.collect(out.fileHandleForReading, into: lines)
        CLIProcess.collect(err.fileHandleForReading, into: errorLines)
        try process.run()
    }

    private static func collect(_ handle: FileHandle, into buffer: LineBuffer) {
        handle.readabilityHandler = { handle in
            let chunk = handle.availableData
            if chunk.isEmpty {
                handle.readabilityHandler = nil
                buffer.close()
                return
            }
            buffer.append(chunk)
        }
    }

    var output: [String] { lines.lines }
    var errors: [String] { errorLines.lines }
    var pid: Int32 { process.processIdentifier }

    func send(_ line: String) {
        stdinPipe.fileHandleForWriting.write(Data((line + "\n").utf8))
    }

    func closeInput() {
        try? stdinPipe.fileHandleForWriting.close()
    }

    func signal(_ number: Int32) {
        kill(process.processIdentifier, number)
    }

    /// Waits for the process to exit and its output to be read; returns its status.
    ///
    /// End-of-file on the pipes normally follows the exit at once, but a sibling child started
    /// concurrently by Foundation's `Process` may have inherited their write ends, so it is awaited
    /// for a bounded time only.
    func wait(timeout: Duration = .seconds(10)) async throws -> Int32 {
        try await waitUntil(timeout: timeout, "groupsync exits") { !self.process.isRunning }
        try? await waitUntil(timeout: .seconds(1), "output read to the end") { self.lines.isClosed && self.errorLines.isClosed }
        let status = process.terminationStatus
        if status != 0 || process.terminationReason != .exit {
            // The expectation on the status says only that it failed: say why (two rare failures under
            // the ThreadSanitizer suite's load could not be diagnosed without it).
            let how = process.terminationReason == .exit ? "exit status" : "signal"
            FileHandle.standardError.write(Data(
                "groupsync \((process.arguments ?? []).joined(separator: " ")) ended with \(how) \(status); last errors: \(errors.suffix(20))\n".utf8))
        }
        return status
    }

    func waitForLine(timeout: Duration = .seconds(10), _ predicate: @escaping @Sendable (String) -> Bool) async throws -> String {
        try await waitUntil(timeout: timeout, "a matching output line (have: \(output.suffix(5)))") {
            self.output.contains(where: predicate)
        }
        return output.first(where: predicate)!
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
}

/// Runs `groupsync` to completion.
func runCLI(_ arguments: [String], input: String? = nil, timeout: Duration = .seconds(30)) async throws -> (status: Int32, output: [String], errors: [String]) {
    let child = try CLIProcess(arguments)
    if let input { child.send(input) }
    child.closeInput()
    let status = try await child.wait(timeout: timeout)
    return (status, child.output, child.errors)
}

/// Complete lines read from a pipe, safe from the pipe's reader thread and the test.
final class LineBuffer: Sendable {
    private let state = LockedValue<(lines: [String], pending: Data, closed: Bool)>(([], Data(), false))

    var lines: [String] { state.withLock { $0.lines } }
    /// Whether the pipe reached end-of-file (the last line, even without a newline, is in `lines`).
    var isClosed: Bool { state.withLock { $0.closed } }

    func close() {
        state.withLock { state in
            if !state.pending.isEmpty {
                state.lines.append(String(decoding: state.pending, as: UTF8.self))
                state.pending = Data()
            }
            state.closed = true
        }
    }

    func append(_ chunk: Data) {
        state.withLock { state in
            state.pending.append(chunk)
            while let newline = state.pending.firstIndex(of: UInt8(ascii: "\n")) {
                state.lines.append(String(decoding: state.pending[state.pending.startIndex..<newline], as: UTF8.self))
                state.pending.removeSubrange(state.pending.startIndex...newline)
            }
        }
    }
}
