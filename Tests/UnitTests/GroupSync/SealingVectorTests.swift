import Foundation
import Testing

@testable import GroupSync

/// Runs docs/conformance/sealing/sealing.json (PROTOCOL.md, Private sessions) through the Swift sealer:
/// the session keys, each payload sealed with its fixed nonce byte for byte, and those that must not open.
@Suite struct SealingVectorTests {
    static let file = ConformanceVectorTests.directory.appendingPathComponent("sealing/sealing.json")

    @Test func everyVectorSealsAndOpensAsDocumented() throws {
        guard case let .object(root) = try JSONValue.read(try Data(contentsOf: Self.file)), case let .string(group)? = root["group"],
            case let .object(key)? = root["group_key"], case let .string(keyID)? = key["id"], case let .string(secret)? = key["base64"],
            case let .array(vectors)? = root["vectors"]
        else { throw Wire.Rejection.wrongShape }
        let groupKey = try GroupKey(id: keyID, base64: secret)
        var checked = 0
        for case let .object(vector) in vectors {
            guard case let .string(name)? = vector["name"], case let .string(session)? = vector["session"] else {
                throw Wire.Rejection.wrongShape
            }
            let sessionKey = SessionSealer.sessionKey(groupKey.secret, group: group, session: session)
            if case let .string(hex)? = vector["session_key_hex"] {
                #expect(sessionKey == Self.bytes(hex), "\(name)")
                checked += 1
                continue
            }
            if case let .string(salt)? = vector["salt"], case let .int(index)? = vector["index"], case let .string(text)? = vector["sealed"]
            {
                // A chunk: its attachment's key from the salt, its index as the nonce.
                let sealer = SessionSealer(keyring: try GroupKeyring([groupKey]), group: group, session: session)
                let cipher = try #require(sealer.chunkCipher(keyID: keyID, salt: salt))
                let raw = try #require(Data(base64Encoded: text))
                if case .bool(false)? = vector["opens"] {
                    var chunk = raw
                    #expect(!cipher.open(&chunk, index: Int(index)), "\(name) must not open")
                } else {
                    guard case let .string(plaintext)? = vector["plaintext"], case let .string(keyHex)? = vector["chunk_key_hex"],
                        case let .string(digest)? = vector["sealed_sha256"]
                    else { throw Wire.Rejection.wrongShape }
                    #expect(cipher.key == Self.bytes(keyHex), "\(name): the chunk key")
                    #expect(cipher.seal(Array(plaintext.utf8), index: Int(index)) == raw, "\(name): sealed byte for byte")
                    var chunk = raw
                    #expect(cipher.open(&chunk, index: Int(index)) && chunk == Data(plaintext.utf8) && SHA256.hex(raw) == digest, "\(name)")
                }
                checked += 1
                continue
            }
            guard case let .array(fields)? = vector["context"], case let .string(text)? = vector["sealed"] else {
                throw Wire.Rejection.wrongShape
            }
            let context = SealedContext(fields.compactMap { if case let .string(field) = $0 { field } else { nil } })
            let sealer = SessionSealer(keyring: try GroupKeyring([groupKey]), group: group, session: session)
            let opened = sealer.open(text, keyID: keyID, context)
            if case .bool(false)? = vector["opens"] {
                #expect(opened == nil, "\(name) must not open")
            } else {
                guard case let .string(plaintext)? = vector["plaintext"], case let .string(nonce)? = vector["nonce_hex"] else {
                    throw Wire.Rejection.wrongShape
                }
                let sealed = AEAD.seal(Array(plaintext.utf8), key: sessionKey, nonce: Self.bytes(nonce), aad: context.bytes)
                #expect(Data(Self.bytes(nonce) + sealed).base64EncodedString() == text, "\(name): sealed byte for byte")
                #expect(opened == Data(plaintext.utf8), "\(name): opens")
            }
            checked += 1
        }
        #expect(checked == vectors.count && checked >= 10)
    }

    /// The sealed records of the decoding vectors open with the key of sealing.json through the records'
    /// own readers: what Swift binds each payload to is what the vectors document.
    @Test func theSealedRecordsOfTheDecodingVectorsOpen() throws {
        func payload(_ file: String, _ name: String) throws -> Data {
            try #require(try ConformanceVectorTests.vectors(in: file).first { $0.name == name }).payload
        }
        let keyring = try GroupKeyring([try GroupKey(id: "k1", base64: "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=")])
        let sealer = SessionSealer(keyring: keyring, group: "g", session: "s1")
        let announcement = try Wire.Announcement.read(try payload("announcement.json", "a sealed activity (private session)"))
        #expect(announcement.opened(by: sealer)?.activity.metadata?.title == "Gallery paris")
        var ended = announcement
        ended.ended = true
        #expect(ended.opened(by: sealer) == nil, "a copy marked ended that its sealer did not mark")
        let record = try Wire.JournalRecord.read(try payload("journal.json", "a sealed record (private session)"))
        #expect(record.opened(by: sealer, session: "s1")?.name == "photo.jpg")
        var salted = record
        salted.salt = "AAECAwQFBgcICQoLDA0ODw=="
        #expect(salted.opened(by: sealer, session: "s1") == nil, "another salt")
        let state = try Wire.StateRecord.read(try payload("state.json", "a sealed value (private session)"))
        #expect(state.opened(by: sealer, session: "s1") != nil)
    }

    static func bytes(_ hex: String) -> [UInt8] { SessionSealerTests.bytes(hex) }
}
