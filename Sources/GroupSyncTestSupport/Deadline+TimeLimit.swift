import MQTT

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
