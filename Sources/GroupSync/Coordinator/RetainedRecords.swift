import Foundation
import MQTT

/// The retained messages this participant publishes (presence, announcement copies, member, state and
/// journal records, and its attachments' chunks). Each carries an MQTT 5 message expiry, so that the
/// broker removes it once nobody keeps it; while this participant keeps a record it refreshes it before
/// it expires, and republishes it after every reconnect (a broker restarted without persistence forgets
/// it). Shared by the coordinator and its sessions.
final class RetainedRecords: Sendable {
    private let client: MQTTClient
    private let owned = LockedValue(OwnedRetained())
    /// Wakes when the next kept record is due for its refresh.
    private let timer = WakeUp()

    init(client: MQTTClient) { self.client = client }

    /// Publishes a record this participant owns (QoS 1), which the broker drops `lifetime` after its last
    /// publish, and returns once the broker acknowledged it. With `refreshing`, it is published again
    /// every third of `lifetime` until it is cleared, released or disowned. On a broker without retained
    /// messages it is sent as a plain message.
    func publish(_ topic: String, _ payload: Data, lifetime: Duration, refreshing: Bool = true) async throws(GroupSyncError) {
        owned.withLock { $0.sending(topic) }
        defer { owned.withLock { $0.acknowledged(topic) } }
        let ticket = try enqueue(topic, payload, lifetime: lifetime, refreshing: refreshing)
        _ = try await GroupSyncError.awaitOverConnection { () async throws(MQTTError) in try await client.acknowledgement(of: ticket) }
    }

    /// The synchronous half of ``publish(_:_:lifetime:refreshing:)``: the record is ours and handed to the
    /// connection.
    func enqueue(_ topic: String, _ payload: Data, lifetime: Duration, refreshing: Bool = true) throws(GroupSyncError)
        -> MQTTClient.PublishTicket
    {
        let record = OwnedRetained.Record(payload: payload, lifetime: lifetime, refreshing: refreshing, published: .now)
        // Owned and handed to the connection in one hold of the lock: nothing sent while it is kept
        // (``whileKept(_:enqueue:)``) can go out before it.
        let enqueued = owned.withLock { owned in
            owned.own(topic, record)
            return Result { () throws(MQTTError) in
                try client.enqueuePublish(
                    to: topic, payload: payload, qos: .atLeastOnce, retain: client.retainAvailable, properties: record.properties(at: .now),
                    writeNow: false)
            }
        }
        client.flush()  // once the lock is released: see `enqueuePublish(…writeNow:)`
        if refreshing { timer.schedule(at: record.refreshDue) }
        return try GroupSyncError.overConnection { () throws(MQTTError) in try enqueued.get() }
    }

    /// Clears a record, ours or someone else's (that only works where the broker's ACL lets us), and
    /// returns whether the broker accepted it. Without retained messages the empty payload still tells
    /// live subscribers.
    @discardableResult
    func clear(_ topic: String) async -> Bool {
        owned.withLock { $0.disown(topic) }
        do {
            try await client.publish(to: topic, payload: Data(), qos: .atLeastOnce, retain: client.retainAvailable)
            return true
        } catch {
            return false
        }
    }

    /// Stops refreshing `topic`: the broker drops it when its lifetime is over.
    func release(_ topic: String) { owned.withLock { $0.release(topic) } }

    /// Forgets `topic` without publishing (someone else cleared it).
    func disown(_ topic: String) { owned.withLock { $0.disown(topic) } }

    func owns(_ topic: String) -> Bool { owned.withLock { $0.records[topic] != nil } }

    /// Whether a publish of `topic` made by ``publish(_:_:lifetime:refreshing:)``, a refresh or a republish
    /// still awaits its acknowledgement: it may reach the broker on the next connection.
    func awaitsAcknowledgement(_ topic: String) -> Bool { owned.withLock { $0.unacknowledged[topic] != nil } }

    /// The payload of the record on `topic` while we keep it (nil when we do not).
    func keptPayload(of topic: String) -> Data? {
        owned.withLock { $0.records[topic].flatMap { $0.refreshing ? $0.payload : nil } }
    }

    /// Whether we own the record on `topic` and keep refreshing it.
    func keeps(_ topic: String) -> Bool { owned.withLock { $0.records[topic]?.refreshing == true } }

    /// Hands what `enqueue` makes to the connection only while we keep the record on `topic`: under the
    /// lock ``clear(_:)`` takes to disown it, so it never goes out after the clear (nor before the record
    /// itself was handed to the connection). `enqueue` must not write now (`writeNow` false). Not awaited.
    func whileKept(_ topic: String, enqueue: () -> MQTTClient.PublishTicket?) {
        let ticket = owned.withLock { owned in owned.records[topic]?.refreshing == true ? enqueue() : nil }
        client.flush()  // once the lock is released: see `enqueuePublish(…writeNow:)`
        if let ticket { client.detach(ticket) }
    }

    /// The owned topics that start with `prefix`, sorted.
    func topics(under prefix: String) -> [String] { owned.withLock { $0.topics(under: prefix) } }

    /// After a reconnect: every owned record again, in the order a newcomer needs them.
    func republishAll() async { await publish(owned.withLock { $0.inRepublishOrder(now: .now) }) }

    /// Refreshes the records due, until ``stopRefreshing()``: each kept record a third of its lifetime
    /// after it was last published, so that a refresh that comes late (a busy machine, a reconnect) still
    /// arrives well before the broker drops the record. The timer wakes when the next one is due, and
    /// every second while the connection is down (the reconnect republishes everything anyway).
    func startRefreshing() {
        timer.onWake { [weak self] in
            guard let self else { return }
            Task { await self.refresh() }
        }
        timer.schedule(at: owned.withLock { $0.nextRefresh })
    }

    func stopRefreshing() { timer.cancel() }

    private func refresh() async {
        guard client.isConnected else { return timer.schedule(after: .seconds(1)) }
        let due = owned.withLock { $0.due(now: .now) }
        await publish(due)
        timer.schedule(at: owned.withLock { $0.nextRefresh })
    }

    /// Publishes again what is still owned of `records`. Each is handed to the connection under the lock
    /// that ``clear(_:)`` takes to disown a record, so a record cleared meanwhile is skipped, and one
    /// cleared right after goes out before its clear: never a cleared record back on the broker.
    private func publish(_ records: [(topic: String, record: OwnedRetained.Record)]) async {
        for (topic, record) in records {
            let ticket = owned.withLock { owned -> MQTTClient.PublishTicket? in
                guard owned.records[topic]?.payload == record.payload,
                    let ticket = try? client.enqueuePublish(
                        to: topic, payload: record.payload, qos: .atLeastOnce, retain: client.retainAvailable,
                        properties: record.properties(at: .now), writeNow: false)
                else { return nil }
                owned.sending(topic)
                return ticket
            }
            client.flush()  // once the lock is released: see `enqueuePublish(…writeNow:)`
            guard let ticket else { continue }
            _ = try? await client.acknowledgement(of: ticket)
            owned.withLock { $0.acknowledged(topic) }
        }
    }
}

/// The bookkeeping of ``RetainedRecords``: every record this participant owns, by topic.
struct OwnedRetained {
    struct Record: Sendable {
        var payload: Data
        var lifetime: Duration
        /// Published again every third of its lifetime while owned.
        var refreshing: Bool
        var published: ContinuousClock.Instant

        /// The message expiry it goes out with at `now`: what is left of its lifetime (at least a second).
        func properties(at now: ContinuousClock.Instant) -> MQTTProperties {
            let left = refreshing ? lifetime : lifetime - (now - published)
            return MQTTProperties(messageExpiry: UInt32(clamping: max(left.components.seconds, 1)))
        }

        func isOver(at now: ContinuousClock.Instant) -> Bool { !refreshing && now - published >= lifetime }

        var refreshDue: ContinuousClock.Instant { published + lifetime / 3 }
    }

    private(set) var records: [String: Record] = [:]
    /// How many publishes of each topic await their acknowledgement (see
    /// ``RetainedRecords/awaitsAcknowledgement(_:)``).
    private(set) var unacknowledged: [String: Int] = [:]

    mutating func sending(_ topic: String) { unacknowledged[topic, default: 0] += 1 }

    mutating func acknowledged(_ topic: String) { unacknowledged[topic] = unacknowledged[topic].flatMap { $0 > 1 ? $0 - 1 : nil } }

    /// Owns `record` on `topic`; an empty payload clears it, so it is no longer owned.
    mutating func own(_ topic: String, _ record: Record) { records[topic] = record.payload.isEmpty ? nil : record }

    mutating func release(_ topic: String) { records[topic]?.refreshing = false }

    mutating func disown(_ topic: String) { records[topic] = nil }

    func topics(under prefix: String) -> [String] { records.keys.filter { $0.hasPrefix(prefix) }.sorted() }

    /// When the next kept record is due for its refresh; nil when none is kept.
    var nextRefresh: ContinuousClock.Instant? { records.values.lazy.filter(\.refreshing).map(\.refreshDue).min() }

    /// The kept records whose refresh is due at `now` (marked as published now); records whose lifetime
    /// is over are forgotten.
    mutating func due(now: ContinuousClock.Instant) -> [(topic: String, record: Record)] {
        records = records.filter { !$0.value.isOver(at: now) }
        var due: [(topic: String, record: Record)] = []
        for (topic, record) in records where record.refreshing && now >= record.refreshDue {
            records[topic]?.published = now
            due.append((topic, record))
        }
        return due.sorted { $0.topic < $1.topic }
    }

    /// Every live record, presence first, then announcement copies, member records, state and journal
    /// records, and attachments' chunks last (the bulk: what a newcomer needs first goes before it).
    mutating func inRepublishOrder(now: ContinuousClock.Instant) -> [(topic: String, record: Record)] {
        records = records.filter { !$0.value.isOver(at: now) }
        return records.map { ($0.key, $0.value) }.sorted {
            (OwnedRetained.rank($0.topic), $0.topic) < (OwnedRetained.rank($1.topic), $1.topic)
        }
    }

    private static func rank(_ topic: String) -> Int {
        if topic.contains("/presence/") { return 0 }
        if topic.contains("/session/") { return 1 }
        if topic.contains("/member/") { return 2 }
        if topic.hasPrefix(GroupTopics.chunkProtocolRoot + "/") { return 4 }
        return 3
    }
}
