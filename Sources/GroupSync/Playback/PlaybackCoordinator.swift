import Foundation
import MQTT

/// Watching or listening together (the counterpart of `AVPlaybackCoordinator`): one media timeline for
/// the whole session. Anyone may ``play()``, ``pause()``, ``seek(to:)`` or ``setRate(_:)``; every
/// participant's player follows, starting at the same instant of the group's clock although the
/// participants' own clocks disagree (by minutes, and drifting).
///
/// Make one with ``init(session:configuration:)``, then drive the local player from
/// two sequences: ``timelineUpdates()`` (pause, position, item — the current timeline first) and ``starts()``
/// (start the media now, at this position and rate: delivered at the scheduled instant).
///
/// - Timeline: shared like ``SharedState`` (the record `groupsync.playback`), so crossing commands
///   converge on the one with the latest hybrid-logical-clock timestamp, and a late joiner's `join()`
///   brings it; it then starts at the current expected position.
/// - Group clock: one participant of the session serves it; every other one estimates its offset to it
///   with `$ping`/`$pong` exchanges on its direct topics (the shortest round trips win) and again every
///   ``Configuration/synchronizationInterval`` while the media plays (less often while it does not).
///   When that participant leaves or crashes, one that followed takes over with the same clock, so
///   timelines stay valid (see PROTOCOL.md, "Playback").
/// - Lifetime: it lives as long as the session: its sequences end when the session is invalidated
///   (left, ended, closed), as do its tasks and suspensions.
/// - Cancellation: a command whose task is cancelled before it applies (already, or while it waits for
///   the group clock) changes nothing and throws ``GroupSyncError/cancelled``; once applied, its timeline
///   goes out, and a cancelled wait for the broker throws ``GroupSyncError/cancelled`` all the same. Issue
///   a command meant to run on cancellation (a `pause()` in cleanup) from a task of its own.
public final class PlaybackCoordinator: Sendable {
    static let timelineKey = "groupsync.playback"
    static let clockKey = "groupsync.clock"
    /// How long a command waits for the group clock before it fails with ``GroupSyncError/noGroupClock``.
    static let clockPatience: Duration = .seconds(2)

    /// The session's one coordinator: every `PlaybackCoordinator` made for a session drives it.
    let engine: Engine

    /// The configuration the session's coordinator was made with.
    public var configuration: Configuration { engine.configuration }

    /// The playback coordinator of `session`. The first one made for a session fixes the configuration;
    /// later ones — any number, before or after `join()` — drive the same timeline and clock, whatever
    /// configuration they pass.
    public init<A: GroupActivity>(session: GroupSession<A>, configuration: Configuration = .init()) {
        let core = session.core
        let (engine, made) = core.facet(\.playback) {
            Engine(core: core, initiator: $0.announcement.createdBy, configuration: configuration)
        }
        if made { engine.start() }
        self.engine = engine
    }

    // MARK: - Reading

    /// The timeline the player follows now (paused at zero until the shared one is known).
    public var timeline: PlaybackTimeline { engine.state.withLock { $0.machine.effectiveTimeline } }

    /// The current timeline first — once the session is joined and caught up — then every change, from
    /// anyone, in the order applied; equal consecutive timelines are not repeated. A slow consumer skips
    /// to the newest. Ends when the session is invalidated or the iterating task is cancelled.
    public func timelineUpdates() -> GroupUpdates<PlaybackTimeline> {
        engine.register(Inbox(keepingNewest: 1), in: \.timelines) { $0.emitted }
    }

    /// Scheduled starts, each delivered when its group instant comes on this participant's clock (or at
    /// once, late, when the command or the join came after it): start the player at the start's
    /// `mediaTime` and `rate`. A timeline that already plays gives one at once. Starts come in order;
    /// a start whose timeline is replaced before its instant (a pause, a seek) never comes. Ends with the
    /// session.
    public func starts() -> GroupUpdates<PlaybackStart> {
        let local = engine.localNow
        return engine.register(Inbox(), in: \.starts) { $0.lateStart(atLocal: local) }
    }

    /// The media time the timeline gives at `instant` (default: now); the timeline's position when the
    /// group clock is not known yet.
    public func expectedMediaTime(at instant: GroupInstant? = nil) -> Double {
        let local = engine.localNow
        return engine.state.withLock { state in
            let timeline = state.machine.effectiveTimeline
            return (instant ?? state.machine.groupTime(atLocal: local)).map(timeline.mediaTime(at:)) ?? timeline.position
        }
    }

    /// The group time now; nil until the group clock is known.
    public func groupTime() -> GroupInstant? { groupTime(atLocal: engine.localNow) }

    /// The group time at `nanoseconds` (since 1970) on this participant's clock (its
    /// ``GroupCoordinator/Configuration/clock``); nil until the group clock is known.
    public func groupTime(atLocal nanoseconds: Int64) -> GroupInstant? {
        engine.state.withLock { $0.machine.groupTime(atLocal: nanoseconds) }
    }

    /// The participant that serves the group clock, once known.
    public var clockReference: Participant? {
        engine.state.withLock { $0.machine.clock.map { Participant(id: $0.reference) } }
    }

    /// The lead a start scheduled now would get.
    public var lead: Duration { engine.state.withLock { $0.machine.lead } }

    /// This participant's suspensions under way, by reason.
    public var suspensionReasons: [PlaybackSuspension.Reason] {
        engine.state.withLock { $0.machine.suspensions.sorted { $0.key < $1.key }.map { PlaybackSuspension.Reason($0.value) } }
    }

    /// Timeline and clock records rejected as invalid (out-of-range numbers, a malformed value, a clock
    /// claimed for someone else).
    public var rejectedRecordCount: Int { engine.state.withLock { $0.machine.rejected } }

    // MARK: - Commands

    /// Plays from the current position at the last rate played (1 at first), starting everyone after the
    /// lead. While the group waits for a suspended participant, only records the intention: the group
    /// starts when nobody holds it any more. Returns when the broker has the new timeline.
    /// Throws ``GroupSyncError/notJoined``, or ``GroupSyncError/noGroupClock`` before the group clock is known.
    public func play() async throws(GroupSyncError) { try await engine.command(.play) }

    /// Pauses everyone at the position the timeline gives now.
    public func pause() async throws(GroupSyncError) { try await engine.command(.pause) }

    /// Moves everyone to `position` (seconds); playing goes on from there after the lead.
    public func seek(to position: Double) async throws(GroupSyncError) {
        guard position.isFinite, position >= 0 else { throw .invalidArgument("a position is a finite number of seconds ≥ 0") }
        try await engine.command(.seek(to: position))
    }

    /// Plays at `rate` (from the position the timeline gives after the lead); 0 pauses.
    public func setRate(_ rate: Double) async throws(GroupSyncError) {
        guard rate.isFinite, abs(rate) <= PlaybackTimeline.maximumRate else {
            throw .invalidArgument("a rate is a finite number within ±\(PlaybackTimeline.maximumRate)")
        }
        try await engine.command(.rate(rate))
    }

    /// Sets what plays (the host's identifier of the media; nil for nothing), paused at `position`.
    public func setItem(_ item: String?, position: Double = 0) async throws(GroupSyncError) {
        guard position.isFinite, position >= 0 else { throw .invalidArgument("a position is a finite number of seconds ≥ 0") }
        guard (item?.utf8.count ?? 0) <= PlaybackTimeline.maximumItemLength else {
            throw .invalidArgument("an item identifier is at most \(PlaybackTimeline.maximumItemLength) bytes")
        }
        try await engine.command(.item(item, position: position))
    }

    /// Suspends this participant's following of the timeline for `reason` (see ``PlaybackSuspension``).
    public func beginSuspension(for reason: PlaybackSuspension.Reason) -> PlaybackSuspension {
        let local = engine.localNow
        var id = 0
        engine.input { machine in
            let action = machine.beginSuspension(reason.rawValue, atLocal: local)
            id = machine.lastSuspension
            return action
        }
        return PlaybackSuspension(reason: reason) { [weak engine, id] in
            guard let engine else { return }
            let local = engine.localNow
            engine.input { $0.endSuspension(id, atLocal: local) }
        }
    }
}
