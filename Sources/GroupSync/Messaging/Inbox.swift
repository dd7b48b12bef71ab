import MQTT

/// A queue from a producer (often the connection's network thread) to the one task that consumes it:
/// what every GroupSync sequence is built on, in place of `AsyncStream`.
///
/// Why not `AsyncStream`: its generic code lives in the concurrency runtime, unspecialised, and looks up
/// type metadata on every `yield` and `next()`, on the path of every received message. This one is
/// compiled with its element type known, and takes one lock per element on each side.
///
/// Semantics are `AsyncStream`'s with the unbounded or `.bufferingNewest(n)` policy:
/// - elements come out in the order they were yielded; nothing is dropped while the inbox is open,
///   except that an inbox made with `keepingNewest: n` keeps only the newest `n` not yet taken;
/// - ``finish()`` ends it after the buffered elements; yields after that are ignored;
/// - cancelling the consuming task ends it at once: nothing more is accepted, and `next()` returns what
///   was already buffered, then nil (a waiting `next()` returns nil at once);
/// - when the consumer side is gone (``Consumer`` deinitialised, i.e. the sequence and its iterators
///   dropped) it ends too;
/// - ending runs the termination handler exactly once, outside the lock.
/// One task at a time may wait in `next()`; a second concurrent waiter is a programming error, as it is
/// for `AsyncStream`.
final class Inbox<Element: Sendable>: Sendable {
    private struct State {
        var buffer: [Element?] = []
        /// Index of the oldest element still in `buffer`.
        var head = 0
        var waiter: UnsafeContinuation<Element?, Never>?
        var ended = false
        var onTermination: (@Sendable () -> Void)?

        enum Next {
            case element(Element)
            case ended
            case empty
        }

        mutating func pop() -> Next {
            guard head < buffer.count else { return ended ? .ended : .empty }
            let element = buffer[head].take()!
            advanceHead()
            return .element(element)
        }

        /// Drops the oldest untaken element (to keep within a limit).
        mutating func dropOldest() {
            buffer[head] = nil
            advanceHead()
        }

        /// Moves past the slot at `head`, reclaiming the taken slots now and then.
        private mutating func advanceHead() {
            head += 1
            if head == buffer.count {
                buffer.removeAll(keepingCapacity: true)
                head = 0
            } else if head >= 256 && head * 2 >= buffer.count {
                buffer.removeFirst(head)
                head = 0
            }
        }
    }

    private let state = LockedValue(State())
    /// How many untaken elements are kept (the oldest are dropped); nil: all of them.
    private let limit: Int?

    init(keepingNewest limit: Int? = nil) {
        precondition(limit.map { $0 > 0 } ?? true, "an inbox keeps at least one element")
        self.limit = limit
    }

    /// Runs `handler` once when the inbox ends (finished, cancelled or dropped by its consumer); at once
    /// if it already has.
    func onTermination(_ handler: @escaping @Sendable () -> Void) {
        let runNow = state.withLock { state -> Bool in
            if state.ended { return true }
            state.onTermination = handler
            return false
        }
        if runNow { handler() }
    }

    /// Hands `element` to the consumer (resuming its task if it waits) or buffers it. Never runs
    /// consumer code, so it may be called under a lock. Ignored once the inbox has ended.
    func yield(_ element: Element) {
        let waiter = state.withLock { state -> UnsafeContinuation<Element?, Never>? in
            guard !state.ended else { return nil }
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            if let limit, state.buffer.count - state.head >= limit { state.dropOldest() }
            state.buffer.append(element)
            return nil
        }
        waiter?.resume(returning: element)
    }

    /// Ends the inbox: the consumer still gets what is buffered, then nil.
    func finish() {
        let (waiter, handler) = state.withLock { state -> (UnsafeContinuation<Element?, Never>?, (@Sendable () -> Void)?) in
            guard !state.ended else { return (nil, nil) }
            state.ended = true
            defer {
                state.waiter = nil
                state.onTermination = nil
            }
            return (state.waiter, state.onTermination)
        }
        waiter?.resume(returning: nil)  // a waiter means the buffer is empty
        handler?()
    }

    /// The next element, waiting for one; nil once the inbox has ended and its buffer is empty.
    func next() async -> Element? {
        // Without waiting when something is buffered — unless the task is cancelled: then the slow path
        // ends the inbox first (as AsyncStream does), or a producer that keeps yielding would keep a
        // cancelled consumer's loop going.
        if !Task.isCancelled {
            switch state.withLock({ $0.pop() }) {
            case let .element(element): return element
            case .ended: return nil
            case .empty: break
            }
        }
        return await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Element?, Never>) in
                let now = state.withLock { state -> State.Next in
                    let next = state.pop()
                    if case .empty = next {
                        precondition(
                            state.waiter == nil, "Two tasks iterate one GroupSync sequence at once; each sequence has one consumer")
                        state.waiter = continuation
                    }
                    return next
                }
                switch now {
                case let .element(element): continuation.resume(returning: element)
                case .ended: continuation.resume(returning: nil)
                case .empty: break
                }
            }
        } onCancel: {
            finish()
        }
    }

    /// The consumer's end: ends the inbox when the last sequence or iterator holding it goes away, so
    /// that the producer stops buffering for nobody (as `AsyncStream` does).
    final class Consumer: Sendable {
        let inbox: Inbox

        init(_ inbox: Inbox) { self.inbox = inbox }

        deinit { inbox.finish() }
    }
}

/// Identity: two inboxes are equal when they are the same one, as the state machines' actions that
/// name them compare.
extension Inbox: Equatable {
    static func == (lhs: Inbox, rhs: Inbox) -> Bool { lhs === rhs }
}
