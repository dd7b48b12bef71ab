import BrokerSupport
import Foundation
import Synchronization
@testable import MQTT

func makeClient(
    _ broker: MosquittoBroker, id: String = MQTTClient.Configuration.randomClientID(),
    wake: WakeChannel.Source = .libraryPairIfVerified,
    _ adjust: (inout MQTTClient.Configuration) -> Void = { _ in }
) throws -> MQTTClient {
    var configuration = try MQTTClient.Configuration(url: broker.url, clientID: id)
    configuration.reconnect = Backoff(initial: .milliseconds(20), maximum: .milliseconds(500))
    adjust(&configuration)
    return try MQTTClient(configuration: configuration, wakeSource: wake)
}

func connectedClient(
    _ broker: MosquittoBroker, id: String = MQTTClient.Configuration.randomClientID(),
    wake: WakeChannel.Source = .libraryPairIfVerified,
    _ adjust: (inout MQTTClient.Configuration) -> Void = { _ in }
) async throws -> MQTTClient {
    let client = try makeClient(broker, id: id, wake: wake, adjust)
    try await client.connect()
    return client
}

/// Unread bytes waiting in `descriptor` (a socket or a pipe).
func unreadBytes(_ descriptor: Int32) -> Int32 {
    var count: Int32 = -1
    _ = ioctl(descriptor, UInt(FIONREAD), &count)
    return count
}
