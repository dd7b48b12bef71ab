import MQTT

/// What an observer's loop reads: the messages of its subscription, and nil each time its ``alarm``
/// fires (a session's last copy may have expired). Ends when the subscription does; ``cancel()`` stops
/// the forwarding and the alarm.
struct ObserverInputs {
    let stream: AsyncStream<MQTTMessage?>
    let alarm: ExpiryAlarm
    private let forward: Task<Void, Never>

    init(_ subscription: MQTTSubscription) {
        // As bounded as the subscription's own buffer: a slow terminal drops the newest, never grows.
        let (stream, feed) = AsyncStream.makeStream(of: MQTTMessage?.self, bufferingPolicy: .bufferingOldest(100_000))
        self.stream = stream
        alarm = ExpiryAlarm { feed.yield(nil) }
        forward = Task {
            for await message in subscription { feed.yield(message) }
            feed.finish()
        }
    }

    func cancel() {
        forward.cancel()
        alarm.cancel()
    }
}
