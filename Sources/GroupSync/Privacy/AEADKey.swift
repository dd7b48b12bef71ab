import CCrypto
import MQTT

/// AES-256-GCM under one key whose schedule is made once: a context to seal and one to open, each
/// initialized with the key at creation and given only a nonce per payload (initializing a context with
/// its key costs more than sealing a message). Each call holds its context's lock for the call.
package final class AEADKey: Sendable {
    private let sealing: LockedValue<OpaquePointer>
    private let opening: LockedValue<OpaquePointer>

    package init(_ key: [UInt8]) {
        precondition(key.count == AEAD.keySize)
        OpenSSLLibrary.initializeOnce()
        func context(encrypting: Bool) -> OpaquePointer {
            // Fails only when out of memory.
            guard let context = EVP_CIPHER_CTX_new(),
                (encrypting
                    ? EVP_EncryptInit_ex2(context, AEAD.cipher, key, nil, nil) : EVP_DecryptInit_ex2(context, AEAD.cipher, key, nil, nil))
                    == 1
            else { fatalError("OpenSSL could not set up AES-256-GCM") }
            return context
        }
        sealing = LockedValue(context(encrypting: true))
        opening = LockedValue(context(encrypting: false))
    }

    deinit {
        sealing.withLock { EVP_CIPHER_CTX_free($0) }
        opening.withLock { EVP_CIPHER_CTX_free($0) }
    }

    /// `plaintext` sealed with `nonce` (12 bytes), bound to `aad`: ciphertext ‖ tag.
    package func seal(_ plaintext: some Collection<UInt8>, nonce: [UInt8], aad: [UInt8]) -> [UInt8] {
        precondition(nonce.count == AEAD.nonceSize)
        let plain = Array(plaintext)
        var out = [UInt8](repeating: 0, count: plain.count + AEAD.tagSize)
        let sealed = sealing.withLock { context in
            var length: Int32 = 0
            return EVP_EncryptInit_ex2(context, nil, nil, nonce, nil) == 1
                && (aad.isEmpty || EVP_EncryptUpdate(context, nil, &length, aad, Int32(aad.count)) == 1)
                && out.withUnsafeMutableBufferPointer { buffer in
                    (plain.isEmpty || EVP_EncryptUpdate(context, buffer.baseAddress, &length, plain, Int32(plain.count)) == 1)
                        && EVP_EncryptFinal_ex(context, buffer.baseAddress! + plain.count, &length) == 1
                        && EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, Int32(AEAD.tagSize), buffer.baseAddress! + plain.count) == 1
                }
        }
        // Each step fails only when out of memory or with a wrong size, which the checks above rule out.
        guard sealed else { fatalError("OpenSSL could not seal with AES-256-GCM") }
        return out
    }

    /// The plaintext of `sealed` (ciphertext ‖ tag), or nil when the tag does not match: a wrong key,
    /// nonce or associated data, or any bit changed.
    package func open(_ sealed: some Collection<UInt8>, nonce: [UInt8], aad: [UInt8]) -> [UInt8]? {
        guard nonce.count == AEAD.nonceSize, sealed.count >= AEAD.tagSize else { return nil }
        let bytes = Array(sealed)
        let cipherCount = bytes.count - AEAD.tagSize
        var tag = Array(bytes[cipherCount...])
        var out = [UInt8](repeating: 0, count: cipherCount)
        let opened = opening.withLock { context in
            var length: Int32 = 0
            var scratch = [UInt8](repeating: 0, count: 16)
            return EVP_DecryptInit_ex2(context, nil, nil, nonce, nil) == 1
                && (aad.isEmpty || EVP_DecryptUpdate(context, nil, &length, aad, Int32(aad.count)) == 1)
                && out.withUnsafeMutableBufferPointer { buffer in
                    cipherCount == 0 || EVP_DecryptUpdate(context, buffer.baseAddress, &length, bytes, Int32(cipherCount)) == 1
                }
                && EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(AEAD.tagSize), &tag) == 1
                && EVP_DecryptFinal_ex(context, &scratch, &length) == 1  // the tag matched
        }
        return opened ? out : nil
    }
}
