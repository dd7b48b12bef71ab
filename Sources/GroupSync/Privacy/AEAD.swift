import CCrypto
import MQTT

/// AES-256-GCM through libcrypto's EVP interface: authenticated encryption with associated data. A sealed
/// text is the ciphertext followed by its 16-byte tag; opening checks the tag over the ciphertext and the
/// associated data before it returns anything.
///
/// The caller owns the nonce's uniqueness: a nonce used twice under one key reveals both plaintexts'
/// XOR and lets the tag be forged (``SessionSealer`` and ``ChunkCipher`` say how they keep theirs apart).
package enum AEAD {
    package static let keySize = 32
    package static let nonceSize = 12
    package static let tagSize = 16

    /// `plaintext` sealed under `key` with `nonce`, bound to `aad`: ciphertext ‖ tag. (One payload: a key
    /// that seals many keeps an ``AEADKey``.)
    package static func seal(_ plaintext: some Collection<UInt8>, key: [UInt8], nonce: [UInt8], aad: [UInt8]) -> [UInt8] {
        Array(AEADKey(key).seal(plaintext, nonce: nonce, aad: aad))
    }

    /// The plaintext of `sealed` (ciphertext ‖ tag), or nil when the tag does not match.
    package static func open(_ sealed: some Collection<UInt8>, key: [UInt8], nonce: [UInt8], aad: [UInt8]) -> [UInt8]? {
        precondition(key.count == keySize)
        return AEADKey(key).open(sealed, nonce: nonce, aad: aad).map { Array($0) }
    }

    /// Calls `body` with the bytes of `bytes`: in place when they are contiguous (an array, `Data`, a slice
    /// of them), copied otherwise.
    static func withBytes<R>(of bytes: some Collection<UInt8>, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        bytes.withContiguousStorageIfAvailable { body(UnsafeRawBufferPointer($0)) } ?? Array(bytes).withUnsafeBytes(body)
    }

    /// AES-256-GCM fetched from the default provider once: a cipher named by `EVP_aes_256_gcm()` is
    /// fetched again at every initialization, which costs more than sealing a message.
    ///
    /// `nonisolated(unsafe)`: set once, before any use, by the initializer of a `static let` (which Swift
    /// runs once, thread-safely), and never changed; OpenSSL's fetched ciphers are immutable and may be used
    /// by any number of threads at once (OpenSSL's threading guide).
    nonisolated(unsafe) static let cipher: OpaquePointer = {
        OpenSSLLibrary.initializeOnce()
        guard let cipher = EVP_CIPHER_fetch(nil, "AES-256-GCM", nil) else { fatalError("OpenSSL has no AES-256-GCM") }
        return cipher
    }()

    /// `count` random bytes from libcrypto's generator (a nonce).
    package static func randomBytes(_ count: Int) -> [UInt8] {
        OpenSSLLibrary.initializeOnce()
        var bytes = [UInt8](repeating: 0, count: count)
        guard RAND_bytes(&bytes, Int32(count)) == 1 else { fatalError("OpenSSL's random generator failed") }
        return bytes
    }
}
