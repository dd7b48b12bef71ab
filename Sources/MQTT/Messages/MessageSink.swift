/// Where one subscription's messages go: the `AsyncStream` behind an ``MQTTSubscription``, or a handler
/// that the network thread calls directly
/// (``MQTTClient/subscribe(to:handler:endOfBurst:connected:onEnd:whenSent:)``).
///
/// A sink is called without any lock held, from libmosquitto's network thread, once per message in the
/// broker's order; `finish` is called once, when the subscription ends.
struct MessageSink: Sendable {
    /// Takes one message; false when it was dropped (a full stream buffer).
    let deliver: @Sendable (MQTTMessage) -> Bool
    let finish: @Sendable () -> Void
    /// Called on the network thread after a burst of messages this sink received some of
    /// (``ConnectionStateMachine/onTurnEnded(moreWaiting:)``).
    var endOfBurst: (@Sendable () -> Void)? = nil
    /// Called on the network thread at CONNACK, with its session-present flag, before any message of the
    /// new connection.
    var connected: (@Sendable (_ sessionPresent: Bool) -> Void)? = nil
    /// The subscription's ID, set when the client registers it.
    var id: UInt64 = 0

    static func stream(_ continuation: AsyncStream<MQTTMessage>.Continuation) -> MessageSink {
        MessageSink(
            deliver: { message in
                if case .dropped = continuation.yield(message) { return false }
                return true
            },
            finish: { continuation.finish() })
    }
}
