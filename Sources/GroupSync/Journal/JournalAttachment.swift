/// One file of a session's journal: what its owner said about it, and the digest that identifies it. Load
/// its bytes with ``GroupSessionJournal/load(_:progress:)`` or ``GroupSessionJournal/load(_:to:progress:)``.
public struct JournalAttachment: Sendable, Hashable, Identifiable, CustomStringConvertible {
    /// An attachment is its owner's: two participants adding the same bytes make two attachments.
    public struct ID: Sendable, Hashable, CustomStringConvertible {
        public let owner: Participant
        /// The attachment's ``JournalAttachment/digest``.
        public let digest: String

        public init(owner: Participant, digest: String) {
            self.owner = owner
            self.digest = digest
        }

        public var description: String { "\(owner.id)/\(digest.prefix(12))" }
    }

    /// The owner's journal record, as it is on the wire.
    let record: Wire.JournalRecord

    public var id: ID { ID(owner: owner, digest: record.id) }
    /// Who added it; only the owner can remove it.
    public var owner: Participant { Participant(id: record.added.participant) }
    /// What identifies the content, 64 lowercase hexadecimal digits: the SHA-256 of its chunks' SHA-256
    /// digests (32 bytes each, in order), which ``GroupSessionJournal/load(_:progress:)`` checks every chunk
    /// against. The same bytes in chunks of the same size have the same digest. It is not the SHA-256 of
    /// the content: hash the loaded bytes for that.
    public var digest: String { record.id }
    public var name: String { record.name }
    /// The media type, e.g. `image/jpeg`.
    public var mediaType: String { record.type }
    /// Bytes.
    public var size: Int { Int(record.size) }
    /// What the owner's app added (string values).
    public var metadata: [String: String] { record.metadata ?? [:] }
    /// When the owner added it, on its hybrid logical clock: the journal lists attachments in this order.
    public var added: HLCTimestamp { record.added }

    public var description: String { "\(name) (\(size) bytes, \(mediaType), by \(owner.id))" }
}
