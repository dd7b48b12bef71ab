import CCrypto
import Foundation
import MQTT

/// SHA-256 through OpenSSL's libcrypto (its EVP interface), which uses the processor's SHA extensions
/// where it has them: the journal hashes every byte it sends and twice every byte it loads (each chunk,
/// and the whole), so the digest must run at memory speed.
///
/// Feed it with ``update(_:)`` and read the digest once with ``finalize()``; ``hex(_:)`` hashes one
/// buffer at once.
final class SHA256 {
    private let context: OpaquePointer

    init() {
        OpenSSLLibrary.initializeOnce()
        // Only fails when out of memory.
        guard let context = EVP_MD_CTX_new(), EVP_DigestInit_ex(context, EVP_sha256(), nil) == 1 else {
            fatalError("OpenSSL could not set up a SHA-256 digest")
        }
        self.context = context
    }

    deinit { EVP_MD_CTX_free(context) }

    func update(_ data: Data) {
        data.withUnsafeBytes { bytes in
            guard let base = bytes.baseAddress, bytes.count > 0 else { return }
            _ = EVP_DigestUpdate(context, base, bytes.count)
        }
    }

    /// The digest as 64 lowercase hexadecimal digits. Call it once, after the last update.
    func finalize() -> String {
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        _ = EVP_DigestFinal_ex(context, &digest, &length)
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(64)
        for byte in digest.prefix(Int(length)) {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0xF)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The SHA-256 of `data` as 64 lowercase hexadecimal digits.
    static func hex(_ data: Data) -> String {
        let hasher = SHA256()
        hasher.update(data)
        return hasher.finalize()
    }

    /// Whether `text` is 64 lowercase hexadecimal digits, as a digest is written on the wire.
    static func isDigest(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }
}
