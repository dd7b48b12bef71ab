/// Where a session stands for the local participant.
public enum GroupSessionState: Sendable, Hashable {
    /// Received (or activated) but not joined.
    case waiting
    /// Joined and caught up: messages and shared state flow.
    case joined
    /// Over for this participant; it never becomes valid again.
    case invalidated(reason: InvalidationReason)

    /// Why a session is over.
    public enum InvalidationReason: Sendable, Hashable {
        /// A participant called `end()` (nil when the ender is unknown, e.g. a cleared announcement).
        case ended(by: Participant?)
        /// The local participant called `leave()`.
        case left
        /// The coordinator was closed (`GroupCoordinator.close()`).
        case coordinatorClosed
        /// Nobody kept the session for its activity's ``GroupActivity/sessionTimeToLive``: everyone had
        /// left, crashed or gone away, and its records expired on the broker.
        case expired
    }

    public var isInvalidated: Bool { if case .invalidated = self { true } else { false } }
}
