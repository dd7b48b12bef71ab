import Foundation

extension MosquittoBroker {
    /// How to configure a test broker. Every broker listens on 127.0.0.1 only.
    ///
    /// The generated `mosquitto.conf` always contains `set_tcp_nodelay true`,
    /// `max_keepalive 65535`, `log_dest stderr` (captured into `broker.log` in
    /// the broker's directory, see ``MosquittoBroker/logText``) and
    /// `log_type` error, warning, notice (connections and disconnections) and
    /// information (startup and shutdown).
    public struct Configuration: Sendable, Equatable {
        /// TLS settings for the main listener.
        public struct TLSListener: Sendable, Hashable {
            /// PEM file with the CA certificate(s) that client certificates must chain to.
            public var caFile: String
            /// PEM file with the broker's certificate.
            public var certFile: String
            /// PEM file with the broker's private key.
            public var keyFile: String
            /// Whether clients must present a certificate signed by `caFile`
            /// (`require_certificate true`).
            public var requireClientCertificate: Bool

            /// TLS for the main listener with the given PEM files.
            public init(caFile: String, certFile: String, keyFile: String, requireClientCertificate: Bool = false) {
                self.caFile = caFile
                self.certFile = certFile
                self.keyFile = keyFile
                self.requireClientCertificate = requireClientCertificate
            }
        }

        /// Port of the main (MQTT over TCP, or TLS) listener; `nil` picks a free loopback port.
        public var port: UInt16?
        /// Port of an MQTT-over-WebSockets listener; `nil` means no such listener.
        public var websocketsPort: UInt16?
        /// Username → password. Non-empty: a password file is generated and
        /// `allow_anonymous false` is set. Empty: `allow_anonymous true`.
        public var users: [String: String]
        /// Text of an ACL file (`user`, `topic`, `pattern` lines) to write and
        /// reference with `acl_file`. With an ACL, anonymous clients only get
        /// what the ACL's lines before any `user` line grant.
        public var acl: String?
        /// When set, the main listener speaks TLS (and ``MosquittoBroker/url`` is `mqtts://`).
        public var tls: TLSListener?
        /// `false` writes `retain_available false`. Mosquitto 2.0.11 then
        /// announces "retain not available" in its MQTT 5 CONNACK (libmosquitto
        /// v5 clients then clear the retain flag themselves and the publish is
        /// delivered as a normal one) and drops MQTT 3.1.1 connections that
        /// publish with the retain flag (logged as "Bad socket read/write on
        /// client …"). Nothing is ever retained.
        public var retainAvailable: Bool
        /// When mosquitto writes its persistence database besides a graceful stop.
        public enum Autosave: Sendable, Hashable {
            /// Leaves `autosave_interval` out: mosquitto's default, every 1800 s.
            case mosquittoDefault
            /// `autosave_interval 0`: only at a graceful stop, so a crash loses
            /// every change since the broker started.
            case atShutdownOnly
            /// `autosave_interval N`: every `N` + 1 seconds or so (mosquitto
            /// saves once more than `N` whole seconds have passed since the last
            /// save).
            case every(seconds: Int)
            /// `autosave_on_changes true` with `autosave_interval N`: once `N`
            /// changes have accumulated. Mosquitto 2.0 counts SUBSCRIBE and
            /// UNSUBSCRIBE packets, connections without clean start, retained
            /// messages stored, messages queued for a client (offline or past its
            /// in-flight window) and every QoS 1/2 delivery its subscriber
            /// acknowledged; QoS 0 deliveries do not count. Under steady reliable
            /// traffic it therefore saves about every `N` acknowledged deliveries.
            case afterChanges(Int)
        }

        /// `true` writes `persistence true` with `persistence_location` in the
        /// broker's directory. Mosquitto saves its database on a graceful stop
        /// (``MosquittoBroker/stop()``, the test support's
        /// `restart(after: .graceful)`) and as ``autosave`` says, never on a
        /// crash (``MosquittoBroker/kill()``, `restart(after: .crash)`): what
        /// changed since the last save is then lost.
        public var persistence: Bool
        /// When the persistence database is saved besides a graceful stop;
        /// ignored without ``persistence``.
        public var autosave: Autosave
        /// Lines appended verbatim at the end of the file, after the main
        /// listener's block: listener-scoped keys apply to the main listener.
        public var extraLines: [String]

        /// A configuration; the defaults give an anonymous, plain-TCP broker on a free port.
        public init(
            port: UInt16? = nil,
            websocketsPort: UInt16? = nil,
            users: [String: String] = [:],
            acl: String? = nil,
            tls: TLSListener? = nil,
            retainAvailable: Bool = true,
            persistence: Bool = false,
            autosave: Autosave = .mosquittoDefault,
            extraLines: [String] = []
        ) {
            self.port = port
            self.websocketsPort = websocketsPort
            self.users = users
            self.acl = acl
            self.tls = tls
            self.retainAvailable = retainAvailable
            self.persistence = persistence
            self.autosave = autosave
            self.extraLines = extraLines
        }

        /// The text of `mosquitto.conf` for a broker whose main listener is on
        /// `port` and whose files live in `directory`.
        func render(port: UInt16, directory: String) -> String {
            var lines: [String] = [
                "# Generated by BrokerSupport for a test broker; see MosquittoBroker+Configuration.swift.",
                // Keep allow_anonymous, password_file and acl_file global.
                "per_listener_settings false",
                // Started as root, mosquitto 2 switches to the `mosquitto` user, which
                // cannot read this private temp directory nor write the persistence file.
                // "root" disables the switch (the option is ignored when not started as root).
                "user root",
                "set_tcp_nodelay true",
                "max_keepalive 65535",
                "log_dest stderr",
                "log_type error",
                "log_type warning",
                "log_type notice",
                "log_type information",
                "log_timestamp true",
                "log_timestamp_format %Y-%m-%dT%H:%M:%S",
            ]
            if !retainAvailable {
                lines.append("retain_available false")
            }
            if persistence {
                lines.append("persistence true")
                lines.append("persistence_location \(directory)/data/")
                switch autosave {
                case .mosquittoDefault:
                    break
                case .atShutdownOnly:
                    lines.append("autosave_interval 0")
                case .every(let seconds):
                    lines.append("autosave_interval \(seconds)")
                case .afterChanges(let changes):
                    lines.append("autosave_on_changes true")
                    lines.append("autosave_interval \(changes)")
                }
            } else {
                lines.append("persistence false")
            }
            if users.isEmpty {
                lines.append("allow_anonymous true")
            } else {
                lines.append("allow_anonymous false")
                lines.append("password_file \(directory)/passwords")
            }
            if acl != nil {
                lines.append("acl_file \(directory)/acl")
            }
            if let websocketsPort {
                lines.append("")
                lines.append("listener \(websocketsPort) 127.0.0.1")
                lines.append("protocol websockets")
            }
            lines.append("")
            lines.append("listener \(port) 127.0.0.1")
            lines.append("protocol mqtt")
            if let tls {
                lines.append("cafile \(tls.caFile)")
                lines.append("certfile \(tls.certFile)")
                lines.append("keyfile \(tls.keyFile)")
                lines.append("require_certificate \(tls.requireClientCertificate)")
            }
            if !extraLines.isEmpty {
                lines.append("")
                lines.append(contentsOf: extraLines)
            }
            return lines.joined(separator: "\n") + "\n"
        }

        /// Writes the password and ACL files into `directory`: everything but
        /// `mosquitto.conf` itself, which depends on the port.
        func writeSupportFiles(in directory: String) throws {
            if persistence {
                try FileManager.default.createDirectory(
                    atPath: "\(directory)/data", withIntermediateDirectories: true)
            }
            if let acl {
                try Data(acl.utf8).write(to: URL(fileURLWithPath: "\(directory)/acl"))
            }
            guard !users.isEmpty else { return }

            // Plain `user:password` lines, then `mosquitto_passwd -U` hashes them in place.
            var plain = ""
            for (user, password) in users.sorted(by: { $0.key < $1.key }) {
                guard !user.isEmpty, !user.contains(":"), !user.contains(where: \.isNewline),
                    !password.contains(where: \.isNewline)
                else {
                    throw MosquittoBroker.Failure(
                        "invalid user \(user.debugDescription): names must be non-empty without ':' or "
                            + "newlines, passwords without newlines")
                }
                plain += "\(user):\(password)\n"
            }
            let path = "\(directory)/passwords"
            try Data(plain.utf8).write(to: URL(fileURLWithPath: path))
            _ = chmod(path, 0o600)

            let tool = try MosquittoBroker.locate(
                "mosquitto_passwd",
                extraDirectories: ["/usr/bin", "/usr/local/bin", "/opt/homebrew/bin"])
            let log = "\(directory)/mosquitto_passwd.log"
            let pid = try Spawn.process(
                tool, ["-U", path], stdin: .nullDevice, stdout: .appending(toFile: log), stderr: .standardOutput,
                newProcessGroup: false)
            var status: Int32 = 0
            while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
            guard status == 0 else {
                throw MosquittoBroker.Failure(
                    "mosquitto_passwd -U \(path) ended with \(MosquittoBroker.describe(status))",
                    log: (try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
            }
        }
    }
}
