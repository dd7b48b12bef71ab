import Foundation

/// A point in time by which something must have happened, on the continuous clock.
///
/// For waits that must end: a broker's start, a child process, and the test support's `waitUntil` (poll a
/// condition until it holds or the deadline passes). `package` access: nothing here is public API.
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
