import MQTT

/// Tracks whether any session is joined, and holds back work (an interstitial ad, a modal) until none is:
/// "don't interrupt two people looking at the same screen". A value type without side effects: every
/// input returns an ``Action``.
struct SharingGate {
    typealias Work = @Sendable () async -> Void

    enum State {
        /// `joined`: the sessions joined now; `deferred`: work waiting for none to be.
        case open(joined: Set<String>, deferred: [Work], listeners: ListenerRegistry<Inbox<Bool>>)
        case closed
    }

    struct Action {
        /// Listeners to tell whether we are sharing now.
        var yield: [(Inbox<Bool>, Bool)] = []
        var finish: [Inbox<Bool>] = []
        /// Work to run now, in the order it was deferred.
        var run: [Work] = []

        /// Yields and finishes, then runs the work in a task of its own (app code, never under a lock).
        func perform() {
            for (inbox, value) in yield { inbox.yield(value) }
            for inbox in finish { inbox.finish() }
            if !run.isEmpty {
                let work = run
                Task { for item in work { await item() } }
            }
        }
    }

    private(set) var state = State.open(joined: [], deferred: [], listeners: ListenerRegistry())

    var isSharing: Bool {
        if case let .open(joined, _, _) = state { return !joined.isEmpty }
        return false
    }

    mutating func onJoined(_ session: String) -> Action {
        guard case .open(var joined, let deferred, let listeners) = state else { return Action() }
        let inserted = joined.insert(session).inserted
        state = .open(joined: joined, deferred: deferred, listeners: listeners)
        return Action(yield: inserted && joined.count == 1 ? listeners.all.map { ($0, true) } : [])
    }

    mutating func onLeft(_ session: String) -> Action {
        guard case .open(var joined, let deferred, let listeners) = state, joined.remove(session) != nil else { return Action() }
        guard joined.isEmpty else {
            state = .open(joined: joined, deferred: deferred, listeners: listeners)
            return Action()
        }
        state = .open(joined: [], deferred: [], listeners: listeners)
        return Action(yield: listeners.all.map { ($0, false) }, run: deferred)
    }

    /// A `sharingUpdates()` listener: it gets the current value at once. Returns nil as its ID once
    /// closed: then it ends after that value.
    mutating func addListener(_ inbox: Inbox<Bool>) -> (ListenerRegistry<Inbox<Bool>>.ID?, Action) {
        guard case .open(let joined, let deferred, var listeners) = state else {
            return (nil, Action(yield: [(inbox, false)], finish: [inbox]))
        }
        let id = listeners.add(inbox)
        state = .open(joined: joined, deferred: deferred, listeners: listeners)
        return (id, Action(yield: [(inbox, !joined.isEmpty)]))
    }

    mutating func removeListener(_ id: ListenerRegistry<Inbox<Bool>>.ID) {
        guard case .open(let joined, let deferred, var listeners) = state else { return }
        listeners.remove(id)
        state = .open(joined: joined, deferred: deferred, listeners: listeners)
    }

    /// Work to run once no session is joined: now, if none is.
    mutating func onDefer(_ work: @escaping Work) -> Action {
        guard case let .open(joined, deferred, listeners) = state, !joined.isEmpty else { return Action(run: [work]) }
        state = .open(joined: joined, deferred: deferred + [work], listeners: listeners)
        return Action()
    }

    /// The coordinator closed: listeners end, deferred work runs.
    mutating func close() -> Action {
        guard case .open(_, let deferred, var listeners) = state else { return Action() }
        state = .closed
        return Action(finish: listeners.removeAll(), run: deferred)
    }
}
