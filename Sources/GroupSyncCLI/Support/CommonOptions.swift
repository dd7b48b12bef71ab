import Foundation
import GroupSync
import MQTT

/// `--broker`, `--group`, `--as` and the broker's credentials, shared by every command that talks to a
/// broker.
struct CommonOptions {
    static let names: Set<String> = ["broker", "group", "as", "keepalive", "cafile", "cert", "key", "password-file", "secret-file"]
    /// The flags of commands that connect a participant (`join`, `bridge`, `end`).
    static let participantFlags: Set<String> = ["no-retain"]
    static let participantHelp = """
          --no-retain       use no retained messages: sessions are found and joined through the
                            participants' welcomes and catch-ups, as on a broker without them. For
                            clusters whose nodes do not share their retained store (ejabberd)
        """
    /// `--no-retain` of the observers (`sessions`, `watch`, `dashboard`).
    static let observerHelp = """
          --no-retain       the group uses no retained messages (its participants run with --no-retain,
                            or the broker keeps none): ask the participants online to welcome this
                            observer with what they know, without appearing as a participant
        """
    static let help = """
          --broker URL      mqtt://[user[:password]@]host[:port], or mqtts:// for TLS
                            (default: $GROUPSYNC_BROKER or mqtt://127.0.0.1:1883). Repeat it, or give
                            a comma list, for brokers that share the group's topics (bridged, or nodes
                            of a cluster): when one fails, the participant moves to the next
          --password-file F the password, from the first line of F (else $GROUPSYNC_PASSWORD; a password
                            in the URL wins). No password is ever printed
          --cafile F        mqtts: the CA certificate the broker's is checked against ($GROUPSYNC_CAFILE;
                            default: the system's trust store, /etc/ssl/certs)
          --cert F, --key F mqtts: a client certificate and its key, for brokers that require one
                            ($GROUPSYNC_CERT, $GROUPSYNC_KEY)
          --secret-file F   the group's keys, which make its sessions private (sealed end to end): one
                            per line, `ID BASE64` of 32 random bytes (make one with
                            echo "k1 $(openssl rand -base64 32)" > F); the first seals, every one
                            opens. Else $GROUPSYNC_SECRET, the same text. No key is ever printed
          --group NAME      the group, like a call everyone is in (default: default)
          --as ID           this participant's ID (default: USER@HOST, the same on every run, so that
                            a rerun takes its own place instead of leaving records behind)
          --keepalive SEC   seconds; a frozen participant vanishes after 1.5 × this (default 5)
        """

    var broker: String
    var group: String
    var participant: String
    var keepAlive: Int
    /// For mqtts:// URLs.
    var tls: MQTTClient.TLS?
    /// When the URL has none.
    var password: String?
    /// False with `--no-retain`.
    var retainedMessages: Bool
    /// The group's keys (`--secret-file`, `GROUPSYNC_SECRET`): its sessions are private.
    var keyring: GroupKeyring?

    /// The options in `arguments`.
    init(_ arguments: Arguments, defaultParticipant: String = CommonOptions.stableParticipant()) throws(UsageError) {
        let brokers = arguments.allValues("broker")
        broker =
            !brokers.isEmpty
            ? brokers.joined(separator: ",") : ProcessInfo.processInfo.environment["GROUPSYNC_BROKER"] ?? "mqtt://127.0.0.1:1883"
        group = arguments.value("group") ?? "default"
        participant = arguments.value("as") ?? defaultParticipant
        keepAlive = try arguments.integer("keepalive", default: 5, range: 5...65_535)
        retainedMessages = !arguments.has("no-retain")
        for (kind, value) in [("group", group), ("participant", participant)] where !Identifier.isValid(value) {
            throw UsageError("invalid \(kind) '\(value)': use 1–128 characters from A–Z a–z 0–9 . _ - : @ ~")
        }
        let environment = ProcessInfo.processInfo.environment
        let caFile = arguments.value("cafile") ?? environment["GROUPSYNC_CAFILE"]
        let certificate = arguments.value("cert") ?? environment["GROUPSYNC_CERT"]
        let key = arguments.value("key") ?? environment["GROUPSYNC_KEY"]
        guard (certificate == nil) == (key == nil) else {
            throw UsageError("a client certificate needs its key: give both --cert and --key (or $GROUPSYNC_CERT and $GROUPSYNC_KEY)")
        }
        for (option, file) in [("cafile", caFile), ("cert", certificate), ("key", key)] {
            guard let file, !FileManager.default.isReadableFile(atPath: file) else { continue }
            throw UsageError("cannot read --\(option) '\(file)'")
        }
        // Without --cafile an mqtts:// broker's certificate is checked against the system's trust store.
        if caFile != nil || certificate != nil { tls = MQTTClient.TLS(caFile: caFile, certificateFile: certificate, keyFile: key) }
        if let flag = ["cafile", "cert", "key"].first(where: { arguments.value($0) != nil }),
            !MQTTClient.Configuration.urls(inList: broker).allSatisfy({ $0.lowercased().hasPrefix("mqtts://") })
        {
            throw UsageError("--\(flag) is for mqtts:// brokers; --broker '\(CommonOptions.redacted(broker))' is not one")
        }
        if let file = arguments.value("password-file") {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
                throw UsageError("cannot read --password-file '\(file)'")
            }
            password = text.split(separator: "\n", omittingEmptySubsequences: false).first.map(String.init) ?? ""
        } else {
            password = environment["GROUPSYNC_PASSWORD"]
        }
        if let file = arguments.value("secret-file") {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
                throw UsageError("cannot read --secret-file '\(file)'")
            }
            keyring = try Self.keyring(text, from: "--secret-file '\(file)'")
        } else if let text = environment["GROUPSYNC_SECRET"] {
            keyring = try Self.keyring(text, from: "$GROUPSYNC_SECRET")
        }
        // A URL that cannot be a broker is a usage error (exit 2), not an unreachable broker (exit 3).
        do {
            _ = try mqttConfiguration()
        } catch {
            guard case let .invalidConfiguration(detail) = error else { throw UsageError("invalid --broker: \(error)") }
            throw UsageError("invalid --broker: \(detail)")
        }
    }

    /// The connection this options describe: URL, TLS files and password.
    func mqttConfiguration() throws(MQTTError) -> MQTTClient.Configuration {
        var configuration = try MQTTClient.Configuration(url: broker, tls: tls)
        if configuration.password == nil, let password { configuration.password = password }
        configuration.keepAlive = keepAlive
        configuration.retainedMessages = retainedMessages
        return configuration
    }

    /// The participant this options describe.
    func coordinatorConfiguration() throws(GroupSyncError) -> GroupCoordinator.Configuration {
        var configuration = try GroupCoordinator.Configuration(
            broker: broker, group: group, participant: participant, tls: tls, keepAlive: keepAlive)
        if configuration.mqtt.password == nil, let password { configuration.mqtt.password = password }
        configuration.mqtt.retainedMessages = retainedMessages
        configuration.keyring = keyring
        return configuration
    }

    /// The keys of `text`: one per line, `ID BASE64`; blank lines and lines starting with `#` are skipped.
    /// A usage error names `source` and the line, never the key.
    static func keyring(_ text: String, from source: String) throws(UsageError) -> GroupKeyring {
        var keys: [GroupKey] = []
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let words = line.split(whereSeparator: \.isWhitespace)
            guard let first = words.first, !first.hasPrefix("#") else { continue }
            guard words.count == 2 else { throw UsageError("\(source), line \(index + 1): expected `ID BASE64`") }
            do {
                keys.append(try GroupKey(id: String(words[0]), base64: String(words[1])))
            } catch {
                throw UsageError("\(source), line \(index + 1): \(error)")
            }
        }
        do {
            return try GroupKeyring(keys)
        } catch {
            throw UsageError("\(source): \(error)")
        }
    }

    /// `USER@HOST` (with `suffix`), made an identifier: characters outside A–Z a–z 0–9 . _ - : @ ~
    /// become `-`, at most 128. The same on every run, so a rerun replaces the earlier process's records.
    static func stableParticipant(suffix: String = "") -> String {
        let user = ProcessInfo.processInfo.environment["USER"] ?? ProcessInfo.processInfo.userName
        let host = ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "host"
        let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-:@~")
        let id = String("\(user.isEmpty ? "user" : user)@\(host)\(suffix)".map { allowed.contains($0) ? $0 : "-" }.prefix(128))
        return Identifier.isValid(id) ? id : "user@host\(suffix)"
    }

    /// `url` with its password, if any, replaced by `***`: no password ever appears in a message.
    static func redacted(_ url: String) -> String {
        MQTTClient.Configuration.redacted(url)
    }

    /// What a race that gave up on ``connect()`` does with a coordinator connected all the same.
    static let close: @Sendable (GroupCoordinator) async -> Void = { await $0.close() }
    /// What a race that gave up on ``connectObserver(will:)`` does with a client connected all the same.
    static let disconnect: @Sendable (MQTTClient) async -> Void = { await $0.disconnect() }

    /// Connects a coordinator, turning connection errors into one readable line (exit code 3).
    /// Cancelled (a race given up, see ``Interruption/race(timeout:waitingFor:discard:_:)``), it stops
    /// connecting and leaves nothing connected (``GroupCoordinator/connect(_:)``).
    ///
    /// `reportingRejections` is called for every message the participant rejects, in addition to (not
    /// instead of) the log that `GROUPSYNC_LOG_REJECTED` turns on.
    func connect(
        reportingRejections report: (@Sendable (_ topic: String, _ payloadSize: Int) -> Void)? = nil
    ) async throws(CommandFailure) -> GroupCoordinator {
        do {
            var configuration = try coordinatorConfiguration()
            if let report {
                let log = configuration.onRejected
                configuration.onRejected = { topic, size in
                    log?(topic, size)
                    report(topic, size)
                }
            }
            // A broker that takes the connection but does not answer is tried again until the command's
            // --timeout (the race every caller puts around this call) gives up.
            while true {
                do {
                    return try await GroupCoordinator.connect(configuration)
                } catch .connection(.noAnswer) where !Task.isCancelled {
                    continue
                }
            }
        } catch {
            throw CommonOptions.failure(error, broker: broker)
        }
    }

    /// Connects a plain MQTT client (for observers that must not appear as participants), with `will` if
    /// given. Cancelled, it behaves as ``connect()``.
    func connectObserver(will: MQTTClient.Will? = nil) async throws(CommandFailure) -> MQTTClient {
        var client: MQTTClient
        do {
            var configuration = try mqttConfiguration()
            // `--no-retain` says what the group's participants do; what an observer publishes of its own
            // (a dashboard's retained topics and will) is not theirs.
            configuration.retainedMessages = true
            if let will { configuration.will = will }
            while true {  // as in ``connect(reportingRejections:)``
                client = try MQTTClient(configuration: configuration)
                do {
                    try await client.connect()
                    break
                } catch .noAnswer where !Task.isCancelled {
                    continue
                }
            }
        } catch {
            throw CommonOptions.failure(.connection(error), broker: broker)
        }
        if Task.isCancelled {
            await client.disconnect()
            throw CommandFailure("cancelled while connecting to \(CommonOptions.redacted(broker))")
        }
        return client
    }

    /// A connection error in the CLI's words (exit code 3): nothing listens, the TLS handshake failed (with
    /// a hint when the port is the other scheme's), the login was refused, or the broker is unreachable.
    static func failure(_ error: GroupSyncError, broker: String) -> CommandFailure {
        guard case let .connection(mqtt) = error else { return CommandFailure(error.description, exitCode: 1) }
        let url = redacted(broker)
        let tls = broker.hasPrefix("mqtts://")
        let message: String
        switch mqtt {
        case let .unreachable(host, port, detail) where detail == String(cString: strerror(ECONNREFUSED)):
            let at = url.contains(",") ? "\(host):\(port), the last of \(url)" : url
            message = "nothing listens at \(at) (connection refused): start a broker (`groupsync broker`) or check --broker"
        case let .unreachable(host, _, detail) where detail == "host name lookup failed":
            message = "cannot find the host \(host) of --broker (\(detail)); check the URL"
        case let .unreachable(host, port, detail):
            let hint = !tls && port == 8883 ? ": port 8883 is MQTT over TLS's, which needs mqtts://" : ""
            message = "\(host):\(port) closed the connection before answering (\(detail))\(hint)"
        case let .noAnswer(host, port, seconds):
            message = "\(host):\(port) took the connection but sent no answer within \(seconds) s; is it an MQTT broker?"
        case let .tls(detail):
            let plain = (try? MQTTClient.Configuration(url: broker).servers.contains { $0.port == 1883 }) == true
            message =
                "TLS handshake with \(url) failed (\(detail)): "
                + (plain
                    ? "port 1883 is plain MQTT's, which needs mqtt://"
                    : "check --cafile (or the system's trust store), the client certificate and the host name, "
                        + "or use mqtt:// for a broker that speaks plain MQTT")
        case let .connectionRefused(code, reason):
            message = "the broker at \(url) refused the login: \(reason) (reason code \(code)); check the user, the password and its ACL"
        default:
            message = "broker \(url): \(mqtt)"
        }
        return CommandFailure(message, exitCode: 3)
    }
}
