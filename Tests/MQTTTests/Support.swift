import BrokerSupport
import Foundation
// Every file of this target sees the test support (Collector, TestPKI, timeBound, …) through this import.
@_exported import GroupSyncTestSupport
import Synchronization
import Testing

@testable import MQTT

func makeClient(
    _ broker: MosquittoBroker, id: String = MQTTClient.Configuration.randomClientID(),
    _ adjust: (inout MQTTClient.Configuration) -> Void = { _ in }
) throws -> MQTTClient {
    var configuration = try MQTTClient.Configuration(url: broker.url, clientID: id)
    configuration.reconnect = Backoff(initial: .milliseconds(20), maximum: .milliseconds(500))
    adjust(&configuration)
    return try MQTTClient(configuration: configuration)
}

func connectedClient(
    _ broker: MosquittoBroker, id: String = MQTTClient.Configuration.randomClientID(),
    _ adjust: (inout MQTTClient.Configuration) -> Void = { _ in }
) async throws -> MQTTClient {
    let client = try makeClient(broker, id: id, adjust)
    try await client.connect()
    return client
}

/// A mosquitto speaking TLS with a fresh test CA and requiring a client certificate, the TLS settings of
/// a client it accepts, and the PKI's files.
func withTLSBroker(_ body: (MosquittoBroker, MQTTClient.TLS, TestPKI.Files) async throws -> Void) async throws {
    try await withTestPKI { pki in
        var config = MosquittoBroker.Configuration()
        config.tls = .init(pki, requireClientCertificate: true)
        try await MosquittoBroker.withBroker(config) { broker in
            let tls = MQTTClient.TLS(caFile: pki.caCert, certificateFile: pki.clientCert, keyFile: pki.clientKey)
            try await body(broker, tls, pki)
        }
    }
}

extension Trait where Self == ConditionTrait {
    /// Skips the test when the suite runs against an external broker (`GROUPSYNC_TEST_BROKER`, see
    /// ``ExternalBroker``): it needs a mosquitto of its own, because of `why` ("restarts it").
    static func needsOwnBroker(_ why: String) -> Self {
        .disabled(if: ExternalBroker.isConfigured, Comment(rawValue: ExternalBroker.skipReason(why)))
    }
}
