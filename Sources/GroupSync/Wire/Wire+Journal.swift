import Foundation

extension Wire {
    /// `…/s/<session>/journal/<id>/<owner>`, retained: one attachment of the session's journal, added
    /// by `owner`. Its bytes are the chunks `groupsync/v2-chunks/<group>/<session>/<id>.<index>/<owner>`,
    /// each exactly `chunkSize` bytes but the last; `chunks` lists each chunk's SHA-256 in order, and
    /// `id` binds that list, so the verified chunks are the content. An empty payload means the owner
    /// removed it.
    package struct JournalRecord: Encodable, Sendable, Hashable {
        package var v = Wire.version
        /// The attachment's identifier, the `<id>` topic level: the SHA-256 of the chunks' digests as raw
        /// bytes (``SHA256/hex(ofDigests:)``), 64 lowercase hexadecimal digits. Not the content's SHA-256.
        package var id: String
        /// A file name for people (not a path).
        package var name: String
        /// The media type, e.g. `image/jpeg`.
        package var type: String
        /// Bytes.
        package var size: Int64
        /// Bytes per chunk (the last one may be shorter).
        package var chunkSize: Int64
        /// The SHA-256 of each chunk, in order: `ceil(size / chunkSize)` of them.
        package var chunks: [String]
        /// When the owner added it, on its hybrid logical clock (`p` is the owner): the journal's order.
        package var added: HLCTimestamp
        /// Anything else the owner's app says about it (string values).
        package var metadata: [String: String]?
        /// In a private session: the ID of the group key that sealed `name`, `type` and `metadata` (on the
        /// wire, `name` holds them sealed, and `type` and `metadata` are absent) and the chunks.
        package var sealed: String? = nil
        /// In a private session: the salt (16 bytes, base64) of the key its chunks are sealed with.
        package var salt: String? = nil
        /// What `name` is on the wire while sealed: the sealed text as it came, or as the owner made it.
        var sealedText: String? = nil

        enum CodingKeys: String, CodingKey { case v, id, name, type, size, chunkSize, chunks, added, metadata, sealed, salt }

        /// The wire form: while sealed, `name` is the sealed text and `type` and `metadata` are left out.
        package func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(v, forKey: .v)
            try container.encode(id, forKey: .id)
            try container.encode(size, forKey: .size)
            try container.encode(chunkSize, forKey: .chunkSize)
            try container.encode(chunks, forKey: .chunks)
            try container.encode(added, forKey: .added)
            if let sealed, let sealedText {
                try container.encode(sealedText, forKey: .name)
                try container.encode(sealed, forKey: .sealed)
                try container.encodeIfPresent(salt, forKey: .salt)
            } else {
                try container.encode(name, forKey: .name)
                try container.encode(type, forKey: .type)
                try container.encodeIfPresent(metadata, forKey: .metadata)
            }
        }

        /// Whether the record is consistent: digests well formed, as many chunks as the size needs, and
        /// `id` the digest of theirs.
        var isConsistent: Bool {
            guard size >= 0, chunkSize > 0, SHA256.isDigest(id), chunks.allSatisfy(SHA256.isDigest) else { return false }
            return Int64(chunks.count) == (size + chunkSize - 1) / chunkSize && SHA256.hex(ofDigests: chunks) == id
        }
    }
}

extension Wire {
    /// Body of `$chunks`, to a participant that holds an attachment where nothing is retained: send chunks
    /// `from` up to `from + count` (exclusive) of attachment `id`, live on their chunk topics.
    package struct ChunkRequest: Encodable, Sendable, Hashable {
        package var id: String
        package var from: Int64
        package var count: Int64
    }
}

extension Wire {
    /// Body of `$have`, to everyone where nothing is retained: the sender holds the bytes of attachment
    /// `id` (it loaded them) and serves them while it is joined.
    package struct Have: Encodable, Sendable, Hashable {
        package var id: String
    }

    /// In a `$catchup` where nothing is retained: who besides its owners holds attachment `id`.
    package struct Holders: Encodable, Sendable, Hashable {
        package var id: String
        package var participants: [String]
    }
}

extension Wire.Have: Wire.Record {
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        self.init(id: try fields.string(CodingKeys.id))
        guard SHA256.isDigest(id) else { throw .wrongShape }
    }
}

extension Wire.Holders: Wire.Record {
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        self.init(id: try fields.string(CodingKeys.id), participants: try fields.strings(CodingKeys.participants))
        guard SHA256.isDigest(id), participants.allSatisfy(Identifier.isValid) else { throw .wrongShape }
    }
}

extension Wire.ChunkRequest: Wire.Record {
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        self.init(
            id: try fields.string(CodingKeys.id), from: try fields.int(CodingKeys.from, in: Wire.Bounds.size),
            count: try fields.int(CodingKeys.count, in: Wire.Bounds.chunkRequest))
        guard SHA256.isDigest(id) else { throw .wrongShape }
    }
}

extension Wire.JournalRecord: Wire.Record {
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        try fields.checkVersion()
        if let sealed = try fields.optionalString(CodingKeys.sealed) {
            // Sealed: `name` holds name, type and metadata; the chunks' salt is 16 bytes.
            guard fields[CodingKeys.type] == nil, fields[CodingKeys.metadata] == nil,
                let salt = try fields.optionalString(CodingKeys.salt), Base64.decode(salt)?.count == 16
            else { throw .wrongShape }
            let text = try fields.string(CodingKeys.name)
            self.init(
                id: try fields.string(CodingKeys.id), name: text, type: "", size: try fields.int(CodingKeys.size, in: Wire.Bounds.size),
                chunkSize: try fields.int(CodingKeys.chunkSize, in: Wire.Bounds.chunkSize), chunks: try fields.strings(CodingKeys.chunks),
                added: try HLCTimestamp(json: try fields.value(CodingKeys.added)), metadata: nil, sealed: sealed, salt: salt,
                sealedText: text)
            guard isConsistent else { throw .wrongShape }
            return
        }
        guard fields[CodingKeys.salt] == nil else { throw .wrongShape }
        var metadata: [String: String]?
        if let value = fields[CodingKeys.metadata] {
            guard case let .object(object) = value else { throw .wrongShape }
            var strings: [String: String] = [:]
            for (key, value) in object {
                guard case let .string(text) = value else { throw .wrongShape }
                strings[key] = text
            }
            metadata = strings
        }
        self.init(
            id: try fields.string(CodingKeys.id), name: try fields.string(CodingKeys.name), type: try fields.string(CodingKeys.type),
            size: try fields.int(CodingKeys.size, in: Wire.Bounds.size),
            chunkSize: try fields.int(CodingKeys.chunkSize, in: Wire.Bounds.chunkSize),
            chunks: try fields.strings(CodingKeys.chunks), added: try HLCTimestamp(json: try fields.value(CodingKeys.added)),
            metadata: metadata)
        guard isConsistent else { throw .wrongShape }
    }
}

extension Wire.JournalRecord {
    /// Whether this record may stand on the journal topic of `attachment` owned by `owner`.
    func matches(attachment: String, owner: String) -> Bool { id == attachment && added.participant == owner }
}
