import BrokerSupport
import Foundation
import GroupSync
import MQTT
import Testing

/// Where nothing is retained, an observer asks with an `observe` record and is told what retained
/// records would have said: one welcome from the participant online that ranks first for it, and per
/// session one catch-up, listing the members, from the member that ranks first there
/// (PROTOCOL.md, "Observers"). Nobody counts it as a participant.
@Suite(.timeLimit(.minutes(timeLimitMinutes(1)))) struct ObserverWelcomeTests {
    @Test func anObserverIsWelcomedOnceAndListedNowhere() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            func join(_ name: String) async throws -> GroupCoordinator {
                try await group.join(name) { $0.mqtt.retainedMessages = false }
            }
            let (alice, bob, carol) = (try await join("alice"), try await join("bob"), try await join("carol"))
            let a = try await alice.startJoined(Gallery(galleryID: "observed"))
            try await SharedState(a, key: "index", initialValue: 0).set(7)
            let b = try await bob.joinSession(a.id, of: Gallery.self)
            try await waitUntil("both members") { ids(a.activeParticipants) == ["alice", "bob"] }

            let topics = GroupTopics(group: group.name)
            let observer = try MQTTClient(configuration: .init(url: broker.url))
            try await observer.connect()
            let answers = Collector(
                try await observer.subscribe(
                    to: ["dash", "dash2"].flatMap { name in
                        [topics.welcomeFilter(for: name), "\(topics.root)/s/+/to/\(name)/+"].map {
                            TopicSubscription($0, qos: .atLeastOnce)
                        }
                    }))
            func ask(_ name: String) async throws {
                try await observer.publish(to: topics.observe(name), payload: try Wire.encode(Wire.Observe()), qos: .atLeastOnce)
            }
            @Sendable func answered(_ name: String) -> [MQTTMessage] {
                answers.elements.filter { $0.topic.contains("/welcome/\(name)/") || $0.topic.contains("/to/\(name)/") }
            }
            try await ask("dash")
            try await waitUntil("a welcome and a catch-up") { answered("dash").count >= 2 }
            // Answers to the second request: by then a duplicate answer to the first that a participant sent
            // at once (a catch-up, from the network thread) would have come, as the broker keeps each
            // sender's order; a welcome goes out from a task, so this bounds its duplicates less tightly.
            try await ask("dash2")
            try await waitUntil("the second observer's answers") { answered("dash2").count >= 2 }

            let dash = answered("dash")
            #expect(dash.count == 2, "\(dash.map(\.topic))")
            let welcome = try #require(
                dash.first { $0.topic.contains("/welcome/") }.flatMap { Wire.decode(Wire.Welcome.self, from: $0.payload) })
            #expect(welcome.presences.map(\.participant) == ["alice", "bob", "carol"])
            #expect(welcome.sessions.map(\.session) == [a.id])
            let catchUpMessage = try #require(dash.first { $0.topic.contains("/to/dash/") })
            #expect(catchUpMessage.topic.hasPrefix("\(topics.root)/s/\(a.id)/to/dash/"))
            let envelope = try #require(Wire.decodeEnvelope(catchUpMessage.payload))
            #expect(envelope.header.type == "$catchup")
            let catchUp = try #require(Wire.decode(Wire.CatchUp.self, from: catchUpMessage.payload[envelope.body]))
            #expect(catchUp.members.map(\.participant) == ["alice", "bob"], "members listed, the observer not among them")
            #expect(catchUp.states.map(\.value) == [.int(7)])

            #expect(ids(a.activeParticipants) == ["alice", "bob"])
            #expect(ids(b.activeParticipants) == ["alice", "bob"])
            for coordinator in [alice, bob, carol] { #expect(coordinator.rejectedMessageCount == 0) }
            await observer.disconnect()
            await group.closeAll()
        }
    }
}
