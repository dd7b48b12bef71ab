import Foundation
import MQTT

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
/// the deadline). Past the deadline it is evaluated once more after yielding:
/// on a starved machine the poller's wake-up can run before work that was due
/// long before it (a timer's job queued behind it), and a condition that holds
/// by then is not a timeout. Errors thrown by the condition, and
/// `CancellationError` when the calling task is cancelled, are propagated.
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
            await Task.yield()
            if try await condition() { return }
            throw DeadlineExceeded(what: description, timeout: timeout)
        }
        try await Task.sleep(for: min(pollEvery, remaining))
    }
}
