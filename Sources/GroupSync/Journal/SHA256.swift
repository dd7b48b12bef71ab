import CCrypto
import Foundation
import MQTT

/// SHA-256 through OpenSSL's libcrypto (its EVP interface), which uses the processor's SHA extensions
/// where it has them: the journal hashes every byte it sends and every byte it loads, so the digest must
/// run at memory speed.
package enum SHA256 {
    /// The SHA-256 of `data` as 64 lowercase hexadecimal digits.
    package static func hex(_ data: Data) -> String {
        OpenSSLLibrary.initializeOnce()
        var digest = [UInt8](repeating: 0, count: 32)
        // Only fails when out of memory.
        guard data.withUnsafeBytes({ EVP_Digest($0.baseAddress, $0.count, &digest, nil, EVP_sha256(), nil) }) == 1 else {
            fatalError("OpenSSL could not compute a SHA-256 digest")
        }
        let digits = Array("0123456789abcdef".utf8)
        return String(unsafeUninitializedCapacity: 64) { text in
            for (index, byte) in digest.enumerated() {
                (text[2 * index], text[2 * index + 1]) = (digits[Int(byte >> 4)], digits[Int(byte & 0xF)])
            }
            return 64
        }
    }

    /// The SHA-256 of `digests` as raw bytes, 32 each, one after another (of nothing when there are none):
    /// a journal attachment's identifier from its chunks' digests.
    static func hex(ofDigests digests: [String]) -> String {
        // '0'…'9' are 48…57, 'a'…'f' 97…102 (wrapping: a text that is no digest gives other bytes, no trap).
        let nibbles = digests.flatMap { $0.utf8.map { $0 <= 57 ? $0 &- 48 : $0 &- 87 } }
        return hex(Data(stride(from: 1, to: nibbles.count, by: 2).map { nibbles[$0 - 1] << 4 | nibbles[$0] }))
    }

    /// Whether `text` is 64 lowercase hexadecimal digits, as a digest is written on the wire.
    static func isDigest(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }
}
