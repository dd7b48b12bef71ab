import Foundation

/// One key of a private group (``GroupKeyring``): 32 secret bytes, named on the wire by ``id``.
///
/// The secret is never printed: `description` shows the ID only.
public struct GroupKey: Sendable, Hashable, CustomStringConvertible {
    /// Names the key on the wire, in clear, so that a reader picks the key a payload was sealed with:
    /// 1–32 characters of `A–Z a–z 0–9 . _ -`.
    public let id: String
    let secret: [UInt8]

    /// A key from its 32 secret bytes. Throws ``GroupSyncError/invalidArgument(_:)`` for another length
    /// or an ID outside the rules (an ID that is not one is not quoted: it may be a secret misplaced).
    public init(id: String, secret: some Collection<UInt8>) throws(GroupSyncError) {
        try Self.validate(id: id)
        guard secret.count == 32 else { throw .invalidArgument("key '\(id)' has \(secret.count) bytes; a group key has 32") }
        self.id = id
        self.secret = Array(secret)
    }

    /// A key from its secret written in base64 (44 characters, spaces around them ignored), as `groupsync
    /// key` prints it: read as a sealed text is (PROTOCOL.md, Private sessions), so that every participant,
    /// whatever its language, takes the same key lines.
    public init(id: String, base64 secret: String) throws(GroupSyncError) {
        try Self.validate(id: id)
        guard let bytes = Base64.decode(secret.trimmingCharacters(in: .whitespaces)) else {
            throw .invalidArgument("key '\(id)' is not base64")
        }
        try self.init(id: id, secret: bytes)
    }

    private static func validate(id: String) throws(GroupSyncError) {
        guard (1...32).contains(id.utf8.count),
            id.utf8.allSatisfy({ Identifier.isAllowed($0) && $0 != UInt8(ascii: ":") && $0 != UInt8(ascii: "@") && $0 != UInt8(ascii: "~") }
            )
        else { throw .invalidArgument("a key ID is 1–32 characters of A–Z a–z 0–9 . _ - (\(id.count) characters given)") }
    }

    /// A new key of 32 random bytes from libcrypto's generator.
    public static func random(id: String) throws(GroupSyncError) -> GroupKey { try GroupKey(id: id, secret: AEAD.randomBytes(32)) }

    /// The secret in base64, for storing it (never print it).
    public var base64Secret: String { Data(secret).base64EncodedString() }

    public var description: String { "GroupKey(\(id), secret not shown)" }
}
