import CCrypto
import Foundation
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

    /// Seals the bytes of `plaintext` with the 12 bytes at `nonce`, bound to `aad`, writing ciphertext ‖ tag
    /// (`plaintext.count` + 16 bytes) to `out`.
    package func seal(_ plaintext: UnsafeRawBufferPointer, nonce: UnsafeRawPointer, aad: [UInt8], into out: UnsafeMutableRawPointer) {
        let count = plaintext.count
        let body = out.assumingMemoryBound(to: UInt8.self)
        let sealed = sealing.withLock { context in
            var length: Int32 = 0
            return EVP_EncryptInit_ex2(context, nil, nil, nonce.assumingMemoryBound(to: UInt8.self), nil) == 1
                && (aad.isEmpty || EVP_EncryptUpdate(context, nil, &length, aad, Int32(aad.count)) == 1)
                && (count == 0
                    || EVP_EncryptUpdate(context, body, &length, plaintext.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(count))
                        == 1)
                && EVP_EncryptFinal_ex(context, body + count, &length) == 1
                && EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, Int32(AEAD.tagSize), body + count) == 1
        }
        // Each step fails only when out of memory or with a wrong size (the nonce is 12 bytes by contract).
        guard sealed else { fatalError("OpenSSL could not seal with AES-256-GCM") }
    }

    /// Opens ciphertext ‖ tag in `sealed` (at least 16 bytes) with the 12 bytes at `nonce`, bound to `aad`,
    /// writing the plaintext (`sealed.count` − 16 bytes) to `out`, which may be `sealed` itself. Returns
    /// false when the tag does not match — a wrong key, nonce or associated data, or any bit changed —, and
    /// `out` holds nothing then.
    package func open(_ sealed: UnsafeRawBufferPointer, nonce: UnsafeRawPointer, aad: [UInt8], into out: UnsafeMutableRawPointer?) -> Bool {
        precondition(sealed.count >= AEAD.tagSize)
        let count = sealed.count - AEAD.tagSize
        let body = sealed.baseAddress!.assumingMemoryBound(to: UInt8.self)
        let opened = opening.withLock { context in
            var length: Int32 = 0
            var scratch: (UInt64, UInt64) = (0, 0)
            return EVP_DecryptInit_ex2(context, nil, nil, nonce.assumingMemoryBound(to: UInt8.self), nil) == 1
                && (aad.isEmpty || EVP_DecryptUpdate(context, nil, &length, aad, Int32(aad.count)) == 1)
                && (count == 0 || EVP_DecryptUpdate(context, out!.assumingMemoryBound(to: UInt8.self), &length, body, Int32(count)) == 1)
                && EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(AEAD.tagSize), UnsafeMutablePointer(mutating: body + count))
                    == 1
                // Final succeeds only when the tag matched.
                && withUnsafeMutableBytes(of: &scratch) {
                    EVP_DecryptFinal_ex(context, $0.baseAddress!.assumingMemoryBound(to: UInt8.self), &length) == 1
                }
        }
        if !opened, count > 0 { memset(out!, 0, count) }  // nothing unauthenticated is left behind
        return opened
    }

    /// `plaintext` sealed with `nonce`, bound to `aad`: ciphertext ‖ tag.
    package func seal(_ plaintext: some Collection<UInt8>, nonce: [UInt8], aad: [UInt8]) -> Data {
        precondition(nonce.count == AEAD.nonceSize)
        var out = Data(count: plaintext.count + AEAD.tagSize)
        out.withUnsafeMutableBytes { out in
            AEAD.withBytes(of: plaintext) { plain in
                nonce.withUnsafeBytes { seal(plain, nonce: $0.baseAddress!, aad: aad, into: out.baseAddress!) }
            }
        }
        return out
    }

    /// The plaintext of `sealed` (ciphertext ‖ tag) opened with `nonce` for `aad`, or nil when it does not open.
    package func open(_ sealed: some Collection<UInt8>, nonce: [UInt8], aad: [UInt8]) -> Data? {
        guard nonce.count == AEAD.nonceSize else { return nil }
        return AEAD.withBytes(of: sealed) { sealed in nonce.withUnsafeBytes { open(sealed, nonce: $0.baseAddress!, aad: aad) } }
    }

    private func open(_ sealed: UnsafeRawBufferPointer, nonce: UnsafeRawPointer, aad: [UInt8]) -> Data? {
        guard sealed.count >= AEAD.tagSize else { return nil }
        var plaintext = Data(count: sealed.count - AEAD.tagSize)
        let opened = plaintext.withUnsafeMutableBytes { open(sealed, nonce: nonce, aad: aad, into: $0.baseAddress) }
        return opened ? plaintext : nil
    }
}
