import Foundation
import Testing

@testable import BrokerSupport
@testable import MQTT

/// What `withBroker` does when `GROUPSYNC_TEST_BROKER` names a broker: here a mosquitto of the test's
/// own stands for that broker (the variable itself is process-wide, so it is not set).
@Suite(.needsOwnBroker("wraps a mosquitto of its own as the external broker"), .timeLimit(.minutes(timeLimitMinutes(1))))
struct ExternalBrokerTests {
    @Test func aURLMustNameOnePlainBroker() throws {
        let broker = try ExternalBroker(url: "mqtt://user:pw@127.0.0.1:18830")
        #expect(broker.host == "127.0.0.1" && broker.port == 18830 && broker.url == "mqtt://user:pw@127.0.0.1:18830")
        #expect(throws: MosquittoBroker.Failure.self) { try ExternalBroker(url: "mqtt://a:1883,mqtt://b:1883") }
        #expect(throws: MosquittoBroker.Failure.self) { try ExternalBroker(url: "mqtts://a:8883") }
        #expect(throws: MosquittoBroker.Failure.self) { try ExternalBroker(url: "127.0.0.1:1883") }
        #expect(ExternalBroker.skipReason("restarts it").hasSuffix(": restarts it"))
    }

    /// The body gets the external broker's URL with its credentials; a second URL keeps them.
    @Test func theBodyGetsTheExternalURL() async throws {
        try await MosquittoBroker.withBroker { own in
            let external = try ExternalBroker(url: "mqtt://someone:secret@127.0.0.1:\(own.port)")
            try await MosquittoBroker.withExternalBroker(external, .init()) { broker in
                #expect(broker.url == external.url && broker.host == "127.0.0.1" && broker.port == own.port)
                #expect(broker.url(port: 1) == "mqtt://someone:secret@127.0.0.1:1")
                let client = try MQTTClient(configuration: .init(url: broker.url))
                try await client.connect()
                await client.disconnect()
            }
        }
    }

    /// A test that needs a mosquitto of its own and lacks the trait fails, naming what it used.
    @Test func whatNeedsAProcessOfOurOwnFailsTheTestLoudly() async throws {
        try await MosquittoBroker.withBroker { own in
            let external = try ExternalBroker(url: own.url)
            await #expect {
                try await MosquittoBroker.withExternalBroker(external, .init()) { broker in
                    broker.kill()
                    _ = broker.logText
                }
            } throws: { error in
                "\(error)".contains("kill(), logText") && "\(error)".contains(".needsOwnBroker")
            }
            #expect(own.isRunning, "nothing reached the real process")
            await #expect(throws: MosquittoBroker.Failure.self) {
                try await MosquittoBroker.withExternalBroker(external, .init(retainAvailable: false)) { _ in }
            }
            await #expect(throws: MosquittoBroker.Failure.self) {
                try await MosquittoBroker.withExternalBroker(external, .init()) { _ in
                    try await MosquittoBroker.withExternalBroker(external, .init()) { _ in }
                }
            }
        }
    }

    /// What a test leaves retained under the groups it named with `unique` is gone when it is done.
    @Test func theTestsRetainedRecordsAreCleared() async throws {
        try await MosquittoBroker.withBroker { own in
            let external = try ExternalBroker(url: own.url)
            let topic = try await MosquittoBroker.withExternalBroker(external, .init()) { broker in
                let topic = "groupsync/v2/\(broker.unique("g"))/presence/alice"
                let client = try await connectedClient(broker)
                try await client.publish(to: topic, string: "here", retain: true)
                await client.disconnect()
                return topic
            }
            let probe = try await connectedClient(own)
            let seen = Collector(try await probe.subscribe(to: [TopicSubscription(topic), TopicSubscription("marker")]))
            try await probe.publish(to: "marker", string: "m")
            try await waitUntil("the marker") { seen.elements.contains { $0.topic == "marker" } }
            #expect(!seen.elements.contains { $0.topic == topic }, "nothing retained left")
            await probe.disconnect()
        }
    }
}
