import BrokerSupport
import Foundation
import MQTT

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A child process started with `posix_spawn` (through ``Spawn``, like the broker), for tests that run
/// command-line programs: in place of Foundation's `Process`, whose Linux implementation hands children
/// its blocked signal mask and descriptors that are not close-on-exec, and whose libdispatch sources
/// once crashed the test process.
///
/// ```swift
/// let child = try ChildProcess("/usr/bin/env", ["cat"], input: .pipe, output: .handler { print($0) })
/// child.write(Array("hello\n".utf8))
/// child.closeInput()
/// let termination = await child.wait(until: .after(.seconds(5)))  // .exited(0), or nil if not in time
/// ```
///
/// What it guarantees:
/// - **Descriptors.** The child inherits its three standard descriptors and nothing else. Its pipes are
///   socket pairs created close-on-exec, so no other process spawned meanwhile (a broker, another
///   child) holds a copy: closing the input really is end-of-file for the child, and the child's output
///   reaches end-of-file once the child (and any descendant it passed its descriptors to) has exited.
///   This process's end of the input pipe is closed by ``closeInput()`` or `deinit`; its end of each
///   output pipe is closed by the thread reading it, at end-of-file.
/// - **Output.** Each output pipe is read by a plain thread of its own that calls the ``Output/handler(_:)``
///   with every chunk as it arrives, then once with an empty chunk at end-of-file. The handler runs on
///   that thread, never with a lock held.
/// - **No zombie.** A thread blocks until the child exits and reaps it at once, whether or not anyone
///   calls ``wait(until:)``. ``signal(_:)`` never reaches another process that reused the PID: it does
///   nothing once the child is reaped.
/// - **Lifetime.** `deinit` kills a child still running (SIGKILL) and closes its input; the threads
///   then reap it and read its output to the end on their own.
///
/// The child stays in this process's process group, like Foundation's `Process` children: a terminal's
/// ^C reaches it too.
public final class ChildProcess: Sendable {
    /// How a child process ended.
    public enum Termination: Sendable, Hashable, CustomStringConvertible {
        /// It exited with this status.
        case exited(Int32)
        /// It was killed by this signal.
        case signalled(Int32)
        /// Its status was taken by someone else (another `waitpid` on this PID): it has ended, but how is
        /// not known.
        case unknown

        /// `exit status N`, `killed by signal N` or `exit status unavailable`.
        public var description: String {
            switch self {
            case .exited(let status): "exit status \(status)"
            case .signalled(let signal): "killed by signal \(signal)"
            case .unknown: "exit status unavailable"
            }
        }

        /// Decodes a `waitpid` status of a process that has ended.
        init(waitStatus status: Int32) {
            let signal = status & 0x7F
            self = signal == 0 ? .exited((status >> 8) & 0xFF) : .signalled(signal)
        }
    }

    /// Where the child's standard input comes from.
    public enum Input: Sendable {
        /// `/dev/null`: the child reads end-of-file at once.
        case nullDevice
        /// A pipe written with ``ChildProcess/write(_:)`` and closed with ``ChildProcess/closeInput()``.
        case pipe
    }

    /// Where the child's standard output or error goes.
    public enum Output: Sendable {
        /// `/dev/null`.
        case nullDevice
        /// A pipe read by a thread of its own, which calls this with every chunk read, in order, and
        /// finally once with an empty chunk at end-of-file.
        case handler(@Sendable (_ chunk: [UInt8]) -> Void)
    }

    /// The path of the program that runs.
    public let executable: String
    /// Its arguments (without the program itself).
    public let arguments: [String]
    /// The child's process ID. Once the child is reaped the ID may belong to another process: use
    /// ``signal(_:)`` to signal the child rather than `kill(pid, …)`.
    public let pid: pid_t

    /// Shared with the threads that reap the child and read its output (which do not hold `self`, so
    /// that `deinit` can run while they wait).
    private let state: LockedValue<State>
    /// This process's end of the child's standard input, -1 once closed (or with ``Input/nullDevice``).
    /// Guarded apart from `state`: a write may block while the child is not reading.
    private let input: LockedValue<Int32>

    private struct State {
        /// Set, under the lock, by the thread that reaps the child, in the same step.
        var termination: Termination?
        /// Output pipes not read to end-of-file yet.
        var openOutputs: Int
        /// Tasks in ``ChildProcess/wait(until:)``, resumed once the child has finished.
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
        var nextWaiter = 0

        /// Whether the child has exited and its output has been read to the end.
        var hasFinished: Bool { termination != nil && openOutputs == 0 }

        /// The waiters to resume if the child has finished; they are removed.
        mutating func takeWaitersIfFinished() -> [CheckedContinuation<Void, Never>] {
            guard hasFinished else { return [] }
            defer { waiters.removeAll() }
            return Array(waiters.values)
        }
    }

    /// Spawns `executable` (a path: `PATH` is not searched; run `/usr/bin/env` to search it).
    ///
    /// - Parameters:
    ///   - environment: The child's whole environment; nil for this process's.
    ///   - input: Where its standard input comes from.
    ///   - output: Where its standard output goes.
    ///   - errors: Where its standard error goes.
    /// - Throws: An error saying which call failed, when a pipe cannot be made or `posix_spawn` fails (no
    ///   such executable, say). Nothing is left open then.
    public init(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
        input: Input = .nullDevice, output: Output = .nullDevice, errors: Output = .nullDevice
    ) throws {
        self.executable = executable
        self.arguments = arguments

        // The child's ends are closed here once it has its copies; ours are closed on failure only.
        var childEnds: [Int32] = []
        var ourEnds: [Int32] = []
        defer { childEnds.forEach { _ = close($0) } }
        func pipe() throws -> (child: Int32, ours: Int32) {
            let (child, ours) = try Spawn.makePipe()
            childEnds.append(child)
            ourEnds.append(ours)
            return (child, ours)
        }

        var stdin = Spawn.Redirect.nullDevice
        var inputFD: Int32 = -1
        var readers: [(fd: Int32, handler: @Sendable ([UInt8]) -> Void)] = []
        do {
            if case .pipe = input {
                let ends = try pipe()
                stdin = .descriptor(ends.child)
                inputFD = ends.ours
                Self.disableSIGPIPE(inputFD)
            }
            var redirects: [Spawn.Redirect] = []
            for stream in [output, errors] {
                switch stream {
                case .nullDevice:
                    redirects.append(.nullDevice)
                case .handler(let handler):
                    let ends = try pipe()
                    redirects.append(.descriptor(ends.child))
                    readers.append((ends.ours, handler))
                }
            }
            pid = try Spawn.process(
                executable, arguments, environment: environment,
                stdin: stdin, stdout: redirects[0], stderr: redirects[1], newProcessGroup: false)
        } catch {
            ourEnds.forEach { _ = close($0) }
            throw error
        }

        state = LockedValue(State(openOutputs: readers.count))
        self.input = LockedValue(inputFD)
        let (state, pid) = (state, pid)
        Self.startThread("reap\(pid)") { Self.reap(pid, state) }
        for (index, reader) in readers.enumerated() {
            Self.startThread("\(index == 0 ? "out" : "err")\(pid)") {
                Self.drain(reader.fd, to: reader.handler, state)
            }
        }
    }

    deinit {
        signal(SIGKILL)
        closeInput()
    }

    // MARK: - Talking to the child

    /// Writes all of `bytes` to the child's standard input, blocking while the pipe is full. Returns
    /// false when not all could be written: the input is closed (or not a pipe), or the child has
    /// closed its end (exited, say; no SIGPIPE is raised).
    @discardableResult
    public func write(_ bytes: [UInt8]) -> Bool {
        input.withLock { fd in
            var offset = 0
            while fd >= 0 && offset < bytes.count {
                let written = bytes[offset...].withUnsafeBytes { Self.writeWithoutSIGPIPE(fd, $0) }
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { return false }
                offset += written
            }
            return fd >= 0
        }
    }

    /// Closes the child's standard input: it reads end-of-file once it has read what was written.
    /// Does nothing if already closed. Waits for a ``write(_:)`` in progress on another thread (which
    /// blocks while the child does not read): call both from the same task.
    public func closeInput() {
        input.withLock { fd in
            if fd >= 0 { _ = close(fd) }
            fd = -1
        }
    }

    /// Sends `number` to the child, unless it has already been reaped (so never to a process that
    /// reused its PID).
    public func signal(_ number: Int32) {
        state.withLock { state in
            if state.termination == nil { _ = kill(pid, number) }
        }
    }

    // MARK: - Waiting

    /// How the child ended, once it has been reaped; nil while it runs (a child stopped by SIGSTOP
    /// runs, for this purpose). Its output may not have been read to the end yet: see ``wait(until:)``.
    public var termination: Termination? {
        state.withLock { $0.termination }
    }

    /// Waits until the child has exited and its output has been read to end-of-file (every
    /// ``Output/handler(_:)`` has had its empty chunk), then returns how it ended.
    ///
    /// Returns nil when `deadline` passes first, or the calling task is cancelled, and leaves the
    /// child as it is: it may still be running (``termination`` is nil), or have exited while a
    /// descendant still holds its output open. Signal it and wait again, or let `deinit` kill it.
    /// Does not poll: the reaping and reading threads resume it.
    package func wait(until deadline: Deadline) async -> Termination? {
        if let finished = finishedTermination { return finished }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.finished() }
            group.addTask { try? await Task.sleep(until: deadline.instant, clock: .continuous) }
            await group.next()
            group.cancelAll()
        }
        return finishedTermination
    }

    private var finishedTermination: Termination? {
        state.withLock { $0.hasFinished ? $0.termination : nil }
    }

    /// Returns once the child has finished, or the task is cancelled.
    private func finished() async {
        let id = state.withLock { state in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                // A cancellation before this point finds no waiter to resume, but is seen here: the
                // cancelled flag is set before the handler runs.
                let now = state.withLock { state in
                    if state.hasFinished || Task.isCancelled { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }

    // MARK: - Running to completion

    /// Runs `executable` to completion on the calling thread, with standard input from /dev/null and
    /// standard output and error together in one pipe, read here until end-of-file; then reaps the
    /// child. For synchronous callers (such as running `openssl`); there is no time limit.
    ///
    /// - Returns: How it ended, and everything it wrote.
    /// - Throws: As ``init(_:_:environment:input:output:errors:)`` does.
    public static func run(_ executable: String, _ arguments: [String]) throws -> (termination: Termination, output: [UInt8]) {
        let (childEnd, ourEnd) = try Spawn.makePipe()
        defer { _ = close(ourEnd) }
        let pid: pid_t
        do {
            defer { _ = close(childEnd) }
            pid = try Spawn.process(
                executable, arguments, stdin: .nullDevice, stdout: .descriptor(childEnd), stderr: .standardOutput,
                newProcessGroup: false)
        }
        var output: [UInt8] = []
        readToEnd(ourEnd) { output += $0 }
        var status: Int32 = 0
        var result: pid_t
        repeat {
            result = waitpid(pid, &status, 0)
        } while result == -1 && errno == EINTR
        return (result == pid ? Termination(waitStatus: status) : .unknown, output)
    }

    // MARK: - Threads

    private static func startThread(_ name: String, _ body: @escaping @Sendable () -> Void) {
        let thread = Thread(block: body)
        thread.name = "cp-\(name)"  // names the thread on Darwin; no effect on Linux (Foundation drops a name set before start())
        thread.start()
    }

    /// Waits for the child to exit without reaping it, then reaps it and records how it ended in one
    /// step under the lock, so that ``signal(_:)`` (which takes the lock) never signals a reused PID.
    private static func reap(_ pid: pid_t, _ state: LockedValue<State>) {
        var info = siginfo_t()
        while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) == -1 && errno == EINTR {}
        let waiters = state.withLock { state in
            var status: Int32 = 0
            var result: pid_t
            repeat {
                // A zombie now, so this returns at once; WNOHANG in case something else reaped it
                // meanwhile (never block under the lock).
                result = waitpid(pid, &status, WNOHANG)
            } while result == -1 && errno == EINTR
            state.termination = result == pid ? Termination(waitStatus: status) : .unknown
            return state.takeWaitersIfFinished()
        }
        waiters.forEach { $0.resume() }
    }

    /// Reads `fd` to end-of-file into `handler`, closes it, and counts it as read.
    private static func drain(_ fd: Int32, to handler: @Sendable ([UInt8]) -> Void, _ state: LockedValue<State>) {
        readToEnd(fd, handler)
        _ = close(fd)
        handler([])
        let waiters = state.withLock { state in
            state.openOutputs -= 1
            return state.takeWaitersIfFinished()
        }
        waiters.forEach { $0.resume() }
    }

    /// Calls `body` with every chunk read from `fd` until end-of-file (or a read error).
    private static func readToEnd(_ fd: Int32, _ body: ([UInt8]) -> Void) {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { systemRead(fd, $0.baseAddress, $0.count) }
            if count > 0 {
                body(Array(buffer[..<count]))
            } else if count < 0 && errno == EINTR {
                continue
            } else {
                return
            }
        }
    }

    // MARK: - SIGPIPE

    /// Keeps writes to the input pipe from raising SIGPIPE once the child has closed its end (where
    /// that is a socket option; on Linux each write asks for it).
    private static func disableSIGPIPE(_ fd: Int32) {
        #if canImport(Darwin)
        _ = fcntl(fd, F_SETNOSIGPIPE, 1)  // a pipe there, not a socket: SO_NOSIGPIPE would not apply
        #endif
    }

    private static func writeWithoutSIGPIPE(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Int {
        #if canImport(Darwin)
        Darwin.write(fd, bytes.baseAddress, bytes.count)
        #else
        send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
        #endif
    }
}

/// `read(2)`; a free function because ``ChildProcess``'s members would shadow it.
private func systemRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int {
    read(fd, buffer, count)
}
