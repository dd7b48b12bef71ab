extension PlaybackCoordinator {
    /// How a participant takes part in coordinated playback.
    public struct Configuration: Sendable {
        /// Suspensions for these reasons make the whole group wait (as `AVPlaybackCoordinator`'s property
        /// of the same name): everyone pauses at one position and starts again together once nobody holds
        /// the group. Other suspensions are this participant's alone. Default: ``PlaybackSuspension/Reason/buffering``.
        public var suspensionReasonsThatTriggerWaiting: Set<PlaybackSuspension.Reason>
        /// How far ahead a `play()` (or a change of rate, a seek while playing, a release after waiting)
        /// schedules the start, so that every participant has the command before the instant comes. nil
        /// (default): three of the longest recent round trips to the clock's reference plus 25 ms, at
        /// most a second (50 ms before any round trip is measured).
        public var lead: Duration?
        /// How often the group clock is checked against its reference (one `$ping` each time): eight
        /// at the start and whenever the reference changes, one every 100 ms until the estimate follows
        /// the drift between the clocks, then one every interval. Default: 250 ms.
        public var synchronizationInterval: Duration

        public init(
            suspensionReasonsThatTriggerWaiting: Set<PlaybackSuspension.Reason> = [.buffering], lead: Duration? = nil,
            synchronizationInterval: Duration = .milliseconds(250)
        ) {
            self.suspensionReasonsThatTriggerWaiting = suspensionReasonsThatTriggerWaiting
            self.lead = lead
            self.synchronizationInterval = synchronizationInterval
        }
    }
}
