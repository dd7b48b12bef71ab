/// Something that happened to the connection, in the order it happened.
public enum ConnectionEvent: Sendable, Hashable {
    /// CONNACK accepted by `server` (one of the configuration's ``MQTTClient/Configuration/servers``).
    /// `sessionPresent`: the broker resumed a stored session — never after a move to another broker.
    case connected(to: MQTTClient.Server, sessionPresent: Bool)
    /// The connection ended. Unless ``MQTTClient/disconnect()`` was called, a reconnect follows.
    case disconnected(reason: String)
    /// The next connect attempt (1-based) will start after `delay`.
    case reconnecting(attempt: Int, delay: Duration)
    /// After a reconnect the broker refused to restore this subscription. Its sequence keeps waiting,
    /// but receives nothing from this filter until a later reconnect restores it.
    case subscriptionRestoreFailed(filter: String, reasonCode: Int)
}
