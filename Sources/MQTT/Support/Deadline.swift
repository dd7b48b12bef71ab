/// A point in time by which something must have happened, on the continuous clock.
///
/// This file is the repository's one deadline helper, shared by the library, the CLI, the tests and the
/// bench (`package` access: nothing here is public API). Every wait is bounded with it: instead of
/// sleeping for a fixed time and hoping that the other side is ready, poll a condition until it holds or
/// the deadline passes (``waitUntil(timeout:pollEvery:_:_:)``). Work that has no condition to poll is
/// bounded with ``withTimeout(_:_:)`` (cancel it and go on without its result) or
/// ``withTimeLimit(_:_:_:)`` (throw ``DeadlineExceeded`` and abandon it). The test support adds
/// `timeBound` (stretch an asserted bound under a sanitizer).
package struct Deadline: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The instant at which the deadline passes.
    package let instant: ContinuousClock.Instant

    /// A deadline at `instant`.
    package init(_ instant: ContinuousClock.Instant) {
        self.instant = instant
    }

    /// A deadline `duration` from now.
    package static func after(_ duration: Duration) -> Deadline {
        Deadline(ContinuousClock.now.advanced(by: duration))
    }

    /// Whether the deadline has passed.
    package var hasPassed: Bool {
        ContinuousClock.now >= instant
    }

    /// Time left until the deadline, or `.zero` once it has passed.
    package var remaining: Duration {
        let left = ContinuousClock.now.duration(to: instant)
        return left > .zero ? left : .zero
    }

    package static func < (lhs: Deadline, rhs: Deadline) -> Bool {
        lhs.instant < rhs.instant
    }

    package var description: String {
        "Deadline(in \(remaining))"
    }
}

/// Thrown by ``waitUntil(timeout:pollEvery:_:_:)`` when the condition did not become true in time, and
/// by ``withTimeLimit(_:_:_:)`` when the work did not finish in time.
package struct DeadlineExceeded: Error, Sendable, CustomStringConvertible {
    /// What was being waited for (the description given to `waitUntil` or `withTimeLimit`).
    package let what: String
    /// How long was waited.
    package let timeout: Duration

    /// An error saying that `what` did not happen within `timeout`.
    package init(what: String, timeout: Duration) {
        self.what = what
        self.timeout = timeout
    }

    package var description: String {
        let subject = what.isEmpty ? "condition" : what
        return "Deadline exceeded: \(subject) did not become true within \(timeout)"
    }
}

/// Polls `condition` until it returns `true`, or throws ``DeadlineExceeded``
/// once `timeout` has passed.
///
/// The condition is evaluated at least once, immediately, then every
/// `pollEvery` (the last sleep is shortened so that the final check happens at
/// the deadline). Errors thrown by the condition, and `CancellationError` when
/// the calling task is cancelled, are propagated.
///
/// - Parameters:
///   - timeout: How long to keep polling.
///   - pollEvery: The pause between two evaluations.
///   - description: What is being waited for; put into the error message.
///   - condition: The condition to poll.
package func waitUntil(
    timeout: Duration = .seconds(5),
    pollEvery: Duration = .milliseconds(5),
    _ description: String = "",
    _ condition: @Sendable () async throws -> Bool
) async throws {
    let deadline = Deadline.after(timeout)
    while true {
        if try await condition() {
            return
        }
        let remaining = deadline.remaining
        if remaining == .zero {
            throw DeadlineExceeded(what: description, timeout: timeout)
        }
        try await Task.sleep(for: min(pollEvery, remaining))
    }
}

/// Runs `work` and returns its result, or cancels it and returns nil once `timeout` has passed: for work
/// whose result is optional (a clean-exit publish to a broker that may be gone, an echo that may never
/// come).
///
/// Returns only after `work` has ended: it must honour cancellation. Cancelling the calling task
/// cancels `work`.
package func withTimeout<T: Sendable>(_ timeout: Duration, _ work: @escaping @Sendable () async -> T?) async -> T? {
    await withTaskGroup(of: Optional<T>.self) { group in
        group.addTask { await work() }
        group.addTask {
            try? await Task.sleep(for: timeout)
            return nil
        }
        let result = await group.next() ?? nil
        group.cancelAll()
        return result
    }
}

/// Runs `work`, cancelling it once `timeout` has passed; returns when `work` has ended (see
/// ``withTimeout(_:_:)``).
package func withTimeout(_ timeout: Duration, _ work: @escaping @Sendable () async -> Void) async {
    let _: Void? = await withTimeout(timeout) { () async -> Void? in await work() }
}

/// Returns `body`'s result, or throws ``DeadlineExceeded`` once `limit` has passed: for work that has no
/// condition to poll (a ping-pong loop, a join) but must not hang a test or the bench forever (a lost
/// QoS 0 message, a broker that died, a connection that never gets its CONNACK).
///
/// The body runs in a task of its own, cancelled on timeout but not awaited: a body that ignores
/// cancellation (an `await` on a continuation that is never resumed) is abandoned instead of hanging the
/// caller. Cancelling the calling task throws `CancellationError` at once.
package func withTimeLimit<T: Sendable>(
    _ limit: Duration, _ what: String, _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    let once = ResumeOnce<T>()
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            guard once.install(continuation) else { return }
            let work = Task {
                do {
                    once.resume(.success(try await body()))
                } catch {
                    once.resume(.failure(error))
                }
            }
            let timer = Task {
                do { try await Task.sleep(for: limit) } catch { return }
                once.resume(.failure(DeadlineExceeded(what: what, timeout: limit)))
                work.cancel()
            }
            once.onFinish { timer.cancel() }
        }
    } onCancel: {
        once.resume(.failure(CancellationError()))
    }
}

/// A continuation resumed exactly once, by whichever comes first.
private final class ResumeOnce<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        var early: Result<T, any Error>?
        var finished = false
        var onFinish: (@Sendable () -> Void)?
    }

    private let state = LockedValue(State())

    /// Returns false if a result came first (it was delivered to `continuation` already).
    func install(_ continuation: CheckedContinuation<T, any Error>) -> Bool {
        let early = state.withLock { state -> Result<T, any Error>? in
            if let early = state.early {
                state.finished = true
                return early
            }
            state.continuation = continuation
            return nil
        }
        guard let early else { return true }
        continuation.resume(with: early)
        return false
    }

    func resume(_ result: Result<T, any Error>) {
        let (continuation, cleanup) = state.withLock { state -> (CheckedContinuation<T, any Error>?, (@Sendable () -> Void)?) in
            guard !state.finished else { return (nil, nil) }
            guard let continuation = state.continuation else {
                if state.early == nil { state.early = result }
                return (nil, nil)
            }
            state.finished = true
            state.continuation = nil
            defer { state.onFinish = nil }
            return (continuation, state.onFinish)
        }
        continuation?.resume(with: result)
        cleanup?()
    }

    func onFinish(_ action: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            if state.finished { return true }
            state.onFinish = action
            return false
        }
        if now { action() }
    }
}
