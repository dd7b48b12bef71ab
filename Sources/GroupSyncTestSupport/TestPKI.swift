import BrokerSupport
import Foundation

/// Generates a throw-away X.509 PKI for TLS tests with the `openssl` command
/// line tool (OpenSSL 1.1.1 or 3.x): all keys are ECDSA P-256, so generation
/// takes a few tens of milliseconds.
public enum TestPKI {
    /// Paths of the generated PEM files.
    public struct Files: Sendable, Hashable {
        /// The directory holding every file.
        public var directory: String
        /// Self-signed certificate of the test CA.
        public var caCert: String
        /// Private key of the test CA.
        public var caKey: String
        /// Server certificate signed by the CA, for the `hostname` given to
        /// ``TestPKI/generate(in:hostname:)`` plus `IP:127.0.0.1` and `DNS:localhost`.
        public var serverCert: String
        /// The server certificate's private key.
        public var serverKey: String
        /// Client certificate signed by the CA (CN `groupsync-test-client`).
        public var clientCert: String
        /// The client certificate's private key.
        public var clientKey: String
        /// Certificate of a second, unrelated CA: trusting only it must make
        /// verification of the server (or client) certificate fail.
        public var wrongCACert: String

        /// ``TestPKI/trustDirectory(for:)``.
        public func trustDirectory() throws -> String { try TestPKI.trustDirectory(for: self) }
    }

    /// `openssl` failed.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        /// What went wrong, with the tool's output.
        public let message: String

        public var description: String {
            "TestPKI: \(message)"
        }
    }

    /// Creates `directory` if needed and writes into it a CA, a server and a
    /// client certificate signed by it, and an unrelated "wrong" CA.
    ///
    /// The server certificate's subjectAltName holds `IP:127.0.0.1`,
    /// `DNS:localhost` and `hostname` (as an IP or DNS entry), and its
    /// extended key usage is serverAuth, so OpenSSL 3 hostname verification
    /// accepts it for 127.0.0.1. The client certificate has clientAuth.
    public static func generate(in directory: String, hostname: String = "127.0.0.1") throws -> Files {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let openssl: String
        do {
            openssl = try MosquittoBroker.locate("openssl", extraDirectories: ["/usr/bin", "/usr/local/bin", "/opt/homebrew/bin"])
        } catch {
            throw Failure(message: "openssl not found (Debian/Ubuntu: `apt-get install openssl`)")
        }
        func path(_ name: String) -> String { "\(directory)/\(name)" }

        let files = Files(
            directory: directory,
            caCert: path("ca.crt"), caKey: path("ca.key"),
            serverCert: path("server.crt"), serverKey: path("server.key"),
            clientCert: path("client.crt"), clientKey: path("client.key"),
            wrongCACert: path("wrong-ca.crt"))

        var alternativeNames = ["IP:127.0.0.1", "DNS:localhost"]
        let hostEntry = (isIPAddress(hostname) ? "IP:" : "DNS:") + hostname
        if !alternativeNames.contains(hostEntry) {
            alternativeNames.append(hostEntry)
        }

        // A self-contained config: nothing depends on the system's openssl.cnf.
        let config = """
            [req]
            distinguished_name = dn
            prompt = no
            [dn]
            CN = unused
            [ca]
            basicConstraints = critical, CA:TRUE
            keyUsage = critical, keyCertSign, cRLSign
            subjectKeyIdentifier = hash
            [server]
            basicConstraints = critical, CA:FALSE
            keyUsage = critical, digitalSignature, keyEncipherment
            extendedKeyUsage = serverAuth
            subjectAltName = \(alternativeNames.joined(separator: ", "))
            subjectKeyIdentifier = hash
            authorityKeyIdentifier = keyid, issuer
            [client]
            basicConstraints = critical, CA:FALSE
            keyUsage = critical, digitalSignature, keyEncipherment
            extendedKeyUsage = clientAuth
            subjectKeyIdentifier = hash
            authorityKeyIdentifier = keyid, issuer

            """
        let configFile = path("openssl.cnf")
        try Data(config.utf8).write(to: URL(fileURLWithPath: configFile))

        func key(_ file: String) throws {
            try run(openssl, ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", file])
        }
        func selfSignedCA(key: String, cert: String, name: String) throws {
            try run(
                openssl,
                [
                    "req", "-new", "-x509", "-config", configFile, "-extensions", "ca", "-key", key,
                    "-subj", "/O=GroupSync tests/CN=\(name)", "-days", "3650", "-sha256", "-out", cert,
                ])
        }
        func signed(key: String, cert: String, name: String, extensions: String) throws {
            let request = cert + ".csr"
            try run(
                openssl,
                [
                    "req", "-new", "-config", configFile, "-key", key,
                    "-subj", "/O=GroupSync tests/CN=\(name)", "-out", request,
                ])
            try run(
                openssl,
                [
                    "x509", "-req", "-in", request, "-CA", files.caCert, "-CAkey", files.caKey,
                    "-set_serial", "0x" + randomHex(bytes: 16), "-days", "825", "-sha256",
                    "-extfile", configFile, "-extensions", extensions, "-out", cert,
                ])
            try? FileManager.default.removeItem(atPath: request)
        }

        try key(files.caKey)
        try selfSignedCA(key: files.caKey, cert: files.caCert, name: "GroupSync Test CA")
        try key(files.serverKey)
        try signed(key: files.serverKey, cert: files.serverCert, name: hostname, extensions: "server")
        try key(files.clientKey)
        try signed(key: files.clientKey, cert: files.clientCert, name: "groupsync-test-client", extensions: "client")

        let wrongKey = path("wrong-ca.key")
        try key(wrongKey)
        try selfSignedCA(key: wrongKey, cert: files.wrongCACert, name: "Unrelated Test CA")

        // Fail here, not in a confusing TLS handshake, if something is off.
        try run(openssl, ["verify", "-CAfile", files.caCert, "-purpose", "sslserver", files.serverCert])
        try run(openssl, ["verify", "-CAfile", files.caCert, "-purpose", "sslclient", files.clientCert])
        return files
    }

    /// A trust directory holding the test CA as the system's does (`/etc/ssl/certs`: certificates under
    /// their subject hashes, made by `openssl rehash`), for `$SSL_CERT_DIR`. Made once per PKI.
    public static func trustDirectory(for files: Files) throws -> String {
        let directory = files.directory + "/trust"
        if FileManager.default.fileExists(atPath: directory + "/ca.pem") { return directory }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: files.caCert, toPath: directory + "/ca.pem")
        let openssl = try MosquittoBroker.locate("openssl", extraDirectories: ["/usr/bin", "/usr/local/bin", "/opt/homebrew/bin"])
        try run(openssl, ["rehash", directory])
        return directory
    }

    private static func run(_ tool: String, _ arguments: [String]) throws {
        let run = try ChildProcess.run(tool, arguments)
        guard run.termination == .exited(0) else {
            let output = String(decoding: run.output, as: UTF8.self)
            throw Failure(message: "openssl \(arguments.joined(separator: " ")) \(run.termination):\n\(output)")
        }
    }

    private static func isIPAddress(_ host: String) -> Bool {
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        let isIPv4 = parts.count == 4 && parts.allSatisfy { UInt8($0) != nil }
        return isIPv4 || host.contains(":")
    }

    private static func randomHex(bytes: Int) -> String {
        // A positive serial: the top bit of the first byte is cleared.
        (0..<bytes).map { index in
            let byte = UInt8.random(in: 0...255) & (index == 0 ? 0x7F : 0xFF)
            return String(byte, radix: 16).leftPadded(to: 2)
        }.joined()
    }
}

/// A fresh test CA and certificates in a temporary folder, removed when `body` returns.
public func withTestPKI<R>(_ body: (TestPKI.Files) async throws -> R) async throws -> R {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gs-pki-\(UUID())").path
    defer { try? FileManager.default.removeItem(atPath: directory) }
    return try await body(try TestPKI.generate(in: directory))
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
