#ifndef GROUPSYNC_CCRYPTO_SHIM_H
#define GROUPSYNC_CCRYPTO_SHIM_H

// OpenSSL's libcrypto through its public headers: its initialization (crypto.h), its message digests and
// ciphers (SHA-256 for the shared journal, AES-256-GCM for private sessions, through the EVP interface),
// its key derivation (HKDF, kdf.h) and its random bytes (rand.h).
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#endif
