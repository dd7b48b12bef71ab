import BrokerSupport
import Foundation
import Testing

@testable import GroupSync
@testable import MQTT

/// A participant given a list of brokers that share the group's topics (two mosquittos joined by a
/// bridge, as docs/SCALING.md shows) moves to the next one when its broker dies, keeping its identity,
/// its epoch and its sessions; reliable delivery stays end to end.
@Suite(.needsOwnBroker("two bridged brokers, one of them killed or cut off"), .timeLimit(.minutes(timeLimitMinutes(1))))
struct FailoverTests {
    typealias Numbered = ReliabilityTests.Numbered
    typealias Arrivals = BrokerCrashTests.Arrivals

    /// Two bridged brokers; alice is on the first with the second as her fallback, bob on the second.
    /// While both send numbered reliable messages to everyone, the first broker is killed (SIGKILL): alice
    /// moves within the reconnect backoff, bob never sees her leave, and every message whose `send`
    /// returned arrives once, in order. Also without retained messages (the mode for clusters whose nodes
    /// keep separate retained stores), where the peer learnt of alice from a catch-up, not her record.
    @Test(arguments: [true, false])
    func aParticipantMovesToTheNextBrokerWhenItsBrokerIsKilled(retainedMessages: Bool) async throws {
        try await MosquittoBroker.withBridgedBrokers { survivor, doomed in
            let fallback = MQTTClient.Server(host: "127.0.0.1", port: Int(survivor.port))
            let onDoomed = Group(doomed, name: "failover")
            let onSurvivor = Group(survivor, name: "failover")
            defer { Task { await onSurvivor.closeAll() } }
            let alice = try await onDoomed.join("alice") {
                $0.mqtt.fallbacks = [fallback]
                $0.mqtt.reconnect = Backoff()  // the default, as a user has it
                $0.mqtt.retainedMessages = retainedMessages
            }
            let bob = try await onSurvivor.join("bob") { $0.mqtt.retainedMessages = retainedMessages }
            let sessionA = try await alice.startJoined(Gallery(galleryID: "failover"))
            let sessionB = try await bob.joinSession(sessionA.id, of: Gallery.self)
            try await waitUntil("both active on both sides") {
                [sessionA, sessionB].allSatisfy { ids($0.activeParticipants) == ["alice", "bob"] }
            }
            let bobsView = Collector(sessionB.activeParticipantUpdates())
            let events = Collector(alice.client.events())
            defer {
                bobsView.cancel()
                events.cancel()
            }

            let sessions = [sessionA, sessionB]
            let names = ["alice", "bob"]
            let arrivals = sessions.map { Arrivals(GroupSessionMessenger(session: $0).messages(of: Numbered.self)) }
            let stop = ReliabilityTests.Flag()
            defer { stop.set() }
            let pace = LockedValue([String: Int]())
            let senders = sessions.enumerated().map { index, session in
                BrokerCrashTests.send(as: names[index], in: session, to: [arrivals[1 - index]], pacedBy: pace, until: stop)
            }
            @Sendable func flows(_ what: String) async throws {
                let before = [arrivals[1].count(from: "alice"), arrivals[0].count(from: "bob")]
                try await waitUntil(timeout: timeBound(.seconds(10)), pollEvery: .milliseconds(10), "traffic flows \(what)") {
                    arrivals[1].count(from: "alice") >= before[0] + 30 && arrivals[0].count(from: "bob") >= before[1] + 30
                }
            }

            try await flows("before the kill")
            let killed = ContinuousClock.now
            doomed.kill()
            try await waitUntil(timeout: .seconds(5), "alice on the second broker") {
                events.elements.contains { $0 == .connected(to: fallback, sessionPresent: false) }
            }
            let moved = ContinuousClock.now - killed
            try await flows("after the move")
            stop.set()
            var stopped: [BrokerCrashTests.Sent] = []
            for sender in senders { stopped.append(try await withTimeLimit(.seconds(15), "a sender stops") { await sender.value }) }
            let sent = stopped
            try? await waitUntil(timeout: .seconds(5), pollEvery: .milliseconds(20), "every sent message arrives") {
                sent[0].delivered.isSubset(of: arrivals[1].numbers(from: "alice"))
                    && sent[1].delivered.isSubset(of: arrivals[0].numbers(from: "bob"))
            }
            let deliveries = [
                BrokerCrashTests.Delivery(
                    receiver: "bob", sender: "alice", sent: sent[0].delivered, received: arrivals[1].numbers(from: "alice")),
                BrokerCrashTests.Delivery(
                    receiver: "alice", sender: "bob", sent: sent[1].delivered, received: arrivals[0].numbers(from: "bob")),
            ]
            #expect(deliveries.allSatisfy { $0.lost == 0 && $0.duplicated == 0 && $0.reordered == 0 }, "\(deliveries)")
            #expect(sent.allSatisfy { $0.failed.isEmpty }, "\(sent.map(\.failed))")
            #expect(sessions.allSatisfy { $0.state == .joined })

            // Within the frozen-participant bound (1.5 × keepalive): bob never saw alice leave.
            #expect(moved < .seconds(5), "moved in \(moved)")
            #expect(bobsView.elements.allSatisfy { ids($0).contains("alice") }, "\(bobsView.elements)")
            // Same identity and epoch: her presence on the second broker is the one she had.
            if retainedMessages {
                let (raw, presences) = try await rawSubscriber(survivor, onSurvivor.coordinators[0].topics.presence("alice"))
                try await presences.waitForCount(1)
                let presence = try JSONSerialization.jsonObject(with: Data(presences.elements[0].payload)) as? [String: Any]
                #expect(presence?["status"] as? String == "online" && (presence?["epoch"] as? NSNumber)?.int64Value == alice.epoch)
                await raw.disconnect()
            }
            // A newcomer to the second broker finds her in the session.
            let carol = try await onSurvivor.join("carol") { $0.mqtt.retainedMessages = retainedMessages }
            let sessionC = try await carol.joinSession(sessionA.id, of: Gallery.self)
            try await waitUntil("carol sees alice") { ids(sessionC.activeParticipants) == ["alice", "bob", "carol"] }
            await alice.close()
        }
    }

    /// When only the participant's connection breaks, its old broker is alive and publishes its will: the
    /// peers mark it lost, and it is back for everyone once its presence comes from the next broker —
    /// whichever of the two arrives first.
    @Test func aParticipantWhoseConnectionBreaksMovesAndIsBackForEveryone() async throws {
        try await MosquittoBroker.withBridgedBrokers { second, first in
            let onFirst = Group(first, name: "moves")
            let onSecond = Group(second, name: "moves")
            defer {
                Task {
                    await onFirst.closeAll()
                    await onSecond.closeAll()
                }
            }
            let alice = try await onFirst.join("alice") { $0.mqtt.fallbacks = [.init(host: "127.0.0.1", port: Int(second.port))] }
            let bob = try await onFirst.join("bob")
            let carol = try await onSecond.join("carol")
            let sessionA = try await alice.startJoined(Gallery(galleryID: "moves"))
            let others = [
                try await bob.joinSession(sessionA.id, of: Gallery.self), try await carol.joinSession(sessionA.id, of: Gallery.self),
            ]
            try await waitUntil("everyone active") { others.allSatisfy { ids($0.activeParticipants) == ["alice", "bob", "carol"] } }
            let events = Collector(alice.client.events())
            defer { events.cancel() }
            alice.dropConnection()
            try await waitUntil(timeout: .seconds(5), "alice on the second broker") {
                events.elements.contains {
                    if case .connected(to: let server, _) = $0 { server.port == Int(second.port) } else { false }
                }
            }
            try await waitUntil(timeout: .seconds(5), "alice active again for everyone") {
                others.allSatisfy { ids($0.activeParticipants) == ["alice", "bob", "carol"] }
            }
            // Messages flow both ways across the bridge from her new broker.
            let toBob = Collector(GroupSessionMessenger(session: others[0]).messages(of: Chat.self))
            defer { toBob.cancel() }
            try await GroupSessionMessenger(session: sessionA).send(Chat(text: "moved"))
            try await toBob.waitForCount(1)
            #expect(sessionA.state == .joined)
        }
    }
}
