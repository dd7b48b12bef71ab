#ifndef GROUPSYNC_CCRYPTO_SHIM_H
#define GROUPSYNC_CCRYPTO_SHIM_H

// OpenSSL's message digests (SHA-256 for the shared journal), through the public EVP interface.
#include <openssl/evp.h>

#endif
