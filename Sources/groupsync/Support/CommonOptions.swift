import Foundation
import GroupSync
import MQTT

/// `--broker`, `--group` and `--as`, shared by every command that talks to a broker.
struct CommonOptions {
    static let names: Set<String> = ["broker", "group", "as", "keepalive"]
    static let help = """
          --broker URL      mqtt://[user[:password]@]host[:port] (default: $GROUPSYNC_BROKER or mqtt://127.0.0.1:1883)
          --group NAME      the group, like a call everyone is in (default: default)
          --as ID           this participant's ID (default: USER@HOST, the same on every run, so that
                            a rerun takes its own place instead of leaving records behind)
          --keepalive SEC   seconds; a frozen participant vanishes after 1.5 × this (default 5)
        """

    var broker: String
    var group: String
    var participant: String
    var keepAlive: Int

    init(_ arguments: Arguments, defaultParticipant: String = CommonOptions.stableParticipant()) throws(UsageError) {
        broker = arguments.value("broker") ?? ProcessInfo.processInfo.environment["GROUPSYNC_BROKER"] ?? "mqtt://127.0.0.1:1883"
        group = arguments.value("group") ?? "default"
        participant = arguments.value("as") ?? defaultParticipant
        keepAlive = try arguments.integer("keepalive", default: 5, range: 5...65_535)
        for (kind, value) in [("group", group), ("participant", participant)] where !Identifier.isValid(value) {
            throw UsageError("invalid \(kind) '\(value)': use 1–128 characters from A–Z a–z 0–9 . _ - : @ ~")
        }
        // A URL that cannot be a broker is a usage error (exit 2), not an unreachable broker (exit 3).
        do {
            _ = try MQTTClient.Configuration(url: broker)
        } catch {
            throw UsageError("invalid --broker '\(CommonOptions.redacted(broker))': \(error)")
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

    /// Connects a coordinator, turning connection errors into one readable line (exit code 3).
    func connect() async throws(CommandFailure) -> GroupCoordinator {
        do {
            let configuration = try GroupCoordinator.Configuration(
                broker: broker, group: group, participant: participant, keepAlive: keepAlive)
            return try await GroupCoordinator.connect(configuration)
        } catch {
            throw CommonOptions.failure(error, broker: broker)
        }
    }

    /// Connects a plain MQTT client (for observers that must not appear as participants).
    func connectObserver() async throws(CommandFailure) -> MQTTClient {
        do {
            var configuration = try MQTTClient.Configuration(url: broker)
            configuration.keepAlive = keepAlive
            let client = try MQTTClient(configuration: configuration)
            try await client.connect()
            return client
        } catch {
            throw CommonOptions.failure(.connection(error), broker: broker)
        }
    }

    static func failure(_ error: GroupSyncError, broker: String) -> CommandFailure {
        if case let .connection(mqtt) = error {
            switch mqtt {
            case .unreachable:
                return CommandFailure(
                    "cannot reach the MQTT broker at \(redacted(broker)); start one with `groupsync broker` or `docker compose up`",
                    exitCode: 3)
            default:
                return CommandFailure("broker \(redacted(broker)): \(mqtt)", exitCode: 3)
            }
        }
        return CommandFailure(error.description, exitCode: 1)
    }
}
