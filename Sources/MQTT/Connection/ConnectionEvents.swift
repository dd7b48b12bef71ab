/// The events of one connection (``MQTTClient/events()``), in the order they happened. It ends after
/// ``MQTTClient/disconnect()`` or when the task iterating it is cancelled. A consumer that falls 1,000
/// events behind loses the oldest. Only one task may iterate it.
public struct ConnectionEvents: AsyncSequence, Sendable {
    public typealias Element = ConnectionEvent
    public typealias Failure = Never

    let stream: AsyncStream<ConnectionEvent>

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: stream.makeAsyncIterator())
    }

    /// Waits for the next event; nil once the client has disconnected.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncStream<ConnectionEvent>.AsyncIterator

        public mutating func next() async -> ConnectionEvent? {
            await base.next()
        }

        public mutating func next(isolation actor: isolated (any Actor)?) async -> ConnectionEvent? {
            await base.next(isolation: actor)
        }
    }
}
