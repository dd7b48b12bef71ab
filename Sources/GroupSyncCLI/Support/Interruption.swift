import MQTT

/// Ctrl-C, SIGTERM or SIGHUP, for every wait of a command: each wait takes a stream that ends when it comes.
/// Waits started after it came end at once.
final class Interruption: Sendable {
    private struct State {
        var fired = false
        /// The streams of waits still going on, by ID (a wait that ends removes its own).
        var waiters: [Int: AsyncStream<Void>.Continuation] = [:]
        var nextID = 0
    }

    // A lock ThreadSanitizer sees (LockedValue's doc says why not `Mutex`): the tests run this under it.
    private let state = LockedValue(State())

    /// A Ctrl-C, SIGTERM or SIGHUP came: every wait ends.
    func fire() {
        let waiters = state.withLock { state in
            state.fired = true
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.finish() }
    }

    /// A stream that ends when the interruption comes (at once if it came already).
    func stream() -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream<Void>.makeStream()
        let (fired, id) = state.withLock { state in
            state.nextID += 1
            if !state.fired { state.waiters[state.nextID] = continuation }
            return (state.fired, state.nextID)
        }
        if fired {
            continuation.finish()
        } else {
            // A long-running command (the bridge) makes a wait per request: each one forgets its stream.
            continuation.onTermination = { [weak self] _ in self?.state.withLock { _ = $0.waiters.removeValue(forKey: id) } }
        }
        return stream
    }

    /// How long a race waits for its cancelled operation to end before it gives up on it.
    static let cancellationGrace = Duration.seconds(2)

    /// Runs `operation` until it returns, the interruption comes (exit code 130), or `timeout` passes (a
    /// failure that names `what` was awaited; nil: no timeout).
    ///
    /// In the two last cases `operation` is cancelled, and the race returns once it has ended, or after
    /// ``cancellationGrace`` if it does not notice its cancellation (work stuck on a frozen broker, or a
    /// TCP connect the kernel has not given up on). A connect ends when cancelled
    /// (``MQTTClient/connect()``) after its network thread let go of libmosquitto's handle, so a command
    /// that exits next runs no libmosquitto or OpenSSL teardown concurrently with `exit()`'s (which can
    /// crash in `SSL_free`) — unless the attempt outlived the grace. A result `operation` returns after
    /// the race was lost goes to `discard` (a connection given up on is closed, not left behind).
    func race<Result: Sendable>(
        timeout: Duration?, waitingFor what: String, discard: (@Sendable (Result) async -> Void)? = nil,
        _ operation: @escaping @Sendable () async throws -> Result
    ) async throws -> Result {
        let outcome = Outcome<Result>()
        let ended = Outcome<Void>()
        let work = Task {
            defer { ended.settle(.success(())) }
            do {
                let result = try await operation()
                if !outcome.settle(.success(result)) { await discard?(result) }
            } catch {
                outcome.settle(.failure(error))
            }
        }
        let watchers = [
            Task { [self] in
                for await _ in stream() {}
                if !Task.isCancelled { outcome.settle(.failure(CommandFailure("interrupted", exitCode: 130))) }
            },
            Task {
                guard let timeout else { return }
                try await Task.sleep(for: timeout)
                let seconds = timeout.components.seconds
                outcome.settle(.failure(CommandFailure("timed out after \(seconds) s waiting for \(what) (see --timeout)")))
            },
        ]
        defer { for watcher in watchers { watcher.cancel() } }
        do {
            return try await outcome.value()
        } catch {
            work.cancel()
            let giveUp = Task {
                try await Task.sleep(for: Interruption.cancellationGrace)
                ended.settle(.success(()))
            }
            try? await ended.value()
            giveUp.cancel()
            throw error
        }
    }
}

/// The first result of a race, handed to the one waiter.
private final class Outcome<Value: Sendable>: Sendable {
    private let state = LockedValue<(result: Result<Value, any Error>?, waiter: CheckedContinuation<Value, any Error>?)>((nil, nil))

    /// Settles the outcome unless it was settled already; returns whether `result` is the outcome.
    @discardableResult
    func settle(_ result: Result<Value, any Error>) -> Bool {
        let (settled, waiter) = state.withLock { state -> (Bool, CheckedContinuation<Value, any Error>?) in
            guard state.result == nil else { return (false, nil) }
            state.result = result
            defer { state.waiter = nil }
            return (true, state.waiter)
        }
        waiter?.resume(with: result)
        return settled
    }

    func value() async throws -> Value {
        try await withCheckedThrowingContinuation { continuation in
            let result = state.withLock { state -> Result<Value, any Error>? in
                if state.result == nil { state.waiter = continuation }
                return state.result
            }
            if let result { continuation.resume(with: result) }
        }
    }
}
