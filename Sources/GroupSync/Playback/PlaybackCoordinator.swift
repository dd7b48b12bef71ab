import Foundation
import MQTT

/// Watching or listening together (the counterpart of `AVPlaybackCoordinator`): one media timeline for
/// the whole session. Anyone may ``play()``, ``pause()``, ``seek(to:)`` or ``setRate(_:)``; every
/// participant's player follows, starting at the same instant of the group's clock although the
/// participants' own clocks disagree (by minutes, and drifting).
///
/// Get it from ``GroupSession/playbackCoordinator(configuration:)``, then drive the local player from
/// two sequences: ``timelineUpdates()`` (pause, position, item — the current timeline first) and ``starts()``
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
    /// The machine and what this side hands out, under one lock.
    private let state: LockedValue<State>
    /// Wakes when the machine has something to do without an input (a `$ping`, a takeover).
    private let timer = WakeUp()
    /// Wakes at the scheduled start, to the nanosecond the scheduler allows: a late start is a start out
    /// of step with the group, so it is not left to the priority of whoever scheduled it (often the
    /// network thread).
    private let startTimer = WakeUp(tolerance: .zero, priority: .high)

    private struct State {
        var machine: PlaybackStateMachine
        var outputs = Outputs()
    }

    /// What this side hands out: the sequences' inboxes and the pending start.
    private struct Outputs {
        var timelines: [Int: Inbox<PlaybackTimeline>] = [:]
        var starts: [Int: Inbox<PlaybackStart>] = [:]
        var nextID = 0
        /// The last timeline given to ``timelineUpdates()``; nil until the shared one is known.
        var emitted: PlaybackTimeline?
        /// Whether each record has been read once since joining: the timeline is handed out only then,
        /// so that a timeline that plays is not first shown paused for want of its clock.
        var timelineRead = false
        var clockRead = false
        /// The timeline whose start is (or was) scheduled, and whether that start is still to come.
        var scheduled: PlaybackTimeline?
        var startPending = false
        /// Commands waiting for the group clock.
        var clockWaiters: [Inbox<Void>] = []
        var ended = false
    }

    /// Made under the session's lock: takes none of its locks. ``start()`` follows the session.
    init(core: SessionCore, initiator: String, configuration: Configuration) {
        self.core = core
        self.configuration = configuration
        let state = LockedValue(
            State(
                machine: PlaybackStateMachine(
                    me: core.me, initiator: initiator,
                    waitingReasons: Set(configuration.suspensionReasonsThatTriggerWaiting.map(\.rawValue)),
                    lead: configuration.lead)))
        self.state = state
        timer.onWake { [weak self] in self?.wake() }
        startTimer.onWake { [weak self] in self?.startDue() }
    }

    /// Serves the group clock and follows the session: once, by whoever made the coordinator, after the
    /// session's lock is released.
    func start() {
        let state = self.state
        core.playbackServes(
            SessionCore.ClockService(
                groupTime: { local in state.withLock { $0.machine.answerPing(atLocal: local) } },
                pong: { [weak self] sender, pong, arrival in
                    guard let self else { return }
                    let (t0, t1, t2) = (
                        GroupInstant(milliseconds: pong.t0).nanoseconds, GroupInstant(milliseconds: pong.t1).nanoseconds,
                        GroupInstant(milliseconds: pong.t2).nanoseconds
                    )
                    // On the network thread: library code only, none of it waits.
                    self.perform(self.update { $0.onPong(from: sender, sent: t0, received: t1, replied: t2, back: arrival) })
                }))
        follow()
    }

    // MARK: - Reading

    /// The timeline the player follows now (paused at zero until the shared one is known).
    public var timeline: PlaybackTimeline { state.withLock { $0.machine.effectiveTimeline } }

    /// The current timeline first — once the session is joined and caught up — then every change, from
    /// anyone, in the order applied; equal consecutive timelines are not repeated. A slow consumer skips
    /// to the newest. Ends when the session is invalidated or the iterating task is cancelled.
    public func timelineUpdates() -> GroupUpdates<PlaybackTimeline> {
        register(Inbox(keepingNewest: 1), in: \.timelines) { state in
            // Handed out under the lock: a change handed out meanwhile comes after it, never before.
            state.outputs.emitted
        }
    }

    /// Scheduled starts, each delivered when its group instant comes on this participant's clock (or at
    /// once, late, when the command or the join came after it): start the player at the start's
    /// `mediaTime` and `rate`. A timeline that already plays gives one at once. Starts come in order;
    /// a start whose timeline is replaced before its instant (a pause, a seek) never comes. Ends with the
    /// session.
    public func starts() -> GroupUpdates<PlaybackStart> {
        let local = localNow
        return register(Inbox(), in: \.starts) { state in
            // Started already (its instant came): this consumer starts late, now. A pending one comes to all.
            let timeline = state.machine.effectiveTimeline
            guard let offset = state.machine.offset(atLocal: local), state.outputs.scheduled == timeline,
                !state.outputs.startPending, timeline.isPlaying
            else { return nil }
            return PlaybackCoordinator.start(of: timeline, atGroup: local &+ offset)
        }
    }

    /// A new sequence: `inbox` among the outputs at `inboxes` until its consumer stops, given `first` at
    /// once when there is one; finished at once when the session is over.
    private func register<Element: Sendable>(
        _ inbox: Inbox<Element>, in inboxes: WritableKeyPath<Outputs, [Int: Inbox<Element>]> & Sendable,
        first: (State) -> Element?
    ) -> GroupUpdates<Element> {
        let registry = self.state
        let ended = registry.withLock { state -> Bool in
            guard !state.outputs.ended else { return true }
            state.outputs.nextID += 1
            let id = state.outputs.nextID
            state.outputs[keyPath: inboxes][id] = inbox
            inbox.onTermination { registry.withLock { _ = $0.outputs[keyPath: inboxes].removeValue(forKey: id) } }
            if let element = first(state) { inbox.yield(element) }
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
        return state.withLock { state in
            let machine = state.machine
            let timeline = machine.effectiveTimeline
            guard let at = instant ?? machine.groupTime(atLocal: local) else { return timeline.position }
            return timeline.mediaTime(at: at)
        }
    }

    /// The group time now; nil until the group clock is known.
    public func groupTime() -> GroupInstant? {
        let local = localNow
        return state.withLock { $0.machine.groupTime(atLocal: local) }
    }

    /// The group time at `nanoseconds` (since 1970) on this participant's clock (its
    /// ``GroupCoordinator/Configuration/clock``); nil until the group clock is known.
    public func groupTime(atLocal nanoseconds: Int64) -> GroupInstant? {
        state.withLock { $0.machine.groupTime(atLocal: nanoseconds) }
    }

    /// The participant that serves the group clock, once known.
    public var clockReference: Participant? {
        state.withLock { $0.machine.clock.map { Participant(id: $0.reference) } }
    }

    /// The lead a start scheduled now would get.
    public var lead: Duration { state.withLock { $0.machine.lead } }

    /// This participant's suspensions under way, by reason.
    public var suspensionReasons: [PlaybackSuspension.Reason] {
        state.withLock { $0.machine.suspensions.sorted { $0.key < $1.key }.map { PlaybackSuspension.Reason($0.value) } }
    }

    /// Timeline and clock records rejected as invalid (out-of-range numbers, a malformed value, a clock
    /// claimed for someone else).
    public var rejectedRecordCount: Int { state.withLock { $0.machine.rejected } }

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
        if let waiter = clockWaiter() {
            await withTimeout(PlaybackCoordinator.clockPatience) { _ = await waiter.next() }
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

    /// Starts the tasks that feed the machine: the two records, the active participants; and the one
    /// that ends everything with the session. Time comes from the timer, armed after every input.
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
                let written = updateState { state in
                    state.outputs[keyPath: read] = true
                    return input(&state.machine, record, local)
                }
                perform(written)
                refresh()
            }
        }
    }

    /// How often a follower exchanges with the reference once its estimate follows the drift, paused or
    /// not: the estimate extrapolates from recent exchanges, and sparser ones put starts tens of
    /// milliseconds apart.
    private var pingInterval: Int64 { configuration.synchronizationInterval.nanoseconds }

    /// The timer's work: the machine's tick (a takeover whose patience ran out), then the `$ping` due.
    private func wake() {
        guard core.isJoined else { return }
        let local = localNow
        perform(update { $0.onTick(atLocal: local) })
        ping(atLocal: local)
        armTimer()
    }

    /// Schedules the timer for the machine's next moment.
    private func armTimer() {
        let local = localNow
        let next = state.withLock { state in
            state.outputs.ended ? nil : state.machine.nextWake(atLocal: local, pingInterval: pingInterval)
        }
        guard let next else { return }
        timer.schedule(after: .nanoseconds(max(next &- local, 0)))
    }

    /// Sends a `$ping` to the reference when the machine says one is due.
    private func ping(atLocal local: Int64) {
        let reference = state.withLock { [pingInterval] in $0.machine.takePing(atLocal: local, interval: pingInterval) }
        guard let reference else { return }
        let (sent, monotonic) = (localNow, ContinuousClock.now)
        let t0 = GroupInstant(nanoseconds: sent).milliseconds
        let key = GroupInstant(milliseconds: t0).nanoseconds  // what the answer's t0 will read as
        state.withLock { $0.machine.onPingSent(t0: key) }
        let queued = core.sendControl(.ping, Wire.Ping(t0: t0), to: reference) { [weak self] left in
            guard let self else { return }
            // On the network thread: library code only, none of it waits.
            self.perform(self.update { $0.onPingLeft(t0: key, atLocal: sent &+ (left - monotonic).nanoseconds) })
        }
        if let queued {
            perform(update { $0.onPingQueued(t0: key, atLocal: sent &+ (queued - monotonic).nanoseconds) })
        }
    }

    /// The machine after one input, with the records it asked for already written.
    private struct Written {
        var action: PlaybackStateMachine.Action
        var records: [Wire.StateRecord]
    }

    /// Feeds one input to the machine and writes the records it asks for under the same lock, so that
    /// they are stamped by the hybrid logical clock in the order the machine changed: a later change never
    /// loses to an earlier one written by another task.
    private func updateState(_ input: (inout State) -> PlaybackStateMachine.Action) -> Written {
        state.withLock { state in
            let action = input(&state)
            var records: [Wire.StateRecord] = []
            if let clock = action.writeClock, let record = write(PlaybackCoordinator.clockKey, clock) { records.append(record) }
            if let timeline = action.writeTimeline, let record = write(PlaybackCoordinator.timelineKey, timeline.record) {
                records.append(record)
            }
            return Written(action: action, records: records)
        }
    }

    private func update(_ input: (inout PlaybackStateMachine) -> PlaybackStateMachine.Action) -> Written {
        updateState { input(&$0.machine) }
    }

    /// Carries out the rest of what the machine asked for: its records handed to the connection at once
    /// (a suspension pauses the others one broker trip later), the player's outputs refreshed, commands
    /// waiting for the clock released once it is known, the timers armed for what the input changed.
    private func perform(_ written: Written) {
        for record in written.records { core.enqueue(record) }
        if written.action.timelineChanged { refresh() }
        let local = localNow
        let waiters = state.withLock { state -> [Inbox<Void>] in
            guard state.machine.offset(atLocal: local) != nil, !state.outputs.clockWaiters.isEmpty else { return [] }
            defer { state.outputs.clockWaiters = [] }
            return state.outputs.clockWaiters
        }
        for waiter in waiters { waiter.finish() }
        armTimer()
        armStart()
    }

    /// An inbox that ends once the group clock is known; nil when it is already.
    private func clockWaiter() -> Inbox<Void>? {
        let local = localNow
        return state.withLock { state in
            guard state.machine.offset(atLocal: local) == nil, !state.outputs.ended else { return nil }
            let waiter = Inbox<Void>()
            state.outputs.clockWaiters.append(waiter)
            return waiter
        }
    }

    /// Writes one of playback's records (applied here at once); nil when not joined.
    private func write(_ key: String, _ value: some Encodable) -> Wire.StateRecord? {
        guard core.isJoined, let json = try? Wire.jsonValue(value) else { return nil }
        return core.write(key: key, value: json)
    }

    /// Hands the timeline to ``timelineUpdates()`` if it changed (once both records were read), and schedules
    /// its start if it plays (once per timeline: a start pending or delivered is not scheduled again).
    /// Under the lock, so that of two refreshes the later one hands out the later timeline.
    private func refresh() {
        let local = localNow
        state.withLock { state in
            guard !state.outputs.ended else { return }
            let timeline = state.machine.effectiveTimeline
            let clockKnown = state.machine.offset(atLocal: local) != nil
            if state.outputs.emitted != timeline && state.outputs.timelineRead && state.outputs.clockRead {
                state.outputs.emitted = timeline
                for inbox in state.outputs.timelines.values { inbox.yield(timeline) }
            }
            if timeline.isPlaying && clockKnown && state.outputs.scheduled == timeline { return }
            state.outputs.scheduled = timeline.isPlaying && clockKnown ? timeline : nil
            state.outputs.startPending = state.outputs.scheduled != nil
        }
        armStart()
    }

    /// Schedules the start timer at the pending start's instant on the local clock, as the current
    /// offset puts it (every refinement of the offset moves it); delivers it at once when it has come.
    private func armStart() {
        let local = localNow
        let remaining = state.withLock { state -> Int64? in
            guard state.outputs.startPending, let timeline = state.outputs.scheduled,
                let offset = state.machine.offset(atLocal: local)
            else { return nil }
            return timeline.anchor.nanoseconds &- offset &- local
        }
        guard let remaining else { return }
        if remaining > 0 {
            startTimer.schedule(after: .nanoseconds(remaining))
        } else {
            startDue()
        }
    }

    /// The start timer fired: hands the start to ``starts()`` when its instant has come on the local
    /// clock (re-reading the offset), or waits again for the instant the refined offset gives.
    private func startDue() {
        let local = localNow
        let (start, inboxes, early) = state.withLock { state -> (PlaybackStart?, [Inbox<PlaybackStart>], Bool) in
            guard state.outputs.startPending, !state.outputs.ended, let timeline = state.outputs.scheduled,
                let offset = state.machine.offset(atLocal: local)
            else { return (nil, [], false) }
            guard timeline.anchor.nanoseconds &- offset &- local <= 0 else { return (nil, [], true) }
            state.outputs.startPending = false
            return (PlaybackCoordinator.start(of: timeline, atGroup: local &+ offset), Array(state.outputs.starts.values), false)
        }
        if early { return armStart() }
        guard let start else { return }
        for inbox in inboxes { inbox.yield(start) }
        armTimer()  // paused pace again
    }

    /// The session is over: every sequence ends, the timers stop, the clock answers no more.
    private func shutdown() {
        core.playbackServes(nil)
        timer.cancel()
        startTimer.cancel()
        let (timelines, starts, waiters) = state.withLock { state in
            state.outputs.ended = true
            defer {
                state.outputs.timelines = [:]
                state.outputs.starts = [:]
                state.outputs.clockWaiters = []
                state.outputs.startPending = false
            }
            return (
                Array(state.outputs.timelines.values), Array(state.outputs.starts.values), state.outputs.clockWaiters
            )
        }
        for inbox in timelines { inbox.finish() }
        for inbox in starts { inbox.finish() }
        for waiter in waiters { waiter.finish() }
    }
}

extension GroupSession {
    /// The session's playback coordinator, made at the first call with `configuration` (later calls
    /// return the same one, whatever their configuration). It may be made before or after `join()`.
    public func playbackCoordinator(configuration: PlaybackCoordinator.Configuration = .init()) -> PlaybackCoordinator {
        let (coordinator, made) = core.facet(\.playback) {
            PlaybackCoordinator(core: core, initiator: $0.announcement.createdBy, configuration: configuration)
        }
        if made { coordinator.start() }
        return coordinator
    }
}
