/// A point in time by which something must have happened, on the continuous clock.
///
/// This file is the repository's one deadline helper, shared by the library, the CLI, the tests and the
/// bench (`package` access: nothing here is public API). Every wait is bounded with it: instead of
/// sleeping for a fixed time and hoping that the other side is ready, poll a condition until it holds or
/// the deadline passes (``waitUntil(timeout:pollEvery:_:_:)``). Work that has no condition to poll is
/// bounded with ``withTimeout(_:_:)`` (cancel it and go on without its result). The test support adds
/// `withTimeLimit` (throw ``DeadlineExceeded`` and abandon the work) and `timeBound` (stretch an asserted
/// bound under a sanitizer), which only the tests and the bench use.
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
/// by the test support's `withTimeLimit` when the work did not finish in time.
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
