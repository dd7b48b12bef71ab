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

    /// The synchronous half of ``send(type:envelope:to:reliable:limit:)``: numbers the envelope in each
    /// destination's stream (reliable) or among the unreliable ones, and hands it to the connection, in one
    /// hold of the session's lock: each stream's wire order is its `seq` order.
    private func enqueue(
        type: String, envelope: Wire.EnvelopeBytes, to recipients: Participants, reliable: Bool, limit: Int
    ) throws(GroupSyncError) -> [MQTTClient.PublishTicket] {
        let (client, epoch, now) = (context.client, context.epoch, ContinuousClock.now)
        var positionDue: ContinuousClock.Instant?
        defer {
            client.flush()  // written once the lock is released: see `enqueuePublish(…writeNow:)`
            timer.schedule(at: positionDue)  // the timer keeps an earlier wake-up
        }
        return try locked.withLock { state throws(GroupSyncError) -> [MQTTClient.PublishTicket] in
            guard case .joined = state.machine.state else { throw state.machine.state.isInvalidated ? .sessionInvalidated : .notJoined }
            let destinations: [(topic: String, stream: Reliable.Stream, recipient: String?)]
            switch recipients.storage {
            case .all: destinations = [(broadcastTopic, .all, nil)]
            case let .only(set):
                guard !set.isEmpty else { throw .noRecipients }
                destinations = try set.map(\.id).sorted().map { participant throws(GroupSyncError) in
                    try Identifier.validate(participant, kind: "participant")  // every one before anything is sent
                    return (topics.direct(id, to: participant, from: me), .direct(to: participant), participant)
                }
            }
            if reliable { positionDue = state.machine.numbering.numberedReliable(at: now) }
            var tickets: [MQTTClient.PublishTicket] = []
            tickets.reserveCapacity(destinations.count)
            do throws(GroupSyncError) {
                for (topic, stream, recipient) in destinations {
                    let sealing = sealer.map { Wire.EnvelopeBytes.Sealing(sealer: $0, session: id, sender: me, recipient: recipient) }
                    let payload = try Self.number(
                        envelope, type: type, epoch: epoch, stream: reliable ? stream : nil, sealing: sealing, limit: limit,
                        &state.machine.numbering)
                    tickets.append(
                        try GroupSyncError.overConnection { () throws(MQTTError) in
                            try client.enqueuePublish(
                                to: topic, payload: payload, qos: reliable ? .atLeastOnce : .atMostOnce, writeNow: false)
                        })
                }
                return tickets
            } catch {
                // The copies already handed over go out, but nobody will await them: their
                // acknowledgements must not linger under IDs that later messages reuse.
                for ticket in tickets { client.detach(ticket) }
                throw error
            }
        }
    }

    /// The envelope numbered (and sealed, in a private session): in `stream` through the outbox (which
    /// keeps it to re-send), or among the unreliable messages (`stream` nil). A message above `limit` takes
    /// no number in its stream.
    private static func number(
        _ envelope: Wire.EnvelopeBytes, type: String, epoch: Int64, stream: Reliable.Stream?, sealing: Wire.EnvelopeBytes.Sealing?,
        limit: Int, _ numbering: inout MessageNumbering
    ) throws(GroupSyncError) -> Data {
        func finished(_ seq: Int64, reliable: Bool) throws(GroupSyncError) -> Data {
            let payload = envelope.finished(type: type, epoch: epoch, seq: seq, reliable: reliable, sealing: sealing)
            guard payload.count <= limit else { throw .messageTooLarge(size: payload.count, limit: limit) }
            return Data(payload)
        }
        guard let stream else { return try finished(numbering.nextUnreliable(), reliable: false) }
        return try numbering.outbox.append(to: stream) { seq throws(GroupSyncError) in try finished(seq, reliable: true) }.payload
    }

    /// The asynchronous half: waits for every ticket, even after one failed, so that no acknowledgement
    /// is left unclaimed.
    func acknowledgements(of tickets: [MQTTClient.PublishTicket]) async throws(GroupSyncError) {
        var failure: MQTTError?
        for ticket in tickets {
            do throws(MQTTError) {
                _ = try await context.client.acknowledgement(of: ticket)
            } catch {
                failure = failure ?? error
            }
        }
        if let failure { throw GroupSyncError(failure) }
    }

    /// The control messages: in no stream, so without `seq`. Reliable (QoS 1), except the clock's
    /// exchanges: a lost one is only one sample less, and a late one a sample the filter drops.
    enum Control: String {
        case catchUp = "$catchup"
        case end = "$end"
        case resend = "$resend"
        case skip = "$skip"
        case position = "$position"
        case ping = "$ping"
        case pong = "$pong"
        case chunks = "$chunks"
        case have = "$have"
        case member = "$member"

        var isReliable: Bool { self != .ping && self != .pong }
    }

    /// Hands a control message to the connection, to `recipient` (nil: everyone), and returns its ticket.
    /// In a private session its body is sealed, as an app message's is, unless it goes to an observer
    /// (`sealed: false`). `writeNow`: see ``MQTTClient/enqueuePublish(to:payload:qos:retain:properties:writeNow:)``.
    func enqueueControl(
        _ control: Control, _ body: some Encodable, to recipient: String?, sealed: Bool = true, writeNow: Bool = true
    ) throws(GroupSyncError) -> MQTTClient.PublishTicket {
        let sealing = sealed ? sealer.map { Wire.EnvelopeBytes.Sealing(sealer: $0, session: id, sender: me, recipient: recipient) } : nil
        let payload = Wire.EnvelopeBytes(encodedBody: try Wire.encode(body)).finished(
            type: control.rawValue, epoch: context.epoch, seq: nil, reliable: control.isReliable, sealing: sealing)
        let topic = recipient.map { topics.direct(id, to: $0, from: me) } ?? broadcastTopic
        return try GroupSyncError.overConnection { () throws(MQTTError) in
            try context.client.enqueuePublish(
                to: topic, payload: payload, qos: control.isReliable ? .atLeastOnce : .atMostOnce, writeNow: writeNow)
        }
    }

    /// Sends a control message without waiting for its acknowledgement (on the network thread too).
    func sendControl(_ control: Control, _ body: some Encodable, to recipient: String?, sealed: Bool = true) {
        if let ticket = try? enqueueControl(control, body, to: recipient, sealed: sealed) { context.client.detach(ticket) }
    }

    /// Sends a control message without waiting. Returns when the connection took it (nil: it could not),
    /// and tells `left` the moment it was written to the socket (where it was written — the network
    /// thread, or this one, possibly before this returns —, which it must not hold up), unless it could
    /// not be. The caller holds no lock `left` takes.
    func sendControl(
        _ control: Control, _ body: some Encodable, to recipient: String?, left: @escaping @Sendable (ContinuousClock.Instant) -> Void
    ) -> ContinuousClock.Instant? {
        guard let ticket = try? enqueueControl(control, body, to: recipient) else { return nil }
        let queued = ContinuousClock.now
        context.client.onOutcome(of: ticket) { outcome in
            if case let .success(receipt) = outcome { left(receipt.completed) }
        }
        return queued
    }

    func send(_ send: SessionStateMachine.Send) {
        switch send {
        case let .catchUp(recipient), let .observerCatchUp(recipient):
            // An observer's is not sealed as a whole (its values are): it lists who is there, which an
            // observer without the key shows too.
            let toObserver = send == .observerCatchUp(to: recipient)
            let listingMembers = !context.client.retainAvailable || toObserver
            var budget = Wire.budget(maximumPacketSize: context.client.maximumPacketSize)
            if sealer != nil && !toObserver { budget = Base64.decodedCapacity(budget) - AEAD.nonceSize - AEAD.tagSize }
            let listingJournal = !context.client.retainAvailable
            let sealing = wireRecord
            for part in read({
                $0.catchUp(listingMembers: listingMembers, listingJournal: listingJournal, budget: budget, sealing: sealing)
            }) {
                sendControl(.catchUp, part, to: recipient, sealed: !toObserver)
            }
        case let .serveChunks(held):
            serve(held)
        case let .memberAnswer(newcomer):
            // Only while our own record is kept: after it went out, and never after a leave's clear.
            context.retained.whileKept(topics.member(id, me)) {
                try? enqueueControl(.member, JSONValue.null, to: newcomer, writeNow: false)
            }
        case let .resend(request): sendControl(.resend, request.resend, to: request.sender)
        case let .position(position, recipient): sendControl(.position, position, to: recipient)
        case let .skip(skip, recipient): sendControl(.skip, skip, to: recipient)
        case let .resent(entry, recipient):
            let payload = entry.stream == .all ? Wire.resentBroadcast(entry.payload) : entry.payload
            let (client, topic) = (context.client, topics.direct(id, to: recipient, from: me))
            if let ticket = try? client.enqueuePublish(to: topic, payload: payload, qos: .atLeastOnce) { client.detach(ticket) }
        case let .pong(ping, recipient, arrival):
            guard let service = locked.withLock({ $0.clockService }), let received = service.groupTime(arrival),
                let replied = service.groupTime(context.clock.nanoseconds())
            else { return }
            sendControl(.pong, Wire.Pong(t0: ping.t0, t1: received.milliseconds, t2: replied.milliseconds), to: recipient)
        }
    }

    /// Publishes the chunks asked of an attachment we hold, live (never retained) on their chunk topics,
    /// where the loaders that asked subscribed to them, in order, with at most the journal's window
    /// unacknowledged: whatever is asked, serving takes that much memory. Ends when nothing is left to
    /// serve (``SessionStateMachine/nextChunkToServe(_:)``).
    private func serve(_ held: HeldAttachment) {
        let (client, session, record) = (context.client, id, held.record)
        let window = max(1, locked.withLock { $0.journal?.window } ?? GroupSessionJournal.Configuration().window)
        let topics = self.topics
        context.tasks.spawn { [me, self] in
            var unacknowledged: [MQTTClient.PublishTicket] = []
            while let index = locked.withLock({ $0.machine.nextChunkToServe(record.id) }) {
                guard let chunk = held.wireChunk(index) else {
                    locked.withLock { $0.machine.releaseHeld(record.id) }  // its file changed or went
                    break
                }
                let topic = topics.chunk(session, attachment: record.id, index: index, owner: me)
                // QoS 1 is queued even while disconnected; a chunk refused otherwise (never: it fit its record)
                // is not sent, and its loader's stall timeout ends the wait for it.
                guard let ticket = try? client.enqueuePublish(to: topic, payload: chunk, qos: .atLeastOnce) else { continue }
                unacknowledged.append(ticket)
                if unacknowledged.count >= window { _ = try? await client.acknowledgement(of: unacknowledged.removeFirst()) }
            }
            for ticket in unacknowledged { _ = try? await client.acknowledgement(of: ticket) }
        }
    }

    /// Writes `value` under `key`: applied locally at once; the caller publishes the record.
    func write(key: String, value: JSONValue) -> Wire.StateRecord {
        let clock = context.hlc.withLock { $0.tick(now: context.clock.milliseconds()) }
        let record = Wire.StateRecord(key: key, value: value, clock: clock)
        let topic = topics.state(id, key: key, writer: me)
        perform { $0.onLocalWrite(record, topic: topic) }
        return record
    }

    /// A state record as it goes on the wire: its value sealed in a private session.
    func wireRecord(_ record: Wire.StateRecord) -> Wire.StateRecord { sealer.map { record.sealed(by: $0, session: id) } ?? record }

    /// Publishes a record written here, retained on our writer topic.
    func publish(_ record: Wire.StateRecord) async throws(GroupSyncError) {
        try await context.retained.publish(
            topics.state(id, key: record.key, writer: me), try Wire.encode(wireRecord(record)), lifetime: lifetime)
    }

    /// Hands a record written here to the connection now, without waiting for the broker (a failure is
    /// what a lost connection makes of it: the record is refreshed, or re-sent by the reconnect).
    func enqueue(_ record: Wire.StateRecord) {
        guard let payload = try? Wire.encode(wireRecord(record)),
            let ticket = try? context.retained.enqueue(topics.state(id, key: record.key, writer: me), payload, lifetime: lifetime)
        else { return }
        context.client.detach(ticket)
    }

    /// Changes the activity: applied locally at once, then announced (our retained copy) in the background.
    func updateActivity(_ activity: Wire.Announcement.Activity) {
        let revision = context.hlc.withLock { $0.tick(now: context.clock.milliseconds()) }
        var updated = announcement
        perform { machine in
            updated = machine.announcement
            updated.activity = activity
            updated.revision = revision
            return machine.onAnnouncement(updated, from: me)
        }
        publishOwnCopy(updated)
    }
}
