/// The chunk subscriptions of one journal load, kept by the load's loop (the tasks that subscribe post
/// what the broker answered). A request subscribes to a range of chunks at once and lasts until none of them is
/// wanted from it any more: each chunk is given up once it arrived (or the load stops wanting it). One
/// given up entirely before the broker acknowledged it is unsubscribed as soon as it arrives, one that
/// failed is forgotten, and once the load is over every one still live is unsubscribed. Pure
/// bookkeeping: the caller unsubscribes what it is handed.
struct ChunkRequests<Subscription> {
    private struct Request {
        let chunks: Range<Int>
        /// How many of `chunks` are still wanted from this request.
        var wanted: Int
        /// nil until the broker acknowledged the subscription.
        var subscription: Subscription?
    }

    private var requests: [Int: Request] = [:]
    /// Each chunk still wanted, with the request it is wanted from.
    private var current: [Int: Int] = [:]
    /// Chunks whose retry waits for the requests that cover them to end (``deferRetry(_:)``).
    private var deferred: Set<Int> = []
    private var lastRequest = 0
    private var closed = false

    /// A new request for `chunks`, by its number; the subscriptions of earlier requests that no chunk is
    /// wanted from any more (these chunks are asked for again), to unsubscribe.
    mutating func request(_ chunks: Range<Int>) -> (request: Int, released: [Subscription]) {
        let released = chunks.compactMap { giveUp($0) }
        lastRequest += 1
        requests[lastRequest] = Request(chunks: chunks, wanted: chunks.count)
        for chunk in chunks { current[chunk] = lastRequest }
        return (lastRequest, released)
    }

    /// `chunk` is no longer wanted from its request: that request's subscription, once none of its chunks
    /// is (one still on its way is dropped when it arrives).
    mutating func giveUp(_ chunk: Int) -> Subscription? {
        guard let id = current.removeValue(forKey: chunk), var request = requests[id] else { return nil }
        request.wanted -= 1
        guard request.wanted == 0, let subscription = request.subscription else {
            requests[id] = request
            return nil
        }
        requests[id] = nil
        return subscription
    }

    /// The subscription of `request` failed: nothing will arrive for it.
    mutating func fail(_ request: Int) { requests[request] = nil }

    /// Keeps the subscription of `request` unless no chunk is wanted from it any more, or the load is
    /// over (then the caller drops it).
    mutating func arrived(_ request: Int, _ subscription: Subscription) -> Bool {
        guard !closed, let wanted = requests[request]?.wanted else { return false }
        guard wanted > 0 else {
            requests[request] = nil
            return false
        }
        requests[request]?.subscription = subscription
        return true
    }

    /// Whether a subscription to `chunk` is live or on its way: a new one would share its filter and so
    /// get no retained copy of its own.
    func isCovered(_ chunk: Int) -> Bool { requests.values.contains { $0.chunks.contains(chunk) } }

    /// Whether the retry of `chunk` must wait because a request covers it (``isCovered(_:)``); it is then
    /// handed back by ``takeUncovered()`` once none does.
    mutating func deferRetry(_ chunk: Int) -> Bool {
        guard isCovered(chunk) else { return false }
        deferred.insert(chunk)
        return true
    }

    /// The deferred chunks no request covers any more, in order: their retries are due now. The caller
    /// asks after each change that may end a request.
    mutating func takeUncovered() -> [Int] {
        guard !deferred.isEmpty else { return [] }
        let due = deferred.filter { !isCovered($0) }
        deferred.subtract(due)
        return due.sorted()
    }

    /// The chunks still wanted whose subscription the broker acknowledged, in order: what a new server
    /// is asked for (one whose subscription is on its way is asked for once it arrives).
    var subscribedWanted: [Int] { current.filter { requests[$0.value]?.subscription != nil }.keys.sorted() }

    /// The load is over: every live subscription, to unsubscribe; any that arrives later is refused.
    mutating func close() -> [Subscription] {
        closed = true
        defer { requests = [:] }
        return requests.values.compactMap(\.subscription)
    }
}
