import BrokerSupport
import MQTT

/// Two brokers joined by a mosquitto bridge, for the tests and the bench.
extension MosquittoBroker.Configuration {
    /// A broker bridged to the one on `port` (127.0.0.1) as docs/SCALING.md shows: every GroupSync topic
    /// (`groupsync/#`) both ways at QoS 1, reconnecting within a second.
    public static func bridged(to port: UInt16) -> MosquittoBroker.Configuration {
        var configuration = MosquittoBroker.Configuration()
        configuration.extraLines = [
            "connection groupsync-bridge",
            "address 127.0.0.1:\(port)",
            "topic groupsync/# both 1",
            "bridge_protocol_version mqttv50",
            "cleansession true",
            "try_private true",
            "start_type automatic",
            "restart_timeout 1",
            "keepalive_interval 5",
        ]
        return configuration
    }
}

extension MosquittoBroker {
    /// Returns once the bridge between this broker and `other` is up: a message published here arrives
    /// there (within ten seconds, else throws).
    public func waitForBridge(to other: MosquittoBroker) async throws {
        let probe = try MQTTClient(configuration: .init(url: other.url))
        try await probe.connect()
        let arrivals = Collector(try await probe.subscribe(to: [TopicSubscription("groupsync/probe")]))
        let sender = try MQTTClient(configuration: .init(url: url))
        try await sender.connect()
        try await waitUntil(timeout: .seconds(10), "bridge connected") {
            try await sender.publish(to: "groupsync/probe", string: "x")
            return arrivals.count > 0
        }
        arrivals.cancel()
        await probe.disconnect()
        await sender.disconnect()
    }
}

extension MosquittoBroker {
    /// Starts a broker and a second one bridged to it, waits for the bridge, runs `body` with
    /// (first, bridged) and stops both, also when `body` throws.
    ///
    /// With `GROUPSYNC_TEST_BROKER=URL1,URL2` (two nodes of a cluster, see
    /// ``ExternalBroker/isPairConfigured``) it starts nothing and runs `body` with values standing for
    /// the two; with one external broker it throws (a test that needs two is skipped there).
    public static func withBridgedBrokers<R>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: (_ first: MosquittoBroker, _ bridged: MosquittoBroker) async throws -> R
    ) async throws -> R {
        if ExternalBroker.isConfigured {
            guard let second = try ExternalBroker.secondFromEnvironment() else {
                throw Failure(
                    "two brokers were asked for while \(ExternalBroker.environmentVariable) names one: give the test the "
                        + "trait that skips it there, or name two brokers that share the group's topics as URL1,URL2")
            }
            return try await withBroker { first in
                let other = MosquittoBroker(external: second)
                do {
                    let result = try await body(first, other)
                    await other.clearRetainedRecords()
                    return result
                } catch {
                    await other.clearRetainedRecords()
                    throw error
                }
            }
        }
        return try await withBroker { first in
            try await withBroker(.bridged(to: first.port)) { bridged in
                try await bridged.waitForBridge(to: first)
                return try await body(first, bridged)
            }
        }
    }
}
