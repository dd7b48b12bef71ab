/// A `ContinuousClock.Instant` in 8 bytes, where it takes 16: nanoseconds from a fixed instant of the
/// process, which reaches 292 years either side. For the tables a participant keeps per member of its
/// group.
@propertyWrapper
struct CompactInstant: Hashable, Sendable {
    private static let origin = ContinuousClock.now
    private var nanoseconds: Int64

    init(wrappedValue: ContinuousClock.Instant) { nanoseconds = CompactInstant.origin.duration(to: wrappedValue).nanoseconds }

    var wrappedValue: ContinuousClock.Instant {
        get { CompactInstant.origin.advanced(by: .nanoseconds(nanoseconds)) }
        set { nanoseconds = CompactInstant.origin.duration(to: newValue).nanoseconds }
    }
}
