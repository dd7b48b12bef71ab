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
        /// How often the group clock is checked against its reference (one `$ping` each time) while the
        /// media plays: eight at the start and whenever the reference changes, one every 100 ms until the
        /// estimate follows the drift between the clocks, then one every interval. Default: 250 ms; taken
        /// as 10 ms to an hour.
        public var synchronizationInterval: Duration
        /// While the media does not play, each check the estimate foresaw doubles the time to the next,
        /// from ``synchronizationInterval`` up to this (one it did not goes back to that): what a paused
        /// or idle session wakes for, beside its heartbeat and keepalive. `play()` goes back to the
        /// shorter pace at once; the estimate it starts with spans seconds between checks, which on an
        /// idle loopback put the first start within 0.2 ms. Default: 8 s, at most an hour; at most
        /// ``synchronizationInterval`` makes the pace fixed.
        public var longestSynchronizationInterval: Duration

        public init(
            suspensionReasonsThatTriggerWaiting: Set<PlaybackSuspension.Reason> = [.buffering], lead: Duration? = nil,
            synchronizationInterval: Duration = .milliseconds(250), longestSynchronizationInterval: Duration = .seconds(8)
        ) {
            self.suspensionReasonsThatTriggerWaiting = suspensionReasonsThatTriggerWaiting
            self.lead = lead
            self.synchronizationInterval = synchronizationInterval
            self.longestSynchronizationInterval = longestSynchronizationInterval
        }
    }
}
