import Foundation
import Testing

@testable import GroupSync

/// The journal's digest against the NIST examples (FIPS 180-2, appendix B), fed whole and in pieces.
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

    @Test func aMillionAsInPiecesOfAnySize() {
        let hasher = SHA256()
        var fed = 0
        var piece = 1
        while fed < 1_000_000 {
            let size = min(piece, 1_000_000 - fed)
            hasher.update(Data(repeating: UInt8(ascii: "a"), count: size))
            fed += size
            piece = piece * 3 + 1
        }
        #expect(hasher.finalize() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    @Test func digestsOnTheWireAreLowercaseHex() {
        #expect(SHA256.isDigest(SHA256.hex(Data("abc".utf8))))
        #expect(!SHA256.isDigest("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"))
        #expect(!SHA256.isDigest("ba7816bf"))
        #expect(!SHA256.isDigest(String(repeating: "g", count: 64)))
    }
}
