import Foundation

extension MQTTClient {
    /// MQTT protocol version spoken on the wire.
    public enum ProtocolVersion: Sendable, Hashable {
        /// MQTT 3.1.1: no properties, no reason codes on acknowledgements.
        case v311
        /// MQTT 5 (default): properties, reason codes, no-local, session expiry.
        case v5
    }

    /// TLS settings for `mqtts://` connections.
    public struct TLS: Sendable, Hashable {
        /// PEM file of the certificate authority that signed the broker's certificate; nil: the system's
        /// trust store (OpenSSL's default: Debian's `/etc/ssl/certs`, or `$SSL_CERT_FILE` and
        /// `$SSL_CERT_DIR`), as browsers and curl check a public broker's certificate.
        public var caFile: String?
        /// PEM client certificate, when the broker requires one (with ``keyFile``).
        public var certificateFile: String?
        /// PEM private key of ``certificateFile``.
        public var keyFile: String?
        /// Check that the broker's certificate names the host connected to (default on; off only for tests).
        public var verifyHostname: Bool

        public init(caFile: String? = nil, certificateFile: String? = nil, keyFile: String? = nil, verifyHostname: Bool = true) {
            self.caFile = caFile
            self.certificateFile = certificateFile
            self.keyFile = keyFile
            self.verifyHostname = verifyHostname
        }
    }

    /// The last will: published by the broker when this client's connection ends without DISCONNECT.
    public struct Will: Sendable, Hashable {
        public var topic: String
        public var payload: [UInt8]
        public var qos: QoS
        public var retain: Bool
        /// MQTT 5 will delay interval: how long the broker waits before publishing it (0 = at once).
        public var delayInterval: UInt32
        /// MQTT 5 message expiry (seconds): a retained will is dropped by the broker this long after it
        /// was published; nil keeps it until overwritten.
        public var messageExpiry: UInt32?

        public init(
            topic: String, payload: [UInt8], qos: QoS = .atLeastOnce, retain: Bool = false, delayInterval: UInt32 = 0,
            messageExpiry: UInt32? = nil
        ) {
            self.topic = topic
            self.payload = payload
            self.qos = qos
            self.retain = retain
            self.delayInterval = delayInterval
            self.messageExpiry = messageExpiry
        }
    }

    /// One broker to connect to.
    public struct Server: Sendable, Hashable, CustomStringConvertible {
        public var host: String
        public var port: Int

        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }

        public var description: String { "\(host):\(port)" }
    }

    /// Everything needed to open and keep one broker connection.
    public struct Configuration: Sendable, Hashable {
        public var host: String
        public var port: Int
        /// Brokers to move to, in order and then round again, when the one in use fails: bridged
        /// brokers, or nodes of one cluster, that share the clients' topics. Same credentials and TLS as
        /// `host`. The first `connect()` tries each in turn before it fails; after a lost connection,
        /// every reconnect attempt goes to the next one. Empty (default): `host` only.
        public var fallbacks: [Server] = []

        /// `host:port`, then the fallbacks.
        public var servers: [Server] { [Server(host: host, port: port)] + fallbacks }
        public var username: String?
        public var password: String?
        public var tls: TLS?
        /// Client identifier; must be unique on the broker (a second connection with it takes the first over).
        public var clientID: String
        /// Keepalive in seconds (libmosquitto's minimum is 5). A silent connection is dropped by the
        /// broker after 1.5 × keepalive, and by this client after the same without a PINGRESP.
        public var keepAlive: Int
        public var protocolVersion: ProtocolVersion
        /// Start a new session on every connect (default), or resume the broker-side session.
        public var cleanStart: Bool
        /// MQTT 5 session expiry interval in seconds (nil: the session ends with the connection).
        public var sessionExpiry: UInt32?
        public var will: Will?
        /// Delays between reconnect attempts after a connection was established once.
        public var reconnect: Backoff
        /// MQTT 5 Receive Maximum: how many QoS 1 and 2 messages the broker may have in flight to us.
        /// The default, 65,535 (MQTT 5's value when none is announced), keeps a lagging QoS 2 subscriber
        /// connected: mosquitto 2.0.11 overruns smaller windows (an acknowledgement of the oldest message
        /// in flight releases up to a whole window of queued ones), and libmosquitto treats a QoS 2
        /// PUBLISH beyond its window as a protocol error and drops the connection — with a clean start,
        /// every message still queued is lost. The cost: the broker no longer paces a slow subscriber,
        /// and mosquitto 2.0.11 walks each client's in-flight list on every acknowledgement, so a
        /// process with hundreds of lagging connections can keep the broker busy for seconds. A client
        /// that never subscribes at QoS 2 may pick a small window (GroupSync's coordinators use 20).
        /// (0 is not a valid window; it is taken as 1.)
        public var receiveMaximum: UInt16 = .max
        /// Whether this client uses the broker's retained messages (default). Off, it behaves as with a
        /// broker that announces Retain Available 0: ``MQTTClient/retainAvailable`` is false and a retained
        /// publish fails with ``MQTTError/retainUnavailable``. For brokers whose retained store is not
        /// shared by every node or broker the clients use — an ejabberd cluster keeps one per node.
        public var retainedMessages = true

        public init(
            host: String = "127.0.0.1", port: Int = 1883, clientID: String = MQTTClient.Configuration.randomClientID(),
            username: String? = nil, password: String? = nil, tls: TLS? = nil, keepAlive: Int = 5,
            protocolVersion: ProtocolVersion = .v5, cleanStart: Bool = true, sessionExpiry: UInt32? = nil,
            will: Will? = nil, reconnect: Backoff = Backoff()
        ) {
            self.host = host
            self.port = port
            self.clientID = clientID
            self.username = username
            self.password = password
            self.tls = tls
            self.keepAlive = keepAlive
            self.protocolVersion = protocolVersion
            self.cleanStart = cleanStart
            self.sessionExpiry = sessionExpiry
            self.will = will
            self.reconnect = reconnect
        }

        /// Parses `mqtt://[user[:password]@]host[:port]` or `mqtts://…` (default ports 1883 and 8883).
        /// For `mqtts` the broker's certificate is checked against the system's trust store unless `tls`
        /// names a CA (and it carries the client certificate, if the broker wants one). A comma-separated
        /// list of URLs (`mqtt://a:1883,mqtt://b:1883`) names the ``fallbacks`` too: one scheme for all, and the
        /// credentials of the first (later ones may repeat them, not differ; a comma in a password is
        /// written `%2C`).
        public init(url: String, clientID: String = MQTTClient.Configuration.randomClientID(), tls: TLS? = nil) throws(MQTTError) {
            let urls = Configuration.urls(inList: url)
            try self.init(single: urls[0], clientID: clientID, tls: tls)
            for other in urls.dropFirst() {
                let fallback = try Configuration(single: other, clientID: clientID, tls: tls)
                guard (fallback.tls == nil) == (self.tls == nil) else {
                    throw .invalidConfiguration("'\(Configuration.redacted(url))' mixes mqtt:// and mqtts://")
                }
                guard fallback.username == nil || fallback.username == username, fallback.password == nil || fallback.password == password
                else {
                    throw .invalidConfiguration(
                        "'\(Configuration.redacted(url))' gives different credentials: every broker of a list takes the same")
                }
                fallbacks.append(Server(host: fallback.host, port: fallback.port))
            }
        }

        private init(single url: String, clientID: String, tls: TLS?) throws(MQTTError) {
            guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased() else {
                throw .invalidConfiguration(
                    "'\(Configuration.redacted(url))' is not a URL; expected mqtt://host[:port] or mqtts://host[:port]")
            }
            guard scheme == "mqtt" || scheme == "mqtts" else {
                throw .invalidConfiguration("unsupported scheme '\(scheme)' in '\(Configuration.redacted(url))'; use mqtt:// or mqtts://")
            }
            guard let host = components.host, !host.isEmpty else {
                throw .invalidConfiguration("'\(Configuration.redacted(url))' has no host")
            }
            if let port = components.port, !(1...65_535).contains(port) {
                throw .invalidConfiguration("'\(Configuration.redacted(url))' has port \(port): a port is 1 to 65535")
            }
            if let path = components.path.split(separator: "/").first {
                throw .invalidConfiguration("'\(Configuration.redacted(url))' has a path ('\(path)'); an MQTT URL names only host and port")
            }
            self.init(
                host: host, port: components.port ?? (scheme == "mqtts" ? 8883 : 1883), clientID: clientID,
                username: components.user?.removingPercentEncoding, password: components.password?.removingPercentEncoding,
                tls: scheme == "mqtts" ? tls ?? TLS() : nil
            )
        }

        /// The URLs of a comma-separated list, trimmed of spaces (an empty one stays, to be refused).
        public static func urls(inList list: String) -> [String] {
            list.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        }

        /// `url` with its password, if any, replaced by `***`, for messages: no password ever appears in
        /// one.
        public static func redacted(_ url: String) -> String {
            guard !url.contains(",") else { return urls(inList: url).map(redacted).joined(separator: ",") }
            guard let scheme = url.range(of: "://"), let at = url[scheme.upperBound...].lastIndex(of: "@"),
                let colon = url[scheme.upperBound..<at].firstIndex(of: ":")
            else { return url }
            return url[..<url.index(after: colon)] + "***" + url[at...]
        }

        /// A client identifier unlikely to collide: `gs-` and 20 random alphanumerics.
        public static func randomClientID() -> String {
            let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789")
            return "gs-" + String((0..<20).map { _ in alphabet.randomElement()! })
        }

        func validate() throws(MQTTError) {
            if keepAlive < 5 || keepAlive > 65_535 {
                throw .invalidConfiguration("keepAlive must be between 5 and 65535 seconds (libmosquitto's range), got \(keepAlive)")
            }
            if clientID.isEmpty || clientID.utf8.count > 65_535 {
                throw .invalidConfiguration("clientID must be 1 to 65535 bytes")
            }
            for server in servers where server.port < 1 || server.port > 65_535 {
                throw .invalidConfiguration("port \(server.port) is out of range")
            }
            if let will, !Topic.isValidName(will.topic) { throw .invalidTopic(will.topic) }
            if will?.retain == true && !retainedMessages {
                throw .invalidConfiguration("a retained will on a client that does not use retained messages")
            }
            if let tls, (tls.certificateFile == nil) != (tls.keyFile == nil) {
                throw .invalidConfiguration("a TLS client certificate needs its key file, and the other way round")
            }
            if protocolVersion == .v311 && (sessionExpiry != nil || (will?.delayInterval ?? 0) > 0) {
                throw .invalidConfiguration("session expiry and will delay need MQTT 5")
            }
        }
    }
}
