/// Tracks whether any session is joined, and holds back work (an interstitial ad, a modal) until none is:
/// the article's "don't interrupt two people looking at the same screen".
struct SharingGate {
    typealias Work = @Sendable () async -> Void

    private(set) var joinedSessions: Set<String> = []
    private var listeners: [UInt64: AsyncStream<Bool>.Continuation] = [:]
    private var deferred: [Work] = []
    private var nextID: UInt64 = 0
    private var closed = false

    var isSharing: Bool { !joinedSessions.isEmpty }

    struct Effects {
        var yield: [(AsyncStream<Bool>.Continuation, Bool)] = []
        var finish: [AsyncStream<Bool>.Continuation] = []
        /// Work to run now, in the order it was deferred.
        var run: [Work] = []

        func perform() {
            for (continuation, value) in yield { continuation.yield(value) }
            for continuation in finish { continuation.finish() }
            if !run.isEmpty {
                let work = run
                Task { for item in work { await item() } }
            }
        }
    }

    mutating func onJoined(_ session: String) -> Effects {
        let was = isSharing
        joinedSessions.insert(session)
        return changed(from: was)
    }

    mutating func onLeft(_ session: String) -> Effects {
        let was = isSharing
        joinedSessions.remove(session)
        return changed(from: was)
    }

    mutating func addListener(_ continuation: AsyncStream<Bool>.Continuation) -> (UInt64, Effects) {
        nextID += 1
        var effects = Effects()
        effects.yield = [(continuation, isSharing)]
        if closed { effects.finish = [continuation] } else { listeners[nextID] = continuation }
        return (nextID, effects)
    }

    mutating func removeListener(_ id: UInt64) {
        listeners[id] = nil
    }

    mutating func onDefer(_ work: @escaping Work) -> Effects {
        var effects = Effects()
        if isSharing { deferred.append(work) } else { effects.run = [work] }
        return effects
    }

    mutating func close() -> Effects {
        closed = true
        var effects = Effects()
        effects.finish = Array(listeners.values)
        listeners = [:]
        if !deferred.isEmpty {
            effects.run = deferred
            deferred = []
        }
        return effects
    }

    private mutating func changed(from was: Bool) -> Effects {
        var effects = Effects()
        guard was != isSharing else { return effects }
        effects.yield = listeners.values.map { ($0, isSharing) }
        if !isSharing {
            effects.run = deferred
            deferred = []
        }
        return effects
    }
}
