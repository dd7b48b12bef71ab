import BrokerSupport
import Foundation
import Synchronization
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

/// A fresh test CA and certificates, in a temporary folder removed afterwards.
func withTestPKI(_ body: (TestPKI.Files) async throws -> Void) async throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gs-pki-\(UUID())").path
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    try await body(try TestPKI.generate(in: directory))
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
