import MQTT

/// Tracks whether any session is joined, and holds back work (an interstitial ad, a modal) until none is:
/// "don't interrupt two people looking at the same screen". A value type without side effects: every
/// input returns an ``Action``.
struct SharingGate {
    typealias Work = @Sendable () async -> Void

    enum State {
        case open(Open)
        /// The coordinator closed: nothing is shared, work runs at once.
        case closed
    }

    struct Open {
        var joined: Set<String> = []
        /// Work waiting for no session to be joined, in the order deferred.
        var deferred: [Work] = []
        var listeners = ListenerRegistry<Inbox<Bool>>()
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

    private(set) var state = State.open(Open())

    var isSharing: Bool { if case let .open(open) = state { !open.joined.isEmpty } else { false } }

    mutating func onJoined(_ session: String) -> Action {
        modifyOpen { open in
            guard open.joined.insert(session).inserted, open.joined.count == 1 else { return Action() }
            return Action(yield: open.listeners.all.map { ($0, true) })
        } ?? Action()
    }

    mutating func onLeft(_ session: String) -> Action {
        modifyOpen { open in
            guard open.joined.remove(session) != nil, open.joined.isEmpty else { return Action() }
            defer { open.deferred = [] }
            return Action(yield: open.listeners.all.map { ($0, false) }, run: open.deferred)
        } ?? Action()
    }

    /// A `sharingUpdates()` listener: it gets the current value at once; once closed, it ends after that
    /// value, not added. Its sequence removes it by its inbox (``removeListener(_:)``).
    mutating func addListener(_ inbox: Inbox<Bool>) -> Action {
        modifyOpen { open in
            open.listeners.add(inbox, id: ObjectIdentifier(inbox))
            return Action(yield: [(inbox, !open.joined.isEmpty)])
        } ?? Action(yield: [(inbox, false)], finish: [inbox])
    }

    /// The sequence of the inbox `id` ended.
    mutating func removeListener(_ id: ObjectIdentifier) { modifyOpen { $0.listeners.remove(id) } }

    /// Work to run once no session is joined: now, if none is.
    mutating func onDefer(_ work: @escaping Work) -> Action {
        modifyOpen { open in
            guard !open.joined.isEmpty else { return Action(run: [work]) }
            open.deferred.append(work)
            return Action()
        } ?? Action(run: [work])
    }

    /// The coordinator closed: listeners end, deferred work runs.
    mutating func close() -> Action {
        guard case var .open(open) = state else { return Action() }
        state = .closed
        return Action(finish: open.listeners.removeAll(), run: open.deferred)
    }

    /// Changes the open state in place; nil once closed.
    @discardableResult
    private mutating func modifyOpen<Result>(_ body: (inout Open) -> Result) -> Result? {
        guard case .open(var open) = state else { return nil }
        state = .closed
        defer { state = .open(open) }
        return body(&open)
    }
}
