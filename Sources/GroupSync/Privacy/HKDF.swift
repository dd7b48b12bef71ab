import CCrypto
import MQTT

/// HKDF-SHA256 (RFC 5869) through libcrypto's EVP_PKEY interface: a key of `count` bytes from input key
/// material, a salt and a context string.
package enum HKDF {
    package static func sha256(key: [UInt8], salt: [UInt8], info: [UInt8], count: Int = 32) -> [UInt8] {
        OpenSSLLibrary.initializeOnce()
        guard let context = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nil) else { fatalError("OpenSSL could not allocate an HKDF context") }
        defer { EVP_PKEY_CTX_free(context) }
        var out = [UInt8](repeating: 0, count: count)
        var length = count
        // Each step fails only when out of memory.
        guard EVP_PKEY_derive_init(context) == 1, EVP_PKEY_CTX_set_hkdf_md(context, EVP_sha256()) == 1,
            EVP_PKEY_CTX_set1_hkdf_salt(context, salt, Int32(salt.count)) == 1,
            EVP_PKEY_CTX_set1_hkdf_key(context, key, Int32(key.count)) == 1,
            EVP_PKEY_CTX_add1_hkdf_info(context, info, Int32(info.count)) == 1, EVP_PKEY_derive(context, &out, &length) == 1,
            length == count
        else { fatalError("OpenSSL could not derive a key with HKDF") }
        return out
    }
}
