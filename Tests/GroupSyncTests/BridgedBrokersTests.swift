import BrokerSupport
import Foundation
import Testing

@testable import GroupSync
@testable import MQTT

/// Two mosquitto brokers joined by a mosquitto bridge (`topic groupsync/# both 1`), with participants on
/// each side: one session works across them. The configuration is the one docs/SCALING.md shows.
@Suite(.needsOwnBroker("two bridged brokers"), .timeLimit(.minutes(timeLimitMinutes(1)))) struct BridgedBrokersTests {
    @Test func oneSessionWorksAcrossTwoBridgedBrokers() async throws {
        try await MosquittoBroker.withBridgedBrokers { a, b in
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
