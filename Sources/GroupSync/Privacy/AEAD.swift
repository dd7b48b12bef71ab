import CCrypto
import MQTT

/// AES-256-GCM through libcrypto's EVP interface: authenticated encryption with associated data. A sealed
/// text is the ciphertext followed by its 16-byte tag; opening checks the tag over the ciphertext and the
/// associated data before it returns anything.
///
/// The caller owns the nonce's uniqueness: a nonce used twice under one key reveals both plaintexts'
/// XOR and lets the tag be forged. ``PrivateSessionKey`` draws each nonce at random (96 bits).
package enum AEAD {
    package static let keySize = 32
    package static let nonceSize = 12
    package static let tagSize = 16

    /// `plaintext` sealed under `key` with `nonce`, bound to `aad`: ciphertext ‖ tag.
    package static func seal(_ plaintext: some Collection<UInt8>, key: [UInt8], nonce: [UInt8], aad: [UInt8]) -> [UInt8] {
        precondition(key.count == keySize && nonce.count == nonceSize)
        OpenSSLLibrary.initializeOnce()
        let context = Context()
        let plain = Array(plaintext)
        var out = [UInt8](repeating: 0, count: plain.count + tagSize)
        var length: Int32 = 0
        // Each step fails only when out of memory or with a wrong size, which the checks above rule out.
        guard EVP_EncryptInit_ex2(context.pointer, EVP_aes_256_gcm(), key, nonce, nil) == 1,
            aad.isEmpty || EVP_EncryptUpdate(context.pointer, nil, &length, aad, Int32(aad.count)) == 1,
            out.withUnsafeMutableBufferPointer({ buffer in
                plain.isEmpty || EVP_EncryptUpdate(context.pointer, buffer.baseAddress, &length, plain, Int32(plain.count)) == 1
            }),
            out.withUnsafeMutableBufferPointer({ buffer in
                EVP_EncryptFinal_ex(context.pointer, buffer.baseAddress! + plain.count, &length) == 1
                    && EVP_CIPHER_CTX_ctrl(context.pointer, EVP_CTRL_GCM_GET_TAG, Int32(tagSize), buffer.baseAddress! + plain.count) == 1
            })
        else { fatalError("OpenSSL could not seal with AES-256-GCM") }
        return out
    }

    /// The plaintext of `sealed` (ciphertext ‖ tag), or nil when the tag does not match: a wrong key,
    /// nonce or associated data, or any bit changed.
    package static func open(_ sealed: some Collection<UInt8>, key: [UInt8], nonce: [UInt8], aad: [UInt8]) -> [UInt8]? {
        precondition(key.count == keySize)
        guard nonce.count == nonceSize, sealed.count >= tagSize else { return nil }
        OpenSSLLibrary.initializeOnce()
        let context = Context()
        let bytes = Array(sealed)
        let cipherCount = bytes.count - tagSize
        var tag = Array(bytes[cipherCount...])
        var out = [UInt8](repeating: 0, count: cipherCount)
        var length: Int32 = 0
        guard EVP_DecryptInit_ex2(context.pointer, EVP_aes_256_gcm(), key, nonce, nil) == 1,
            aad.isEmpty || EVP_DecryptUpdate(context.pointer, nil, &length, aad, Int32(aad.count)) == 1,
            out.withUnsafeMutableBufferPointer({ buffer in
                cipherCount == 0 || EVP_DecryptUpdate(context.pointer, buffer.baseAddress, &length, bytes, Int32(cipherCount)) == 1
            }),
            EVP_CIPHER_CTX_ctrl(context.pointer, EVP_CTRL_GCM_SET_TAG, Int32(tagSize), &tag) == 1
        else { return nil }
        var scratch = [UInt8](repeating: 0, count: 16)
        guard EVP_DecryptFinal_ex(context.pointer, &scratch, &length) == 1 else { return nil }  // the tag did not match
        return out
    }

    /// One cipher context, freed with its owner.
    private final class Context {
        let pointer: OpaquePointer
        init() {
            guard let pointer = EVP_CIPHER_CTX_new() else { fatalError("OpenSSL could not allocate a cipher context") }
            self.pointer = pointer
        }
        deinit { EVP_CIPHER_CTX_free(pointer) }
    }

    /// `count` random bytes from libcrypto's generator (a nonce).
    package static func randomBytes(_ count: Int) -> [UInt8] {
        OpenSSLLibrary.initializeOnce()
        var bytes = [UInt8](repeating: 0, count: count)
        guard RAND_bytes(&bytes, Int32(count)) == 1 else { fatalError("OpenSSL's random generator failed") }
        return bytes
    }
}
