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

    static func bytes(_ hex: String) -> [UInt8] { SessionSealerTests.bytes(hex) }
}
