import Synchronization

/// Ctrl-C or SIGTERM, for every wait of a command: each wait takes a stream that ends when it comes.
/// Waits started after it came end at once.
final class Interruption: Sendable {
    private struct State {
        var fired = false
        var waiters: [AsyncStream<Void>.Continuation] = []
    }

    private let state = Mutex(State())

    /// A Ctrl-C or SIGTERM came: every wait ends.
    func fire() {
        let waiters = state.withLock { state in
            state.fired = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.finish() }
    }

    /// A stream that ends when the interruption comes (at once if it came already).
    func stream() -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream<Void>.makeStream()
        let fired = state.withLock { state in
            if !state.fired { state.waiters.append(continuation) }
            return state.fired
        }
        if fired { continuation.finish() }
        return stream
    }

    /// Runs `operation` until it returns, the interruption comes (exit code 130), or `timeout` passes (a
    /// failure that names `what` was awaited).
    func race<Result: Sendable>(
        timeout: Duration, waitingFor what: String, _ operation: @escaping @Sendable () async throws -> Result
    ) async throws -> Result {
        try await withThrowingTaskGroup(of: Result.self) { group in
            group.addTask { try await operation() }
            group.addTask { [self] in
                for await _ in stream() {}
                throw CommandFailure("interrupted", exitCode: 130)
            }
            group.addTask {
                try await Task.sleep(for: timeout)
                throw CommandFailure("timed out after \(timeout.components.seconds) s waiting for \(what) (see --timeout)")
            }
            defer { group.cancelAll() }
            return try await group.next()!
        }
    }
}
