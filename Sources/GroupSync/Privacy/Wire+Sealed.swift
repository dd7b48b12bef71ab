import Foundation

/// The records of a private session as they go on the wire and come back: what is sealed in each
/// (PROTOCOL.md, Private sessions), and where it is bound to.
extension SealedContext {
    /// An envelope's body: its session, sender, recipient (`""` for a broadcast, also when re-sent to one
    /// receiver), the sender's epoch, its `seq` (`""` for a control message, which has none), type and
    /// reliability.
    package static func message(
        session: String, sender: String, recipient: String?, epoch: Int64, seq: Int64?, type: String, reliable: Bool
    ) -> SealedContext {
        SealedContext(capacity: 96 + session.utf8.count + sender.utf8.count + (recipient?.utf8.count ?? 0) + type.utf8.count) {
            $0.append("message")
            $0.append(session)
            $0.append(sender)
            $0.append(recipient ?? "")
            $0.append(epoch)
            if let seq { $0.append(seq) } else { $0.append("") }
            $0.append(type)
            $0.append(reliable ? "1" : "0")
        }
    }

    /// A shared state record's value: its session, key and clock.
    package static func state(session: String, key: String, clock: HLCTimestamp) -> SealedContext {
        SealedContext("state", session, key, clock.participant, String(clock.time), String(clock.counter))
    }

    /// A journal record's name, type and metadata: its session, attachment, when its owner added it, and
    /// what its chunks are read with (the salt of their key, the size, the chunk size).
    package static func journal(_ record: Wire.JournalRecord, session: String) -> SealedContext {
        SealedContext(
            "journal", session, record.id, record.added.participant, String(record.added.time), String(record.added.counter),
            record.salt ?? "", String(record.size), String(record.chunkSize))
    }

    /// An announcement's activity: its session, activity type, creator, creation time, revision, lifetime
    /// and whether it says the session ended.
    package static func announcement(_ announcement: Wire.Announcement) -> SealedContext {
        let revision = announcement.revision
        return SealedContext(
            "announcement", announcement.session, announcement.activity.type, announcement.createdBy, String(announcement.createdAt),
            revision.participant, String(revision.time), String(revision.counter), String(announcement.ttl),
            announcement.ended == true ? "1" : "0")
    }
}

extension Wire.ScannedEnvelope {
    /// This envelope, read from `payload`, as it is delivered in `session` from `sender` (to `recipient`,
    /// nil for a broadcast): in a private session (`sealer`) its body is opened — an app message's and a
    /// control message's alike, so that nobody without the key can send either —, and it is nil when not
    /// sealed, or it does not open for its place (session, sender, recipient, epoch, seq, type,
    /// reliability), or what it holds is not JSON by the decoding rules. Elsewhere it is as it came: nil
    /// when sealed. Returns the envelope and the bytes its `body` range is in.
    package func opened(_ payload: Data, by sealer: SessionSealer?, session: String, sender: String, recipient: String?) -> (
        Wire.ScannedEnvelope, Data
    )? {
        guard let sealer else { return header.sealed == nil ? (self, payload) : nil }
        guard let keyID = header.sealed else { return nil }
        let context = SealedContext.message(
            session: session, sender: sender, recipient: recipient, epoch: header.epoch, seq: header.seq, type: header.type,
            reliable: header.reliable)
        let opened = payload[body].withUnsafeBytes { json -> Data? in
            // The text between the quotes (checked by the envelope's parse), read in place unless it has
            // escapes (a writer may escape `/`).
            guard json.count >= 2, !json.contains(UInt8(ascii: "\\")) else {
                guard case let .string(text)? = try? JSONParser.parse(Data(json)) else { return nil }
                return sealer.open(text, keyID: keyID, context)
            }
            return sealer.open(base64: UnsafeRawBufferPointer(rebasing: json.dropFirst().dropLast()), keyID: keyID, context)
        }
        guard let opened, (try? JSONParser.check(opened)) != nil else { return nil }
        var envelope = self
        envelope.body = opened.startIndex..<opened.endIndex
        return (envelope, opened)
    }
}

extension Wire.StateRecord {
    /// This record with its value sealed by `sealer` for its place in `session` (key and clock).
    package func sealed(by sealer: SessionSealer, session: String) -> Wire.StateRecord {
        var plaintext: [UInt8] = []
        JSONWriter.append(value, to: &plaintext)
        var record = self
        record.value = .string(sealer.seal(plaintext, .state(session: session, key: key, clock: clock)))
        record.sealed = sealer.sealingKeyID
        record.text = nil
        return record
    }

    /// This record with its value opened by `sealer`: nil when it is not sealed, does not open for its
    /// place (another session, key or clock, another group key, a changed bit), or holds no JSON value by
    /// the decoding rules. Without a sealer (the session is not private), the record as it is, unless
    /// sealed.
    package func opened(by sealer: SessionSealer?, session: String) -> Wire.StateRecord? {
        guard let sealer else { return sealed == nil ? self : nil }
        guard let keyID = sealed, case let .string(text) = value,
            let plaintext = sealer.open(text, keyID: keyID, .state(session: session, key: key, clock: clock)),
            let (value, exact) = try? JSONParser.parseNoting(plaintext)
        else { return nil }
        return Wire.StateRecord(key: key, value: value, clock: clock, text: exact ? plaintext : nil)
    }
}

extension Wire.Announcement {
    /// This announcement with its activity's data and metadata sealed by `sealer` (one already sealed
    /// as it is).
    package func sealed(by sealer: SessionSealer) -> Wire.Announcement {
        guard activity.sealed == nil else { return self }
        var members: [String: JSONValue] = ["data": activity.data]
        members["metadata"] = activity.metadata.flatMap { try? Wire.jsonValue($0) }
        var plaintext: [UInt8] = []
        JSONWriter.append(.object(members), to: &plaintext)
        var announcement = self
        announcement.activity = Activity(
            type: activity.type, metadata: nil, data: .string(sealer.seal(plaintext, .announcement(self))), sealed: sealer.sealingKeyID)
        return announcement
    }

    /// This announcement with its activity opened by `sealer`: nil when it does not open for its place
    /// (another session, type, creator or revision, another group key, a changed bit) or what it holds
    /// is no `{"data": …, "metadata": …}`. One that is not sealed as it is.
    package func opened(by sealer: SessionSealer) -> Wire.Announcement? {
        guard let keyID = activity.sealed else { return self }
        guard case let .string(text) = activity.data, let plaintext = sealer.open(text, keyID: keyID, .announcement(self)),
            case let .object(members)? = try? JSONParser.parse(plaintext), let data = members["data"],
            let metadata = members["metadata"].flatMap({ try? GroupActivityMetadata(json: $0) })
        else { return nil }
        var announcement = self
        announcement.activity = Activity(type: activity.type, metadata: metadata, data: data)
        return announcement
    }
}

extension Wire.JournalRecord {
    /// This record (its `salt` set) with its name, type and metadata sealed by `sealer`.
    package func sealed(by sealer: SessionSealer, session: String) -> Wire.JournalRecord {
        var members: [String: JSONValue] = ["name": .string(name), "type": .string(type)]
        members["metadata"] = metadata.map { .object($0.mapValues(JSONValue.string)) }
        var plaintext: [UInt8] = []
        JSONWriter.append(.object(members), to: &plaintext)
        var record = self
        record.sealed = sealer.sealingKeyID
        record.sealedText = sealer.seal(plaintext, .journal(self, session: session))
        return record
    }

    /// This record with its name, type and metadata opened by `sealer`: nil when it does not open for its
    /// place (another session or attachment, another owner or time, another group key, a changed bit) or
    /// holds no `{"name": …, "type": …, "metadata": …}`. Without a sealer, the record as it is, unless
    /// sealed.
    package func opened(by sealer: SessionSealer?, session: String) -> Wire.JournalRecord? {
        guard let sealer else { return sealed == nil ? self : nil }
        guard let keyID = sealed, let text = sealedText, salt != nil,
            let plaintext = sealer.open(text, keyID: keyID, .journal(self, session: session)),
            case let .object(members)? = try? JSONParser.parse(plaintext), case let .string(name)? = members["name"],
            case let .string(type)? = members["type"]
        else { return nil }
        var metadata: [String: String]?
        if let value = members["metadata"] {
            guard case let .object(object) = value else { return nil }
            metadata = [:]
            for (key, value) in object {
                guard case let .string(text) = value else { return nil }
                metadata?[key] = text
            }
        }
        var record = self
        (record.name, record.type, record.metadata) = (name, type, metadata)
        return record
    }
}

extension Wire.Announcement.Activity {
    /// The title to show: the metadata's, or "private session" while it is sealed with a key we do not have.
    package var title: String { metadata?.title ?? "private session" }
}
