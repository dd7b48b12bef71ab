/// A local reason not to follow the group's timeline for a while (the counterpart of
/// `AVCoordinatedPlaybackSuspension`): while it lasts, this participant's player does what it must
/// (buffer, let the user scrub). If its reason is one of the coordinator's
/// ``PlaybackCoordinator/Configuration/suspensionReasonsThatTriggerWaiting``, the whole group pauses at
/// one position until it ends, then starts again together. Ends with ``end()``, or when the session is
/// over; a participant that crashes or leaves stops holding the group within the crash-detection time.
public final class PlaybackSuspension: Sendable {
    /// Why a participant suspends. Any identifier-like string works; these are the usual ones.
    public struct Reason: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(_ rawValue: String) { self.rawValue = rawValue }

        /// The player ran out of media and waits for more (makes the group wait by default).
        public static let buffering = Reason("buffering")
        /// The user drags the playhead.
        public static let scrubbing = Reason("scrubbing")
        /// Something else took over the player: a call, an ad, another app.
        public static let interruption = Reason("interruption")

        public var description: String { rawValue }
    }

    public let reason: Reason
    private let ending: @Sendable () -> Void

    init(reason: Reason, ending: @escaping @Sendable () -> Void) {
        self.reason = reason
        self.ending = ending
    }

    /// Ends the suspension; if it held the group and was the last to, everyone starts again after the
    /// lead. Idempotent.
    public func end() { ending() }
}
