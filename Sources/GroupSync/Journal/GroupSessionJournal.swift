import Foundation
import MQTT

/// Files and images shared with the whole session (the counterpart of GroupActivities'
/// `GroupSessionJournal`): a participant adds an attachment, and every participant — late joiners
/// included, after the owner left or crashed — sees it in ``attachments`` and can load it.
///
/// Make one with ``init(session:configuration:)``: every one made for a session shows the same
/// attachments, with the configuration of the first.
///
/// - Where the bytes live: on the broker, as retained messages, in chunks of at most
///   ``Configuration/chunkSize`` bytes, next to the owner's journal record (name, media type, size, each
///   chunk's SHA-256). So an attachment can be loaded while nobody who has it is online, at the cost of
///   broker memory (bounded by ``Configuration/maximumSessionSize``). On a broker without retained
///   messages (or with the coordinator's `retainedMessages` off) they live with the participants: the
///   owner and everyone who loaded an attachment keep its bytes while they are in the session (what was
///   added or loaded into memory, or the loaded file, mapped) and publish the chunks a loader asks for.
///   An attachment nobody online holds cannot be loaded then.
/// - Integrity: every chunk is checked against its digest as it arrives (a corrupted or forged one is
///   rejected and fetched again), and ``JournalAttachment/digest`` binds those digests: each byte is hashed once.
/// - Lifetime: an attachment lives as long as the owner's state records — refreshed while the owner is in
///   the session, expiring a session TTL after it left — and ends with the session: ``GroupSession/end()``
///   removes it from the broker. Only its owner can ``remove(_:)`` it.
public final class GroupSessionJournal: Sendable {
    public let configuration: Configuration
    let core: SessionCore

    /// The journal of `session`. The first one made for a session fixes the configuration; later ones —
    /// any number, before or after `join()` — get that one whatever they pass. It lists attachments once
    /// joined.
    public init<A: GroupActivity>(session: GroupSession<A>, configuration: Configuration = .init()) {
        core = session.core
        self.configuration = core.facet(\.journal) { _ in configuration }.0
    }

    // MARK: - Reading

    /// The attachments now, in the order they were added (empty before `join()`).
    public var attachments: [JournalAttachment] { core.read { $0.journal.attachments } }

    /// The current list of attachments first, then the list after every change (an attachment added or
    /// removed by anyone, this participant included), in order. A slow consumer skips to the newest list.
    /// Ends when the session is invalidated.
    public func attachmentUpdates() -> GroupUpdates<[JournalAttachment]> {
        let inbox = Inbox<[JournalAttachment]>(keepingNewest: 1)
        core.register(inbox, { $0.addJournalListener(inbox) }, removal: { $0.removeJournalListener($1) })
        return GroupUpdates(inbox)
    }

    // MARK: - Adding and removing

    /// Adds `data` to the journal and returns once the broker holds all of it: every chunk, then the
    /// record that makes it visible to everyone. Throws ``GroupSyncError/notJoined`` before `join()`, and
    /// ``GroupSyncError/journalLimitExceeded(_:)`` naming the limit an attachment this size would exceed.
    /// Adding the same bytes again, in chunks of the same size, replaces the attachment's name, media type
    /// and metadata. Cancelling the task stops sending and throws ``GroupSyncError/cancelled``; what was
    /// sent already is cleared (the record first), and nobody is left with an attachment missing its chunks
    /// — except when the bytes were added before: that attachment stays.
    public func add(
        _ data: Data, name: String, mediaType: String = "application/octet-stream", metadata: [String: String] = [:]
    ) async throws(GroupSyncError) -> JournalAttachment {
        guard core.isJoined else { throw core.isInvalidated ? .sessionInvalidated : .notJoined }
        // A task cancelled already sends nothing (an acknowledgement that comes at once would not see it).
        if Task.isCancelled { throw .cancelled }
        let client = core.context.client
        guard configuration.chunkSize > 0, configuration.window > 0 else {
            throw .invalidArgument("chunkSize and window must be positive")
        }
        let packetLimit = client.maximumPacketSize.map { $0 - Wire.envelopeAllowance }
        // In a private session each chunk is sealed, which makes it a tag longer.
        let sealer = core.sealer
        let chunkSize = min(configuration.chunkSize, (packetLimit ?? .max) - (sealer == nil ? 0 : AEAD.tagSize))
        // The record lists 67 bytes per chunk (a quoted digest and a comma): one that cannot fit the
        // broker's packets is refused before anything is hashed.
        let chunkCount = (data.count + chunkSize - 1) / chunkSize
        if let limit = packetLimit, chunkCount * 67 > limit {
            throw .journalLimitExceeded(.recordSize(size: chunkCount * 67, limit: limit))
        }
        // Slices share `data`'s bytes: the owner keeps (and refreshes) one copy of the attachment (sealed
        // chunks are copies of their own).
        let content = stride(from: data.startIndex, to: data.endIndex, by: chunkSize).map { data[$0..<min($0 + chunkSize, data.endIndex)] }
        let sealed = sealer.map { sealedChunks(content, size: data.count, chunkSize: chunkSize, sealer: $0) }
        let (salt, cipher, chunks) = (sealed?.salt, sealed?.cipher, sealed?.chunks ?? content)
        // Each byte is hashed once, into its chunk's digest; the attachment's digest is that of theirs.
        let digests = chunks.map(SHA256.hex)
        let digest = SHA256.hex(ofDigests: digests)
        let (me, session, topics) = (core.me, core.id, core.topics)
        try core.read { machine throws(GroupSyncError) in
            try machine.journal.check(adding: data.count, digest: digest, owner: me, limits: configuration)
        }
        let added = core.context.hlc.withLock { $0.tick(now: core.context.clock.milliseconds()) }
        var record = Wire.JournalRecord(
            id: digest, name: name, type: mediaType, size: Int64(data.count), chunkSize: Int64(chunkSize),
            chunks: digests, added: added, metadata: metadata.isEmpty ? nil : metadata, salt: salt)
        if let sealer { record = record.sealed(by: sealer, session: session) }
        let payload = try Wire.encode(record)
        if let limit = packetLimit, payload.count > limit {
            throw .journalLimitExceeded(.recordSize(size: payload.count, limit: limit))
        }
        let lifetime = core.lifetime
        let recordTopic = topics.journal(session, attachment: digest, owner: me)
        // The same bytes added again (to rename them): the same chunks and record topic. A failure then
        // takes nothing back, the attachment stays (under its old name or, if the record went out, the new).
        let replacing = core.read { machine in
            machine.journal.attachments.contains { $0.id == JournalAttachment.ID(owner: Participant(id: me), digest: digest) }
        }
        guard client.retainAvailable else {
            // Nothing is retained: we hold the bytes and serve them to whoever asks while we are joined.
            let held = HeldAttachment(record: record, bytes: .memory(data), cipher: cipher)
            core.perform {
                $0.onJournal { journal in
                    if let held { journal.hold(held) }
                    return journal.onRecord(record, digest: digest, owner: me)
                }
            }
            do throws(GroupSyncError) {
                try await core.context.retained.publish(recordTopic, payload, lifetime: lifetime)
            } catch {
                if !replacing {
                    core.perform { $0.onJournal { $0.onRecord(nil, digest: digest, owner: me) } }
                    let retained = core.context.retained
                    retained.release(recordTopic)
                    core.context.tasks.spawn { await retained.clear(recordTopic) }
                }
                throw error
            }
            return JournalAttachment(record: record)
        }
        // Chunks first, at most `window` unacknowledged at a time; the record once the broker holds them
        // all, so that whoever sees the record finds every chunk.
        var unacknowledged: [MQTTClient.PublishTicket] = []
        var sent: [String] = []  // the record last: cleared first
        do throws(GroupSyncError) {
            for (index, chunk) in chunks.enumerated() {
                if Task.isCancelled { throw .cancelled }
                let topic = topics.chunk(session, attachment: digest, index: index, owner: me)
                unacknowledged.append(try core.context.retained.enqueue(topic, chunk, lifetime: lifetime))
                sent.append(topic)
                if unacknowledged.count >= configuration.window {
                    try await core.acknowledgements(of: [unacknowledged.removeFirst()])
                }
            }
            while !unacknowledged.isEmpty { try await core.acknowledgements(of: [unacknowledged.removeFirst()]) }
            sent.append(recordTopic)
            try await core.context.retained.publish(recordTopic, payload, lifetime: lifetime)
        } catch {
            // Not added: the record, if it went out, and the chunks it would name are not kept, and go now
            // (the record first, so that nobody finds it without its chunks).
            for ticket in unacknowledged { client.detach(ticket) }
            let (retained, abandoned) = (core.context.retained, replacing ? [] : Array(sent.reversed()))
            for topic in abandoned { retained.release(topic) }
            core.context.tasks.spawn { for topic in abandoned { await retained.clear(topic) } }
            throw error
        }
        core.perform { $0.onJournal { $0.onRecord(record, digest: digest, owner: me) } }
        return JournalAttachment(record: record)
    }

    /// `content`'s chunks sealed for a private session, with their salt and the cipher it makes: a fresh
    /// salt, unless these bytes are an attachment of ours already (added again to rename it): then its
    /// salt, so that they make the same chunks, hence the same attachment.
    private func sealedChunks(
        _ content: [Data], size: Int, chunkSize: Int, sealer: SessionSealer
    ) -> (salt: String, cipher: ChunkCipher, chunks: [Data]) {
        let (me, keyID) = (core.me, sealer.sealingKeyID)
        let ours = core.read { machine in
            machine.journal.attachments.map(\.record).filter {
                $0.added.participant == me && $0.size == Int64(size) && $0.chunkSize == Int64(chunkSize) && $0.sealed == keyID
            }
        }
        for record in ours {
            guard let salt = record.salt, let cipher = sealer.chunkCipher(keyID: keyID, salt: salt) else { continue }
            // Chunk by chunk: other bytes of that size are told apart at their first differing chunk.
            var chunks: [Data] = []
            for (index, piece) in content.enumerated() {
                let chunk = cipher.seal(piece, index: index)
                guard record.chunks.indices.contains(index), SHA256.hex(chunk) == record.chunks[index] else { break }
                chunks.append(chunk)
            }
            if chunks.count == content.count, chunks.count == record.chunks.count { return (salt, cipher, chunks) }
        }
        let salt = Data(AEAD.randomBytes(16)).base64EncodedString()
        // A fresh salt of 16 bytes always makes a cipher.
        let cipher = sealer.chunkCipher(keyID: keyID, salt: salt)!
        return (salt, cipher, content.enumerated().map { cipher.seal($1, index: $0) })
    }

    /// Adds the file at `file`, memory-mapped rather than read (the bytes stay on disk until sent), named
    /// by its last path component unless `name` is given. See ``add(_:name:mediaType:metadata:)``.
    ///
    /// Leave the file's bytes as they are while the attachment is in the journal (removing or replacing the
    /// file is fine: the mapping keeps the bytes): chunks that are refreshed or served are read from the
    /// mapping, and a file truncated under a mapping ends the process with `SIGBUS`. Where nothing is
    /// retained, a chunk that no longer matches its digest is not served.
    public func add(
        contentsOf file: URL, name: String? = nil, mediaType: String = "application/octet-stream", metadata: [String: String] = [:]
    ) async throws(GroupSyncError) -> JournalAttachment {
        let data: Data
        do {
            data = try Data(contentsOf: file, options: .alwaysMapped)
        } catch {
            throw .file("cannot read \(file.path): \(error.localizedDescription)")
        }
        return try await add(data, name: name ?? file.lastPathComponent, mediaType: mediaType, metadata: metadata)
    }

    /// Removes one of this participant's attachments for everyone: its record, then its chunks, are
    /// cleared from the broker. Throws ``GroupSyncError/notAttachmentOwner(owner:)`` for someone else's
    /// (the example ACL refuses that on the broker too). Loads of it in progress elsewhere fail once the
    /// chunks they still need are gone. Cancelling the task may leave the record and chunks on the broker
    /// until they expire (a session time to live): none is refreshed any more.
    public func remove(_ attachment: JournalAttachment) async throws(GroupSyncError) {
        guard attachment.owner == core.context.me else { throw .notAttachmentOwner(owner: attachment.owner.id) }
        guard !core.isInvalidated else { throw .sessionInvalidated }
        let recordTopic = core.topics.journal(core.id, attachment: attachment.digest, owner: attachment.owner.id)
        core.context.retained.disown(recordTopic)
        let chunkTopics = JournalStateMachine.topics(of: attachment.record, core.topics, session: core.id).dropFirst()
        for topic in chunkTopics { core.context.retained.release(topic) }
        let client = core.context.client
        _ = try await GroupSyncError.awaitOverConnection { () async throws(MQTTError) in
            try await client.publish(to: recordTopic, payload: Data(), qos: .atLeastOnce, retain: client.retainAvailable)
        }
        core.perform { $0.onJournal { $0.onRecord(nil, digest: attachment.digest, owner: attachment.owner.id) } }
        guard client.retainAvailable else { return }  // no chunk was published to stay
        for topic in chunkTopics { await core.context.retained.clear(topic) }
    }
}
