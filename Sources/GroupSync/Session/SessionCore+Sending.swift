import Foundation
import MQTT

extension SessionCore {
    /// Publishes an envelope to `recipients`: numbered and handed to the connection atomically, so that
    /// a sender's reliable messages reach every receiver in send order.
    ///
    /// Returns once a reliable message was acknowledged by the broker, and at once for an unreliable one
    /// (handed to the connection: QoS 0 has no acknowledgement worth waiting for).
    func send(
        type: String, envelope: Wire.EnvelopeBytes, to recipients: Participants, reliable: Bool, limit: Int
    ) async throws(GroupSyncError) {
        let tickets = try enqueue(type: type, envelope: envelope, to: recipients, reliable: reliable, limit: limit)
        if reliable {
            try await acknowledgements(of: tickets)
        } else {
            for ticket in tickets { context.client.detach(ticket) }
        }
    }

    /// The synchronous half of ``send(type:envelope:to:reliable:limit:)``: numbers the envelope and hands
    /// it to the connection.
    private func enqueue(
        type: String, envelope: Wire.EnvelopeBytes, to recipients: Participants, reliable: Bool, limit: Int
    ) throws(GroupSyncError) -> [MQTTClient.PublishTicket] {
        guard isJoined else { throw state.isInvalidated ? .sessionInvalidated : .notJoined }
        let destinations: [String]
        switch recipients.storage {
        case .all: destinations = broadcastDestinations
        case let .only(set):
            guard !set.isEmpty else { throw .noRecipients }
            var direct: [String] = []
            for participant in set.map(\.id).sorted() {
                try Identifier.validate(participant, kind: "participant")  // every one before anything is sent
                direct.append(topics.direct(id, to: participant, from: me))
            }
            destinations = direct
        }
        let client = context.client
        let epoch = context.epoch
        return try context.sequencer.withLock { sequencer throws(GroupSyncError) -> [MQTTClient.PublishTicket] in
            let payload = envelope.finished(type: type, epoch: epoch, seq: sequencer.next(reliable: reliable), reliable: reliable)
            guard payload.count <= limit else { throw .messageTooLarge(size: payload.count, limit: limit) }
            var tickets: [MQTTClient.PublishTicket] = []
            tickets.reserveCapacity(destinations.count)
            for topic in destinations {
                do throws(MQTTError) {
                    tickets.append(try client.enqueuePublish(to: topic, payload: payload, qos: reliable ? .atLeastOnce : .atMostOnce))
                } catch {
                    // The copies already handed over go out, but nobody will await them: their
                    // acknowledgements must not linger under IDs that later messages reuse.
                    for ticket in tickets { client.detach(ticket) }
                    throw .connection(error)
                }
            }
            return tickets
        }
    }

    /// The asynchronous half: waits for every ticket, even after one failed, so that no acknowledgement
    /// is left unclaimed.
    private func acknowledgements(of tickets: [MQTTClient.PublishTicket]) async throws(GroupSyncError) {
        var failure: MQTTError?
        for ticket in tickets {
            do throws(MQTTError) {
                _ = try await context.client.acknowledgement(of: ticket)
            } catch {
                failure = failure ?? error
            }
        }
        if let failure { throw .connection(failure) }
    }

    func sendControl<Body: Codable & Sendable>(type: String, body: Body, to recipients: Participants) async throws(GroupSyncError) {
        try await send(type: type, envelope: try Wire.EnvelopeBytes(body: body), to: recipients, reliable: true, limit: Wire.maximumPayload)
    }

    /// Network thread: answers a newcomer. Handed to the connection now; only the acknowledgement is
    /// awaited, in a task.
    func sendCatchUp(to newcomer: String) {
        let listingMembers = !context.client.retainAvailable
        let catchUp = machine.withLock { $0.catchUp(listingMembers: listingMembers) }
        if let body = try? Wire.encode(catchUp),
            let tickets = try? enqueue(
                type: "$catchup", envelope: Wire.EnvelopeBytes(encodedBody: body), to: .only(Participant(id: newcomer)), reliable: true,
                limit: Wire.maximumPayload)
        {
            context.tasks.spawn { [self] in try? await acknowledgements(of: tickets) }
        }
    }

    /// Writes `value` under `key`: applied locally at once; the caller publishes the record.
    func write(key: String, value: JSONValue) -> Wire.StateRecord {
        let now = context.clock.milliseconds()
        let clock = context.hlc.withLock { $0.tick(now: now) }
        let record = Wire.StateRecord(key: key, value: value, clock: clock)
        let topic = topics.state(id, key: key, writer: me)
        apply { $0.onLocalWrite(record, topic: topic) }
        return record
    }

    /// Publishes a record written here, retained on our writer topic.
    func publish(_ record: Wire.StateRecord) async throws(GroupSyncError) {
        try await context.retained.publish(topics.state(id, key: record.key, writer: me), try Wire.encode(record), lifetime: lifetime)
    }

    /// Changes the activity: applied locally at once, then announced (our retained copy) in the background.
    func updateActivity(_ activity: Wire.Announcement.Activity) {
        let now = context.clock.milliseconds()
        let revision = context.hlc.withLock { $0.tick(now: now) }
        var updated = announcement
        apply { machine in
            updated = machine.announcement
            updated.activity = activity
            updated.revision = revision
            return machine.onAnnouncement(updated, from: me)
        }
        let (retained, topic) = (context.retained, ownCopyTopic)
        context.tasks.spawn { [self, updated] in
            guard !isInvalidated, let payload = try? Wire.encode(updated) else { return }
            try? await retained.publish(topic, payload, lifetime: updated.lifetime)
        }
    }
}
