import Foundation
import MQTT

/// The retained messages this participant publishes and keeps alive (presence, announcements, member
/// and state records): republished after every reconnect — a broker restarted without persistence
/// forgets them — and no longer once cleared. Shared by the coordinator and its sessions.
final class RetainedRecords: Sendable {
    private let client: MQTTClient
    private let owned = LockedValue(OwnedRetained())

    init(client: MQTTClient) {
        self.client = client
    }

    /// Publishes a record this participant owns (QoS 1) and returns once the broker acknowledged it; an
    /// empty payload clears it. On a broker without retained messages it is sent as a plain message.
    func publish(_ topic: String, _ payload: Data) async throws(GroupSyncError) {
        let ticket = try enqueue(topic, payload)
        do {
            _ = try await client.acknowledgement(of: ticket)
        } catch {
            throw .connection(error)
        }
    }

    /// The synchronous half of ``publish(_:_:)``: the record is ours and handed to the connection.
    func enqueue(_ topic: String, _ payload: Data) throws(GroupSyncError) -> MQTTClient.PublishTicket {
        owned.withLock { $0.own(topic, payload) }
        do {
            return try client.enqueuePublish(to: topic, payload: payload, qos: .atLeastOnce, retain: client.retainAvailable)
        } catch {
            throw .connection(error)
        }
    }

    /// Clears a record, ours or someone else's (that only works where the broker's ACL lets us).
    /// Without retained messages the empty payload still tells live subscribers.
    func clear(_ topic: String) async {
        owned.withLock { $0.own(topic, Data()) }
        _ = try? await client.publish(to: topic, payload: Data(), qos: .atLeastOnce, retain: client.retainAvailable)
    }

    /// Stops republishing `topic` after reconnects (someone else cleared it), without publishing.
    func disown(_ topic: String) {
        owned.withLock { $0.disown(topic) }
    }

    /// The owned topics that start with `prefix`, sorted.
    func topics(under prefix: String) -> [String] {
        owned.withLock { $0.topics(under: prefix) }
    }

    /// After a reconnect: every owned record again, in the order a newcomer needs them.
    func republishAll() async {
        for (topic, payload) in owned.withLock({ $0.inRepublishOrder() }) {
            _ = try? await client.publish(to: topic, payload: payload, qos: .atLeastOnce, retain: client.retainAvailable)
        }
    }
}

/// The bookkeeping of ``RetainedRecords``: topic → payload of every record this participant owns.
struct OwnedRetained {
    private(set) var records: [String: Data] = [:]

    /// Owns `payload` on `topic`; an empty payload clears the record, so it is no longer owned.
    mutating func own(_ topic: String, _ payload: Data) {
        records[topic] = payload.isEmpty ? nil : payload
    }

    mutating func disown(_ topic: String) {
        records[topic] = nil
    }

    func topics(under prefix: String) -> [String] {
        records.keys.filter { $0.hasPrefix(prefix) }.sorted()
    }

    /// Presence first, then announcements, member records and state records.
    func inRepublishOrder() -> [(topic: String, payload: Data)] {
        records.map { ($0.key, $0.value) }.sorted { (OwnedRetained.rank($0.topic), $0.topic) < (OwnedRetained.rank($1.topic), $1.topic) }
    }

    private static func rank(_ topic: String) -> Int {
        if topic.contains("/presence/") { return 0 }
        if topic.contains("/session/") { return 1 }
        if topic.contains("/member/") { return 2 }
        return 3
    }
}
