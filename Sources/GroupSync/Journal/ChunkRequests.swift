/// The chunk subscriptions of one journal load, shared (under a lock) between the load's loop and the
/// tasks that subscribe. Each subscription is a request with its own number: one given up before the
/// broker acknowledged it is unsubscribed as soon as it arrives, one that failed is forgotten, and once
/// the load is over every one still live is unsubscribed. Pure bookkeeping: the caller unsubscribes
/// what it is handed.
struct ChunkRequests<Subscription> {
    private var live: [Int: Subscription] = [:]
    /// Requests given up before their subscription arrived, with their chunk.
    private var abandoned: [Int: Int] = [:]
    /// Requests whose subscription failed and that were not given up yet.
    private var failed: Set<Int> = []
    private var closed = false

    /// Takes the subscription of `request`, or marks it to be dropped when it comes.
    mutating func abandon(_ request: Int, chunk: Int) -> Subscription? {
        if let subscription = live.removeValue(forKey: request) { return subscription }
        if failed.remove(request) == nil { abandoned[request] = chunk }
        return nil
    }

    /// The subscription of `request` failed: nothing will arrive for it.
    mutating func fail(_ request: Int) {
        if abandoned.removeValue(forKey: request) == nil { failed.insert(request) }
    }

    /// Keeps the subscription of `request` unless the request was given up (then the caller drops it).
    mutating func arrived(_ request: Int, _ subscription: Subscription) -> Bool {
        guard !closed, abandoned.removeValue(forKey: request) == nil else { return false }
        live[request] = subscription
        return true
    }

    /// Whether an earlier subscription to `chunk` is still on its way: a new one would share its filter
    /// and so get no retained copy of its own.
    func isArriving(_ chunk: Int) -> Bool { abandoned.values.contains(chunk) }

    /// The load is over: every live subscription, to unsubscribe; any that arrives later is refused.
    mutating func close() -> [Subscription] {
        closed = true
        defer { live = [:] }
        return Array(live.values)
    }
}
