import MQTT

/// The one timer of a runtime object whose state machine says when it next has something to do.
///
/// The machine's inputs ask for a wake-up at a deadline; the object hands the deadline to
/// ``schedule(at:)``. Only an earlier deadline replaces the pending one: a later one is met by the pending
/// wake-up, whose handler asks the machine what is due and schedules what it answers next. So a stream of
/// inputs that push a deadline back (heartbeats, messages) costs a comparison each, not a task each, and an
/// object with nothing due sleeps until its next deadline, never on a period.
///
/// The handler runs on a task of its own: never on the thread that scheduled, never on libmosquitto's
/// network thread. ``cancel()`` ends the timer for good (a handler already running finishes).
final class WakeUp: Sendable {
    private struct State {
        var deadline: ContinuousClock.Instant?
        var task: Task<Void, Never>?
        var handler: (@Sendable () -> Void)?
        var cancelled = false
        var wakes = 0
    }

    private let state = LockedValue(State())
    /// How late a wake-up may come (nil: the system's default, which lets it coalesce with others).
    private let tolerance: Duration?
    /// The priority of the handler's task, whoever scheduled it (nil: the scheduler's, which on
    /// libmosquitto's network thread is none).
    private let priority: TaskPriority?

    init(tolerance: Duration? = nil, priority: TaskPriority? = nil) {
        self.tolerance = tolerance
        self.priority = priority
    }

    /// How many times the handler ran: what an idle object costs.
    var wakeCount: Int { state.withLock { $0.wakes } }

    /// Sets what runs at each wake-up, once, before the first ``schedule(at:)``.
    func onWake(_ handler: @escaping @Sendable () -> Void) {
        state.withLock { $0.handler = handler }
    }

    /// Wakes at `deadline` unless a wake-up at or before it is pending; nil asks for nothing.
    func schedule(at deadline: ContinuousClock.Instant?) {
        guard let deadline else { return }
        let (tolerance, priority) = (self.tolerance, self.priority)
        let replaced = state.withLock { state -> Task<Void, Never>? in
            guard !state.cancelled, state.deadline.map({ deadline < $0 }) ?? true else { return nil }
            let previous = state.task
            state.deadline = deadline
            // Made under the lock, so it cannot fire before it is recorded.
            state.task = Task(priority: priority) { [weak self] in
                try? await Task.sleep(until: deadline, tolerance: tolerance, clock: .continuous)
                guard !Task.isCancelled else { return }
                self?.fire(deadline)
            }
            return previous
        }
        replaced?.cancel()
    }

    /// Wakes `delay` from now (see ``schedule(at:)``).
    func schedule(after delay: Duration) { schedule(at: .now + delay) }

    /// Ends the timer: no wake-up comes after this returns, except from a handler already running.
    func cancel() {
        let task = state.withLock { state -> Task<Void, Never>? in
            state.cancelled = true
            state.deadline = nil
            state.handler = nil
            defer { state.task = nil }
            return state.task
        }
        task?.cancel()
    }

    private func fire(_ deadline: ContinuousClock.Instant) {
        let handler = state.withLock { state -> (@Sendable () -> Void)? in
            guard state.deadline == deadline, !state.cancelled else { return nil }
            state.deadline = nil
            state.task = nil
            state.wakes += 1
            return state.handler
        }
        handler?()
    }
}
