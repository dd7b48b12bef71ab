/// Something that happened to the connection, in the order it happened.
public enum ConnectionEvent: Sendable, Hashable {
    /// CONNACK accepted. `sessionPresent`: the broker resumed a stored session.
    case connected(sessionPresent: Bool)
    /// The connection ended. Unless ``MQTTClient/disconnect()`` was called, a reconnect follows.
    case disconnected(reason: String)
    /// The next connect attempt (1-based) will start after `delay`.
    case reconnecting(attempt: Int, delay: Duration)
    /// After a reconnect the broker refused to restore this subscription. Its sequence keeps waiting,
    /// but receives nothing from this filter until a later reconnect restores it.
    case subscriptionRestoreFailed(filter: String, reasonCode: Int)
}
