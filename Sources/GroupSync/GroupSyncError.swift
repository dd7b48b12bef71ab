import MQTT

/// What can go wrong in GroupSync. Each case says what to do about it.
public enum GroupSyncError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A group, participant, session, activity or state key is not a valid identifier.
    case invalidIdentifier(kind: String, value: String, reason: String)
    /// The broker connection failed; the wrapped error says why and what to do.
    case connection(MQTTError)
    /// No coordinator is set up: call `GroupCoordinator.connect(…)` and `GroupCoordinator.setShared(…)`.
    case noCoordinator
    /// The session was left, ended or lost; create or join another one.
    case sessionInvalidated
    /// The session must be joined first (`join()`).
    case notJoined
    /// An encoded message exceeds the messenger's size limit.
    case messageTooLarge(size: Int, limit: Int)
    /// The value could not be encoded as JSON.
    case encodingFailed(String)
    /// An `.only([])` recipient set is empty: nobody would receive the message.
    case noRecipients
    /// The waiting task was cancelled. Each operation's documentation says what stays done: a `join()`
    /// or `add()` is undone (and can be retried); a message or value already handed over still goes out.
    case cancelled
    /// An argument is out of its range; the message says which and what is allowed.
    case invalidArgument(String)
    /// Playback has no group clock yet: no participant serving it has answered since the session was
    /// joined. Try again in a moment.
    case noGroupClock
    /// A journal operation would exceed one of the journal's limits, named in the case; remove attachments
    /// or raise the limit in ``GroupSessionJournal/Configuration``.
    case journalLimitExceeded(JournalLimit)
    /// Only an attachment's owner can remove it (the broker's ACL enforces it too).
    case notAttachmentOwner(owner: String)
    /// A load made no progress for the journal's `stallTimeout`: the broker no longer has the chunk and
    /// nobody who owns it republished it (its owner left and its records expired, or the broker lost them
    /// while the owner was away). Load it again once its owner is back.
    case attachmentUnavailable(digest: String, chunk: Int)
    /// The attachment's owner removed it while it was loading (or before).
    case attachmentRemoved(digest: String)
    /// A chunk matched its digest but not the length the owner's record gives it (`chunkSize`, less for
    /// the last): the record is inconsistent. Nothing was returned.
    case attachmentCorrupted(digest: String)
    /// A file could not be read or written; the message says which and why.
    case file(String)
    /// The session is private: its activity, messages and state are sealed with the group key `keyID`,
    /// which this participant's keyring does not have. Joining needs it in
    /// ``GroupCoordinator/Configuration/keyring``.
    case privateSession(keyID: String)

    public var description: String {
        switch self {
        case let .invalidIdentifier(kind, value, reason):
            "invalid \(kind) '\(value)': \(reason). Use 1–128 characters from A–Z a–z 0–9 . _ - : @ ~"
        case let .connection(error): error.description
        case .noCoordinator: "no GroupSync coordinator: connect one with GroupCoordinator.connect(...) and GroupCoordinator.setShared(...)"
        case .sessionInvalidated: "the session is no longer valid (left, ended or lost); wait for the next one from sessions()"
        case .notJoined: "join() the session before sending or setting state"
        case let .messageTooLarge(size, limit):
            "message of \(size) bytes exceeds the limit of \(limit) bytes; send less or raise the messenger's limit"
        case let .encodingFailed(detail): "could not encode the value as JSON: \(detail)"
        case .noRecipients: "the recipient set is empty"
        case .cancelled: "the operation was cancelled before it completed; it can be tried again"
        case let .invalidArgument(detail): "invalid argument: \(detail)"
        case .noGroupClock: "the group clock is not synchronized yet (no participant serving it has answered); try again in a moment"
        case let .journalLimitExceeded(limit): "journal limit exceeded: \(limit)"
        case let .notAttachmentOwner(owner): "only the attachment's owner (\(owner)) can remove it"
        case let .attachmentUnavailable(digest, chunk):
            "attachment \(digest.prefix(12)) is unavailable: chunk \(chunk) did not arrive (its owner is away and the broker no longer has it, or nobody online holds it); load it again once its owner is back"
        case let .attachmentRemoved(digest): "attachment \(digest.prefix(12)) was removed by its owner"
        case let .attachmentCorrupted(digest):
            "attachment \(digest.prefix(12)) did not verify: a chunk's length differs from its record; ask its owner to add it again"
        case let .file(detail): "file error: \(detail)"
        case let .privateSession(keyID):
            "the session is private: it is sealed with group key '\(keyID)', which this participant does not have; add it to the keyring to join"
        }
    }

    /// A connection's failure as the library reports it: ``cancelled`` when the waiting task was
    /// cancelled (whatever waited for it), ``connection(_:)`` otherwise.
    init(_ failure: MQTTError) { self = failure == .cancelled ? .cancelled : .connection(failure) }

    /// What `body` returns; its failure as ``init(_:)`` says.
    static func overConnection<T>(_ body: () throws(MQTTError) -> T) throws(GroupSyncError) -> T {
        do {
            return try body()
        } catch {
            throw GroupSyncError(error)
        }
    }

    /// ``overConnection(_:)`` for an asynchronous `body`.
    static func awaitOverConnection<T>(_ body: () async throws(MQTTError) -> T) async throws(GroupSyncError) -> T {
        do {
            return try await body()
        } catch {
            throw GroupSyncError(error)
        }
    }
}

/// Identifier rules shared by every name that becomes a topic level.
public enum Identifier {
    /// `A–Z a–z 0–9 . _ - : @ ~` (a switch, not a set lookup: it runs for every level of every topic).
    @inline(__always)
    static func isAllowed(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: ":"), UInt8(ascii: "@"), UInt8(ascii: "~"):
            true
        default: false
        }
    }

    /// Throws unless `value` is 1–128 characters of `A–Z a–z 0–9 . _ - : @ ~`. This keeps MQTT's `/`, `+`,
    /// `#` and `$` (and anything a dashboard would have to escape) out of topics.
    public static func validate(_ value: String, kind: String) throws(GroupSyncError) {
        if value.isEmpty { throw .invalidIdentifier(kind: kind, value: value, reason: "it is empty") }
        if value.utf8.count > 128 { throw .invalidIdentifier(kind: kind, value: value, reason: "it is longer than 128 bytes") }
        if let bad = value.utf8.first(where: { !isAllowed($0) }) {
            let character = String(decoding: [bad], as: UTF8.self)
            throw .invalidIdentifier(kind: kind, value: value, reason: "'\(character)' is not allowed")
        }
    }

    /// Whether `value` follows the rules (for input from the wire).
    public static func isValid(_ value: String) -> Bool { !value.isEmpty && value.utf8.count <= 128 && value.utf8.allSatisfy(isAllowed) }
}
