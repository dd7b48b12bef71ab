import Foundation
import MQTT

/// A broker someone else started, named by the environment variable `GROUPSYNC_TEST_BROKER`
/// (`mqtt://[user:password@]host:port`), that the tests' `withBroker` (GroupSyncTestSupport, which
/// reads the variable) hands out instead of starting a mosquitto of its own.
///
/// Only a broker with the default ``MosquittoBroker/Configuration`` can be replaced, and only what
/// any MQTT broker offers is available on it: ``MosquittoBroker/url`` (with the credentials),
/// ``MosquittoBroker/host`` and ``MosquittoBroker/port``. Whatever needs the broker's process or files
/// (stopping, killing, freezing or restarting it, its PID, log or configuration file) is refused
/// loudly: `withBroker` then fails the test with a ``MosquittoBroker/Failure`` naming the operation.
/// A test that needs a broker of its own says so with a condition trait built on ``isConfigured`` and
/// ``skipReason(_:)``, so that it is skipped with that reason.
public struct ExternalBroker: Sendable, Hashable {
    /// The environment variable naming the external broker.
    public static let environmentVariable = "GROUPSYNC_TEST_BROKER"

    /// The URL as given, credentials included: clients are built from it.
    public let url: String
    /// The host part of ``url``.
    public let host: String
    /// The port of ``url`` (1883 when it names none).
    public let port: UInt16

    /// Parses `url`, which must be one `mqtt://` URL (TLS would need the broker's CA, which the tests
    /// do not have).
    public init(url: String) throws {
        let parsed: MQTTClient.Configuration
        do {
            parsed = try MQTTClient.Configuration(url: url)
        } catch {
            throw MosquittoBroker.Failure("\(Self.environmentVariable): \(error)")
        }
        guard parsed.fallbacks.isEmpty, parsed.tls == nil, let port = UInt16(exactly: parsed.port) else {
            throw MosquittoBroker.Failure(
                "\(Self.environmentVariable) must name one broker as mqtt://[user:password@]host:port, "
                    + "not '\(MQTTClient.Configuration.redacted(url))'")
        }
        self.url = url
        self.host = parsed.host
        self.port = port
    }

    /// The reason a test that needs a mosquitto of its own gives for being skipped against an
    /// external broker: `why` says what the test does with its broker ("restarts it").
    public static func skipReason(_ why: String) -> String {
        "needs a mosquitto of its own, not the external broker of \(environmentVariable): \(why)"
    }
}
