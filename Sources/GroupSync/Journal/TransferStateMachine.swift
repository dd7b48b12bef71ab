import Foundation

/// One load of an attachment: which chunks to ask the broker for, and what to hand over, in order.
///
/// The window is `[next, next + window)`: `next` is the first chunk not yet handed over, and only chunks
/// inside the window are requested, in batches: once half the window (at least one chunk) is free, every
/// chunk of it not requested yet at once, so that one subscription asks for several. A chunk that
/// arrives ahead of `next` waits in memory until the ones before it are in, so at most `window` chunks
/// are ever held, whatever the attachment's size. Chunks are handed over strictly in order, each once: a
/// duplicate (a refresh, a republish after a reconnect) is ignored. A chunk whose digest does not match
/// is rejected and requested again after a backoff. With no progress for `stallTimeout`, the load fails.
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

    /// One thing to do after an input. An input returns them in the order to do them: unsubscribes
    /// first, then the chunks to hand over (in order), then subscribes, then a retry to schedule, and last
    /// whether the load is complete or failed.
    enum Effect: Equatable {
        /// Stop the request for this chunk.
        case unsubscribe(Int)
        /// Hand these bytes over: the next chunk in order.
        case deliver(Data)
        /// Request these chunks (subscribe to their retained topics, in one request).
        case subscribe(Range<Int>)
        /// Request this rejected chunk again after the backoff: ``onRetryDue(_:)`` then.
        case retry(Int, after: Duration)
        /// Every chunk is handed over.
        case complete
        /// The load failed: no progress for the stall timeout, this chunk first among the missing.
        case fail(missing: Int)
    }

    /// What an input asks for, in order.
    typealias Action = [Effect]

    let configuration: Configuration
    private(set) var state: State
    private(set) var rejected = 0

    init(_ configuration: Configuration, now: Int64) {
        self.configuration = configuration
        self.state = .loading(Loading(lastProgress: now))
    }

    var completedChunks: Int {
        switch state {
        case let .loading(loading): loading.next
        case .finished: configuration.chunkCount
        case .failed: 0
        }
    }

    /// Whether the load is over: complete, failed or cancelled.
    var isOver: Bool { if case .loading = state { false } else { true } }

    mutating func start() -> Action {
        guard case var .loading(loading) = state else { return [] }
        guard configuration.chunkCount > 0 else {
            state = .finished
            return [.complete]
        }
        var action = Action()
        fill(&loading, &action)
        state = .loading(loading)
        return action
    }

    /// Chunk `index` arrived; `verified` says whether its digest matched.
    mutating func onChunk(_ index: Int, _ payload: Data, verified: Bool, now: Int64) -> Action {
        guard case var .loading(loading) = state, loading.pending.contains(index) else { return [] }
        var action: Action = [.unsubscribe(index)]
        guard verified else {
            rejected += 1
            let attempt = loading.attempts[index, default: 0] + 1
            loading.attempts[index] = attempt
            // 50 ms, doubling, at most 2 s: a forged chunk does not make us hammer the broker.
            action.append(.retry(index, after: .milliseconds(min(50 << min(attempt - 1, 6), 2_000))))
            state = .loading(loading)
            return action
        }
        loading.pending.remove(index)
        loading.attempts[index] = nil
        loading.held[index] = payload
        loading.lastProgress = now
        while let data = loading.held.removeValue(forKey: loading.next) {
            action.append(.deliver(data))
            loading.next += 1
        }
        fill(&loading, &action)
        if loading.next == configuration.chunkCount {
            state = .finished
            action.append(.complete)
        } else {
            state = .loading(loading)
        }
        return action
    }

    /// A rejected chunk's backoff is over: request it again.
    mutating func onRetryDue(_ index: Int) -> Action {
        guard case .loading(let loading) = state, loading.pending.contains(index) else { return [] }
        return [.subscribe(index..<index + 1)]
    }

    /// When (ms) the load fails unless a chunk comes first: ``onTick(now:)`` is due then. nil once it
    /// ended.
    var stallDeadline: Int64? {
        guard case let .loading(loading) = state else { return nil }
        return loading.lastProgress &+ configuration.stallTimeout
    }

    /// Time passes (at ``stallDeadline``): a load without progress for `stallTimeout` fails.
    mutating func onTick(now: Int64) -> Action {
        guard case let .loading(loading) = state, now - loading.lastProgress >= configuration.stallTimeout else { return [] }
        let missing = loading.pending.min() ?? loading.next
        state = .failed(missing: missing)
        return loading.pending.sorted().map(Effect.unsubscribe) + [.fail(missing: missing)]
    }

    /// The load is abandoned (cancelled): every request ends.
    mutating func cancel() -> Action {
        guard case let .loading(loading) = state else { return [] }
        state = .failed(missing: loading.next)
        return loading.pending.sorted().map(Effect.unsubscribe)
    }

    /// Requests every chunk of the window not requested yet, once half of the window (at least one chunk)
    /// is free or the attachment's last chunks are.
    private func fill(_ loading: inout Loading, _ action: inout Action) {
        let end = min(loading.next + configuration.window, configuration.chunkCount)
        let batch = max(configuration.window / 2, 1)
        guard end - loading.requestedUpTo >= batch || (end == configuration.chunkCount && end > loading.requestedUpTo) else {
            return
        }
        action.append(.subscribe(loading.requestedUpTo..<end))
        loading.pending.formUnion(loading.requestedUpTo..<end)
        loading.requestedUpTo = end
    }
}
