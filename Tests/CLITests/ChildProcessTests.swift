import BrokerSupport
import Foundation
import MQTT
import Testing

/// What `ChildProcess` (the tests' posix_spawn-based child processes) guarantees.
@Suite(.timeLimit(.minutes(timeLimitMinutes(1)))) struct ChildProcessTests {
    /// Output and error, each read to the end by the time `wait` returns, and the exit status.
    @Test func exitStatusAndBothOutputsReadToTheEnd() async throws {
        let output = LineBuffer(), errors = LineBuffer()
        let child = try ChildProcess(
            "/bin/sh", ["-c", "echo out; echo err >&2; printf tail; exit 3"],
            output: .handler { output.receive($0) }, errors: .handler { errors.receive($0) })
        #expect(await child.wait(until: .after(.seconds(10))) == .exited(3))
        #expect(output.isClosed && errors.isClosed)
        #expect(output.lines == ["out", "tail"])
        #expect(errors.lines == ["err"])
        #expect(child.termination == .exited(3))
    }

    @Test func inputPipeReachesTheChildAndClosingItIsEndOfFile() async throws {
        let output = LineBuffer()
        let child = try ChildProcess("/bin/cat", [], input: .pipe, output: .handler { output.receive($0) })
        #expect(child.write(Array("one\ntwo\n".utf8)))
        child.closeInput()
        #expect(await child.wait(until: .after(.seconds(10))) == .exited(0))
        #expect(output.lines == ["one", "two"])
        #expect(!child.write(Array("late\n".utf8)), "nothing is written once the input is closed")
    }

    /// The reason for the type: a child spawned while another one's pipes are open does not inherit them,
    /// so closing the first one's input still ends it.
    @Test func aConcurrentChildDoesNotInheritAnotherOnesPipes() async throws {
        let first = try ChildProcess("/bin/cat", [], input: .pipe, output: .handler { _ in })
        let second = try ChildProcess("/bin/cat", [], input: .pipe, output: .handler { _ in })
        first.closeInput()
        #expect(await first.wait(until: .after(.seconds(10))) == .exited(0))
        #expect(second.termination == nil)
        second.closeInput()
        #expect(await second.wait(until: .after(.seconds(10))) == .exited(0))
    }

    @Test func waitReturnsNilAtTheDeadlineAndASignalEndsTheChild() async throws {
        let child = try ChildProcess("/bin/cat", [], input: .pipe, output: .handler { _ in })
        let start = ContinuousClock.now
        #expect(await child.wait(until: .after(.milliseconds(200))) == nil)
        #expect(ContinuousClock.now - start >= .milliseconds(200))
        #expect(child.termination == nil)
        child.signal(SIGTERM)
        #expect(await child.wait(until: .after(.seconds(10))) == .signalled(SIGTERM))
        child.signal(SIGKILL)  // reaped: does nothing
    }

    /// The child starts with no signal blocked, whatever the spawning thread blocks.
    @Test func theChildStartsWithAnEmptySignalMask() async throws {
        let output = LineBuffer()
        let child = try Self.withSignalBlocked(SIGUSR1) {
            try ChildProcess("/bin/sh", ["-c", "grep SigBlk /proc/self/status"], output: .handler { output.receive($0) })
        }
        #expect(await child.wait(until: .after(.seconds(10))) == .exited(0))
        #expect(output.lines.map { $0.replacingOccurrences(of: "\t", with: " ") } == ["SigBlk: 0000000000000000"])
    }

    /// Only the three standard descriptors reach the child.
    @Test func theChildInheritsOnlyItsStandardDescriptors() async throws {
        let output = LineBuffer()
        let child = try ChildProcess("/bin/ls", ["/proc/self/fd"], output: .handler { output.receive($0) })
        #expect(await child.wait(until: .after(.seconds(10))) == .exited(0))
        // ls's own directory descriptor is the one past standard error.
        #expect(output.lines.compactMap { Int($0) }.sorted() == [0, 1, 2, 3])
    }

    /// `deinit` kills a running child and it is reaped (not left a zombie) without anyone waiting.
    @Test func aDroppedChildIsKilledAndReaped() async throws {
        var child: ChildProcess? = try ChildProcess("/bin/cat", [], input: .pipe, output: .handler { _ in })
        let pid = try #require(child?.pid)
        child = nil
        // kill(pid, 0) succeeds on a zombie: ESRCH means it is gone for good.
        try await waitUntil(timeout: .seconds(10), "the dropped child reaped") { kill(pid, 0) == -1 && errno == ESRCH }
    }

    @Test func writingToAChildThatHasExitedFailsWithoutSIGPIPE() async throws {
        let child = try ChildProcess("/bin/true", [], input: .pipe)
        #expect(await child.wait(until: .after(.seconds(10))) == .exited(0))
        #expect(!child.write(Array(repeating: 0x41, count: 1 << 20)))
    }

    @Test func runCapturesOutputAndErrorTogether() throws {
        let run = try ChildProcess.run("/bin/sh", ["-c", "echo a; echo b >&2; exit 2"])
        #expect(run.termination == .exited(2))
        #expect(String(decoding: run.output, as: UTF8.self) == "a\nb\n")
    }

    @Test func aMissingExecutableThrows() {
        #expect(throws: (any Error).self) { try ChildProcess("/nonexistent/program", []) }
    }

    /// Runs `body` on this thread with `signal` blocked (as Foundation's `Process` passed its caller's mask on).
    static func withSignalBlocked<R>(_ signal: Int32, _ body: () throws -> R) rethrows -> R {
        var blocked = sigset_t(), previous = sigset_t()
        sigemptyset(&blocked)
        sigaddset(&blocked, signal)
        pthread_sigmask(SIG_BLOCK, &blocked, &previous)
        defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
        return try body()
    }
}
