/// A point in time by which something must have happened, on the continuous clock: the repository's one
/// deadline helper.
///
/// Every wait in the tests, the bench and `groupsync demo` is bounded with it: instead of sleeping for a
/// fixed time and hoping that the other side is ready, poll a condition until it holds or the deadline
/// passes (``waitUntil(timeout:pollEvery:_:_:)``). The test support adds `withTimeLimit` (bound a piece of
/// work that has no condition to poll) and `timeBound` (stretch an asserted bound under a sanitizer).
public struct Deadline: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The instant at which the deadline passes.
    public let instant: ContinuousClock.Instant

    /// A deadline at `instant`.
    public init(_ instant: ContinuousClock.Instant) {
        self.instant = instant
    }

    /// A deadline `duration` from now.
    public static func after(_ duration: Duration) -> Deadline {
        Deadline(ContinuousClock.now.advanced(by: duration))
    }

    /// Whether the deadline has passed.
    public var hasPassed: Bool {
        ContinuousClock.now >= instant
    }

    /// Time left until the deadline, or `.zero` once it has passed.
    public var remaining: Duration {
        let left = ContinuousClock.now.duration(to: instant)
        return left > .zero ? left : .zero
    }

    public static func < (lhs: Deadline, rhs: Deadline) -> Bool {
        lhs.instant < rhs.instant
    }

    public var description: String {
        "Deadline(in \(remaining))"
    }
}

/// Thrown by ``waitUntil(timeout:pollEvery:_:_:)`` when the condition did not
/// become true in time.
public struct DeadlineExceeded: Error, Sendable, CustomStringConvertible {
    /// What was being waited for (the `description` given to `waitUntil`).
    public let what: String
    /// How long was waited.
    public let timeout: Duration

    /// An error saying that `what` did not happen within `timeout`.
    public init(what: String, timeout: Duration) {
        self.what = what
        self.timeout = timeout
    }

    public var description: String {
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
public func waitUntil(
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
