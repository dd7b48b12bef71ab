import Foundation
import MQTT
import Synchronization

/// The keys of one private session: every key of the group's keyring derived for the session, the first
/// sealing. A key per session (HKDF-SHA256 from the group key, the group and the session's ID) keeps one
/// session's payloads from opening in another; each payload is bound to where it belongs by its
/// associated data (``SealedContext``). Its nonce: 96 random bits drawn when the sealer is made, with the
/// count of payloads it sealed so far XORed into the last 64 — distinct within a sealer, and as unlikely to
/// meet another sealer's (another participant's, or another process's) as random nonces are.
///
/// On the wire a sealed payload is `base64(nonce ‖ ciphertext ‖ tag)` beside the ID of the group key it
/// was sealed with (PROTOCOL.md, Private sessions).
package struct SessionSealer: Sendable {
    /// The ID of the group key that seals.
    package let sealingKeyID: String
    /// Each group key's session key, and its cipher.
    private let keys: [String: SessionKey]
    private let sealingCipher: AEADKey
    private let nonces = NonceSequence()

    package init(keyring: GroupKeyring, group: String, session: String) {
        sealingKeyID = keyring.sealingKey.id
        keys = Dictionary(
            uniqueKeysWithValues: keyring.keys.map { key in
                let bytes = Self.sessionKey(key.secret, group: group, session: session)
                return (key.id, SessionKey(bytes: bytes, cipher: AEADKey(bytes)))
            })
        sealingCipher = keys[sealingKeyID]!.cipher
    }

    /// HKDF-SHA256 of the group key, with salt `groupsync/v2` and info `session <group>/<session>`.
    package static func sessionKey(_ groupKey: [UInt8], group: String, session: String) -> [UInt8] {
        HKDF.sha256(key: groupKey, salt: Array("groupsync/v2".utf8), info: Array("session \(group)/\(session)".utf8))
    }

    /// Whether this keyring has the key named `id`.
    package func opens(keyID id: String) -> Bool { keys[id] != nil }

    /// `plaintext` sealed with the sealing key and a fresh nonce, bound to `context`: the base64 text of
    /// nonce ‖ ciphertext ‖ tag.
    package func seal(_ plaintext: some Collection<UInt8>, _ context: SealedContext) -> String {
        var text: [UInt8] = []
        AEAD.withBytes(of: plaintext) { appendSealed($0, context, to: &text) }
        return String(decoding: text, as: UTF8.self)
    }

    /// Appends the text ``seal(_:_:)`` makes of `plaintext` to `out` (an envelope being written).
    package func appendSealed(_ plaintext: UnsafeRawBufferPointer, _ context: SealedContext, to out: inout [UInt8]) {
        withUnsafeTemporaryAllocation(byteCount: AEAD.nonceSize + plaintext.count + AEAD.tagSize, alignment: 1) { sealed in
            nonces.next(into: sealed.baseAddress!)
            sealingCipher.seal(plaintext, nonce: sealed.baseAddress!, aad: context.bytes, into: sealed.baseAddress! + AEAD.nonceSize)
            Base64.append(UnsafeRawBufferPointer(sealed), to: &out)
        }
    }

    /// The plaintext of `text` (as ``seal(_:_:)`` writes it) sealed with key `keyID` for `context`; nil
    /// when this keyring has no such key, the text is no sealed payload, or it does not open (another
    /// context, another key, a changed bit).
    package func open(_ text: String, keyID: String, _ context: SealedContext) -> Data? {
        var text = text
        return text.withUTF8 { open(base64: UnsafeRawBufferPointer($0), keyID: keyID, context) }
    }

    /// ``open(_:keyID:_:)`` of the text's UTF-8 bytes (an envelope's, read in place): decoded into a
    /// buffer of its own, opened into the `Data` returned.
    package func open(base64 text: UnsafeRawBufferPointer, keyID: String, _ context: SealedContext) -> Data? {
        let capacity = Base64.decodedCapacity(text.count)
        guard let cipher = keyID == sealingKeyID ? sealingCipher : keys[keyID]?.cipher, capacity >= AEAD.nonceSize + AEAD.tagSize
        else { return nil }
        return withUnsafeTemporaryAllocation(byteCount: capacity, alignment: 1) { sealed -> Data? in
            guard let count = Base64.decode(text, into: sealed.baseAddress!), count >= AEAD.nonceSize + AEAD.tagSize else { return nil }
            var plaintext = Data(count: count - AEAD.nonceSize - AEAD.tagSize)
            let opened = plaintext.withUnsafeMutableBytes { plaintext in
                cipher.open(
                    UnsafeRawBufferPointer(rebasing: sealed[AEAD.nonceSize..<count]), nonce: sealed.baseAddress!, aad: context.bytes,
                    into: plaintext.baseAddress)
            }
            return opened ? plaintext : nil
        }
    }
}

/// A group key derived for one session, and its cipher.
private struct SessionKey {
    let bytes: [UInt8]
    let cipher: AEADKey
}

/// The nonces of one sealer: a random start, and a count XORed into its last 8 bytes.
private final class NonceSequence: Sendable {
    private let start = AEAD.randomBytes(AEAD.nonceSize)
    private let count = Atomic<UInt64>(0)

    /// Writes the next nonce (12 bytes) to `out`.
    func next(into out: UnsafeMutableRawPointer) {
        let n = count.add(1, ordering: .relaxed).oldValue
        for byte in 0..<AEAD.nonceSize {
            let counted = byte < 4 ? 0 : UInt8(truncatingIfNeeded: n >> (8 * UInt64(11 - byte)))
            out.storeBytes(of: start[byte] ^ counted, toByteOffset: byte, as: UInt8.self)
        }
    }
}

extension SessionSealer {
    /// What seals and opens the chunks of a private attachment sealed with key `keyID` and `salt` (16
    /// bytes, base64); nil when this keyring lacks the key or the salt is no such thing.
    package func chunkCipher(keyID: String, salt: String) -> ChunkCipher? {
        guard let sessionKey = keys[keyID]?.bytes, let salt = Base64.decode(salt), salt.count == 16 else { return nil }
        return ChunkCipher(key: HKDF.sha256(key: sessionKey, salt: salt, info: Array("chunks".utf8)))
    }
}

/// Seals and opens the chunks of one private attachment. Its key is HKDF-SHA256 of the session key with
/// the record's salt (info `chunks`): a key per attachment, so chunk `index`'s nonce is `index` itself
/// (12 bytes, big endian), never used twice under one key for different bytes. Sealing is deterministic:
/// whoever holds the bytes makes the very chunk the record's digest names, and a holder whose bytes no
/// longer match sees it by that digest before it publishes anything.
package struct ChunkCipher: Sendable, Hashable {
    let key: [UInt8]
    private let cipher: AEADKey

    init(key: [UInt8]) {
        self.key = key
        cipher = AEADKey(key)
    }

    /// Chunk `index`'s bytes sealed: ciphertext ‖ tag (16 bytes longer).
    package func seal(_ plaintext: some Collection<UInt8>, index: Int) -> Data {
        cipher.seal(plaintext, nonce: Self.nonce(index), aad: Self.context.bytes)
    }

    /// Opens chunk `index` where it is: true, and `chunk` holds its content (16 bytes shorter), or false
    /// when it does not open (`chunk` is then to be dropped).
    package func open(_ chunk: inout Data, index: Int) -> Bool {
        guard chunk.count >= AEAD.tagSize else { return false }
        let nonce = Self.nonce(index)
        let opened = chunk.withUnsafeMutableBytes { bytes in
            nonce.withUnsafeBytes {
                cipher.open(UnsafeRawBufferPointer(bytes), nonce: $0.baseAddress!, aad: Self.context.bytes, into: bytes.baseAddress)
            }
        }
        if opened { chunk.removeLast(AEAD.tagSize) }
        return opened
    }

    package static func == (lhs: ChunkCipher, rhs: ChunkCipher) -> Bool { lhs.key == rhs.key }
    package func hash(into hasher: inout Hasher) { hasher.combine(key) }

    private static let context = SealedContext("chunk")

    private static func nonce(_ index: Int) -> [UInt8] {
        (0..<AEAD.nonceSize).map { byte in UInt8(truncatingIfNeeded: UInt64(index) >> (8 * UInt64(AEAD.nonceSize - 1 - byte))) }
    }
}

/// The associated data of a sealed payload: what it is and where it belongs, as fields each written as its
/// length (4 bytes, big endian) and its UTF-8 bytes (a number as its decimal digits). A payload opens only
/// with the same fields.
package struct SealedContext: Sendable, Hashable {
    package private(set) var bytes: [UInt8]

    package init(_ fields: String...) { self.init(fields) }

    package init(_ fields: [String]) {
        self.init(capacity: fields.reduce(0) { $0 + 4 + $1.utf8.count }) { for field in fields { $0.append(field) } }
    }

    /// Fields written one by one into storage of `capacity` bytes, which they must fit (a context made for
    /// every message: one allocation, no array of fields first).
    init(capacity: Int, _ build: (inout Writer) -> Void) {
        bytes = [UInt8](unsafeUninitializedCapacity: capacity) { storage, count in
            var writer = Writer(storage: storage)
            build(&writer)
            count = writer.count
        }
    }

    /// Writes fields into a context's storage.
    struct Writer: ~Copyable {
        private let storage: UnsafeMutableBufferPointer<UInt8>
        private(set) var count = 0

        fileprivate init(storage: UnsafeMutableBufferPointer<UInt8>) { self.storage = storage }

        mutating func append(_ field: String) {
            if field.utf8.withContiguousStorageIfAvailable({ write(UnsafeRawBufferPointer($0)) }) == nil {
                var field = field
                field.withUTF8 { write(UnsafeRawBufferPointer($0)) }
            }
        }

        /// `number` as the field `String(number)` is, without making that string.
        mutating func append(_ number: Int64) { number.withDecimalDigits { write($0) } }

        private mutating func write(_ field: UnsafeRawBufferPointer) {
            precondition(storage.count - count >= 4 + field.count, "a sealed context's fields outgrew its capacity")
            let at = UnsafeMutableRawPointer(storage.baseAddress! + count)
            at.storeBytes(of: UInt32(field.count).bigEndian, as: UInt32.self)
            if !field.isEmpty { (at + 4).copyMemory(from: field.baseAddress!, byteCount: field.count) }
            count += 4 + field.count
        }
    }
}
