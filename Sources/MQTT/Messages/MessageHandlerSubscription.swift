/// A subscription whose messages go to a handler on the network thread
/// (``MQTTClient/subscribe(to:handler:endOfBurst:connected:onEnd:whenSent:)``). It lasts until
/// ``unsubscribe()`` or the client's disconnect.
package struct MessageHandlerSubscription: Sendable {
    let id: UInt64
    let connection: MosquittoConnection

    /// Ends the subscription (its `onEnd` runs) and unsubscribes the filters no other live subscription
    /// uses. Idempotent. A message the network thread routed just before may still reach the handler.
    package func unsubscribe() {
        connection.update { $0.onSubscriptionRemoved(id: id) }
    }
}
