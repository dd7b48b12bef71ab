import BrokerSupport
import Foundation
import Testing

@testable import GroupSync
@testable import MQTT

/// Two mosquitto brokers joined by a mosquitto bridge (`topic groupsync/# both 1`), with participants on
/// each side: one session works across them. The configuration is the one docs/SCALING.md shows.
@Suite(.needsOwnBroker("two bridged brokers"), .timeLimit(.minutes(1))) struct BridgedBrokersTests {
    static func bridgeLines(to port: UInt16) -> [String] {
        [
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
    }

    /// Returns once the bridge is up: a message published on `b` arrives on `a`.
    static func waitForBridge(from b: MosquittoBroker, to a: MosquittoBroker) async throws {
        let probe = try MQTTClient(configuration: .init(url: a.url))
        try await probe.connect()
        let arrivals = Collector(try await probe.subscribe(to: [TopicSubscription("groupsync/probe")]))
        let sender = try MQTTClient(configuration: .init(url: b.url))
        try await sender.connect()
        try await waitUntil(timeout: .seconds(10), "bridge connected") {
            try await sender.publish(to: "groupsync/probe", string: "x")
            return arrivals.count > 0
        }
        await probe.disconnect()
        await sender.disconnect()
    }

    @Test func oneSessionWorksAcrossTwoBridgedBrokers() async throws {
        try await MosquittoBroker.withBroker { a in
            var bConfig = MosquittoBroker.Configuration()
            bConfig.extraLines = BridgedBrokersTests.bridgeLines(to: a.port)
            try await MosquittoBroker.withBroker(bConfig) { b in
                try await Self.waitForBridge(from: b, to: a)
                let onA = Group(a, name: "bridged")
                let onB = Group(b, name: "bridged")
                let alice = try await onA.join("alice")
                let bob = try await onB.join("bob")
                // Announcement crosses the bridge.
                let sessionA = try await alice.startJoined(Gallery(galleryID: "two-brokers"))
                let sessionB = try await bob.joinSession(sessionA.id, of: Gallery.self)
                try await waitUntil("presence across the bridge") {
                    ids(sessionA.activeParticipants) == ["alice", "bob"] && ids(sessionB.activeParticipants) == ["alice", "bob"]
                }
                // Messages both ways.
                let toBob = Collector(GroupSessionMessenger(session: sessionB).messages(of: Chat.self))
                let toAlice = Collector(GroupSessionMessenger(session: sessionA).messages(of: Chat.self))
                try await GroupSessionMessenger(session: sessionA).send(Chat(text: "from A"))
                try await GroupSessionMessenger(session: sessionB).send(Chat(text: "from B"), to: .only(Participant(id: "alice")))
                try await toBob.waitForCount(1)
                try await toAlice.waitForCount(1)
                #expect(toBob.elements.map(\.message.text) == ["from A"])
                #expect(toAlice.elements.map(\.message.text) == ["from B"])
                // State converges across the bridge, also for crossing writes.
                let stateA = try SharedState(sessionA, key: "index", initialValue: 0)
                let stateB = try SharedState(sessionB, key: "index", initialValue: 0)
                async let x: Void = stateA.set(1)
                async let y: Void = stateB.set(2)
                _ = try await (x, y)
                try await waitUntil("converged") { stateA.value == stateB.value && stateA.value != 0 }
                let winner = stateA.value
                // A late joiner on B is caught up from retained state and a catch-up from across the bridge.
                let carol = try await onB.join("carol")
                let sessionC = try await carol.joinSession(sessionA.id, of: Gallery.self)
                #expect(try SharedState(sessionC, key: "index", initialValue: 0).value == winner)
                try await waitUntil("carol is active everywhere") { ids(sessionA.activeParticipants) == ["alice", "bob", "carol"] }
                // A crash on B is seen on A through the bridged will.
                await bob.simulateCrash()
                try await waitUntil(timeout: timeBound(.seconds(2)), "bob's will crosses the bridge") {
                    ids(sessionA.activeParticipants) == ["alice", "carol"] && ids(sessionC.activeParticipants) == ["alice", "carol"]
                }
                await onA.closeAll()
                await onB.closeAll()
            }
        }
    }
}
