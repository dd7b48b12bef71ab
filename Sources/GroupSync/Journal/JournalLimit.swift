/// A limit of the journal that an operation would exceed: see ``GroupSyncError/journalLimitExceeded(_:)``.
public enum JournalLimit: Sendable, Hashable, CustomStringConvertible {
    /// One attachment's size (``GroupSessionJournal/Configuration/maximumAttachmentSize``).
    case attachmentSize(size: Int, limit: Int)
    /// The total size of the session's attachments, everyone's
    /// (``GroupSessionJournal/Configuration/maximumSessionSize``).
    case sessionSize(total: Int, limit: Int)
    /// The number of the session's attachments, everyone's
    /// (``GroupSessionJournal/Configuration/maximumAttachmentCount``).
    case attachmentCount(count: Int, limit: Int)
    /// The attachment's record (its list of chunk digests) would exceed the broker's Maximum Packet Size:
    /// use a larger ``GroupSessionJournal/Configuration/chunkSize`` or a smaller attachment.
    case recordSize(size: Int, limit: Int)

    public var description: String {
        switch self {
        case let .attachmentSize(size, limit):
            "an attachment of \(size) bytes exceeds the limit of \(limit) bytes per attachment (Configuration.maximumAttachmentSize)"
        case let .sessionSize(total, limit):
            "the session's attachments would total \(total) bytes, over the limit of \(limit) bytes (Configuration.maximumSessionSize)"
        case let .attachmentCount(count, limit):
            "the session would have \(count) attachments, over the limit of \(limit) (Configuration.maximumAttachmentCount)"
        case let .recordSize(size, limit):
            "the attachment's record of \(size) bytes exceeds the broker's packet limit of \(limit) bytes; use a larger Configuration.chunkSize"
        }
    }
}
