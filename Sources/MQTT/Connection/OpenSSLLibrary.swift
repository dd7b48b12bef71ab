import CCrypto

/// OpenSSL, set up once per process before libmosquitto or anything else of this package uses it: without
/// the handler that frees its global state when the process exits (`OPENSSL_INIT_NO_ATEXIT`).
///
/// That handler runs while other threads may still be ending — a network thread that has just let
/// `disconnect()` return, for one — and a thread's own OpenSSL state is freed by a destructor that takes
/// one of those global locks: freed first, it crashes the process on its way out (OpenSSL issue 6214).
/// The process's exit reclaims the memory anyway. The first initialization decides, so every use of
/// OpenSSL here calls this first; a host program that set OpenSSL up before keeps its own choice.
package enum OpenSSLLibrary {
    private static let initialized: Bool = {
        OPENSSL_init_crypto(UInt64(OPENSSL_INIT_NO_ATEXIT), nil) == 1
    }()

    package static func initializeOnce() {
        _ = initialized
    }
}
