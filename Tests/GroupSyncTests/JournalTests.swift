import BrokerSupport
import Foundation
import Synchronization
import Testing

@testable import GroupSync
@testable import MQTT

/// The shared journal against a real broker: attachments added, listed, loaded and removed; late
/// joiners; a broker crash mid-transfer; corrupted chunks; the ACL; the limits; nothing left behind.
@Suite(.timeLimit(.minutes(timeLimitMinutes(2)))) struct JournalTests {
    /// `count` bytes that compress badly and differ per call, from a SplitMix64 generator with a random
    /// seed: a byte-by-byte loop, or a system call per word, would hold one of the few threads every test
    /// shares for a good part of a second in a debug build, and delay other tests' refreshes.
    static func bytes(_ count: Int) -> Data {
        var state = UInt64.random(in: .min ... .max)
        var data = Data(count: (count + 7) / 8 * 8)
        data.withUnsafeMutableBytes { buffer in
            for word in 0..<buffer.count / 8 {
                state &+= 0x9E37_79B9_7F4A_7C15
                var z = state
                z = (z ^ (z &>> 30)) &* 0xBF58_476D_1CE4_E5B9
                z = (z ^ (z &>> 27)) &* 0x94D0_49BB_1331_11EB
                buffer.storeBytes(of: z ^ (z &>> 31), toByteOffset: word * 8, as: UInt64.self)
            }
        }
        return data.prefix(count)
    }

    /// Small chunks, so that a few hundred kilobytes make many of them.
    static let small = GroupSessionJournal.Configuration(chunkSize: 16 << 10, window: 4)

    @Test func anAttachmentIsListedLoadedAndRemoved() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let (_, _, a, b) = try await group.pair(Gallery(galleryID: "journal"))
            let (aliceJournal, bobJournal) = (
                GroupSessionJournal(session: a, configuration: Self.small), GroupSessionJournal(session: b, configuration: Self.small)
            )
            let lists = Collector(bobJournal.attachmentUpdates())
            defer { lists.cancel() }
            try await lists.waitForCount(1)
            #expect(lists.elements[0].isEmpty, "the current list comes first")
            #expect(GroupSessionJournal(session: b).configuration.chunkSize == Self.small.chunkSize, "the first one's configuration")

            let photo = Self.bytes(100_000)
            let added = try await aliceJournal.add(photo, name: "photo.jpg", mediaType: "image/jpeg", metadata: ["caption": "Lake"])
            #expect(added.size == 100_000 && added.owner.id == "alice" && added.name == "photo.jpg")
            #expect(aliceJournal.attachments == [added], "the owner lists it once add() returns")
            try await waitUntil("bob lists the photo") { lists.elements.last == [added] }
            let listed = try #require(bobJournal.attachments.first)
            #expect(listed.mediaType == "image/jpeg" && listed.metadata == ["caption": "Lake"] && listed.digest == added.digest)

            let reports = LockedValue<[JournalLoadProgress]>([])
            let loaded = try await bobJournal.load(listed) { progress in reports.withLock { $0.append(progress) } }
            #expect(loaded == photo)
            let progress = reports.withLock { $0 }
            #expect(progress.first?.completedBytes == 0 && progress.last?.completedBytes == 100_000)
            #expect(progress.map(\.completedBytes) == progress.map(\.completedBytes).sorted(), "progress only moves forward")
            #expect(progress.count >= 7, "one report per chunk of 16 KiB, and one at the start")

            let file = FileManager.default.temporaryDirectory.appendingPathComponent("groupsync-\(UUID().uuidString).jpg")
            defer { try? FileManager.default.removeItem(at: file) }
            try await bobJournal.load(listed, to: file)
            #expect(try Data(contentsOf: file) == photo)
            #expect(!FileManager.default.fileExists(atPath: file.path + ".partial"))

            await #expect(throws: GroupSyncError.notAttachmentOwner(owner: "alice")) { try await bobJournal.remove(listed) }
            try await aliceJournal.remove(added)
            try await waitUntil("bob's list is empty again") { lists.elements.last == [] }
            #expect(aliceJournal.attachments.isEmpty)
            await #expect(throws: GroupSyncError.attachmentRemoved(digest: added.digest)) { try await bobJournal.load(listed) }
            await group.closeAll()
        }
    }

    /// A newcomer sees the journal as part of `join()` and loads an attachment whose owner left or
    /// crashed: the bytes are on the broker.
    @Test(arguments: [false, true]) func aLateJoinerLoadsAfterTheOwnerIsGone(crashed: Bool) async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice")
            let a = try await alice.startJoined(Gallery(galleryID: "late"))
            let photo = Self.bytes(200_000)
            let added = try await GroupSessionJournal(session: a, configuration: Self.small).add(
                photo, name: "late.png", mediaType: "image/png")
            let bob = try await group.join("bob")
            let b = try await bob.joinSession(a.id, of: Gallery.self)  // keeps the session alive
            if crashed { await alice.simulateCrash() } else { await a.leave() }

            let carol = try await group.join("carol")
            let c = try await carol.joinSession(a.id, of: Gallery.self)
            let journal = GroupSessionJournal(session: c)
            #expect(journal.attachments.map(\.id) == [added.id], "listed once join() returns")
            #expect(try await journal.load(journal.attachments[0]) == photo)
            _ = b
            await group.closeAll()
        }
    }

    enum Interruption: Sendable, CaseIterable { case brokerCrash, droppedConnection }

    /// The broker crashes (SIGKILL) in the middle of a load and comes back without the retained
    /// messages — the owner republishes what it owns — or the loader's connection drops: either way the
    /// load goes on where it was, with every byte once.
    @Test(.needsOwnBroker("kills and restarts it"), arguments: Interruption.allCases)
    func aLoadSurvivesAnInterruption(_ interruption: Interruption) async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let (_, bob, a, b) = try await group.pair(Gallery(galleryID: "crash"))
            let content = Self.bytes(2 << 20)
            let added = try await GroupSessionJournal(session: a, configuration: Self.small).add(content, name: "big.bin")
            let journal = GroupSessionJournal(session: b, configuration: GroupSessionJournal.Configuration(window: 2))
            let crashed = Atomic(false)
            let restart = LockedValue<Task<Void, any Error>?>(nil)
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("groupsync-\(UUID().uuidString).bin")
            defer { try? FileManager.default.removeItem(at: file) }
            try await journal.load(added, to: file) { progress in
                if progress.completedBytes > content.count / 4, !crashed.exchange(true, ordering: .relaxed) {
                    switch interruption {
                    case .brokerCrash: restart.withLock { $0 = Task { try await broker.restart(after: .crash) } }
                    case .droppedConnection: bob.dropConnection()
                    }
                }
            }
            let didCrash = crashed.load(ordering: .relaxed)
            #expect(didCrash, "the broker crashed during the load")
            try await restart.withLock { $0 }?.value
            #expect(try Data(contentsOf: file) == content)
            await group.closeAll()
        }
    }

    /// A chunk on the broker that does not match its digest (here written by a raw client, on a broker
    /// without ACL) is rejected, and fetched again until a good one arrives; the load never returns bad
    /// bytes.
    @Test func aCorruptedChunkIsRejectedAndFetchedAgain() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let (_, _, a, b) = try await group.pair(Gallery(galleryID: "corrupt"))
            let content = Self.bytes(80_000)
            let added = try await GroupSessionJournal(session: a, configuration: Self.small).add(content, name: "doc.pdf")
            let topic = GroupTopics(group: group.name).chunk(a.id, attachment: added.digest, index: 2, owner: "alice")
            let forger = try await Self.rawClient(broker, "forger")
            var forged = content[(2 * 16_384)..<(3 * 16_384)]
            forged[forged.startIndex] ^= 0xFF
            try await forger.publish(to: topic, payload: Data(forged), qos: .atLeastOnce, retain: true)

            let rejected = Atomic(0)
            let load = Task {
                try await GroupSessionJournal(session: b).load(added) { progress in
                    rejected.store(progress.rejectedChunks, ordering: .relaxed)
                }
            }
            try await waitUntil("the forged chunk is rejected") { rejected.load(ordering: .relaxed) >= 1 }
            let good = content[(2 * 16_384)..<(3 * 16_384)]
            try await forger.publish(to: topic, payload: Data(good), qos: .atLeastOnce, retain: true)
            #expect(try await load.value == content)
            await forger.disconnect()
            await group.closeAll()
        }
    }

    /// A record whose chunk digests do not hash to its id — here the content's SHA-256 in its place — is
    /// rejected and never listed; the same chunks under their id are listed and load.
    @Test func aRecordWhoseChunksDoNotHashToItsIDIsRejected() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let (_, bob, a, b) = try await group.pair(Gallery(galleryID: "ids"))
            let zoe = try await Self.rawClient(broker, "zoe")
            let content = Self.bytes(40_000)
            let chunks = stride(from: 0, to: content.count, by: 16_384).map { Data(content[$0..<min($0 + 16_384, content.count)]) }
            let digests = chunks.map(SHA256.hex)
            for (index, chunk) in chunks.enumerated() {
                let topic = GroupTopics(group: group.name).chunk(
                    a.id, attachment: SHA256.hex(ofDigests: digests), index: index, owner: "zoe")
                try await zoe.publish(to: topic, payload: chunk, qos: .atLeastOnce, retain: true)
            }
            func publish(id: String) async throws {
                let record = Wire.JournalRecord(
                    id: id, name: "z.bin", type: "application/octet-stream", size: Int64(content.count), chunkSize: 16_384,
                    chunks: digests, added: HLCTimestamp(time: 1, counter: 0, participant: "zoe"))
                let topic = GroupTopics(group: group.name).journal(a.id, attachment: id, owner: "zoe")
                try await zoe.publish(to: topic, payload: try Wire.encode(record), qos: .atLeastOnce, retain: true)
            }
            let rejectedBefore = bob.rejectedMessageCount
            try await publish(id: SHA256.hex(content))
            try await waitUntil("bob rejects the record") { bob.rejectedMessageCount > rejectedBefore }
            #expect(GroupSessionJournal(session: b).attachments.isEmpty, "a rejected record is not listed")

            try await publish(id: SHA256.hex(ofDigests: digests))
            try await waitUntil("bob lists the record under the chunks' id") { GroupSessionJournal(session: b).attachments.count == 1 }
            let listed = GroupSessionJournal(session: b).attachments[0]
            #expect(listed.digest == SHA256.hex(ofDigests: digests) && listed.owner.id == "zoe")
            #expect(try await GroupSessionJournal(session: b).load(listed) == content)
            #expect(bob.rejectedMessageCount == rejectedBefore + 1)
            await zoe.disconnect()
            await group.closeAll()
        }
    }

    /// The record's id binds the chunk digests, not the chunks' lengths: a chunk that matches its digest
    /// but not the length the record gives it shows the owner's record inconsistent, and the load fails at
    /// once with `attachmentCorrupted` instead of handing over more or fewer bytes than the record says.
    @Test func aChunkOfAnotherLengthThanItsRecordSaysFailsTheLoad() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let (_, _, a, b) = try await group.pair(Gallery(galleryID: "lengths"))
            let zoe = try await Self.rawClient(broker, "zoe")
            let content = Self.bytes(20)
            // The record says 16 bytes, then 4; zoe cuts 10 and 10.
            let chunks = [content.prefix(10), content.suffix(10)].map { Data($0) }
            let digests = chunks.map(SHA256.hex)
            let id = SHA256.hex(ofDigests: digests)
            let topics = GroupTopics(group: group.name)
            for (index, chunk) in chunks.enumerated() {
                try await zoe.publish(
                    to: topics.chunk(a.id, attachment: id, index: index, owner: "zoe"), payload: chunk, qos: .atLeastOnce, retain: true)
            }
            let record = Wire.JournalRecord(
                id: id, name: "cut.bin", type: "application/octet-stream", size: 20, chunkSize: 16, chunks: digests,
                added: HLCTimestamp(time: 1, counter: 0, participant: "zoe"))
            try await zoe.publish(
                to: topics.journal(a.id, attachment: id, owner: "zoe"), payload: try Wire.encode(record), qos: .atLeastOnce, retain: true)
            let journal = GroupSessionJournal(session: b)
            try await waitUntil("bob lists zoe's record") { journal.attachments.count == 1 }
            await #expect(throws: GroupSyncError.attachmentCorrupted(digest: id)) { try await journal.load(journal.attachments[0]) }
            await zoe.disconnect()
            await group.closeAll()
        }
    }

    /// A plain MQTT client on `broker` (no ACL: it may write any topic).
    static func rawClient(_ broker: MosquittoBroker, _ name: String) async throws -> MQTTClient {
        var configuration = try MQTTClient.Configuration(url: broker.url)
        configuration.clientID = broker.unique(name)
        let client = try MQTTClient(configuration: configuration)
        try await client.connect()
        return client
    }

    /// Under the example ACL, nobody but the owner can remove or overwrite an attachment: the broker
    /// refuses it, and the attachment stays listed and loadable.
    @Test(.needsOwnBroker("users and an ACL")) func onlyTheOwnerRemovesUnderTheACL() async throws {
        let configuration = MosquittoBroker.Configuration(users: LifetimeTests.users, acl: LifetimeTests.acl)
        try await MosquittoBroker.withBroker(configuration) { broker in
            let group = Group(broker)
            let alice = try await group.join("alice", LifetimeTests.login("alice"))
            let bob = try await group.join("bob", LifetimeTests.login("bob"))
            let a = try await alice.startJoined(Gallery(galleryID: "acl"))
            let b = try await bob.joinSession(a.id, of: Gallery.self)
            let content = Self.bytes(50_000)
            let added = try await GroupSessionJournal(session: a, configuration: Self.small).add(
                content, name: "mine.txt", mediaType: "text/plain")
            try await waitUntil("bob lists it") { GroupSessionJournal(session: b).attachments.count == 1 }

            var login = try MQTTClient.Configuration(url: broker.url)
            (login.username, login.password) = ("mallory", LifetimeTests.users["mallory"])
            let mallory = try MQTTClient(configuration: login)
            try await mallory.connect()
            let topics = GroupTopics(group: group.name)
            let record = topics.journal(a.id, attachment: added.digest, owner: "alice")
            let chunk = topics.chunk(a.id, attachment: added.digest, index: 0, owner: "alice")
            await #expect(throws: MQTTError.notAuthorized(topic: record)) {
                try await mallory.publish(to: record, payload: Data(), qos: .atLeastOnce, retain: true)
            }
            await #expect(throws: MQTTError.notAuthorized(topic: chunk)) {
                try await mallory.publish(to: chunk, payload: Data("forged".utf8), qos: .atLeastOnce, retain: true)
            }
            await #expect(throws: GroupSyncError.notAttachmentOwner(owner: "alice")) {
                try await GroupSessionJournal(session: b).remove(added)
            }
            #expect(GroupSessionJournal(session: b).attachments.map(\.id) == [added.id])
            #expect(try await GroupSessionJournal(session: b).load(added) == content)

            try await GroupSessionJournal(session: a).remove(added)
            try await waitUntil("the owner's remove reaches bob") { GroupSessionJournal(session: b).attachments.isEmpty }
            await mallory.disconnect()
            await group.closeAll()
        }
    }

    /// An add that fails once its chunks are out (here the broker refuses the record) keeps nothing: its
    /// record is not refreshed, its chunks are cleared.
    @Test(.needsOwnBroker("an ACL")) func aFailedAddKeepsNothingOfTheAttachment() async throws {
        let acl = "topic readwrite #\ntopic deny \(GroupTopics.protocolRoot)/+/s/+/journal/+/alice\n"
        try await MosquittoBroker.withBroker(.init(acl: acl)) { broker in
            let group = Group(broker)
            let a = try await group.join("alice").startJoined(Gallery(galleryID: "refused"))
            let photo = Self.bytes(100_000)
            await #expect(throws: GroupSyncError.self) {
                _ = try await GroupSessionJournal(session: a, configuration: Self.small).add(photo, name: "photo.jpg")
            }
            let retained = a.core.context.retained
            let (records, chunks) = ("\(a.core.topics.root)/s/\(a.id)/journal", GroupTopics.chunkProtocolRoot)
            #expect(!(retained.topics(under: records) + retained.topics(under: chunks)).contains(where: retained.keeps), "none refreshed")
            try await waitUntil("nothing is kept, and the chunks are cleared") {
                let stored = try await retainedTopics(broker, under: "\(chunks)/\(group.name)")
                return retained.topics(under: records).isEmpty && retained.topics(under: chunks).isEmpty && stored.isEmpty
            }
            await group.closeAll()
        }
    }

    /// Adding the same bytes again (to rename them) from a cancelled task throws `cancelled` and leaves
    /// the attachment loadable for everyone (where holders serve, the record went out before the wait).
    @Test func aCancelledReAddLeavesTheAttachment() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let a = try await group.join("alice", retainedMessages: false).startJoined(Gallery(galleryID: "rename"))
            let b = try await group.join("bob", retainedMessages: false).joinSession(a.id, of: Gallery.self)
            let (alices, bobs) = (GroupSessionJournal(session: a, configuration: Self.small), GroupSessionJournal(session: b))
            let photo = Self.bytes(50_000)
            let added = try await alices.add(photo, name: "photo.jpg")
            try await waitUntil("bob lists it") { bobs.attachments.map(\.id) == [added.id] }
            let again = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                return try await alices.add(photo, name: "renamed.jpg")
            }
            await #expect(throws: GroupSyncError.cancelled) { _ = try await again.value }
            #expect(alices.attachments.map(\.id) == [added.id])
            #expect(try await bobs.load(bobs.attachments[0]) == photo)
            await group.closeAll()
        }
    }

    /// A load lets go of every chunk subscription it made once it ends, completed or cancelled mid-transfer
    /// (subscriptions still on their way included), whether the chunks are retained or a holder serves them.
    @Test(arguments: [true, false]) func aLoadThatEndsLeavesNoSubscriptionBehind(retained: Bool) async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let a = try await group.join("alice", retainedMessages: retained).startJoined(Gallery(galleryID: "journal"))
            let b = try await group.join("bob", retainedMessages: retained).joinSession(a.id, of: Gallery.self)
            let bobJournal = GroupSessionJournal(session: b, configuration: Self.small)
            let photo = Self.bytes(400_000)
            let added = try await GroupSessionJournal(session: a, configuration: Self.small).add(photo, name: "photo.jpg")
            try await waitUntil("bob lists the photo") { bobJournal.attachments == [added] }
            let client = b.core.context.client
            @Sendable func live() -> [String] { client.connection.state.withLock { $0.liveFilters.map(\.filter) }.sorted() }
            let before = live()
            func completeLoad(_ round: Int) async throws {
                #expect(try await bobJournal.load(added) == photo)
                try await waitUntil("the completed load's subscriptions are gone (round \(round))") { live() == before }
            }
            for round in 0..<8 {
                // Where holders serve, a completed load makes bob one: his next loads read his own copy.
                if retained { try await completeLoad(round) }
                // Cancelled from its own progress report after `round` chunks, with requests on their way.
                let load = Task {
                    try await bobJournal.load(added) { progress in
                        if progress.completedBytes >= round * Self.small.chunkSize { withUnsafeCurrentTask { $0?.cancel() } }
                    }
                }
                await #expect(throws: GroupSyncError.cancelled) { try await load.value }
                try await waitUntil("the cancelled load's subscriptions are gone (round \(round))") { live() == before }
            }
            try await completeLoad(8)
            // Where holders serve, bob's loads now read his own copy: one stops when cancelled, too.
            let fromCopy = Task {
                try await bobJournal.load(added) { progress in
                    if progress.completedBytes > 0 { withUnsafeCurrentTask { $0?.cancel() } }
                }
            }
            await #expect(throws: GroupSyncError.cancelled) { try await fromCopy.value }
            await group.closeAll()
        }
    }

    /// An attachment lives as long as its owner's records: kept while the owner is in the session, gone
    /// from the broker a session TTL after the owner crashed.
    @Test func anAttachmentExpiresWithItsOwnersRecords() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice")
            let a = try await alice.startJoined(Brief(name: "journal"))
            _ = try await GroupSessionJournal(session: a, configuration: Self.small).add(Self.bytes(40_000), name: "brief.bin")
            let root = "\(GroupTopics.chunkProtocolRoot)/\(group.name)"
            @Sendable func chunks() async throws -> [String] { try await retainedTopics(broker, under: root) }
            // Kept: each chunk is published again, live, while alice is in the session.
            let (watcher, seen) = try await rawSubscriber(broker, "\(root)/#")
            try await waitUntil(timeout: timeBound(.seconds(5)), "every chunk is refreshed") {
                Set(seen.elements.filter { !$0.retain }.map(\.topic)).count == 3
            }
            await watcher.disconnect()
            await alice.simulateCrash()
            try await waitUntil(timeout: timeBound(.seconds(5)), "the chunks expire") { try await chunks().isEmpty }
            await group.closeAll()
        }
    }

    /// Without retained messages the owner serves its attachments while it is in the session, and so does
    /// whoever loaded one: a member loads it, a late joiner finds it listed through its catch-up and loads
    /// it too, another loads it after the owner left, from those who loaded it — across two brokers that
    /// share the group's topics (or two nodes of a cluster); nothing is left retained. Once nobody active
    /// holds it, a load fails at once with a typed error, not after a stall.
    @Test(.needsTwoBrokers) func withoutRetainedMessagesTheOwnerServesItsAttachments() async throws {
        try await MosquittoBroker.withBridgedBrokers { broker, other in
            let group = Group(broker)
            let across = Group(other, name: group.name)
            let alice = try await group.join("alice") { $0.mqtt.retainedMessages = false }
            let a = try await alice.startJoined(Gallery(galleryID: "no-retain"))
            let bob = try await across.join("bob") { $0.mqtt.retainedMessages = false }
            let b = try await bob.joinSession(a.id, of: Gallery.self)
            let photo = Self.bytes(300_000)
            let added = try await GroupSessionJournal(session: a, configuration: Self.small).add(
                photo, name: "photo.png", mediaType: "image/png")
            let bobs = GroupSessionJournal(session: b, configuration: Self.small)
            try await waitUntil("bob lists it") { bobs.attachments.map(\.id) == [added.id] }
            let progress = LockedValue<[Int]>([])
            #expect(try await bobs.load(bobs.attachments[0]) { update in progress.withLock { $0.append(update.completedBytes) } } == photo)
            #expect(progress.withLock { $0 }.last == photo.count)

            let carol = try await across.join("carol") { $0.mqtt.retainedMessages = false }
            let c = try await carol.joinSession(a.id, of: Gallery.self)
            let carols = GroupSessionJournal(session: c, configuration: Self.small)
            #expect(carols.attachments.map(\.id) == [added.id], "listed once join() returns: its catch-up lists the journal")
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("journal-\(group.name).png")
            defer { try? FileManager.default.removeItem(at: file) }
            try await carols.load(carols.attachments[0], to: file)
            #expect(try Data(contentsOf: file) == photo)
            let root = "\(GroupTopics.chunkProtocolRoot)/\(group.name)"
            #expect(try await retainedTopics(broker, under: root).isEmpty, "no chunk is retained")

            await a.leave()
            let dave = try await group.join("dave") { $0.mqtt.retainedMessages = false }
            let d = try await dave.joinSession(a.id, of: Gallery.self)
            let daves = GroupSessionJournal(session: d, configuration: Self.small)
            #expect(daves.attachments.map(\.id) == [added.id], "still listed: its catch-up lists the journal")
            #expect(try await daves.load(daves.attachments[0]) == photo, "from bob or carol, who loaded it")

            await b.leave()
            await c.leave()
            try await waitUntil("only dave is left") { ids(d.activeParticipants) == ["dave"] }
            let start = ContinuousClock.now
            let erin = try await group.join("erin") { $0.mqtt.retainedMessages = false }
            let e = try await erin.joinSession(a.id, of: Gallery.self)
            let erins = GroupSessionJournal(session: e, configuration: Self.small)
            #expect(try await erins.load(erins.attachments[0]) == photo, "dave loaded it: he holds it")
            await d.leave()
            try await waitUntil("only erin is left") { ids(e.activeParticipants) == ["erin"] }
            #expect(try await erins.load(erins.attachments[0]) == photo, "her own copy: nobody else need serve it")
            let frank = try await group.join("frank") { $0.mqtt.retainedMessages = false }
            let f = try await frank.joinSession(a.id, of: Gallery.self)
            let franks = GroupSessionJournal(session: f, configuration: Self.small)
            await e.leave()
            try await waitUntil("only frank is left") { ids(f.activeParticipants) == ["frank"] }
            let unavailable = ContinuousClock.now
            await #expect(throws: GroupSyncError.attachmentUnavailable(digest: added.digest, chunk: 0)) {
                try await franks.load(franks.attachments[0])
            }
            #expect(ContinuousClock.now - unavailable < .seconds(1), "at once, not after the stall timeout")
            _ = start
            #expect([alice, bob, carol, dave, erin, frank].map(\.rejectedMessageCount) == [0, 0, 0, 0, 0, 0])
            await across.closeAll()
            await group.closeAll()
        }
    }

    /// Without retained messages, a load whose holder leaves halfway goes on with the next holder, every
    /// byte once.
    @Test func withoutRetainedMessagesALoadMovesToAnotherHolder() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice", retainedMessages: false)
            let a = try await alice.startJoined(Gallery(galleryID: "holders"))
            var sessions: [String: GroupSession<Gallery>] = [:]
            for name in ["bob", "carol", "dave"] {
                sessions[name] = try await group.join(name, retainedMessages: false).joinSession(a.id, of: Gallery.self)
            }
            let photo = Self.bytes(1_000_000)
            let added = try await GroupSessionJournal(session: a, configuration: Self.small).add(photo, name: "big")
            for name in ["bob", "carol"] {
                let journal = GroupSessionJournal(session: sessions[name]!, configuration: Self.small)
                try await waitUntil("\(name) lists it") { !journal.attachments.isEmpty }
                #expect(try await journal.load(journal.attachments[0]) == photo)
            }
            await a.leave()
            let d = sessions["dave"]!
            try await waitUntil("alice left") { !ids(d.activeParticipants).contains("alice") }
            let daves = GroupSessionJournal(session: d, configuration: Self.small)
            let first = try #require(
                d.core.read { $0.journal.servers(of: added.digest, active: ["bob", "carol", "dave"], me: "dave").first })
            let server = sessions[first]!
            let leaving = LockedValue<Task<Void, Never>?>(nil)
            let loaded = try await daves.load(daves.attachments[0]) { progress in
                guard progress.completedBytes > 0 else { return }
                leaving.withLock { task in
                    if task == nil { task = Task { await server.leave() } }
                }
            }
            await leaving.withLock { $0 }?.value
            #expect(loaded == photo, "from \(first), then the other")
            #expect(!ids(d.activeParticipants).contains(first))
            await group.closeAll()
        }
    }

    /// Without retained messages, a holder that says it holds an attachment but sends nothing (here a
    /// forged `$have`, as a member whose copy is gone would be) is given up after the answer timeout for
    /// the next holder, long before the stall timeout.
    @Test func withoutRetainedMessagesASilentHolderIsPassedOver() async throws {
        let load = try await Self.loadPastAFalseHolder(answeringWithGarbage: false, stallTimeout: .seconds(10))
        #expect(load.loaded == load.photo)
        #expect(
            load.took >= .seconds(1) && load.took < .seconds(8),
            "after bob's answer timeout (1 s), not the stall timeout (10 s): \(load.took)")
    }

    /// Without retained messages, a holder whose chunks do not verify (a hostile one here, answering as
    /// bob with garbage) is passed over after a few, before its answer timeout.
    @Test func withoutRetainedMessagesAHolderOfBadChunksIsPassedOver() async throws {
        let load = try await Self.loadPastAFalseHolder(answeringWithGarbage: true, stallTimeout: .seconds(120))
        #expect(load.loaded == load.photo)
        #expect(load.took < .seconds(10), "before bob's answer timeout (12 s): \(load.took)")
        #expect(load.rejected >= GroupSessionJournal.rejectedBeforeMovingOn)
    }

    /// The scene of the two tests above, on a broker without ACL: alice adds an attachment and carol loads
    /// it; mallory, a plain MQTT client, claims with a forged `$have` that bob holds it too — and, if
    /// `answeringWithGarbage`, answers bob's chunk requests as bob; alice leaves. Then a loader for whom
    /// bob ranks before carol loads it, with `stallTimeout`. Returns what it loaded, the attachment's
    /// bytes, how long the load took and how many chunks it rejected.
    static func loadPastAFalseHolder(
        answeringWithGarbage: Bool, stallTimeout: Duration
    ) async throws -> (loaded: Data, photo: Data, took: Duration, rejected: Int) {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let loader = try #require(
                (0..<100).map { "loader\($0)" }.first { SessionStateMachine.rank($0, "bob") > SessionStateMachine.rank($0, "carol") })
            let alice = try await group.join("alice", retainedMessages: false)
            let a = try await alice.startJoined(Gallery(galleryID: "false-holder"))
            let bob = try await group.join("bob", retainedMessages: false)
            _ = try await bob.joinSession(a.id, of: Gallery.self)
            let c = try await group.join("carol", retainedMessages: false).joinSession(a.id, of: Gallery.self)
            let photo = Self.bytes(100_000)
            let added = try await GroupSessionJournal(session: a, configuration: Self.small).add(photo, name: "p")
            let carols = GroupSessionJournal(session: c, configuration: Self.small)
            try await waitUntil("carol lists it") { !carols.attachments.isEmpty }
            #expect(try await carols.load(carols.attachments[0]) == photo)

            let topics = GroupTopics(group: group.name)
            let mallory = try MQTTClient(configuration: .init(url: broker.url))
            try await mallory.connect()
            let requests = try await mallory.subscribe(to: [TopicSubscription("\(topics.root)/s/\(a.id)/to/bob/+")])
            let answering = Task {
                for await message in requests where answeringWithGarbage {
                    guard let envelope = Wire.decodeEnvelope(message.payload), envelope.header.type == "$chunks",
                        let request = Wire.decode(Wire.ChunkRequest.self, from: message.payload[envelope.body])
                    else { continue }
                    for index in request.from..<(request.from + request.count) {
                        let topic = topics.chunk(a.id, attachment: added.digest, index: Int(index), owner: "bob")
                        _ = try? await mallory.publish(to: topic, payload: Data(repeating: 0x42, count: 100), qos: .atLeastOnce)
                    }
                }
            }
            let have = Wire.EnvelopeBytes(encodedBody: try Wire.encode(Wire.Have(id: added.digest)))
                .finished(type: "$have", epoch: bob.epoch, seq: nil, reliable: true)
            try await mallory.publish(to: topics.broadcast(a.id, from: "bob"), payload: Data(have))
            try await waitUntil("alice knows bob holds it") { a.core.read { $0.journal.holders[added.digest] } == ["bob", "carol"] }
            await a.leave()

            let l = try await group.join(loader, retainedMessages: false).joinSession(a.id, of: Gallery.self)
            try await waitUntil("alice is gone for the loader") { !ids(l.activeParticipants).contains("alice") }
            #expect(
                l.core.read { $0.journal.servers(of: added.digest, active: ["bob", "carol", loader], me: loader) } == ["bob", "carol"])
            let journal = GroupSessionJournal(
                session: l, configuration: GroupSessionJournal.Configuration(chunkSize: 16 << 10, window: 4, stallTimeout: stallTimeout))
            let rejected = LockedValue(0)
            let start = ContinuousClock.now
            let loaded = try await journal.load(journal.attachments[0]) { progress in rejected.withLock { $0 = progress.rejectedChunks } }
            let took = ContinuousClock.now - start
            answering.cancel()
            await mallory.disconnect()
            await group.closeAll()
            return (loaded, photo, took, rejected.withLock { $0 })
        }
    }

    /// A member that asks for chunks past the end of an attachment, or someone who is no member, is
    /// refused and reported; the owner goes on serving the others.
    @Test func aChunkRequestOutOfRangeIsRejected() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice") { $0.mqtt.retainedMessages = false }
            let a = try await alice.startJoined(Gallery(galleryID: "requests"))
            let bob = try await group.join("bob") { $0.mqtt.retainedMessages = false }
            let b = try await bob.joinSession(a.id, of: Gallery.self)
            let photo = Self.bytes(100_000)
            let added = try await GroupSessionJournal(session: a, configuration: Self.small).add(photo, name: "p")
            let topics = GroupTopics(group: group.name)
            func ask(_ from: Int64, _ count: Int64, as sender: String) async throws {
                let body = try Wire.encode(Wire.ChunkRequest(id: added.digest, from: from, count: count))
                let envelope = Wire.EnvelopeBytes(encodedBody: body).finished(type: "$chunks", epoch: 1, seq: nil, reliable: true)
                let client = try MQTTClient(configuration: .init(url: broker.url))
                try await client.connect()
                try await client.publish(to: topics.direct(a.id, to: "alice", from: sender), payload: Data(envelope))
                await client.disconnect()
            }
            try await ask(5, 100, as: "bob")  // past the end: 7 chunks
            try await ask(0, 1, as: "mallory")  // no member
            try await waitUntil("both reported") { alice.rejectedMessageCount == 2 }
            let bobs = GroupSessionJournal(session: b, configuration: Self.small)
            try await waitUntil("bob lists it") { !bobs.attachments.isEmpty }
            #expect(try await bobs.load(bobs.attachments[0]) == photo)
            await group.closeAll()
        }
    }

    /// On a broker whose packets stop at 128 KB, the default chunks fit, a larger configured chunk is cut
    /// to fit, and a record too long for one packet is a typed error before anything is sent.
    @Test(.needsOwnBroker("a packet limit of 128 KB")) func aBrokerWith128KBPacketsCarriesTheJournal() async throws {
        try await MosquittoBroker.withBroker(MosquittoBroker.Configuration(extraLines: ["max_packet_size 131072"])) { broker in
            let group = Group(broker)
            let sessions = try await group.joinOneSession(["alice", "bob", "carol"], Gallery(galleryID: "128k"))
            // Each session's journal keeps the configuration it was first made with.
            let (alice, bob) = (
                GroupSessionJournal(session: sessions[0]),
                GroupSessionJournal(session: sessions[1], configuration: .init(chunkSize: 1 << 20))
            )
            let carol = GroupSessionJournal(session: sessions[2], configuration: .init(chunkSize: 16))
            let content = Self.bytes(1 << 20)
            let defaults = try await alice.add(content, name: "one-mib.bin")
            #expect(defaults.record.chunkSize == 64 << 10)
            let cut = try await bob.add(Self.bytes(300_000), name: "cut.bin")
            #expect(cut.record.chunkSize < 131_072 && cut.record.chunks.count == 3, "\(cut.record.chunkSize) × \(cut.record.chunks.count)")
            try await waitUntil("carol lists both") { carol.attachments.count == 2 }
            #expect(try await carol.load(defaults) == content)
            #expect(try await alice.load(cut).count == 300_000)
            await #expect {
                try await carol.add(Self.bytes(200_000), name: "t")
            } throws: { error in
                guard case .journalLimitExceeded(.recordSize)? = error as? GroupSyncError else { return false }
                return true
            }
            await group.closeAll()
        }
    }

    /// Each limit is a typed error that names it, before anything is sent.
    @Test func theLimitsAreTypedErrors() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let (_, _, a, b) = try await group.pair(Gallery(galleryID: "limits"))
            let limits = GroupSessionJournal.Configuration(
                chunkSize: 1_024, maximumAttachmentSize: 3_000, maximumSessionSize: 5_000, maximumAttachmentCount: 3)
            let journal = GroupSessionJournal(session: a, configuration: limits)
            await #expect(throws: GroupSyncError.journalLimitExceeded(.attachmentSize(size: 3_001, limit: 3_000))) {
                try await journal.add(Self.bytes(3_001), name: "too-big")
            }
            _ = try await journal.add(Self.bytes(3_000), name: "one")
            await #expect(throws: GroupSyncError.journalLimitExceeded(.sessionSize(total: 5_001, limit: 5_000))) {
                try await journal.add(Self.bytes(2_001), name: "over-the-session")
            }
            _ = try await journal.add(Self.bytes(1_000), name: "two")
            _ = try await journal.add(Self.bytes(10), name: "three")
            await #expect(throws: GroupSyncError.journalLimitExceeded(.attachmentCount(count: 4, limit: 3))) {
                try await journal.add(Self.bytes(10), name: "four")
            }
            // A receiver holds loads to its own limit.
            let big = try #require(journal.attachments.first { $0.name == "one" })
            try await waitUntil("bob lists three") {
                GroupSessionJournal(session: b, configuration: .init(maximumAttachmentSize: 2_000)).attachments.count == 3
            }
            await #expect(throws: GroupSyncError.journalLimitExceeded(.attachmentSize(size: 3_000, limit: 2_000))) {
                try await GroupSessionJournal(session: b).load(big)
            }
            #expect(
                GroupSyncError.journalLimitExceeded(.sessionSize(total: 5_001, limit: 5_000)).description.contains("maximumSessionSize"))
            await group.closeAll()
        }
    }

    /// `end()` removes every attachment — records and chunks, everyone's — from the broker, also under
    /// the ACL (where each owner clears its own once it sees the end) and when the one who ends it never
    /// joined.
    @Test(
        .needsOwnBroker("one case runs it with users and an ACL"),
        arguments: [(acl: false, enderJoined: true), (acl: true, enderJoined: true), (acl: false, enderJoined: false)])
    func endLeavesNothingRetained(acl: Bool, enderJoined: Bool) async throws {
        let configuration = acl ? MosquittoBroker.Configuration(users: LifetimeTests.users, acl: LifetimeTests.acl) : .init()
        try await MosquittoBroker.withBroker(configuration) { broker in
            let group = Group(broker)
            let login: (String) -> (inout GroupCoordinator.Configuration) -> Void = { acl ? LifetimeTests.login($0) : { _ in } }
            let alice = try await group.join("alice", login("alice"))
            let bob = try await group.join("bob", login("bob"))
            let a = try await alice.startJoined(Gallery(galleryID: "end"))
            let b = try await bob.joinSession(a.id, of: Gallery.self)
            _ = try await GroupSessionJournal(session: a, configuration: Self.small).add(Self.bytes(40_000), name: "a1")
            _ = try await GroupSessionJournal(session: a).add(Self.bytes(1_000), name: "a2")
            _ = try await GroupSessionJournal(session: b, configuration: Self.small).add(Self.bytes(30_000), name: "b1")
            let roots = ["\(GroupTopics.protocolRoot)/\(group.name)", "\(GroupTopics.chunkProtocolRoot)/\(group.name)"]
            let (user, password) = acl ? ("bob", LifetimeTests.users["bob"]) : (nil, nil)
            // Markers bob may write under each root.
            let markers = ["\(roots[0])/alive/bob", "\(roots[1])/marker/m.0/bob"]
            @Sendable func stored() async throws -> [String] {
                var topics: [String] = []
                for (root, marker) in zip(roots, markers) {
                    topics += try await retainedTopics(broker, under: root, marker: marker, user: user, password: password)
                }
                return topics
            }
            #expect(Set(try await stored().filter { $0.hasPrefix(roots[1]) }).count == 3 + 1 + 2)
            if enderJoined {
                await b.end()
            } else {
                let carol = try await group.join("carol", login("alice"))
                let c = try await carol.firstSession(of: Gallery.self)
                await c.end()
            }
            try await waitUntil(timeout: timeBound(.seconds(5)), "nothing of the session is left on the broker") {
                try await stored().filter { $0.contains(a.id) }.isEmpty
            }
            await group.closeAll()
        }
    }
}
