import BrokerSupport
import Foundation
import Testing

@testable import GroupSync

/// Private groups (``GroupCoordinator/Configuration/keyring``): what the broker carries of their sessions
/// it cannot read, and a sealed payload moved, altered or opened with another key is rejected and counted,
/// never delivered.
@Suite(.timeLimit(.minutes(timeLimitMinutes(2)))) struct PrivateSessionTests {
    static let k1 = try! GroupKey(id: "k1", secret: [UInt8](repeating: 1, count: 32))
    static let k2 = try! GroupKey(id: "k2", secret: [UInt8](repeating: 2, count: 32))

    static func keyed(_ keys: GroupKey..., retainedMessages: Bool = true) -> (inout GroupCoordinator.Configuration) -> Void {
        { configuration in
            configuration.keyring = try! GroupKeyring(keys)
            configuration.mqtt.retainedMessages = retainedMessages
        }
    }

    /// alice and bob, both with key k1, joined to alice's session of `activity`; mallory, a plain MQTT
    /// client without any key.
    static func keyedPairAndAForger(_ broker: MosquittoBroker, _ activity: Gallery) async throws -> (
        Group, GroupCoordinator, GroupSession<Gallery>, GroupCoordinator, GroupSession<Gallery>, MQTTClient
    ) {
        let group = Group(broker)
        let alice = try await group.join("alice", keyed(k1))
        let a = try await alice.startJoined(activity)
        let bob = try await group.join("bob", keyed(k1))
        let b = try await bob.joinSession(a.id, of: Gallery.self)
        let mallory = try MQTTClient(configuration: .init(url: broker.url))
        try await mallory.connect()
        return (group, alice, a, bob, b, mallory)
    }

    static func chats(_ session: GroupSession<Gallery>) -> Collector<(Chat, Participant)> {
        Collector(GroupSessionMessenger(session: session).messages(of: Chat.self).map { ($0, $1.source) })
    }

    @Test func messagesAreSealedOnTheWireAndReachTheirRecipients() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice", Self.keyed(Self.k1))
            let bob = try await group.join("bob", Self.keyed(Self.k1))
            let a = try await alice.startJoined(Gallery(galleryID: "private"))
            let (tap, wire) = try await rawSubscriber(broker, "\(GroupTopics.protocolRoot)/\(group.name)/s/\(a.id)/#")
            let b = try await bob.joinSession(a.id, of: Gallery.self)
            let received = Self.chats(a)
            let messenger = GroupSessionMessenger(session: b)
            try await messenger.send(Chat(text: "a secret for everyone"))
            try await messenger.send(Chat(text: "a secret for alice"), to: .only(a.localParticipant))
            try await GroupSessionMessenger(session: b, deliveryMode: .unreliable).send(Chat(text: "an unreliable secret"))
            try await received.waitForCount(3)
            #expect(received.elements.map(\.0.text).sorted() == ["a secret for alice", "a secret for everyone", "an unreliable secret"])
            #expect(received.elements.allSatisfy { $0.1.id == "bob" })
            @Sendable func texts() -> [String] {
                wire.elements.filter { $0.topic.hasSuffix("/bob") && !$0.topic.contains("/member/") }
                    .map { String(decoding: $0.payload, as: UTF8.self) }
            }
            // The tap is another subscriber: the broker may hand it the last message after alice.
            try? await waitUntil("the tap has bob's three messages") { texts().filter { $0.contains(#""sealed":"k1""#) }.count >= 3 }
            let texts = texts()
            #expect(texts.filter { $0.contains(#""sealed":"k1""#) }.count == 3, "\(texts)")
            #expect(wire.elements.allSatisfy { !String(decoding: $0.payload, as: UTF8.self).contains("secret") })
            #expect(alice.rejectedMessageCount == 0 && bob.rejectedMessageCount == 0)
            await tap.disconnect()
            await group.closeAll()
        }
    }

    /// A sealed message altered by one bit, moved to a direct topic, or passed off as another member's is
    /// rejected and counted; the same message again is the same message (delivered once).
    @Test func alteredMovedOrReassignedMessagesAreRejected() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice", Self.keyed(Self.k1))
            let bob = try await group.join("bob", Self.keyed(Self.k1))
            let carol = try await group.join("carol", Self.keyed(Self.k1))
            let a = try await alice.startJoined(Gallery(galleryID: "private"))
            let b = try await bob.joinSession(a.id, of: Gallery.self)
            _ = try await carol.joinSession(a.id, of: Gallery.self)
            try await waitUntil(timeout: timeBound(.seconds(5)), "alice lists everyone") { a.activeParticipants.count == 3 }
            let session = "\(GroupTopics.protocolRoot)/\(group.name)/s/\(a.id)"
            let (tap, wire) = try await rawSubscriber(broker, "\(session)/all/bob")
            let received = Self.chats(a)
            try await GroupSessionMessenger(session: b).send(Chat(text: "original"))
            try await received.waitForCount(1)
            try await wire.waitForCount(1)
            let original = String(decoding: wire.elements[0].payload, as: UTF8.self)

            // One character of the sealed text changed.
            let start = original.range(of: #""body":""#)!.upperBound
            let target = original.index(start, offsetBy: 20)
            let altered = original.replacingCharacters(in: target...target, with: original[target] == "A" ? "B" : "A")
            // Bob's stream into carol's: her epoch, her topic, the seq she has not used.
            let reassigned = original.replacingOccurrences(of: #""epoch":\#(bob.epoch)"#, with: #""epoch":\#(carol.epoch)"#)
            let forgeries = [
                ("\(session)/all/bob", altered), ("\(session)/to/alice/bob", original), ("\(session)/all/carol", reassigned),
            ]
            for (index, (topic, payload)) in forgeries.enumerated() {
                try await tap.publish(to: topic, string: payload)
                try await waitUntil(timeout: timeBound(.seconds(5)), "forgery \(index) rejected") {
                    alice.rejectedMessageCount == index + 1
                }
            }
            try await tap.publish(to: "\(session)/all/bob", string: original)  // the same message again
            try await GroupSessionMessenger(session: b).send(Chat(text: "after"))
            try await received.waitForCount(2)
            #expect(received.elements.map(\.0.text) == ["original", "after"])
            #expect(alice.rejectedMessageCount == 3)
            await tap.disconnect()
            await group.closeAll()
        }
    }

    /// Without the key a participant sees that the session exists, not what it is, and cannot join it. An announcement in clear is rejected in a private group.
    @Test func aSessionIsPrivateToWhoeverLacksItsKey() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice", Self.keyed(Self.k1))
            let (tap, wire) = try await rawSubscriber(broker, "\(GroupTopics.protocolRoot)/\(group.name)/session/#")
            let a = try await alice.startJoined(Gallery(galleryID: "hidden"))
            let eve = try await group.join("eve")
            let frank = try await group.join("frank", Self.keyed(Self.k2))
            for outsider in [eve, frank] {
                try await waitUntil(timeout: timeBound(.seconds(5)), "the session is listed") {
                    outsider.currentSessions(activityIdentifier: nil).map(\.id) == [a.id]
                }
                let session = outsider.currentSessions(activityIdentifier: nil)[0]
                #expect(session.metadata.title == "private session")
                await #expect(throws: GroupSyncError.privateSession(keyID: "k1")) { try await session.join() }
            }
            #expect(!wire.elements.isEmpty)
            #expect(wire.elements.allSatisfy { !String(decoding: $0.payload, as: UTF8.self).contains("hidden") })

            let clear = try await group.join("mallory").activate(Gallery(galleryID: "in clear"))
            try await waitUntil(timeout: timeBound(.seconds(5)), "the clear announcement is rejected") { alice.rejectedMessageCount >= 1 }
            #expect(!alice.currentSessions(activityIdentifier: nil).map(\.id).contains(clear))
            await tap.disconnect()
            await group.closeAll()
        }
    }

    /// Control messages are sealed too: without the key nobody ends a session (or sends any other
    /// control message) for a member, in clear or sealed with another key; the member's own `end()` does.
    @Test func aControlMessageWithoutTheKeyIsRejected() async throws {
        try await MosquittoBroker.withBroker { broker in
            let (group, alice, a, bob, b, mallory) = try await Self.keyedPairAndAForger(broker, Gallery(galleryID: "ends"))
            let topic = GroupTopics(group: group.name).broadcast(a.id, from: "alice")
            let clear = Wire.EnvelopeBytes(encodedBody: Data("null".utf8)).finished(
                type: "$end", epoch: alice.epoch, seq: nil, reliable: true)
            let otherKey = SessionSealer(keyring: try GroupKeyring([Self.k2]), group: group.name, session: a.id)
            let sealed = Wire.EnvelopeBytes(encodedBody: Data("null".utf8)).finished(
                type: "$end", epoch: alice.epoch, seq: nil, reliable: true,
                sealing: .init(sealer: otherKey, session: a.id, sender: "alice", recipient: nil))
            for payload in [clear, sealed] { try await mallory.publish(to: topic, payload: Data(payload)) }
            try await waitUntil("both are rejected") { bob.rejectedMessageCount == 2 }
            #expect(b.state == .joined)
            await a.end()
            try await waitUntil("alice's own end ends it") { b.state == .invalidated(reason: .ended(by: Participant(id: "alice"))) }
            await mallory.disconnect()
            await group.closeAll()
        }
    }

    /// A copy sealed with a key nobody here has authenticates nothing: one forged on a member's own topic
    /// (no key needed) with a revision a day ahead, another activity, another lifetime or `ended` changes
    /// neither the session nor anyone's clock, and a newcomer who reads it still joins with the real copy.
    @Test func aClosedCopyChangesNothingOfAKnownSession() async throws {
        try await MosquittoBroker.withBroker { broker in
            let (group, alice, a, bob, b, mallory) = try await Self.keyedPairAndAForger(broker, Gallery(galleryID: "real"))
            let topics = GroupTopics(group: group.name)
            let now = SystemWallClock().milliseconds()
            var forged = Wire.Announcement(
                session: a.id, activity: .init(type: Gallery.activityIdentifier, metadata: nil, data: .string("x"), sealed: "zz"),
                createdBy: "alice", createdAt: now, revision: HLCTimestamp(time: now + 23 * 3_600_000, counter: 0, participant: "alice"),
                ttl: Gallery.sessionTimeToLive.components.seconds)
            var copies = [forged]
            forged.ttl += 1
            copies.append(forged)
            forged.ttl -= 1
            forged.ended = true
            copies.append(forged)
            for copy in copies {
                try await mallory.publish(to: topics.announcement(a.id, by: "mallory"), payload: try Wire.encode(copy), retain: true)
            }
            // In clear, rejected and counted: once it is, the copies before it were read.
            forged.activity.sealed = nil
            try await mallory.publish(to: topics.announcement(a.id, by: "mallory"), payload: try Wire.encode(forged), retain: true)
            try await waitUntil("the clear copy is rejected") { alice.rejectedMessageCount >= 1 && bob.rejectedMessageCount >= 1 }
            for (coordinator, session) in [(alice, a), (bob, b)] {
                #expect(session.state == .joined)
                #expect(session.activity.galleryID == "real")
                #expect(coordinator.hlc.withLock { $0.latest.time } < now + 3_600_000, "the clock did not jump a day")
            }
            try await mallory.publish(to: topics.announcement(a.id, by: "mallory"), payload: try Wire.encode(copies[0]), retain: true)
            let c = try await group.join("carol", Self.keyed(Self.k1)).joinSession(a.id, of: Gallery.self)
            #expect(c.activity.galleryID == "real")
            await mallory.disconnect()
            await group.closeAll()
        }
    }

    /// Shared state values are sealed where they are retained and in the catch-up a late joiner gets
    /// without retained messages; the late joiner opens them. A record in clear is rejected.
    @Test(arguments: [true, false]) func stateIsSealedAndALateJoinerOpensIt(retainedMessages: Bool) async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            func join(_ name: String) async throws -> GroupCoordinator {
                try await group.join(name, Self.keyed(Self.k1, retainedMessages: retainedMessages))
            }
            let alice = try await join("alice")
            let a = try await alice.startJoined(Gallery(galleryID: "private"))
            let session = "\(GroupTopics.protocolRoot)/\(group.name)/s/\(a.id)"
            let (tap, wire) = try await rawSubscriber(broker, "\(session)/#")
            try await SharedState(a, key: "page", initialValue: "").set("the secret page")
            let bob = try await join("bob")
            let b = try await bob.joinSession(a.id, of: Gallery.self)
            #expect(try SharedState(b, key: "page", initialValue: "").value == "the secret page")
            try await wire.waitForCount(1)
            #expect(wire.elements.contains { String(decoding: $0.payload, as: UTF8.self).contains(#""sealed":"k1""#) })
            #expect(wire.elements.allSatisfy { !String(decoding: $0.payload, as: UTF8.self).contains("secret") })

            let forged =
                #"{"clock":{"c":0,"p":"bob","t":\#(SystemWallClock().milliseconds() + 1_000)},"key":"page","v":2,"value":"forged"}"#
            try await tap.publish(to: "\(session)/state/page/bob", string: forged)
            try await waitUntil(timeout: timeBound(.seconds(5)), "the record in clear is rejected") { alice.rejectedMessageCount == 1 }
            #expect(try SharedState(a, key: "page", initialValue: "").value == "the secret page")
            await tap.disconnect()
            await group.closeAll()
        }
    }

    /// The journal of a private session: names, types and metadata sealed in the record, every chunk
    /// sealed; the members read and load them (where nothing is retained, also from a holder who loaded
    /// them, after their owner left); nothing of them travels in clear.
    @Test(arguments: [true, false]) func theJournalIsSealed(retainedMessages: Bool) async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            func join(_ name: String) async throws -> GroupCoordinator {
                try await group.join(name, Self.keyed(Self.k1, retainedMessages: retainedMessages))
            }
            // The group's topics only: on a broker the suite shares (GROUPSYNC_TEST_BROKER) others talk in clear.
            let (tap, wire) = try await rawSubscriber(
                broker, "\(GroupTopics.protocolRoot)/\(group.name)/#", "\(GroupTopics.chunkProtocolRoot)/\(group.name)/#")
            let alice = try await join("alice")
            let a = try await alice.startJoined(Gallery(galleryID: "journal"))
            let configuration = GroupSessionJournal.Configuration(chunkSize: 16 << 10, window: 4)
            let content = Data(String(repeating: "the plain photo bytes ", count: 3_000).utf8)  // 66,000 bytes: 5 chunks
            let added = try await GroupSessionJournal(session: a, configuration: configuration).add(
                content, name: "hidden-photo.jpg", mediaType: "image/jpeg", metadata: ["caption": "a quiet caption"])
            let bob = try await join("bob")
            let b = try await bob.joinSession(a.id, of: Gallery.self)
            let journal = GroupSessionJournal(session: b)
            try await waitUntil(timeout: timeBound(.seconds(5)), "bob lists the attachment") { journal.attachments.count == 1 }
            let listed = journal.attachments[0]
            #expect(
                listed.name == "hidden-photo.jpg" && listed.mediaType == "image/jpeg" && listed.metadata == ["caption": "a quiet caption"])
            #expect(listed.size == content.count && listed.digest == added.digest)
            #expect(try await journal.load(listed) == content)
            if !retainedMessages {
                // alice leaves; carol loads from bob, who holds what he loaded and seals it as it goes out.
                await alice.close()
                let carol = try await join("carol")
                let c = try await carol.joinSession(a.id, of: Gallery.self)
                let carolsJournal = GroupSessionJournal(session: c)
                try await waitUntil(timeout: timeBound(.seconds(5)), "carol lists the attachment") { carolsJournal.attachments.count == 1 }
                #expect(try await carolsJournal.load(carolsJournal.attachments[0]) == content)
            }
            let marker = "\(GroupTopics.protocolRoot)/\(group.name)/marker"
            try await tap.publish(to: marker, string: "m")
            try await waitUntil(timeout: timeBound(.seconds(5)), "the tap's marker") { wire.elements.contains { $0.topic == marker } }
            await tap.disconnect()
            #expect(wire.elements.contains { $0.topic.hasPrefix(GroupTopics.chunkProtocolRoot) }, "the chunks went by")
            for clear in ["plain photo", "hidden-photo", "image/jpeg", "quiet caption"] {
                #expect(!wire.elements.contains { String(decoding: $0.payload, as: UTF8.self).contains(clear) }, "\(clear) on the wire")
            }
            #expect(bob.rejectedMessageCount == 0)
            await group.closeAll()
        }
    }

    /// Adding the same bytes again renames the attachment in a private session too: its chunks are sealed
    /// with the salt they were added with, so they are the same chunks; other bytes of that size are not.
    @Test(arguments: [true, false]) func reAddingTheSameBytesRenamesAPrivateAttachment(retainedMessages: Bool) async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let keyed = Self.keyed(Self.k1, retainedMessages: retainedMessages)
            let a = try await group.join("alice", keyed).startJoined(Gallery(galleryID: "rename"))
            let b = try await group.join("bob", keyed).joinSession(a.id, of: Gallery.self)
            let configuration = GroupSessionJournal.Configuration(chunkSize: 16 << 10, window: 4)
            let (alices, bobs) = (GroupSessionJournal(session: a, configuration: configuration), GroupSessionJournal(session: b))
            let photo = Data((0..<40_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
            let added = try await alices.add(photo, name: "photo.jpg")
            let renamed = try await alices.add(photo, name: "renamed.jpg")
            #expect(renamed.id == added.id)
            try await waitUntil("bob lists it renamed") { bobs.attachments.map(\.name) == ["renamed.jpg"] }
            #expect(try await bobs.load(bobs.attachments[0]) == photo)
            let other = try await alices.add(Data(photo.reversed()), name: "other.jpg")
            #expect(other.id != added.id && alices.attachments.count == 2)
            await group.closeAll()
        }
    }

    /// Where nothing is retained, the owner of a file added from disk seals each chunk as it serves it,
    /// from the file (mapped). Changed in place after it was added, the file no longer matches the chunks'
    /// digests: nothing is served, so no other bytes ever go out under a chunk's nonce, and the load fails.
    @Test func aFileChangedAfterItWasAddedIsNotSealedAgain() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let keyed = Self.keyed(Self.k1, retainedMessages: false)
            let (tap, wire) = try await rawSubscriber(broker, "\(GroupTopics.chunkProtocolRoot)/\(group.name)/#")
            let alice = try await group.join("alice", keyed)
            let a = try await alice.startJoined(Gallery(galleryID: "changed-file"))
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("changed-\(group.name).bin")
            defer { try? FileManager.default.removeItem(at: file) }
            try Data(repeating: 1, count: 40_000).write(to: file)
            let configuration = GroupSessionJournal.Configuration(chunkSize: 16 << 10, window: 4, stallTimeout: .seconds(3))
            _ = try await GroupSessionJournal(session: a, configuration: configuration).add(contentsOf: file)
            let handle = try FileHandle(forWritingTo: file)  // in place: the owner's mapping sees it
            try handle.write(contentsOf: Data(repeating: 2, count: 40_000))
            try handle.close()

            let b = try await group.join("bob", keyed).joinSession(a.id, of: Gallery.self)
            let journal = GroupSessionJournal(session: b, configuration: configuration)
            try await waitUntil("bob lists it") { journal.attachments.count == 1 }
            await #expect(throws: GroupSyncError.self) { try await journal.load(journal.attachments[0]) }
            let marker = "\(GroupTopics.chunkProtocolRoot)/\(group.name)/marker"
            try await tap.publish(to: marker, string: "m")
            try await waitUntil("the tap's marker") { wire.elements.contains { $0.topic == marker } }
            await tap.disconnect()
            #expect(wire.elements.map(\.topic) == [marker], "no chunk went out")
            await group.closeAll()
        }
    }

    /// What a broker writes to disk of a private session's retained records holds none of its content.
    @Test(.needsOwnBroker("stops it to read its database")) func aBrokersDatabaseHoldsNoClearContent() async throws {
        var configuration = MosquittoBroker.Configuration()
        configuration.persistence = true
        try await MosquittoBroker.withBroker(configuration) { broker in
            let group = Group(broker)
            let alice = try await group.join("alice", Self.keyed(Self.k1))
            let a = try await alice.startJoined(Gallery(galleryID: "hush-gallery"))
            try await SharedState(a, key: "page", initialValue: "").set("the secret page")
            try await GroupSessionMessenger(session: a).send(Chat(text: "a secret"))
            await broker.stop()  // gracefully: mosquitto saves its database
            let database = try Data(contentsOf: URL(fileURLWithPath: "\(broker.directory)/data/mosquitto.db"))
            let text = String(decoding: database, as: UTF8.self)
            #expect(text.contains(#""sealed":"k1""#), "the session's records are in the database")
            for clear in ["hush-gallery", "Gallery", "secret"] { #expect(!text.contains(clear), "\(clear) in the database") }
            await group.closeAll()
        }
    }

    /// With the old key second in its keyring, alice joins bob's session (sealed with the old key) and
    /// reads what he seals with it; bob, who has only the old key, reads nothing alice seals with the new
    /// one; dave, with the new key only, cannot open bob's copy of the announcement but opens alice's (each
    /// member seals its own with its first key): he joins, and reads alice, not bob.
    @Test func aRotatedKeyringOpensTheOldKeyOnly() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let bob = try await group.join("bob", Self.keyed(Self.k1))
            let alice = try await group.join("alice", Self.keyed(Self.k2, Self.k1))
            let dave = try await group.join("dave", Self.keyed(Self.k2))
            let b = try await bob.startJoined(Gallery(galleryID: "rotated"))
            let a = try await alice.joinSession(b.id, of: Gallery.self)
            try await waitUntil(timeout: timeBound(.seconds(5)), "both list both") {
                [a, b].allSatisfy { $0.activeParticipants.count == 2 }
            }
            let (atAlice, atBob) = (Self.chats(a), Self.chats(b))
            try await GroupSessionMessenger(session: b).send(Chat(text: "sealed with k1"))
            try await GroupSessionMessenger(session: a).send(Chat(text: "sealed with k2"))
            try await atAlice.waitForCount(1)
            try await waitUntil(timeout: timeBound(.seconds(5)), "bob rejects alice's") { bob.rejectedMessageCount == 1 }
            #expect(atAlice.elements.map(\.0.text) == ["sealed with k1"])
            #expect(atBob.elements.isEmpty)
            try await waitUntil(timeout: timeBound(.seconds(5)), "dave opens alice's copy") {
                dave.currentSessions(activityIdentifier: nil).map(\.metadata.title) == ["Gallery rotated"]
            }
            let d = try await dave.joinSession(b.id, of: Gallery.self)
            let atDave = Self.chats(d)
            try await waitUntil(timeout: timeBound(.seconds(5)), "all three list all three") {
                [a, b, d].allSatisfy { $0.activeParticipants.count == 3 }
            }
            try await GroupSessionMessenger(session: b).send(Chat(text: "k1 again"))
            try await GroupSessionMessenger(session: a).send(Chat(text: "k2 again"))
            try await atDave.waitForCount(1)
            try await waitUntil(timeout: timeBound(.seconds(5)), "dave rejects bob's") { dave.rejectedMessageCount >= 1 }
            #expect(atDave.elements.map(\.0.text) == ["k2 again"])
            await group.closeAll()
        }
    }
}
