/// The media timeline the whole session follows: where the media is (`position`, in seconds) at the group
/// instant `anchor`, and how fast it moves from there (`rate`; 0 while paused or waiting).
///
/// Media time is a function of group time, the same for everyone: ``mediaTime(at:)``. A `play()` sets an
/// anchor a little in the future (the lead), so that every player starts at that instant; before it, the
/// media stays at `position`.
public struct PlaybackTimeline: Sendable, Hashable {
    /// What is playing (the host's identifier of the media), nil when nothing is set.
    public var item: String?
    /// Seconds into the media at `anchor`.
    public var position: Double
    /// Media seconds per second from `anchor` on; 0 when paused or while the group waits.
    public var rate: Double
    public var anchor: GroupInstant
    /// The rate the group plays at once nobody holds it: 0 after a pause, the rate of the last play.
    public var intendedRate: Double
    /// The IDs of ``waitingFor``, as the record carries them.
    var waitingIDs: Set<String>
    /// Which group clock `anchor` is on (see ``PlaybackCoordinator``): a timeline on another one is taken
    /// as paused at `position`.
    var base: String

    /// Participants whose suspension makes the group wait (at `position`, with `rate` 0).
    public var waitingFor: Set<Participant> { Set(waitingIDs.map(Participant.init(id:))) }

    /// Whether the media moves now or will at `anchor`.
    public var isPlaying: Bool { rate != 0 }

    /// The media time at `instant`: `position` until `anchor`, then moving at `rate` (never below zero).
    public func mediaTime(at instant: GroupInstant) -> Double {
        guard rate != 0, instant > anchor else { return position }
        return max(position + rate * (instant - anchor).seconds, 0)
    }

    /// Paused at zero, no item: a session whose timeline nobody has set yet.
    static func initial(base: String) -> PlaybackTimeline {
        PlaybackTimeline(
            item: nil, position: 0, rate: 0, anchor: GroupInstant(nanoseconds: 0), intendedRate: 0, waitingIDs: [], base: base)
    }

    /// The largest rate a timeline may have, either way.
    public static let maximumRate = 64.0
    /// The longest item identifier, in UTF-8 bytes.
    public static let maximumItemLength = 1_024
    /// At most this many waiting participants are accepted in a record.
    static let maximumWaiting = 1_000
}

extension PlaybackTimeline {
    /// The timeline as the value of its state record (`groupsync.playback`).
    var record: Wire.Timeline {
        Wire.Timeline(
            item: item, position: position, rate: rate, at: anchor.milliseconds, intent: intendedRate, waiting: waitingIDs.sorted(),
            base: base)
    }

    /// A record's timeline (its reader checked every field's range).
    init(_ record: Wire.Timeline) {
        self.init(
            item: record.item, position: record.position, rate: record.rate, anchor: GroupInstant(milliseconds: record.at),
            intendedRate: record.intent, waitingIDs: Set(record.waiting), base: record.base)
    }

    /// The start of this timeline handed out at group instant `now`: late by as much as `now` is after
    /// the anchor, at the media time of `now`.
    func start(at now: GroupInstant) -> PlaybackStart {
        PlaybackStart(item: item, mediaTime: mediaTime(at: now), rate: rate, scheduled: anchor, lateness: max(now - anchor, .zero))
    }
}
