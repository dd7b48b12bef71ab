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
        Array(sealedWithNonce(plaintext, nonce: nonce, aad: aad).dropFirst(AEAD.nonceSize))
    }

    /// `nonce` ‖ ciphertext ‖ tag of `plaintext`, in one buffer (as a sealed text holds them).
    package func sealedWithNonce(_ plaintext: some Collection<UInt8>, nonce: [UInt8], aad: [UInt8]) -> [UInt8] {
        precondition(nonce.count == AEAD.nonceSize)
        let count = plaintext.count
        let seal = { (plain: UnsafeBufferPointer<UInt8>) -> [UInt8] in
            [UInt8](unsafeUninitializedCapacity: AEAD.nonceSize + count + AEAD.tagSize) { out, initialized in
                let base = out.baseAddress!
                for index in 0..<AEAD.nonceSize { base[index] = nonce[index] }
                let body = base + AEAD.nonceSize
                let sealed = self.sealing.withLock { context in
                    var length: Int32 = 0
                    return EVP_EncryptInit_ex2(context, nil, nil, nonce, nil) == 1
                        && (aad.isEmpty || EVP_EncryptUpdate(context, nil, &length, aad, Int32(aad.count)) == 1)
                        && (count == 0 || EVP_EncryptUpdate(context, body, &length, plain.baseAddress, Int32(count)) == 1)
                        && EVP_EncryptFinal_ex(context, body + count, &length) == 1
                        && EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, Int32(AEAD.tagSize), body + count) == 1
                }
                // Each step fails only when out of memory or with a wrong size, which the checks above rule out.
                guard sealed else { fatalError("OpenSSL could not seal with AES-256-GCM") }
                initialized = AEAD.nonceSize + count + AEAD.tagSize
            }
        }
        return plaintext.withContiguousStorageIfAvailable(seal) ?? Array(plaintext).withUnsafeBufferPointer(seal)
    }

    /// The plaintext of `sealed` (ciphertext ‖ tag), or nil when the tag does not match: a wrong key,
    /// nonce or associated data, or any bit changed.
    package func open(_ sealed: some Collection<UInt8>, nonce: [UInt8], aad: [UInt8]) -> [UInt8]? {
        guard nonce.count == AEAD.nonceSize else { return nil }
        return openWithNonce(nonce + Array(sealed), aad: aad)
    }

    /// The plaintext of `sealed` = nonce ‖ ciphertext ‖ tag, or nil when it does not open.
    package func openWithNonce(_ sealed: [UInt8], aad: [UInt8]) -> [UInt8]? {
        guard sealed.count >= AEAD.nonceSize + AEAD.tagSize else { return nil }
        let count = sealed.count - AEAD.nonceSize - AEAD.tagSize
        return sealed.withUnsafeBufferPointer { input -> [UInt8]? in
            let nonce = input.baseAddress!
            let body = nonce + AEAD.nonceSize
            let tag = UnsafeMutableRawPointer(mutating: body + count)
            var opened = false
            let plaintext = [UInt8](unsafeUninitializedCapacity: max(count, 1)) { out, initialized in
                opened = opening.withLock { context in
                    var length: Int32 = 0
                    var scratch: (UInt64, UInt64) = (0, 0)
                    return EVP_DecryptInit_ex2(context, nil, nil, nonce, nil) == 1
                        && (aad.isEmpty || EVP_DecryptUpdate(context, nil, &length, aad, Int32(aad.count)) == 1)
                        && (count == 0 || EVP_DecryptUpdate(context, out.baseAddress, &length, body, Int32(count)) == 1)
                        && EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(AEAD.tagSize), tag) == 1
                        // Final succeeds only when the tag matched.
                        && withUnsafeMutableBytes(of: &scratch) {
                            EVP_DecryptFinal_ex(context, $0.baseAddress!.assumingMemoryBound(to: UInt8.self), &length) == 1
                        }
                }
                initialized = opened ? count : 0
            }
            return opened ? plaintext : nil
        }
    }
}
