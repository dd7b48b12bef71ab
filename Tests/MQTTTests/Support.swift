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
