#ifndef GROUPSYNC_CCRYPTO_SHIM_H
#define GROUPSYNC_CCRYPTO_SHIM_H

// OpenSSL's libcrypto through its public headers: its initialization (crypto.h) and its message digests
// (SHA-256 for the shared journal, through the EVP interface).
#include <openssl/crypto.h>
#include <openssl/evp.h>

#endif
