/// A `ContinuousClock.Instant` in 8 bytes, where it takes 16: nanoseconds from a fixed instant of the
/// process, which reaches 292 years either side. For the tables a participant keeps per member of its
/// group.
@propertyWrapper
struct CompactInstant: Hashable, Sendable {
    private static let origin = ContinuousClock.now
    private var nanoseconds: Int64

    init(wrappedValue: ContinuousClock.Instant) { nanoseconds = CompactInstant.nanoseconds(to: wrappedValue) }

    var wrappedValue: ContinuousClock.Instant {
        get { CompactInstant.origin.advanced(by: .nanoseconds(nanoseconds)) }
        set { nanoseconds = CompactInstant.nanoseconds(to: newValue) }
    }

    private static func nanoseconds(to instant: ContinuousClock.Instant) -> Int64 {
        let (seconds, attoseconds) = origin.duration(to: instant).components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
