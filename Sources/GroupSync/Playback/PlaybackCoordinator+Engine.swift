import Foundation
import MQTT

extension PlaybackCoordinator {
    /// A session's one playback coordinator: the machine under its lock, its timers, and what follows the
    /// session. Made once per session (kept by ``SessionCore`` until the session is over), whatever
    /// number of ``PlaybackCoordinator``s drive it.
    final class Engine: Sendable {
        let configuration: Configuration
        let core: SessionCore
        /// The machine, and the inboxes of what it hands out, under one lock.
        let state: LockedValue<State>
        /// Wakes when the machine asks to (a `$ping`, a takeover).
        private let timer = WakeUp()
        /// Wakes at the scheduled start, to the nanosecond the scheduler allows: a late start is a start out
        /// of step with the group, so it is not left to the priority of whoever scheduled it (often the
        /// network thread).
        private let startTimer = WakeUp(tolerance: .zero, priority: .high)

        /// The machine decides everything; the inboxes are only where its actions send what it hands out.
        struct State {
            var machine: PlaybackStateMachine
            var timelines = ListenerRegistry<Inbox<PlaybackTimeline>>()
            var starts = ListenerRegistry<Inbox<PlaybackStart>>()
            /// Commands waiting for the group clock.
            var clockWaiters: [Inbox<Void>] = []
        }

        /// Made under the session's lock: takes none of its locks. ``start()`` follows the session.
        init(core: SessionCore, initiator: String, configuration: Configuration) {
            self.core = core
            self.configuration = configuration
            state = LockedValue(
                State(
                    machine: PlaybackStateMachine(
                        me: core.me, initiator: initiator,
                        waitingReasons: Set(configuration.suspensionReasonsThatTriggerWaiting.map(\.rawValue)),
                        lead: configuration.lead, pingInterval: configuration.synchronizationInterval,
                        longestPingInterval: configuration.longestSynchronizationInterval)))
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
                        // On the network thread: library code only, which waits for no network or user.
                        self?.input { $0.onPong(from: sender, sent: t0, received: t1, replied: t2, back: arrival) }
                    }))
            follow()
        }

        /// A new sequence: `inbox` among the inboxes at `inboxes` until its consumer stops, given what `first`
        /// says at once; finished at once when the session is over.
        func register<Element: Sendable>(
            _ inbox: Inbox<Element>, in inboxes: WritableKeyPath<State, ListenerRegistry<Inbox<Element>>> & Sendable,
            first: (PlaybackStateMachine) -> Element?
        ) -> GroupUpdates<Element> {
            let registry = self.state
            let ended = registry.withLock { state -> Bool in
                guard !state.machine.isEnded else { return true }
                let id = ObjectIdentifier(inbox)
                state[keyPath: inboxes].add(inbox, id: id)
                inbox.onTermination { registry.withLock { _ = $0[keyPath: inboxes].remove(id) } }
                // Handed out under the lock: a change handed out meanwhile comes after it, never before.
                if let element = first(state.machine) { inbox.yield(element) }
                return false
            }
            if ended { inbox.finish() }
            return GroupUpdates(inbox)
        }

        func command(_ command: PlaybackStateMachine.Command) async throws(GroupSyncError) {
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
            if let waiter {
                await withTimeout(PlaybackCoordinator.clockPatience) { _ = await waiter.next() }
                state.withLock { $0.clockWaiters.removeAll { $0 === waiter } }  // gave up, or was cancelled
            }
            // Cancelled before it applies: nothing changes.
            guard !Task.isCancelled else { throw .cancelled }
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

        // MARK: - Following the session

        var localNow: Int64 { core.context.clock.nanoseconds() }

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
                // The session is over: the clock answers no more, and every sequence ends.
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
                // Where the write happened (the network thread, or a publisher that holds no lock of
                // ours): library code only, which waits for no network or user.
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
        func input(publishing: Bool = false, _ input: (inout PlaybackStateMachine) -> PlaybackStateMachine.Action)
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
                if action.waiters == .release {
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
}
