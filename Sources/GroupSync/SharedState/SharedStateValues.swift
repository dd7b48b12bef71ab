/// The values of a ``SharedState``: see ``SharedState/valueUpdates()``.
///
/// Each value is decoded in the iterating task, when it asks for the next one; a consumer that falls
/// behind skips to the latest value instead of replaying every intermediate one. Only one task may
/// iterate it.
public struct SharedStateValues<Value: Codable & Sendable & Equatable>: AsyncSequence, Sendable {
    public typealias Element = Value
    let updates: Inbox<SessionStateMachine.Update>.Consumer
    let initialValue: Value

    public struct AsyncIterator: AsyncIteratorProtocol {
        let updates: Inbox<SessionStateMachine.Update>.Consumer
        let initialValue: Value
        var last: Value?

        public mutating func next() async -> Value? {
            while let update = await updates.inbox.next() {
                guard case let .value(record) = update else { continue }
                let value = record.flatMap { $0.decoded(as: Value.self) } ?? initialValue
                if value != last {
                    last = value
                    return value
                }
            }
            return nil
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(updates: updates, initialValue: initialValue) }
}
