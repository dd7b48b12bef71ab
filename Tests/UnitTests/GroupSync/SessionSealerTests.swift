import Foundation
import Testing

@testable import GroupSync

/// The primitives of private sessions against their published test vectors, and the session sealer's
/// binding of each payload to its key, session and context.
@Suite struct SessionSealerTests {
    static func bytes(_ hex: String) -> [UInt8] {
        stride(from: 0, to: hex.count, by: 2).map { offset in
            let start = hex.index(hex.startIndex, offsetBy: offset)
            return UInt8(hex[start..<hex.index(start, offsetBy: 2)], radix: 16)!
        }
    }

    /// RFC 5869, test case 1.
    @Test func hkdfMatchesRFC5869() {
        let okm = HKDF.sha256(key: [UInt8](repeating: 0x0b, count: 22), salt: Array(0...0x0c), info: Array(0xf0...0xf9), count: 42)
        #expect(okm == Self.bytes("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"))
    }

    /// The GCM specification's test case 16 (McGrew and Viega): AES-256, a 96-bit IV, associated data.
    @Test func aesGCMMatchesItsSpecification() {
        let key = Self.bytes("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308")
        let plaintext = Self.bytes(
            "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39")
        let (aad, nonce) = (Self.bytes("feedfacedeadbeeffeedfacedeadbeefabaddad2"), Self.bytes("cafebabefacedbaddecaf888"))
        let sealed = AEAD.seal(plaintext, key: key, nonce: nonce, aad: aad)
        #expect(
            sealed
                == Self.bytes(
                    "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662"
                        + "76fc6ece0f4e1768cddf8853bb2d551b"))
        #expect(AEAD.open(sealed, key: key, nonce: nonce, aad: aad) == plaintext)
        var flipped = sealed
        flipped[3] ^= 1
        #expect(AEAD.open(flipped, key: key, nonce: nonce, aad: aad) == nil, "a changed bit")
        #expect(AEAD.open(sealed, key: key, nonce: nonce, aad: aad.dropLast()) == nil, "other associated data")
        #expect(AEAD.open(sealed, key: key, nonce: Array(nonce.reversed()), aad: aad) == nil, "another nonce")
        #expect(AEAD.open(sealed.prefix(15), key: key, nonce: nonce, aad: aad) == nil, "shorter than a tag")
        #expect(AEAD.open(AEAD.seal([], key: key, nonce: nonce, aad: []), key: key, nonce: nonce, aad: []) == [], "nothing sealed")
    }

    static let old = try! GroupKey(id: "k1", secret: [UInt8](repeating: 1, count: 32))
    static let new = try! GroupKey(id: "k2", secret: [UInt8](repeating: 2, count: 32))
    static func sealer(_ keys: [GroupKey], session: String = "s1") -> SessionSealer {
        SessionSealer(keyring: try! GroupKeyring(keys), group: "g", session: session)
    }

    @Test func aPayloadOpensOnlyWithItsKeySessionAndContext() {
        let context = SealedContext.message(session: "s1", sender: "alice", recipient: nil, epoch: 7, seq: 1, type: "Chat", reliable: true)
        let text = Self.sealer([Self.old]).seal(Array(#"{"text":"hi"}"#.utf8), context)
        #expect(Self.sealer([Self.old]).open(text, keyID: "k1", context) == Data(#"{"text":"hi"}"#.utf8))
        #expect(Self.sealer([Self.old], session: "s2").open(text, keyID: "k1", context) == nil, "another session's key")
        let elsewhere: [SealedContext] = [
            .message(session: "s1", sender: "mallory", recipient: nil, epoch: 7, seq: 1, type: "Chat", reliable: true),
            .message(session: "s1", sender: "alice", recipient: "bob", epoch: 7, seq: 1, type: "Chat", reliable: true),
            .message(session: "s1", sender: "alice", recipient: nil, epoch: 8, seq: 1, type: "Chat", reliable: true),
            .message(session: "s1", sender: "alice", recipient: nil, epoch: 7, seq: 2, type: "Chat", reliable: true),
            .message(session: "s1", sender: "alice", recipient: nil, epoch: 7, seq: 1, type: "Other", reliable: true),
            .message(session: "s1", sender: "alice", recipient: nil, epoch: 7, seq: 1, type: "Chat", reliable: false),
        ]
        for other in elsewhere { #expect(Self.sealer([Self.old]).open(text, keyID: "k1", other) == nil) }
        #expect(Self.sealer([Self.old]).open(text, keyID: "k2", context) == nil, "a key it does not have")
        #expect(Self.sealer([Self.old]).open("not base64!", keyID: "k1", context) == nil)
        #expect(Self.sealer([Self.old]).seal([1], context) != Self.sealer([Self.old]).seal([1], context), "a fresh nonce each time")
    }

    /// A sealed text is standard padded base64, as Foundation writes it, for every remainder length.
    @Test func sealedTextsAreStandardBase64() {
        for count in 0..<7 {
            let bytes = (0..<count).map { UInt8(truncatingIfNeeded: 0xFB &+ $0 &* 77) }
            var text: [UInt8] = []
            bytes.withUnsafeBytes { Base64.append($0, to: &text) }
            #expect(String(decoding: text, as: UTF8.self) == Data(bytes).base64EncodedString(), "\(count) bytes")
        }
    }

    /// A sealed text is read as strictly as it is written: standard padded base64 and nothing else. The
    /// bits padding leaves over are not checked (PROTOCOL.md, Private sessions).
    @Test func sealedTextsAreReadAsTheyAreWritten() {
        for count in 0..<7 {
            let bytes = (0..<count).map { UInt8(truncatingIfNeeded: 0xFB &+ $0 &* 77) }
            #expect(Base64.decode(Data(bytes).base64EncodedString()) == bytes, "\(count) bytes")
        }
        #expect(Base64.decode("QR==") == [65], "left-over bits")
        for text in ["QQ=", "Q===", "====", "QU=D", "QUJD====", "QU==QUJD", "QUJD\n", " QUJD", "QUJ", "QU-D", "QUJ_", "QUJD\0"] {
            #expect(Base64.decode(text) == nil, "\(text.debugDescription)")
        }
    }

    /// A sealed envelope as `JSONEncoder` writes it (sorted keys, slashes unescaped).
    struct SealedEnvelope: Encodable {
        var body: String
        var epoch: Int64
        var reliable: Bool
        var sealed: String
        var seq: Int64?
        var type: String
        var v = Wire.version
    }

    /// A sealed envelope is byte for byte what `JSONEncoder` writes for its fields, and its body opens only
    /// where it was sealed for — also when its writer escaped a `/` of the text; a clear envelope in a
    /// private session, or a sealed one elsewhere, is not read.
    @Test(arguments: [nil, "bob"] as [String?], [1, nil] as [Int64?])
    func anEnvelopeOpensWhereItWasSealedFor(recipient: String?, seq: Int64?) throws {
        let sealer = Self.sealer([Self.old])
        let sealing = Wire.EnvelopeBytes.Sealing(sealer: sealer, session: "s1", sender: "alice", recipient: recipient)
        let body = Data(#"{"text":"hi"}"#.utf8)
        func read(_ payload: Data, by sealer: SessionSealer?, sender: String = "alice", recipient: String? = recipient) -> Data? {
            guard let envelope = Wire.decodeEnvelope(payload),
                let (opened, bytes) = envelope.opened(payload, by: sealer, session: "s1", sender: sender, recipient: recipient)
            else { return nil }
            return bytes[opened.body]
        }
        // Sealed until the text has a `/` in it (its nonce and tag are random), so that it is also read escaped.
        var (payload, text) = (Data(), "")
        repeat {
            payload = Data(
                Wire.EnvelopeBytes(encodedBody: body).finished(type: "Note", epoch: 7, seq: seq, reliable: seq != nil, sealing: sealing))
            let envelope = try #require(Wire.decodeEnvelope(payload))
            text = String(decoding: payload[envelope.body].dropFirst().dropLast(), as: UTF8.self)
        } while !text.contains("/")
        let reference = SealedEnvelope(body: text, epoch: 7, reliable: seq != nil, sealed: "k1", seq: seq, type: "Note")
        #expect(payload == (try Wire.encode(reference)))
        let escaped = Data(String(decoding: payload, as: UTF8.self).replacingOccurrences(of: "/", with: #"\/"#).utf8)
        #expect(read(payload, by: sealer) == body)
        #expect(read(escaped, by: sealer) == body)
        #expect(read(payload, by: sealer, sender: "mallory") == nil, "passed off as another sender's")
        #expect(read(payload, by: sealer, recipient: recipient == nil ? "bob" : nil) == nil, "moved to another topic")
        #expect(read(payload, by: nil) == nil, "sealed, in a session that is not private")
        let clear = Data(Wire.EnvelopeBytes(encodedBody: body).finished(type: "Note", epoch: 7, seq: seq, reliable: seq != nil))
        #expect(read(clear, by: sealer) == nil, "in clear, in a private session")
        #expect(read(clear, by: nil) == body)
    }

    /// Fields are length-prefixed: moving a boundary between them changes the associated data.
    @Test func contextFieldsCannotBeShifted() {
        #expect(SealedContext("ab", "c") != SealedContext("a", "bc"))
        #expect(SealedContext("ab", "c").bytes == [0, 0, 0, 2, 97, 98, 0, 0, 0, 1, 99])
        let message = SealedContext.message(session: "s", sender: "p", recipient: nil, epoch: .min, seq: 0, type: "T", reliable: true)
        #expect(message == SealedContext("message", "s", "p", "", String(Int64.min), "0", "T", "1"), "numbers as their decimal text")
    }

    /// A rotated keyring seals with its first key and still opens the old one's payloads; without the old
    /// key they stay closed.
    @Test func rotation() {
        let context = SealedContext.state(session: "s1", key: "index", clock: HLCTimestamp(time: 5, counter: 0, participant: "alice"))
        let before = Self.sealer([Self.old]).seal([42], context)
        let rotated = Self.sealer([Self.new, Self.old])
        #expect(rotated.sealingKeyID == "k2")
        #expect(rotated.open(before, keyID: "k1", context) == Data([42]))
        let after = rotated.seal([43], context)
        #expect(Self.sealer([Self.old]).open(after, keyID: "k2", context) == nil, "the old keyring cannot read the new key's")
        #expect(Self.sealer([Self.new]).open(before, keyID: "k1", context) == nil, "the old key dropped")
        #expect(Self.sealer([Self.new]).open(after, keyID: "k2", context) == Data([43]))
    }

    @Test func keysAreCheckedAndNeverPrinted() throws {
        #expect(throws: GroupSyncError.self) { try GroupKey(id: "k", secret: [UInt8](repeating: 0, count: 31)) }
        #expect(throws: GroupSyncError.self) { try GroupKey(id: "a/b", secret: [UInt8](repeating: 0, count: 32)) }
        #expect(throws: GroupSyncError.self) { try GroupKey(id: "", secret: [UInt8](repeating: 0, count: 32)) }
        #expect(throws: GroupSyncError.self) { try GroupKeyring([]) }
        #expect(throws: GroupSyncError.self) { try GroupKeyring([Self.old, Self.old]) }
        let key = try GroupKey.random(id: "fresh")
        #expect(try GroupKey(id: "fresh", base64: key.base64Secret) == key)
        #expect(try GroupKey(id: "fresh", base64: " \(key.base64Secret) ") == key)
        #expect(throws: GroupSyncError.self, "padding after the end") { try GroupKey(id: "fresh", base64: key.base64Secret + "====") }
        #expect(!"\(key)".contains(key.base64Secret) && "\(key)".contains("fresh"))
        // A key file's line the wrong way round (`BASE64 ID`): the error does not quote the secret.
        #expect {
            try GroupKey(id: key.base64Secret, base64: "fresh")
        } throws: { error in
            !"\(error)".contains(key.base64Secret) && "\(error)".contains("key ID")
        }
    }
}
