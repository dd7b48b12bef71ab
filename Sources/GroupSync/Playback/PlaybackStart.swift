/// A scheduled start, delivered by ``PlaybackCoordinator/starts()`` when its group instant comes: the
/// local player starts (or jumps to) `mediaTime` at `rate`, now.
public struct PlaybackStart: Sendable, Hashable {
    public var item: String?
    /// Where the media is at the moment of delivery (the scheduled position, or later when late).
    public var mediaTime: Double
    public var rate: Double
    /// The group instant the start was scheduled for.
    public var scheduled: GroupInstant
    /// How late the delivery is after `scheduled`: zero or a fraction of a millisecond for a start
    /// received in time; more for one received after its instant (a late command, a late joiner), whose
    /// `mediaTime` is then ahead of the timeline's `position` by as much.
    public var lateness: Duration
}
