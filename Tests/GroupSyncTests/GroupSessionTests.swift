import BrokerSupport
import Foundation
import Testing

@testable import GroupSync
@testable import MQTT

/// Sessions, presence and the messenger between coordinators on a real mosquitto.
@Suite(.timeLimit(.minutes(timeLimitMinutes(1)))) struct GroupSessionTests {
    @Test func initiatorAndInviteeReceiveTheSessionThroughTheSamePath() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice")
            let bob = try await group.join("bob")
            let aliceSessions = Collector(alice.sessions(of: Gallery.self))
            let bobSessions = Collector(bob.sessions(of: Gallery.self))
            let boards = Collector(bob.sessions(of: Whiteboard.self))
            let id = try await alice.activate(Gallery(galleryID: "paris"))
            try await aliceSessions.waitForCount(1)
            try await bobSessions.waitForCount(1)
            #expect(aliceSessions.elements[0].id == id && bobSessions.elements[0].id == id)
            #expect(bobSessions.elements[0].activity.galleryID == "paris")
            #expect(bobSessions.elements[0].initiator.id == "alice")
            #expect(bobSessions.elements[0].state == .waiting)
            #expect(boards.count == 0, "a session reaches only listeners of its activity type")
            await group.closeAll()
            try await waitUntil("sequences end on close") { aliceSessions.isFinished && bobSessions.isFinished }
        }
    }

    @Test func aListenerStartedAfterActivationGetsTheSessionExactlyOnce() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice")
            let id = try await alice.activate(Gallery(galleryID: "rome"))
            let late = try await group.join("late")
            let sessions = Collector(late.sessions(of: Gallery.self))
            try await sessions.waitForCount(1)
            // A second session proves the sequence is live, and that the first was not repeated before it.
            let second = try await alice.activate(Gallery(galleryID: "oslo"))
            try await sessions.waitForCount(2)
            #expect(sessions.elements.map(\.id) == [id, second])
            await group.closeAll()
        }
    }

    @Test func sharedCoordinatorMakesTheStaticAPIWork() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            #expect(await Gallery(galleryID: "x").prepareForActivation() == .activationDisabled || GroupCoordinator.shared != nil)
            let sessions = Collector(Gallery.sessions())  // started before any coordinator exists
            for _ in 0..<3 { _ = Gallery.sessions() }  // dropped at once: nothing of them is left waiting
            #expect(GroupCoordinator.sharing.withLock { $0.waiting.count } == 1)
            let alice = try await group.join("alice")
            GroupCoordinator.setShared(alice)
            defer { GroupCoordinator.setShared(nil) }
            #expect(await Gallery(galleryID: "x").prepareForActivation() == .activationPreferred)
            let id = try await Gallery(galleryID: "x").activate()
            try await sessions.waitForCount(1)
            #expect(sessions.elements[0].activity.galleryID == "x" && sessions.elements[0].id == id)
            await group.closeAll()
        }
    }

    @Test(.needsOwnBroker("restarts it")) func theSessionsListenerKeepsWorkingAcrossABrokerRestart() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice")
            let bob = try await group.join("bob")
            let sessions = Collector(bob.sessions(of: Gallery.self))
            try await broker.restart()
            try await waitUntil(timeout: .seconds(10), "reconnected") { alice.client.isConnected && bob.client.isConnected }
            let id = try await alice.activate(Gallery(galleryID: "after-restart"))
            try await waitUntil("announced after the restart") { sessions.elements.contains { $0.id == id } }
            await group.closeAll()
        }
    }

    @Test func joinLeaveAndActiveParticipants() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice")
            let bob = try await group.join("bob")
            let aliceSession = try await alice.startJoined(Gallery(galleryID: "a"))
            #expect(aliceSession.state == .joined)
            #expect(ids(aliceSession.activeParticipants) == ["alice"])
            let updates = Collector(aliceSession.activeParticipantUpdates())
            try await updates.waitForCount(1)
            #expect(ids(updates.elements[0]) == ["alice"], "the current set comes first")
            let bobSession = try await bob.joinSession(aliceSession.id, of: Gallery.self)
            #expect(ids(bobSession.activeParticipants) == ["alice", "bob"])
            try await waitUntil("alice sees bob") { ids(aliceSession.activeParticipants) == ["alice", "bob"] }
            await bobSession.leave()
            #expect(bobSession.state == .invalidated(reason: .left))
            try await waitUntil("alice sees bob leave") { ids(aliceSession.activeParticipants) == ["alice"] }
            try await waitUntil("updates follow") { updates.last.map(ids) == ["alice"] && updates.count >= 3 }
            await group.closeAll()
        }
    }

    @Test func messagesAreTypedOrderedNotEchoedAndTargetedByTopic() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let (raw, wire) = try await rawSubscriber(broker, "\(GroupTopics.protocolRoot)/\(group.name)/s/+/+/#")
            let alice = try await group.join("alice")
            let bob = try await group.join("bob")
            let carol = try await group.join("carol")
            let a = try await alice.startJoined(Gallery(galleryID: "m"))
            let b = try await bob.joinSession(a.id, of: Gallery.self)
            let c = try await carol.joinSession(a.id, of: Gallery.self)
            let aMessenger = GroupSessionMessenger(session: a)
            let aOwn = Collector(aMessenger.messages(of: Chat.self))
            let bChats = Collector(GroupSessionMessenger(session: b).messages(of: Chat.self))
            let bStates = Collector(GroupSessionMessenger(session: b).messages(of: GalleryState.self))
            let cChats = Collector(GroupSessionMessenger(session: c).messages(of: Chat.self))
            for i in 0..<20 { try await aMessenger.send(Chat(text: "all \(i)")) }
            try await aMessenger.send(GalleryState(index: 7))
            try await aMessenger.send(Chat(text: "secret"), to: .only(Participant(id: "bob")))
            try await aMessenger.send(Chat(text: "end"))
            try await bChats.waitForCount(22)
            try await cChats.waitForCount(21)
            try await bStates.waitForCount(1)  // its own consumer task: not necessarily done when bChats is
            #expect(bChats.elements.map(\.message.text) == (0..<20).map { "all \($0)" } + ["secret", "end"])
            #expect(bChats.elements.allSatisfy { $0.context.source.id == "alice" })
            #expect(cChats.elements.map(\.message.text) == (0..<20).map { "all \($0)" } + ["end"], "carol never gets bob's message")
            #expect(bStates.elements.map(\.message) == [GalleryState(index: 7)], "messages reach only their own type")
            #expect(aOwn.count == 0, "no self-echo")
            // On the wire: the targeted message travelled on bob's topic only.
            // The wire carries member and state records too: wait for the last message, sent after the secret.
            try await waitUntil("raw subscriber saw the last message") {
                wire.elements.contains { $0.string?.contains(#""text":"end""#) == true }
            }
            let secret = wire.elements.filter { $0.string?.contains("secret") == true }
            #expect(secret.map(\.topic) == ["\(GroupTopics.protocolRoot)/\(group.name)/s/\(a.id)/to/bob/alice"])
            await group.closeAll()
            await raw.disconnect()
        }
    }

    @Test func messagingBeforeJoinOrTooLargeIsATypedError() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice")
            let id = try await alice.activate(Gallery(galleryID: "x"))
            let session = try await alice.firstSession(of: Gallery.self)
            #expect(session.id == id)
            await #expect(throws: GroupSyncError.notJoined) { try await GroupSessionMessenger(session: session).send(Chat(text: "x")) }
            try await session.join()
            let small = GroupSessionMessenger(session: session, maximumMessageSize: 100)
            await #expect {
                try await small.send(Chat(text: String(repeating: "x", count: 200)))
            } throws: { error in
                if case .messageTooLarge = error as? GroupSyncError { return true }
                return false
            }
            await #expect(throws: GroupSyncError.noRecipients) { try await small.send(Chat(text: "x"), to: .only([])) }
            await group.closeAll()
        }
    }

    @Test func reliableMessagesKeepOrderWithoutDuplicatesAcrossAReconnect() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let (alice, _, a, b) = try await group.pair(Gallery(galleryID: "r"))
            let received = Collector(GroupSessionMessenger(session: b).messages(of: GalleryState.self))
            let messenger = GroupSessionMessenger(session: a)
            let sender = Task {
                for i in 0..<300 { try await messenger.send(GalleryState(index: i)) }
            }
            // Only where the cut comes: under a sanitizer and the whole suite's load the first 50 take seconds.
            try await waitUntil(timeout: .seconds(30), "some arrived") { received.count > 50 }
            alice.dropConnection()
            try await sender.value
            try await received.waitForCount(300, timeout: .seconds(10))
            #expect(received.elements.map(\.message.index) == Array(0..<300))
            await group.closeAll()
        }
    }

    @Test func afterLeaveANewSessionSeesNothingOfTheOldOne() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice")
            let bob = try await group.join("bob")
            let a1 = try await alice.startJoined(Gallery(galleryID: "one"))
            let b1 = try await bob.joinSession(a1.id, of: Gallery.self)
            let oldMessages = Collector(GroupSessionMessenger(session: b1).messages(of: Chat.self))
            await b1.leave()
            try await waitUntil("old sequence ends on leave") { oldMessages.isFinished }
            let a2 = try await alice.startJoined(Gallery(galleryID: "two"))
            let b2 = try await bob.joinSession(a2.id, of: Gallery.self)
            let newMessages = Collector(GroupSessionMessenger(session: b2).messages(of: Chat.self))
            try await GroupSessionMessenger(session: a1).send(Chat(text: "old"))
            try await GroupSessionMessenger(session: a2).send(Chat(text: "new"))
            try await newMessages.waitForCount(1)
            #expect(newMessages.elements.map(\.message.text) == ["new"])
            #expect(oldMessages.count == 0)
            await group.closeAll()
        }
    }

    @Test func endInvalidatesEveryoneAndClearsTheBroker() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice")
            let bob = try await group.join("bob")
            let carol = try await group.join("carol")
            let a = try await alice.startJoined(Gallery(galleryID: "e"))
            let b = try await bob.joinSession(a.id, of: Gallery.self)
            let waiting = try await carol.firstSession(of: Gallery.self)  // never joins
            let bStates = Collector(b.stateUpdates())
            try await SharedState(a, key: "index", initialValue: 0).set(3)
            try await SharedState(b, key: "index", initialValue: 0).set(4)
            await a.end()
            try await waitUntil("bob invalidated") { b.state == .invalidated(reason: .ended(by: Participant(id: "alice"))) }
            try await waitUntil("carol's waiting session invalidated") { waiting.state.isInvalidated }
            try await waitUntil("bob's state sequence ends") { bStates.isFinished }
            #expect(a.state == .invalidated(reason: .ended(by: Participant(id: "alice"))))
            // A fresh subscriber receives nothing of the session.
            try await waitUntil("retained messages cleared") {
                try await !retainedTopics(broker, under: "\(GroupTopics.protocolRoot)/\(group.name)").contains { $0.contains(a.id) }
            }
            await group.closeAll()
        }
    }

    @Test func aChangedActivityReachesEveryone() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let (_, _, a, b) = try await group.pair(Gallery(galleryID: "before"))
            let changes = Collector(b.activityUpdates())
            try await changes.waitForCount(1)
            a.activity = Gallery(galleryID: "after")
            try await waitUntil("bob sees the new activity") { b.activity.galleryID == "after" }
            try await waitUntil("as an update") { changes.last?.galleryID == "after" }
            let late = try await group.join("late")
            let l = try await late.joinSession(a.id, of: Gallery.self)
            #expect(l.activity.galleryID == "after", "the retained announcement carries the change")
            await group.closeAll()
        }
    }

    @Test func aParticipantWhoseConnectionDiesDisappearsWithinASecond() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice")
            let bob = try await group.join("bob") { $0.mqtt.reconnect = Backoff(initial: .seconds(30), maximum: .seconds(30)) }
            let a = try await alice.startJoined(Gallery(galleryID: "crash"))
            _ = try await bob.joinSession(a.id, of: Gallery.self)
            try await waitUntil("bob active") { ids(a.activeParticipants) == ["alice", "bob"] }
            let start = ContinuousClock.now
            bob.dropConnection()  // the socket closes without DISCONNECT: the broker publishes bob's will
            try await waitUntil(timeout: timeBound(.seconds(1)), "bob gone within 1 s") { ids(a.activeParticipants) == ["alice"] }
            #expect(ContinuousClock.now - start < timeBound(.seconds(1)))
            await group.closeAll()
        }
    }

    @Test func invalidIdentifiersAreRejectedWithAClearError() async throws {
        for bad in ["", "a/b", "a+", "#", "$SYS", "with space"] {
            await #expect(throws: GroupSyncError.self) {
                _ = try await GroupCoordinator.connect(.init(broker: "mqtt://127.0.0.1:1", group: "g", participant: bad))
            }
        }
        #expect(throws: Never.self) { try Identifier.validate("alice.example-1_x:y@z~", kind: "participant") }
    }

    /// Sequence numbers go on across a leave and rejoin, so receivers never drop the new messages as
    /// redeliveries.
    @Test func messagesAfterALeaveAndRejoinArrive() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let (alice, _, a1, b) = try await group.pair(Gallery(galleryID: "rejoin"))
            let received = Collector(GroupSessionMessenger(session: b).messages(of: Chat.self))
            for i in 1...3 { try await GroupSessionMessenger(session: a1).send(Chat(text: "first \(i)")) }
            try await received.waitForCount(3)
            await a1.leave()
            let a2 = try await alice.joinSession(a1.id, of: Gallery.self)
            try await waitUntil("alice active again") { ids(b.activeParticipants) == ["alice", "bob"] }
            for i in 1...3 { try await GroupSessionMessenger(session: a2).send(Chat(text: "second \(i)")) }
            try await received.waitForCount(6)
            #expect(received.elements.map(\.message.text) == ["first 1", "first 2", "first 3", "second 1", "second 2", "second 3"])
            await group.closeAll()
        }
    }
}
