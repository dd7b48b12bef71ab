/// A point in time by which something must have happened, on the continuous clock.
///
/// Shared by the library, the CLI, the tests and the bench (`package` access: nothing here is public
/// API). Work whose result is optional is bounded with ``withTimeout(_:_:)`` (cancel it and go on without
/// its result). The test support adds `waitUntil` (poll a condition until it holds or the deadline
/// passes), `withTimeLimit` (throw `DeadlineExceeded` and abandon the work) and `timeBound` (stretch an
/// asserted bound under a sanitizer), which only the tests and the bench use.
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
