/// The messages of one subscription, in the order the broker delivered them.
///
/// It ends (returns nil) after ``unsubscribe()``, after ``MQTTClient/disconnect()``, or when the task
/// iterating it is cancelled; in each case its filters are unsubscribed from the broker unless another
/// live subscription of the same client uses them. It survives reconnects: the client subscribes its
/// filters again on every new connection, so a consumer never resubscribes by hand.
///
/// Its buffer is bounded by ``BufferingPolicy``: a consumer that falls behind loses messages (counted in
/// ``MQTTClient/droppedMessageCount``) instead of making the process grow without limit. Only one task
/// may iterate it.
public struct MQTTSubscription: AsyncSequence, Sendable {
    public typealias Element = MQTTMessage
    public typealias Failure = Never

    /// What happens when more than `capacity` messages wait for the consumer.
    public enum BufferingPolicy: Sendable, Hashable {
        /// Keep the oldest `capacity` messages, drop new arrivals (order without gaps up to the limit).
        case dropNewest(capacity: Int)
        /// Keep the newest `capacity` messages, drop the oldest (for "latest value" streams).
        case dropOldest(capacity: Int)

        /// 100,000 messages, dropping new arrivals beyond that.
        public static let `default` = BufferingPolicy.dropNewest(capacity: 100_000)

        var streamPolicy: AsyncStream<MQTTMessage>.Continuation.BufferingPolicy {
            switch self {
            case let .dropNewest(capacity): return .bufferingOldest(Swift.max(capacity, 1))
            case let .dropOldest(capacity): return .bufferingNewest(Swift.max(capacity, 1))
            }
        }
    }

    let stream: AsyncStream<MQTTMessage>
    let id: UInt64
    let connection: MosquittoConnection

    /// The filters this subscription receives.
    public let filters: [TopicSubscription]

    /// Ends the sequence and unsubscribes its filters (those no other live subscription uses).
    public func unsubscribe() {
        connection.update { $0.onSubscriptionRemoved(id: id) }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: stream.makeAsyncIterator())
    }

    /// Waits for the next message; nil once the subscription has ended.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncStream<MQTTMessage>.AsyncIterator

        public mutating func next() async -> MQTTMessage? {
            await base.next()
        }

        public mutating func next(isolation actor: isolated (any Actor)?) async -> MQTTMessage? {
            await base.next(isolation: actor)
        }
    }
}
