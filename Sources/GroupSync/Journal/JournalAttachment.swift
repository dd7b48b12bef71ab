/// One file of a session's journal: what its owner said about it, and its content's SHA-256. Load its
/// bytes with ``GroupSessionJournal/load(_:progress:)`` or ``GroupSessionJournal/load(_:to:progress:)``.
public struct JournalAttachment: Sendable, Hashable, Identifiable, CustomStringConvertible {
    /// An attachment is its owner's: two participants adding the same bytes make two attachments.
    public struct ID: Sendable, Hashable, CustomStringConvertible {
        public let owner: Participant
        /// SHA-256 of the content, 64 lowercase hexadecimal digits.
        public let sha256: String

        public init(owner: Participant, sha256: String) {
            self.owner = owner
            self.sha256 = sha256
        }

        public var description: String { "\(owner.id)/\(sha256.prefix(12))" }
    }

    /// The owner's journal record, as it is on the wire.
    let record: Wire.JournalRecord

    public var id: ID { ID(owner: owner, sha256: record.sha256) }
    /// Who added it; only the owner can remove it.
    public var owner: Participant { Participant(id: record.added.participant) }
    /// SHA-256 of the content, 64 lowercase hexadecimal digits: what ``GroupSessionJournal/load(_:progress:)``
    /// verifies before it returns.
    public var sha256: String { record.sha256 }
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
