import Foundation
import Testing

@testable import GroupSync

/// The journal's digest against the NIST examples (FIPS 180-2, appendix B), and an attachment's digest
/// from its chunks' digests.
@Suite struct SHA256Tests {
    @Test(arguments: [
        ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        (
            "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        ),
    ])
    func nistExamples(message: String, digest: String) {
        #expect(SHA256.hex(Data(message.utf8)) == digest)
    }

    @Test func aMillionAs() {
        let data = Data(repeating: UInt8(ascii: "a"), count: 1_000_000)
        #expect(SHA256.hex(data) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
        #expect(SHA256.hex(data[1...]) == SHA256.hex(Data(repeating: UInt8(ascii: "a"), count: 999_999)), "a slice")
    }

    @Test func digestsOnTheWireAreLowercaseHex() {
        #expect(SHA256.isDigest(SHA256.hex(Data("abc".utf8))))
        #expect(!SHA256.isDigest("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"))
        #expect(!SHA256.isDigest("ba7816bf"))
        #expect(!SHA256.isDigest(String(repeating: "g", count: 64)))
    }

    /// An attachment's digest is the SHA-256 of its chunks' digests as raw bytes, one after another:
    /// of nothing for an empty attachment, not of the hexadecimal text.
    @Test func anAttachmentsDigestHashesItsChunksRawDigests() {
        let abc = SHA256.hex(Data("abc".utf8))
        let empty = SHA256.hex(Data())
        #expect(SHA256.hex(ofDigests: []) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(SHA256.hex(ofDigests: [abc]) == "4f8b42c22dd3729b519ba6f68d2da7cc5b2d606d05daed5ad5128cc03e6c6358")
        #expect(SHA256.hex(ofDigests: [abc, empty]) == "6f1290896ee81a0349174d19f4473d267a10289c40480861d5c42affffbd79f9")
        #expect(SHA256.hex(ofDigests: [empty, abc]) != SHA256.hex(ofDigests: [abc, empty]), "the order counts")
        #expect(SHA256.hex(ofDigests: [abc]) != SHA256.hex(Data(abc.utf8)))
    }
}
