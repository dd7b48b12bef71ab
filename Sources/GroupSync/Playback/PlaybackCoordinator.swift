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
    /// The machine, and the inboxes of what it hands out, under one lock.
    private let state: LockedValue<State>
    /// Wakes when the machine asks to (a `$ping`, a takeover).
    private let timer = WakeUp()
    /// Wakes at the scheduled start, to the nanosecond the scheduler allows: a late start is a start out
    /// of step with the group, so it is not left to the priority of whoever scheduled it (often the
    /// network thread).
    private let startTimer = WakeUp(tolerance: .zero, priority: .high)

    private struct State {
        var machine: PlaybackStateMachine
        var timelines = ListenerRegistry<Inbox<PlaybackTimeline>>()
        var starts = ListenerRegistry<Inbox<PlaybackStart>>()
        var clockWaiters: [Inbox<Void>] = []
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
                    lead: configuration.lead, pingInterval: configuration.synchronizationInterval)))
        self.state = state
        timer.onWake { [weak self] in self?.wake() }
        startTimer.onWake { [weak self] in self?.wake() }
    }

    /// Serves the group clock and follows the session: once, by whoever made the coordinator, after the
    /// session's lock is released.
    func start() {
        let state = self.state
        core.playbackServes(
            SessionCore.ClockService(
                groupTime: { local in state.withLock { $0.machine.answerPing(atLocal: local) } },
                pong: { [weak self] sender, pong, arrival in
                    let (t0, t1, t2) = (
                        GroupInstant(milliseconds: pong.t0).nanoseconds, GroupInstant(milliseconds: pong.t1).nanoseconds,
                        GroupInstant(milliseconds: pong.t2).nanoseconds
                    )
                    // On the network thread: library code only, none of it waits.
                    self?.input { $0.onPong(from: sender, sent: t0, received: t1, replied: t2, back: arrival) }
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
        register(Inbox(keepingNewest: 1), in: \.timelines) { $0.emitted }
    }

    /// Scheduled starts, each delivered when its group instant comes on this participant's clock (or at
    /// once, late, when the command or the join came after it): start the player at the start's
    /// `mediaTime` and `rate`. A timeline that already plays gives one at once. Starts come in order;
    /// a start whose timeline is replaced before its instant (a pause, a seek) never comes. Ends with the
    /// session.
    public func starts() -> GroupUpdates<PlaybackStart> {
        let local = localNow
        return register(Inbox(), in: \.starts) { $0.lateStart(atLocal: local) }
    }

    /// A new sequence: `inbox` among the inboxes at `inboxes` until its consumer stops, given what `first`
    /// says at once; finished at once when the session is over.
    private func register<Element: Sendable>(
        _ inbox: Inbox<Element>, in inboxes: WritableKeyPath<State, ListenerRegistry<Inbox<Element>>> & Sendable,
        first: (PlaybackStateMachine) -> Element?
    ) -> GroupUpdates<Element> {
        let registry = self.state
        let ended = registry.withLock { state -> Bool in
            guard !state.machine.isEnded else { return true }
            let id = state[keyPath: inboxes].add(inbox)
            inbox.onTermination { registry.withLock { _ = $0[keyPath: inboxes].remove(id) } }
            // Handed out under the lock: a change handed out meanwhile comes after it, never before.
            if let element = first(state.machine) { inbox.yield(element) }
            return false
        }
        if ended { inbox.finish() }
        return GroupUpdates(inbox)
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
    public func groupTime() -> GroupInstant? { groupTime(atLocal: localNow) }

    /// The group time at `nanoseconds` (since 1970) on this participant's clock (its
    /// ``GroupCoordinator/Configuration/clock``); nil until the group clock is known.
    public func groupTime(atLocal nanoseconds: Int64) -> GroupInstant? { state.withLock { $0.machine.groupTime(atLocal: nanoseconds) } }

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
        // Right after joining the group clock may still be coming: wait for it a little, on an inbox that
        // ends once it is known (or the session is over).
        let asked = localNow
        let waiter = state.withLock { state -> Inbox<Void>? in
            guard state.machine.waitForClock(atLocal: asked) else { return nil }
            let waiter = Inbox<Void>()
            state.clockWaiters.append(waiter)
            return waiter
        }
        if let waiter { await withTimeout(PlaybackCoordinator.clockPatience) { _ = await waiter.next() } }
        let local = localNow
        var refusal: GroupSyncError?
        // The timeline is published here, to return once the broker has it.
        let records = input(publishing: true) { machine in
            guard !machine.isEnded, machine.offset(atLocal: local) != nil else {
                refusal = machine.isEnded ? .sessionInvalidated : .noGroupClock
                return PlaybackStateMachine.Action()
            }
            return machine.command(command, atLocal: local)
        }
        if let refusal { throw refusal }
        for record in records { try await core.publish(record) }
    }

    /// Suspends this participant's following of the timeline for `reason` (see ``PlaybackSuspension``).
    public func beginSuspension(for reason: PlaybackSuspension.Reason) -> PlaybackSuspension {
        let local = localNow
        var id = 0
        input { machine in
            let action = machine.beginSuspension(reason.rawValue, atLocal: local)
            id = machine.lastSuspension
            return action
        }
        return PlaybackSuspension(reason: reason) { [weak self, id] in
            guard let self else { return }
            let local = self.localNow
            self.input { $0.endSuspension(id, atLocal: local) }
        }
    }

    // MARK: - Following the session

    private var localNow: Int64 { core.context.clock.nanoseconds() }

    /// Starts the tasks that feed the machine: the two records, the active participants; and the one
    /// that ends everything with the session. Time comes from the timers the machine asks for.
    private func follow() {
        let core = self.core
        let participants = Inbox.Consumer(core.listen(.participants, keepingNewest: 1))
        let states = Inbox.Consumer(core.listen(.state))
        let tasks = core.context.tasks
        follow(PlaybackCoordinator.clockKey) { machine, record, local in
            machine.onClockRecord(.init(record) { $0.matches(writer: $1) }, atLocal: local)
        }
        follow(PlaybackCoordinator.timelineKey) { machine, record, local in
            machine.onTimelineRecord(.init(record), atLocal: local)
        }
        tasks.spawn { [self] in
            while let update = await participants.inbox.next() {
                guard case let .participants(active) = update else { continue }
                let local = localNow
                input { $0.onActive(Set(active.map(\.id)), atLocal: local) }
            }
        }
        tasks.spawn { [self] in
            while let update = await states.inbox.next() {
                if case let .state(state) = update, state.isInvalidated { break }
            }
            core.playbackServes(nil)
            input { $0.end() }
        }
    }

    /// Feeds every value of the record `key` (nil: none) to the machine through `feed`.
    private func follow(
        _ key: String, _ feed: @escaping @Sendable (inout PlaybackStateMachine, Wire.StateRecord?, Int64) -> PlaybackStateMachine.Action
    ) {
        let updates = Inbox.Consumer(core.listen(.values(key: key), keepingNewest: 1))
        core.context.tasks.spawn { [self] in
            while let next = await updates.inbox.next() {
                guard case let .value(record) = next else { continue }
                let local = localNow
                input { feed(&$0, record, local) }
            }
        }
    }

    /// Both timers' work: time passes for the machine (not while we are not joined: a claim could not be
    /// written).
    private func wake() {
        guard core.isJoined else { return }
        let local = localNow
        input { $0.onTick(atLocal: local) }
    }

    /// Sends a `$ping` carrying `t0` to the reference, and tells the machine when the connection took it
    /// and when it was written to the socket (both moments measured against one reading of the clocks).
    private func ping(_ reference: String, t0: Double) {
        let key = GroupInstant(milliseconds: t0).nanoseconds
        let (sent, monotonic) = (localNow, ContinuousClock.now)
        let queued = core.sendControl(.ping, Wire.Ping(t0: t0), to: reference) { [weak self] left in
            // On the network thread: library code only, none of it waits.
            self?.input { $0.onPingLeft(t0: key, atLocal: sent &+ (left - monotonic).nanoseconds) }
        }
        if let queued { input { $0.onPingQueued(t0: key, atLocal: sent &+ (queued - monotonic).nanoseconds) } }
    }

    /// Feeds one input to the machine and does what its action says. Under the lock, what keeps the
    /// machine's order: the records stamped by the hybrid logical clock (a later change never loses to an
    /// earlier one), the timeline and start yielded (an inbox never runs consumer code). After it: the
    /// `$ping` (its `t0` is the input's moment), the records handed to the connection at once (a suspension
    /// pauses the others one broker trip later) or, `publishing`, returned for the caller to publish, the
    /// inboxes ended (their termination handlers take the lock), the timers set.
    @discardableResult
    private func input(publishing: Bool = false, _ input: (inout PlaybackStateMachine) -> PlaybackStateMachine.Action)
        -> [Wire.StateRecord]
    {
        let (action, records, ending) = state.withLock { state in
            let action = input(&state.machine)
            var (records, ending): ([Wire.StateRecord], [() -> Void]) = ([], [])
            if let clock = action.writeClock { write(PlaybackCoordinator.clockKey, clock, to: &records) }
            if let timeline = action.writeTimeline { write(PlaybackCoordinator.timelineKey, timeline.record, to: &records) }
            switch action.timelines {
            case .none: break
            case let .yield(timeline): for inbox in state.timelines.all { inbox.yield(timeline) }
            case .finish: ending += state.timelines.removeAll().map { inbox in inbox.finish }
            }
            switch action.start {
            case .none, .wake: break
            case let .deliver(start): for inbox in state.starts.all { inbox.yield(start) }
            case .finish: ending += state.starts.removeAll().map { inbox in inbox.finish }
            }
            if action.releaseWaiters {
                ending += state.clockWaiters.map { inbox in inbox.finish }
                state.clockWaiters = []
            }
            return (action, records, ending)
        }
        if case let .send(reference, t0) = action.ping { ping(reference, t0: t0) }
        if !publishing { for record in records { core.enqueue(record) } }
        for end in ending { end() }
        switch action.start {
        case .none, .deliver: break
        case let .wake(local): startTimer.schedule(after: .nanoseconds(max(local &- localNow, 0)))
        case .finish: startTimer.cancel()
        }
        switch action.timer {
        case .none: break
        case let .wake(local): timer.schedule(after: .nanoseconds(max(local &- localNow, 0)))
        case .cancel: timer.cancel()
        }
        return publishing ? records : []
    }

    /// Writes one of playback's records as ours (applied here at once) into `records`; nothing when not
    /// joined.
    private func write(_ key: String, _ value: some Encodable, to records: inout [Wire.StateRecord]) {
        guard core.isJoined, let json = try? Wire.jsonValue(value) else { return }
        records.append(core.write(key: key, value: json))
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
