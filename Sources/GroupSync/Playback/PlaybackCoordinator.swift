import Foundation
import MQTT

/// Watching or listening together (the counterpart of `AVPlaybackCoordinator`): one media timeline for
/// the whole session. Anyone may ``play()``, ``pause()``, ``seek(to:)`` or ``setRate(_:)``; every
/// participant's player follows, starting at the same instant of the group's clock although the
/// participants' own clocks disagree (by minutes, and drifting).
///
/// Get it from ``GroupSession/playbackCoordinator(configuration:)``, then drive the local player from
/// two sequences: ``timelines()`` (pause, position, item — the current timeline first) and ``starts()``
/// (start the media now, at this position and rate: delivered at the scheduled instant).
///
/// - Timeline: shared like ``SharedState`` (the record `groupsync.playback`), so crossing commands
///   converge on the one with the latest hybrid-logical-clock timestamp, and a late joiner's `join()`
///   brings it; it then starts at the current expected position.
/// - Group clock: one participant of the session serves it; every other one estimates its offset to it
///   with `$ping`/`$pong` exchanges on its direct topics (the shortest round trips win) and again every
///   ``Configuration/synchronizationInterval``. When that participant leaves or crashes, one that
///   followed takes over with the same clock, so timelines stay valid (see PROTOCOL.md, "Playback").
/// - Lifetime: it lives as long as the session: its sequences end when the session is invalidated
///   (left, ended, closed), as do its tasks and suspensions.
public final class PlaybackCoordinator: Sendable {
    static let timelineKey = "groupsync.playback"
    static let clockKey = "groupsync.clock"
    /// How long a command waits for the group clock before it fails with ``GroupSyncError/noGroupClock``.
    static let clockPatience: Duration = .seconds(2)

    public let configuration: Configuration
    let core: SessionCore
    private let machine: LockedValue<PlaybackStateMachine>
    private let outputs = LockedValue(Outputs())

    /// What this side hands out: the sequences' inboxes and the pending start.
    private struct Outputs {
        var timelines: [Int: Inbox<PlaybackTimeline>] = [:]
        var starts: [Int: Inbox<PlaybackStart>] = [:]
        var nextID = 0
        /// The last timeline given to ``timelines()``; nil until the shared one is known.
        var emitted: PlaybackTimeline?
        /// Whether each record has been read once since joining: the timeline is handed out only then,
        /// so that a timeline that plays is not first shown paused for want of its clock.
        var timelineRead = false
        var clockRead = false
        /// The timeline the start timer is (or was) for, and the timer.
        var scheduled: PlaybackTimeline?
        var timer: Task<Void, Never>?
        /// Exchanges left in a burst with the reference.
        var burst = 0
        var lastPing: Int64 = 0
        var ended = false
    }

    init(core: SessionCore, configuration: Configuration) {
        self.core = core
        self.configuration = configuration
        self.machine = LockedValue(
            PlaybackStateMachine(
                me: core.me, initiator: core.announcement.createdBy,
                waitingReasons: Set(configuration.suspensionReasonsThatTriggerWaiting.map(\.rawValue)),
                lead: configuration.lead))
        let machine = self.machine
        core.clockService.withLock {
            $0 = SessionCore.ClockService(
                groupTime: { local in machine.withLock { $0.answerPing(atLocal: local) } },
                pong: { [weak self] sender, pong, arrival in
                    guard let self else { return }
                    let (t0, t1, t2) = (
                        GroupInstant(milliseconds: pong.t0).nanoseconds, GroupInstant(milliseconds: pong.t1).nanoseconds,
                        GroupInstant(milliseconds: pong.t2).nanoseconds
                    )
                    // On the network thread: library code only, none of it waits.
                    self.perform(self.update { $0.onPong(from: sender, sent: t0, received: t1, replied: t2, back: arrival) })
                })
        }
        follow()
    }

    // MARK: - Reading

    /// The timeline the player follows now (paused at zero until the shared one is known).
    public var timeline: PlaybackTimeline { machine.withLock { $0.effectiveTimeline } }

    /// The current timeline first — once the session is joined and caught up — then every change, from
    /// anyone, in the order applied; equal consecutive timelines are not repeated. A slow consumer skips
    /// to the newest. Ends when the session is invalidated or the iterating task is cancelled.
    public func timelines() -> GroupUpdates<PlaybackTimeline> {
        let inbox = Inbox<PlaybackTimeline>(keepingNewest: 1)
        let registry = outputs
        let ended = registry.withLock { outputs -> Bool in
            guard !outputs.ended else { return true }
            outputs.nextID += 1
            let id = outputs.nextID
            outputs.timelines[id] = inbox
            inbox.onTermination { registry.withLock { _ = $0.timelines.removeValue(forKey: id) } }
            // Yielded under the lock: a change handed out meanwhile comes after it, never before.
            if let current = outputs.emitted { inbox.yield(current) }
            return false
        }
        if ended { inbox.finish() }
        return GroupUpdates(inbox)
    }

    /// Scheduled starts, each delivered when its group instant comes on this participant's clock (or at
    /// once, late, when the command or the join came after it): start the player at the start's
    /// `mediaTime` and `rate`. A timeline that already plays gives one at once. Starts come in order;
    /// a start whose timeline is replaced before its instant (a pause, a seek) never comes. Ends with the
    /// session.
    public func starts() -> GroupUpdates<PlaybackStart> {
        let inbox = Inbox<PlaybackStart>()
        let local = localNow
        let (timeline, offset) = machine.withLock { ($0.effectiveTimeline, $0.offset(atLocal: local)) }
        let registry = outputs
        let ended = registry.withLock { outputs -> Bool in
            guard !outputs.ended else { return true }
            outputs.nextID += 1
            let id = outputs.nextID
            outputs.starts[id] = inbox
            inbox.onTermination { registry.withLock { _ = $0.starts.removeValue(forKey: id) } }
            // Started already (its timer fired): this consumer starts late, now. A pending one comes to all.
            if let offset, outputs.scheduled == timeline, outputs.timer == nil, timeline.isPlaying {
                inbox.yield(PlaybackCoordinator.start(of: timeline, atGroup: local &+ offset))
            }
            return false
        }
        if ended { inbox.finish() }
        return GroupUpdates(inbox)
    }

    /// The start of `timeline` delivered at group time `now` (nanoseconds).
    static func start(of timeline: PlaybackTimeline, atGroup now: Int64) -> PlaybackStart {
        let instant = GroupInstant(nanoseconds: now)
        return PlaybackStart(
            item: timeline.item, mediaTime: timeline.mediaTime(at: instant), rate: timeline.rate, scheduled: timeline.anchor,
            lateness: max(instant - timeline.anchor, .zero))
    }

    /// The media time the timeline gives at `instant` (default: now); the timeline's position when the
    /// group clock is not known yet.
    public func expectedMediaTime(at instant: GroupInstant? = nil) -> Double {
        let local = localNow
        return machine.withLock { machine in
            let timeline = machine.effectiveTimeline
            guard let at = instant ?? machine.groupTime(atLocal: local) else { return timeline.position }
            return timeline.mediaTime(at: at)
        }
    }

    /// The group time now; nil until the group clock is known.
    public func groupTime() -> GroupInstant? {
        let local = localNow
        return machine.withLock { $0.groupTime(atLocal: local) }
    }

    /// The group time at `nanoseconds` (since 1970) on this participant's clock (its
    /// ``GroupCoordinator/Configuration/clock``); nil until the group clock is known.
    public func groupTime(atLocal nanoseconds: Int64) -> GroupInstant? {
        machine.withLock { $0.groupTime(atLocal: nanoseconds) }
    }

    /// The participant that serves the group clock, once known.
    public var clockReference: Participant? {
        machine.withLock { $0.clock.map { Participant(id: $0.reference) } }
    }

    /// The lead a start scheduled now would get.
    public var lead: Duration { machine.withLock { $0.lead } }

    /// This participant's suspensions under way, by reason.
    public var suspensionReasons: [PlaybackSuspension.Reason] {
        machine.withLock { $0.suspensions.sorted { $0.key < $1.key }.map { PlaybackSuspension.Reason($0.value) } }
    }

    /// Timeline and clock records rejected as invalid (out-of-range numbers, a malformed value, a clock
    /// claimed for someone else).
    public var rejectedRecordCount: Int { machine.withLock { $0.rejected } }

    // MARK: - Commands

    /// Plays from the current position at the last rate played (1 at first), starting everyone after the
    /// lead. While the group waits for a suspended participant, only records the intention: the group
    /// starts when nobody holds it any more. Returns when the broker has the new timeline.
    /// Throws ``GroupSyncError/notJoined``, or ``GroupSyncError/noGroupClock`` before the group clock is known.
    public func play() async throws(GroupSyncError) { try await command(.play) }

    /// Pauses everyone at the position the timeline gives now.
    public func pause() async throws(GroupSyncError) { try await command(.pause) }

    /// Moves everyone to `position` (seconds); playing goes on from there after the lead.
    public func seek(to position: Double) async throws(GroupSyncError) {
        guard position.isFinite, position >= 0 else { throw .invalidArgument("a position is a finite number of seconds ≥ 0") }
        try await command(.seek(to: position))
    }

    /// Plays at `rate` (from the position the timeline gives after the lead); 0 pauses.
    public func setRate(_ rate: Double) async throws(GroupSyncError) {
        guard rate.isFinite, abs(rate) <= PlaybackTimeline.maximumRate else {
            throw .invalidArgument("a rate is a finite number within ±\(PlaybackTimeline.maximumRate)")
        }
        try await command(.rate(rate))
    }

    /// Sets what plays (the host's identifier of the media; nil for nothing), paused at `position`.
    public func setItem(_ item: String?, position: Double = 0) async throws(GroupSyncError) {
        guard position.isFinite, position >= 0 else { throw .invalidArgument("a position is a finite number of seconds ≥ 0") }
        guard (item?.utf8.count ?? 0) <= PlaybackTimeline.maximumItemLength else {
            throw .invalidArgument("an item identifier is at most \(PlaybackTimeline.maximumItemLength) bytes")
        }
        try await command(.item(item, position: position))
    }

    private func command(_ command: PlaybackStateMachine.Command) async throws(GroupSyncError) {
        guard core.isJoined else { throw core.isInvalidated ? .sessionInvalidated : .notJoined }
        // Right after joining the group clock may still be coming: wait for it a little.
        let deadline = ContinuousClock.now + PlaybackCoordinator.clockPatience
        while groupTime() == nil && ContinuousClock.now < deadline && !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(5))
        }
        let local = localNow
        var failed = false
        var written = update { machine in
            do {
                return try machine.command(command, atLocal: local)
            } catch {
                failed = true
                return PlaybackStateMachine.Action()
            }
        }
        if failed { throw .noGroupClock }
        // The timeline is published here, to return once the broker has it; the rest as usual.
        let pending = written.records.filter { $0.key == PlaybackCoordinator.timelineKey }
        written.records.removeAll { $0.key == PlaybackCoordinator.timelineKey }
        perform(written)
        for record in pending { try await core.publish(record) }
    }

    /// Suspends this participant's following of the timeline for `reason`; when the reason is one that
    /// triggers waiting, the whole group pauses at one position until the suspension ends.
    public func beginSuspension(for reason: PlaybackSuspension.Reason) -> PlaybackSuspension {
        let local = localNow
        var id = 0
        perform(
            update { machine in
                let (begun, action) = machine.beginSuspension(reason.rawValue, atLocal: local)
                id = begun
                return action
            })
        return PlaybackSuspension(reason: reason) { [weak self, id] in
            guard let self else { return }
            let local = self.localNow
            self.perform(self.update { $0.endSuspension(id, atLocal: local) })
        }
    }

    // MARK: - Following the session

    private var localNow: Int64 { core.context.clock.nanoseconds() }

    /// Starts the tasks that feed the machine: the two records, the active participants, time; and the
    /// one that ends everything with the session.
    private func follow() {
        let core = self.core
        let participants = Inbox.Consumer(core.listen(.participants, keepingNewest: 1))
        let states = Inbox.Consumer(core.listen(.state))
        let tasks = core.context.tasks
        follow(PlaybackCoordinator.clockKey, read: \.clockRead) { machine, record, local in
            let decoded = record.flatMap { Wire.value(PlaybackStateMachine.ClockRecord.self, from: $0.value) }
            let valid = record.map { decoded?.isValid(writtenBy: $0.clock.participant) ?? false } ?? true
            return machine.onClockRecord(decoded, valid: valid, atLocal: local)
        }
        follow(PlaybackCoordinator.timelineKey, read: \.timelineRead) { machine, record, local in
            let decoded = record.map { Wire.value(PlaybackTimeline.Record.self, from: $0.value) }
            return machine.onTimelineRecord(decoded ?? nil, valid: decoded.map { $0 != nil } ?? true, atLocal: local)
        }
        tasks.spawn { [self] in
            while let update = await participants.inbox.next() {
                guard case let .participants(active) = update else { continue }
                let local = localNow
                perform(self.update { $0.onActive(Set(active.map(\.id)), atLocal: local) })
            }
        }
        tasks.spawn { [self] in
            while let update = await states.inbox.next() {
                if case let .state(state) = update, state.isInvalidated { break }
            }
            shutdown()
        }
        tasks.spawn { [self] in
            // Time: takeovers that waited, and the exchanges with the reference.
            while !Task.isCancelled && !core.isInvalidated {
                // Every 5 ms during a burst of exchanges, else every 50 ms.
                try? await Task.sleep(for: .milliseconds(outputs.withLock { $0.burst > 0 } ? 5 : 50))
                guard core.isJoined else { continue }
                let local = localNow
                perform(self.update { $0.onTick(atLocal: local) })
                ping(atLocal: local)
            }
        }
    }

    /// Feeds every value of the record `key` (nil: none) to the machine through `input`, then marks it
    /// `read` and refreshes the outputs.
    private func follow(
        _ key: String, read: WritableKeyPath<Outputs, Bool> & Sendable,
        _ input: @escaping @Sendable (inout PlaybackStateMachine, Wire.StateRecord?, Int64) -> PlaybackStateMachine.Action
    ) {
        let updates = Inbox.Consumer(core.listen(.values(key: key), keepingNewest: 1))
        core.context.tasks.spawn { [self] in
            while let next = await updates.inbox.next() {
                guard case let .value(record) = next else { continue }
                let local = localNow
                let written = update { input(&$0, record, local) }
                outputs.withLock { $0[keyPath: read] = true }
                perform(written)
                refresh()
            }
        }
    }

    /// Sends a `$ping` to the reference when one is due: every 5 ms during a burst, one more at the next
    /// tick for each answer while the estimate is not settled, every 100 ms until the estimate follows the
    /// drift, then every synchronization interval (to the 50 ms tick).
    private func ping(atLocal local: Int64) {
        let (role, fitted) = machine.withLock { ($0.role, $0.estimator.fitsDrift) }
        guard case let .follower(reference, _) = role else {
            outputs.withLock { $0.burst = 0 }  // serving the clock: no burst to finish
            return
        }
        let interval = fitted ? configuration.synchronizationInterval.nanoseconds : 100_000_000
        let due = outputs.withLock { outputs -> Bool in
            if outputs.burst > 0 {
                outputs.burst -= 1
            } else if local &- outputs.lastPing < interval {
                return false
            }
            outputs.lastPing = local
            return true
        }
        guard due else { return }
        let (sent, monotonic) = (localNow, ContinuousClock.now)
        let t0 = GroupInstant(nanoseconds: sent).milliseconds
        let key = GroupInstant(milliseconds: t0).nanoseconds  // what the answer's t0 will read as
        machine.withLock { $0.onPingSent(t0: key) }
        let queued = core.sendControl(.ping, Wire.Ping(t0: t0), to: reference) { [weak self] left in
            guard let self else { return }
            // On the network thread: library code only, none of it waits.
            self.perform(self.update { $0.onPingLeft(t0: key, atLocal: sent &+ (left - monotonic).nanoseconds) })
        }
        if let queued { perform(update { $0.onPingQueued(t0: key, atLocal: sent &+ (queued - monotonic).nanoseconds) }) }
    }

    /// The machine after one input, with the records it asked for already written.
    private struct Written {
        var action: PlaybackStateMachine.Action
        var records: [Wire.StateRecord]
    }

    /// Feeds one input to the machine and writes the records it asks for under the same lock, so that
    /// they are stamped by the hybrid logical clock in the order the machine changed: a later change never
    /// loses to an earlier one written by another task.
    private func update(_ input: (inout PlaybackStateMachine) -> PlaybackStateMachine.Action) -> Written {
        machine.withLock { machine in
            let action = input(&machine)
            var records: [Wire.StateRecord] = []
            if let clock = action.writeClock, let record = write(PlaybackCoordinator.clockKey, clock) { records.append(record) }
            if let timeline = action.writeTimeline, let record = write(PlaybackCoordinator.timelineKey, timeline.record) {
                records.append(record)
            }
            return Written(action: action, records: records)
        }
    }

    /// Carries out the rest of what the machine asked for: its records handed to the connection at once
    /// (a suspension pauses the others one broker trip later), a burst of exchanges or one more, the
    /// player's outputs refreshed.
    private func perform(_ written: Written) {
        for record in written.records { core.enqueue(record) }
        if written.action.synchronize { outputs.withLock { $0.burst = 8 } }
        // At the next tick, not at once: pings spread over time are likelier to find a quiet moment
        // than a chain of them caught in the same stall.
        if written.action.exchangeAgain { outputs.withLock { $0.burst = max($0.burst, 1) } }
        if written.action.timelineChanged { refresh() }
    }

    /// Writes one of playback's records (applied here at once); nil when not joined.
    private func write(_ key: String, _ value: some Encodable) -> Wire.StateRecord? {
        guard core.isJoined, let json = try? Wire.jsonValue(value) else { return nil }
        return core.write(key: key, value: json)
    }

    /// Hands the timeline to ``timelines()`` if it changed (once both records were read), and schedules
    /// its start if it plays (once per timeline: a start pending or delivered is not scheduled again).
    /// The timeline is read under the outputs' lock, so that of two refreshes the later one hands out the
    /// later timeline; the timer is made under it too, so that it cannot fire before it is recorded.
    private func refresh() {
        let local = localNow
        let cancelled = outputs.withLock { outputs -> Task<Void, Never>? in
            guard !outputs.ended else { return nil }
            let (timeline, clockKnown) = machine.withLock { ($0.effectiveTimeline, $0.offset(atLocal: local) != nil) }
            if outputs.emitted != timeline && outputs.timelineRead && outputs.clockRead {
                outputs.emitted = timeline
                for inbox in outputs.timelines.values { inbox.yield(timeline) }
            }
            if timeline.isPlaying && clockKnown && outputs.scheduled == timeline { return nil }
            let previous = outputs.timer
            outputs.scheduled = timeline.isPlaying && clockKnown ? timeline : nil
            outputs.timer =
                outputs.scheduled == nil
                ? nil
                : Task { [weak self] in
                    guard let self else { return }
                    await self.fire(timeline)
                }
            return previous
        }
        cancelled?.cancel()
    }

    /// Waits until `timeline`'s anchor comes on the local clock (re-reading the offset as it goes), then
    /// hands the start to ``starts()``.
    private func fire(_ timeline: PlaybackTimeline) async {
        while !Task.isCancelled {
            let local = localNow
            guard let offset = machine.withLock({ $0.offset(atLocal: local) }) else { return }
            let remaining = timeline.anchor.nanoseconds &- offset &- local
            if remaining <= 0 {
                let start = PlaybackCoordinator.start(of: timeline, atGroup: local &+ offset)
                let inboxes = outputs.withLock { outputs -> [Inbox<PlaybackStart>] in
                    guard outputs.scheduled == timeline, !outputs.ended else { return [] }
                    outputs.timer = nil
                    return Array(outputs.starts.values)
                }
                for inbox in inboxes { inbox.yield(start) }
                return
            }
            // Long waits in steps, so that a refined offset moves the instant; the last one exactly.
            let step = min(remaining, 20_000_000)
            try? await Task.sleep(until: .now + .nanoseconds(step), tolerance: .zero, clock: .continuous)
        }
    }

    /// The session is over: every sequence ends, the timer stops, the clock answers no more.
    private func shutdown() {
        core.clockService.withLock { $0 = nil }
        core.playback.withLock { $0 = nil }
        let (timelines, starts, timer) = outputs.withLock { outputs in
            outputs.ended = true
            defer {
                outputs.timelines = [:]
                outputs.starts = [:]
                outputs.timer = nil
            }
            return (Array(outputs.timelines.values), Array(outputs.starts.values), outputs.timer)
        }
        timer?.cancel()
        for inbox in timelines { inbox.finish() }
        for inbox in starts { inbox.finish() }
    }
}

extension GroupSession {
    /// The session's playback coordinator, made at the first call with `configuration` (later calls
    /// return the same one, whatever their configuration). It may be made before or after `join()`.
    public func playbackCoordinator(configuration: PlaybackCoordinator.Configuration = .init()) -> PlaybackCoordinator {
        core.playback.withLock { existing in
            if let existing { return existing }
            let made = PlaybackCoordinator(core: core, configuration: configuration)
            existing = made
            return made
        }
    }
}
