import Foundation
import GroupSyncTestSupport
import MQTT

/// A plain MQTT client (the project's `MQTTClient`) subscribed to some of a group's topics, recording
/// every live message the broker routes there: what GroupSync puts on the wire, counted from outside.
/// Retained copies stored before it subscribed are not replayed to it (retain handling "do not send"),
/// unless `replayRetained` asks for them (to read a record already on the broker without writing one).
final class WireSniffer: Sendable {
    struct Record: Sendable {
        let topic: String
        let size: Int
        let retained: Bool
        let at: UInt64
    }

    let client: MQTTClient
    private let subscription: MQTTSubscription
    private let records = LockedValue<[Record]>([])
    private let reader = LockedValue<Task<Void, Never>?>(nil)

    private init(client: MQTTClient, subscription: MQTTSubscription) {
        self.client = client
        self.subscription = subscription
    }

    static func start(url: String, filters: [String], replayRetained: Bool = false) async throws -> WireSniffer {
        let client = try MQTTClient(configuration: .init(url: url, clientID: "bench-sniffer-\(UInt32.random(in: 0...UInt32.max))"))
        try await client.connect()
        let subscription = try await client.subscribe(
            to: filters.map { TopicSubscription($0, qos: .atMostOnce, retainHandling: replayRetained ? .sendOnSubscribe : .doNotSend) })
        let sniffer = WireSniffer(client: client, subscription: subscription)
        let task = Task {
            for await message in subscription {
                let record = Record(
                    topic: message.topic, size: message.payload.count, retained: message.retain, at: MonotonicClock.nanoseconds())
                sniffer.records.withLock { $0.append(record) }
            }
        }
        sniffer.reader.withLock { $0 = task }
        return sniffer
    }

    var count: Int { records.withLock { $0.count } }

    func records(from index: Int) -> [Record] {
        records.withLock { Array($0[min(index, $0.count)...]) }
    }

    /// Waits until a record arrives after index `index`; returns it.
    func next(after index: Int, timeout: Double = 5) async throws -> Record {
        try await waitUntil(timeout: .seconds(timeout), pollEvery: .microseconds(200), "a message on the sniffed topics") {
            self.count > index
        }
        return records.withLock { $0[index] }
    }

    /// Waits until nothing new arrived for `quiet` (at most `timeout` seconds in all).
    func waitQuiet(_ quiet: Duration, timeout: Double = 10) async throws {
        let deadline = Deadline.after(.seconds(timeout))
        var seen = count
        while !deadline.hasPassed {
            try await Task.sleep(for: quiet)
            let now = count
            if now == seen { return }
            seen = now
        }
    }

    func stop() async {
        subscription.unsubscribe()
        reader.withLock { $0?.cancel() }
        await client.disconnect()
    }
}
