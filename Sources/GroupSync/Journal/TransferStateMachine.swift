import Foundation

/// One load of an attachment: which chunks to ask the broker for, and what to hand over, in order.
///
/// The window is `[next, next + window)`: `next` is the first chunk not yet handed over, and only chunks
/// inside the window are requested. A chunk that arrives ahead of `next` waits in memory until the ones
/// before it are in, so at most `window` chunks are ever held, whatever the attachment's size. Chunks are
/// handed over strictly in order, each once: a duplicate (a refresh, a republish after a reconnect) is
/// ignored. A chunk whose digest does not match is rejected and requested again after a backoff. With
/// no progress for `stallTimeout`, the load fails.
///
/// Pure logic: the caller verifies digests, subscribes, writes and keeps time.
struct TransferStateMachine {
    struct Configuration {
        var chunkCount: Int
        var window: Int
        /// How long a load may go without any chunk before it fails (ms).
        var stallTimeout: Int64
    }

    enum State {
        case loading(Loading)
        case finished
        case failed(missing: Int)
    }

    struct Loading {
        /// The first chunk not handed over yet.
        var next = 0
        /// Chunks below this one have been requested at least once.
        var requestedUpTo = 0
        /// Requested and not yet verified.
        var pending: Set<Int> = []
        /// Verified, waiting for the chunks before them.
        var held: [Int: Data] = [:]
        /// Rejections per chunk, for the backoff.
        var attempts: [Int: Int] = [:]
        var lastProgress: Int64
    }

    /// What to do after an input, in this order: unsubscribe, hand over `deliver` (in order), subscribe,
    /// schedule `retry`; then, if `done`, the load is complete, or if `failedAt` is set, it failed.
    struct Action: Equatable {
        var unsubscribe: [Int] = []
        var deliver: [Data] = []
        var subscribe: [Int] = []
        var retry: (index: Int, after: Duration)?
        var done = false
        var failedAt: Int?

        static func == (lhs: Action, rhs: Action) -> Bool {
            lhs.unsubscribe == rhs.unsubscribe && lhs.deliver == rhs.deliver && lhs.subscribe == rhs.subscribe
                && lhs.retry?.index == rhs.retry?.index && lhs.retry?.after == rhs.retry?.after && lhs.done == rhs.done
                && lhs.failedAt == rhs.failedAt
        }
    }

    let configuration: Configuration
    private(set) var state: State
    /// Chunks rejected so far.
    private(set) var rejected = 0

    init(_ configuration: Configuration, now: Int64) {
        self.configuration = configuration
        self.state = .loading(Loading(lastProgress: now))
    }

    /// Chunks handed over so far.
    var completedChunks: Int {
        switch state {
        case let .loading(loading): loading.next
        case .finished: configuration.chunkCount
        case .failed: 0
        }
    }

    /// The first requests.
    mutating func start() -> Action {
        guard case var .loading(loading) = state else { return Action() }
        var action = Action()
        fill(&loading, &action)
        state = configuration.chunkCount == 0 ? .finished : .loading(loading)
        action.done = configuration.chunkCount == 0
        return action
    }

    /// Chunk `index` arrived; `verified` says whether its digest matched.
    mutating func onChunk(_ index: Int, _ payload: Data, verified: Bool, now: Int64) -> Action {
        guard case var .loading(loading) = state, loading.pending.contains(index) else { return Action() }
        var action = Action(unsubscribe: [index])
        guard verified else {
            rejected += 1
            let attempt = loading.attempts[index, default: 0] + 1
            loading.attempts[index] = attempt
            // 50 ms, doubling, at most 2 s: a forged chunk does not make us hammer the broker.
            action.retry = (index, .milliseconds(min(50 << min(attempt - 1, 6), 2_000)))
            state = .loading(loading)
            return action
        }
        loading.pending.remove(index)
        loading.attempts[index] = nil
        loading.held[index] = payload
        loading.lastProgress = now
        while let data = loading.held.removeValue(forKey: loading.next) {
            action.deliver.append(data)
            loading.next += 1
        }
        fill(&loading, &action)
        if loading.next == configuration.chunkCount {
            state = .finished
            action.done = true
        } else {
            state = .loading(loading)
        }
        return action
    }

    /// A rejected chunk's backoff is over: request it again.
    mutating func onRetryDue(_ index: Int) -> Action {
        guard case .loading(let loading) = state, loading.pending.contains(index) else { return Action() }
        return Action(subscribe: [index])
    }

    /// When (ms) the load fails unless a chunk comes first: ``onTick(now:)`` is due then. nil once it
    /// ended.
    var stallDeadline: Int64? {
        guard case let .loading(loading) = state else { return nil }
        return loading.lastProgress &+ configuration.stallTimeout
    }

    /// Time passes (at ``stallDeadline``): a load without progress for `stallTimeout` fails.
    mutating func onTick(now: Int64) -> Action {
        guard case let .loading(loading) = state, now - loading.lastProgress >= configuration.stallTimeout else { return Action() }
        let missing = loading.pending.min() ?? loading.next
        state = .failed(missing: missing)
        return Action(unsubscribe: loading.pending.sorted(), failedAt: missing)
    }

    /// The load is abandoned (cancelled): every request ends.
    mutating func cancel() -> Action {
        guard case let .loading(loading) = state else { return Action() }
        state = .failed(missing: loading.next)
        return Action(unsubscribe: loading.pending.sorted())
    }

    /// Requests every chunk of the window not requested yet.
    private func fill(_ loading: inout Loading, _ action: inout Action) {
        let end = min(loading.next + configuration.window, configuration.chunkCount)
        while loading.requestedUpTo < end {
            action.subscribe.append(loading.requestedUpTo)
            loading.pending.insert(loading.requestedUpTo)
            loading.requestedUpTo += 1
        }
    }
}
