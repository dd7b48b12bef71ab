import BrokerSupport
import Foundation
import Testing

@testable import GroupSync
@testable import MQTT

/// docs/PROTOCOL.md checked from the outside: a raw MQTT client that knows only the document — topics as
/// strings, payloads through `JSONSerialization`, never GroupSync's `Wire` types — reads GroupSync traffic
/// and takes part in a session as a participant written in another language would.
///
/// Set `GROUPSYNC_PRINT_WIRE=1` to print every captured message (how the examples in the document were made).
@Suite(.timeLimit(.minutes(timeLimitMinutes(1)))) struct ProtocolConformanceTests {
    @Test func aRawClientDecodesEveryPayloadWithTheDocumentedRules() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let root = "groupsync/v2/\(group.name)"
            let marker = "\(root)/marker"
            let (raw, wire) = try await rawSubscriber(broker, "\(root)/#")
            let alice = try await group.join("alice") { $0.displayName = "Alice" }
            let bob = try await group.join("bob")
            let a = try await alice.startJoined(Gallery(galleryID: "wire"))
            try await SharedState(a, key: "index", initialValue: 0).set(3)
            let b = try await bob.joinSession(a.id, of: Gallery.self)
            #expect(try SharedState(b, key: "index", initialValue: 0).value == 3, "caught up")
            let session = "\(root)/s/\(a.id)"
            let aliceChats = Collector(GroupSessionMessenger(session: a).messages(of: Chat.self))
            let bobChats = Collector(GroupSessionMessenger(session: b).messages(of: Chat.self))
            try await GroupSessionMessenger(session: a).send(Chat(text: "hello"))
            try await GroupSessionMessenger(session: b, deliveryMode: .unreliable).send(
                Chat(text: "psst"), to: .only(Participant(id: "alice")))
            try await bobChats.waitForCount(1)
            try await aliceChats.waitForCount(1)

            // Retained: a new subscriber first receives exactly presence, announcement, members and state.
            let (late, replay) = try await rawSubscriber(broker, "\(root)/#")
            try await late.publish(to: marker, string: "late")
            try await waitUntil("the late subscriber's marker") { replay.elements.contains { $0.topic == marker } }
            // A heartbeat (live, not retained, every keepalive / 2) may come in between.
            let beforeMarker = replay.elements.prefix { $0.topic != marker }
            let stored = beforeMarker.filter(\.retain)
            #expect(beforeMarker.allSatisfy { $0.retain || $0.topic.hasPrefix("\(root)/alive/") })
            #expect(
                Set(stored.map(\.topic)) == [
                    "\(root)/presence/alice", "\(root)/presence/bob", "\(root)/session/\(a.id)/alice", "\(root)/session/\(a.id)/bob",
                    "\(session)/member/alice", "\(session)/member/bob", "\(session)/state/index/alice",
                ])
            // Every stored record has a lifetime on the broker (what is left of it: at most the session's).
            #expect(stored.allSatisfy { ($0.properties.messageExpiry ?? 0) > 0 && $0.properties.messageExpiry! <= 3600 })
            await late.disconnect()

            // End: `$end`, the ended copy, then empty payloads for every copy, members and state; close: empty
            // presence.
            await a.end()
            await group.closeAll()
            let cleared: Set<String> = [
                "\(root)/session/\(a.id)/alice", "\(root)/session/\(a.id)/bob", "\(session)/member/alice", "\(session)/member/bob",
                "\(session)/state/index/alice", "\(root)/presence/alice", "\(root)/presence/bob",
            ]
            try await waitUntil("every retained message cleared") {
                cleared.isSubset(of: Set(wire.elements.filter(\.payload.isEmpty).map(\.topic)))
            }
            _ = try await raw.publish(to: marker, string: "done")
            try await waitUntil("the marker") { wire.elements.contains { $0.topic == marker } }
            await raw.disconnect()

            let messages = wire.elements.filter { $0.topic != marker }
            if ProcessInfo.processInfo.environment["GROUPSYNC_PRINT_WIRE"] != nil {
                for message in messages { print("WIRE \(message.topic) \(message.string ?? "<binary>")") }
            }
            var reader = DocumentedReader(group: group.name)
            for message in messages { try reader.read(message) }
            #expect(
                reader.kinds.subtracting(["heartbeat", "$position"]) == [
                    "presence", "announcement", "ended", "member", "state", "Chat", "$catchup", "$end",
                ],
                "heartbeats come every keepalive / 2, a position statement a heartbeat interval after a reliable message: maybe none in this capture"
            )
            #expect(reader.presences["alice"]?.name == "Alice" && reader.presences["bob"]?.name == nil)
            #expect(reader.presences.values.allSatisfy { !$0.statuses.contains("lost") }, "a clean close sends no will")
            // Reliable app messages are numbered per stream; control messages carry no seq.
            #expect(reader.reliable["alice"]?.map(\.type) == ["Chat"])
            #expect(reader.reliable["alice"]?.map(\.seq) == [1])
            #expect(reader.control["alice"]?.filter { $0 != "$position" } == ["$catchup", "$end"])
            #expect(reader.unreliable["bob"]?.map(\.seq) == [1])
            #expect(reader.catchUps.map(\.topic) == ["\(session)/to/bob/alice"], "alice, the only active one, answers bob")
            #expect(reader.rejected.isEmpty, "\(reader.rejected)")
        }
    }

    @Test func aHandWrittenForeignParticipantIsActiveAndItsMessagesArrive() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let root = "groupsync/v2/\(group.name)"
            let (alice, _, a, b) = try await group.pair(Gallery(galleryID: "foreign"))
            try await SharedState(a, key: "index", initialValue: 0).set(5)
            let aliceChats = Collector(GroupSessionMessenger(session: a).messages(of: Chat.self))
            let bobChats = Collector(GroupSessionMessenger(session: b).messages(of: Chat.self))

            // Connect: a unique client ID, MQTT 5, the will = retained `lost` presence with this epoch.
            let epoch = Int64(Date().timeIntervalSince1970 * 1_000)
            var configuration = try MQTTClient.Configuration(url: broker.url, clientID: "gs-zoe-\(UInt32.random(in: 0...UInt32.max))")
            configuration.reconnect = Backoff(initial: .seconds(30), maximum: .seconds(30))
            configuration.will = .init(
                topic: "\(root)/presence/zoe", payload: Array(#"{"epoch":\#(epoch),"participant":"zoe","status":"lost","v":2}"#.utf8),
                qos: .atLeastOnce, retain: true)
            let zoe = try MQTTClient(configuration: configuration)
            try await zoe.connect()
            try await zoe.publish(
                to: "\(root)/presence/zoe", string: #"{"epoch":\#(epoch),"name":"Zoë","participant":"zoe","status":"online","v":2}"#,
                qos: .atLeastOnce, retain: true)

            // Listen: the session is found through its retained announcement.
            let group0 = Collector(
                try await zoe.subscribe(to: [
                    TopicSubscription("\(root)/presence/+", qos: .atLeastOnce), TopicSubscription("\(root)/session/+/+", qos: .atLeastOnce),
                ]))
            try await waitUntil("the announcement") { group0.elements.contains { $0.topic == "\(root)/session/\(a.id)/alice" } }
            let announcement = try DocumentedReader.object(group0.elements.first { $0.topic == "\(root)/session/\(a.id)/alice" }!.payload)
            #expect((announcement["activity"] as? [String: Any])?["type"] as? String == Gallery.activityIdentifier)

            // Join: subscribe, publish the member record, wait for it to come back (the barrier) and for `$catchup`.
            let base = "\(root)/s/\(a.id)"
            let inbox = Collector(
                try await zoe.subscribe(to: [
                    TopicSubscription("\(base)/member/+", qos: .atLeastOnce), TopicSubscription("\(base)/state/+/+", qos: .atLeastOnce),
                    TopicSubscription("\(base)/to/zoe/+", qos: .atLeastOnce),
                    TopicSubscription("\(base)/all/+", qos: .atLeastOnce, noLocal: true),
                ]))
            try await zoe.publish(to: "\(base)/member/zoe", string: #"{"epoch":\#(epoch),"participant":"zoe","v":2}"#, retain: true)
            try await waitUntil("own member record echoed") { inbox.elements.contains { $0.topic == "\(base)/member/zoe" } }
            try await waitUntil("$catchup") { inbox.elements.contains { $0.topic.hasPrefix("\(base)/to/zoe/") } }
            let expectedResponder = DocumentedReader.catchUpResponder(newcomer: "zoe", active: ["alice", "bob"])
            let catchUp = try DocumentedReader.object(inbox.elements.first { $0.topic.hasPrefix("\(base)/to/zoe/") }!.payload)
            let catchUpBody = try #require(catchUp["body"] as? [String: Any])
            let caughtUpStates = try #require(catchUpBody["states"] as? [[String: Any]])
            #expect(caughtUpStates.map { $0["key"] as? String } == ["index"] && caughtUpStates.first?["value"] as? Int == 5)
            // This broker retains: zoe read every member record before her echo, so none is listed again.
            let caughtUpMembers = try #require(catchUpBody["members"] as? [[String: Any]])
            #expect(caughtUpMembers.isEmpty)
            try await waitUntil("zoe is active for alice and bob") {
                ids(a.activeParticipants) == ["alice", "bob", "zoe"] && ids(b.activeParticipants) == ["alice", "bob", "zoe"]
            }

            // State: an HLC record newer than everything seen wins; one with a forged clock participant is ignored.
            let seen = try #require(caughtUpStates.first?["clock"] as? [String: Any])
            let seenTime = try #require(seen["t"] as? Int64), seenCounter = try #require(seen["c"] as? Int64)
            let now = Int64(Date().timeIntervalSince1970 * 1_000)
            let (t, c) = now > seenTime ? (now, Int64(0)) : (seenTime, seenCounter + 1)
            let rejectedBefore = alice.rejectedMessageCount
            try await zoe.publish(
                to: "\(base)/state/index/zoe", string: #"{"clock":{"c":\#(c),"p":"zoe","t":\#(t)},"key":"index","v":2,"value":9}"#,
                retain: true)
            try await zoe.publish(
                to: "\(base)/state/other/zoe", string: #"{"clock":{"c":0,"p":"alice","t":\#(t + 1)},"key":"other","v":2,"value":1}"#,
                retain: true)
            try await waitUntil("zoe's write wins") { try SharedState(a, key: "index", initialValue: 0).value == 9 }
            try await waitUntil("the forged clock is counted") { alice.rejectedMessageCount > rejectedBefore }
            #expect(try SharedState(a, key: "other", initialValue: 0).value == 0)

            // Messages: seq per sender, epoch and reliability; a redelivered reliable seq is dropped; wrong `v` is rejected.
            func envelope(_ seq: Int, _ text: String, v: Int = 2) -> String {
                #"{"body":{"text":"\#(text)"},"epoch":\#(epoch),"reliable":true,"seq":\#(seq),"type":"Chat","v":\#(v)}"#
            }
            try await zoe.publish(to: "\(base)/all/zoe", string: envelope(1, "hallo"))
            try await zoe.publish(to: "\(base)/all/zoe", string: envelope(1, "hallo"))  // a redelivery
            try await zoe.publish(to: "\(base)/all/zoe", string: envelope(2, "from the future", v: 3))
            try await zoe.publish(to: "\(base)/all/zoe", string: envelope(2, "wie geht's?"))
            try await zoe.publish(to: "\(base)/to/alice/zoe", string: envelope(1, "nur für alice"))  // her own stream
            try await aliceChats.waitForCount(3)
            try await bobChats.waitForCount(2)
            #expect(aliceChats.elements.map(\.message.text) == ["hallo", "wie geht's?", "nur für alice"])
            #expect(bobChats.elements.map(\.message.text) == ["hallo", "wie geht's?"])
            #expect((aliceChats.elements + bobChats.elements).allSatisfy { $0.context.source == Participant(id: "zoe") })

            // Exactly one participant answered: every catch-up was queued for zoe before alice and bob read
            // her messages, and the broker's queue to zoe is FIFO, so all are in before this marker.
            try await zoe.publish(to: "\(base)/to/zoe/zoe", string: "marker")
            try await waitUntil("the marker") { inbox.elements.contains { $0.topic == "\(base)/to/zoe/zoe" } }
            #expect(
                inbox.elements.filter { $0.topic.hasPrefix("\(base)/to/zoe/") && $0.topic != "\(base)/to/zoe/zoe" }.map(\.topic)
                    == ["\(base)/to/zoe/\(expectedResponder)"])

            // Leave: an empty member record. Crash: the will marks zoe lost.
            try await zoe.publish(to: "\(base)/member/zoe", payload: Data(), retain: true)
            try await waitUntil("zoe left") {
                ids(a.activeParticipants) == ["alice", "bob"] && ids(b.activeParticipants) == ["alice", "bob"]
            }
            #expect(alice.state.withLock { $0.machine.online["zoe"] } == epoch)
            zoe.connection.closeSocketAbruptly()
            try await waitUntil("zoe's will arrives") { alice.state.withLock { $0.machine.online["zoe"] } == nil }
            await zoe.disconnect()
            await group.closeAll()
        }
    }

    @Test(.needsOwnBroker("users and an ACL")) func theExampleACLMakesIdentitiesUnforgeableAndSessionsStillWork() async throws {
        let acl = try String(
            contentsOf: DocumentedReader.repository.appendingPathComponent("deploy/mosquitto/acl.example"), encoding: .utf8)
        let users = ["alice": "alice-pw", "bob": "bob-pw"]
        try await MosquittoBroker.withBroker(.init(users: users, acl: acl)) { broker in
            let group = Group(broker)
            let root = "groupsync/v2/\(group.name)"
            func login(_ name: String) -> (inout GroupCoordinator.Configuration) -> Void {
                {
                    $0.mqtt.username = name
                    $0.mqtt.password = users[name]
                }
            }
            let alice = try await group.join("alice", login("alice"))
            let bob = try await group.join("bob", login("bob"))
            // A second connection of bob's account, reading everything it is allowed to.
            let (spy, spied) = try await rawSubscriber(broker, "\(root)/#", user: "bob", password: users["bob"]!)

            let a = try await alice.startJoined(Gallery(galleryID: "acl"))
            let b = try await bob.joinSession(a.id, of: Gallery.self)
            try await SharedState(a, key: "index", initialValue: 0).set(1)
            try await waitUntil("alice's write reaches bob") { try SharedState(b, key: "index", initialValue: 0).value == 1 }
            try await SharedState(b, key: "index", initialValue: 0).set(2)
            try await waitUntil("bob's write reaches alice") { try SharedState(a, key: "index", initialValue: 0).value == 2 }
            let aliceChats = Collector(GroupSessionMessenger(session: a).messages(of: Chat.self))
            let bobMessenger = GroupSessionMessenger(session: b)
            try await bobMessenger.send(Chat(text: "for alice only"), to: .only(Participant(id: "alice")))
            try await bobMessenger.send(Chat(text: "for all"))
            try await aliceChats.waitForCount(2)
            #expect(aliceChats.elements.map(\.message.text) == ["for alice only", "for all"])

            // Bob's account reads the broadcast, but not his own direct message to alice (read only …/to/bob/+).
            try await waitUntil("the spy sees the broadcast") { spied.elements.contains { $0.string?.contains("for all") == true } }
            #expect(!spied.elements.contains { $0.topic.contains("/to/alice/") })
            // Bob's account cannot publish as alice (MQTT 5, QoS 1: PUBACK reason 135).
            await #expect(throws: MQTTError.notAuthorized(topic: "\(root)/presence/alice")) {
                try await spy.publish(to: "\(root)/presence/alice", string: "{}", qos: .atLeastOnce)
            }
            await #expect(throws: MQTTError.notAuthorized(topic: "\(root)/s/\(a.id)/all/alice")) {
                try await spy.publish(to: "\(root)/s/\(a.id)/all/alice", string: "{}", qos: .atLeastOnce)
            }

            // End: alice may not clear bob's records; bob clears them himself when he sees the session end.
            await a.end()
            try await waitUntil("bob invalidated") { b.state.isInvalidated }
            try await waitUntil("nothing of the session is left on the broker") {
                let stored = try await retainedTopics(
                    broker, under: root, marker: "\(root)/s/probe/all/alice", user: "alice", password: users["alice"]!)
                return !stored.contains { $0.contains(a.id) }
            }
            await spy.disconnect()
            await group.closeAll()
        }
    }

    /// PROTOCOL.md, "Stale wills": a participant that sees its own presence as `lost` (any epoch) while
    /// connected publishes its online presence again, so the retained record is right for newcomers.
    @Test func aStaleWillOfAnOlderConnectionIsOverwrittenByItsOwner() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let root = "groupsync/v2/\(group.name)"
            let alice = try await group.join("alice")
            let (raw, seen) = try await rawSubscriber(broker, "\(root)/presence/+")
            // The will of alice's previous process, delivered late (its broker connection timed out only now).
            try await raw.publish(
                to: "\(root)/presence/alice", string: #"{"epoch":\#(alice.epoch - 10_000),"participant":"alice","status":"lost","v":2}"#,
                retain: true)
            // Alice has read the stale will once she has read this later presence of someone else.
            try await raw.publish(to: "\(root)/presence/zed", string: #"{"epoch":1,"participant":"zed","status":"online","v":2}"#)
            try await waitUntil("alice read both") { alice.state.withLock { $0.machine.online["zed"] } == 1 }
            try await waitUntil(timeout: timeBound(.seconds(1)), "alice republishes her online presence") {
                seen.elements.last { $0.topic == "\(root)/presence/alice" }?.string?.contains(#""status":"online""#) == true
            }
            await raw.disconnect()
            await group.closeAll()
        }
    }

    /// PROTOCOL.md, "Reconnect": only records of live sessions are republished; an ended session stays ended.
    @Test func anEndedSessionIsNotAnnouncedAgainAfterAReconnect() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let root = "groupsync/v2/\(group.name)"
            let alice = try await group.join("alice")
            let bob = try await group.join("bob")
            let ended = try await alice.startJoined(Gallery(galleryID: "ended"))
            let b = try await bob.joinSession(ended.id, of: Gallery.self)
            let live = try await alice.startJoined(Whiteboard(name: "live"))
            try await SharedState(live, key: "last", initialValue: 0).set(1)
            await b.end()  // bob ends alice's session
            try await waitUntil("alice sees the end") { ended.state.isInvalidated }
            let (raw, seen) = try await rawSubscriber(broker, "\(root)/#")
            alice.dropConnection()
            // Republishing goes presence, announcements, members, state: the live state record comes last.
            try await waitUntil("alice republished") {
                seen.elements.contains { $0.topic.hasSuffix("/s/\(live.id)/state/last/alice") && !$0.retain }
            }
            #expect(!seen.elements.contains { $0.topic.hasPrefix("\(root)/session/\(ended.id)/") && !$0.retain && !$0.payload.isEmpty })
            await raw.disconnect()
            await group.closeAll()
        }
    }

    /// PROTOCOL.md, "Journal": a participant written from the document alone adds an attachment — chunks
    /// retained with the session's ttl as expiry, at most a window unacknowledged, then the record — and a
    /// Swift participant lists and loads it.
    @Test func aHandWrittenParticipantAddsAnAttachmentThatSwiftLoads() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let root = "groupsync/v2/\(group.name)"
            let alice = try await group.join("alice")
            let a = try await alice.startJoined(Gallery(galleryID: "attach"))
            let lists = Collector(GroupSessionJournal(session: a).attachmentUpdates())
            defer { lists.cancel() }

            var configuration = try MQTTClient.Configuration(url: broker.url)
            configuration.clientID = broker.unique("gs-zoe")
            let zoe = try MQTTClient(configuration: configuration)
            try await zoe.connect()
            // The session's ttl, from its announcement: the lifetime of everything of the session.
            let announcements = Collector(
                try await zoe.subscribe(to: [TopicSubscription("\(root)/session/\(a.id)/+", qos: .atLeastOnce)]))
            try await waitUntil("the announcement") { !announcements.elements.isEmpty }
            let ttl = try #require(DocumentedReader.integer(try DocumentedReader.object(announcements.elements[0].payload)["ttl"]))
            let expiry = MQTTProperties(messageExpiry: UInt32(ttl))

            // Content: 3 chunks of 65,536 bytes, the last one shorter; digests as 64 lowercase hexadecimal digits.
            let content = Data((0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 7919) })
            let chunkSize = 65_536
            let chunks = stride(from: 0, to: content.count, by: chunkSize).map { content[$0..<min($0 + chunkSize, content.count)] }
            let digests = chunks.map { SHA256.hex(Data($0)) }
            let id = DocumentedReader.attachmentID(digests)
            let chunkTopics = chunks.indices.map { "groupsync/v2-chunks/\(group.name)/\(a.id)/\(id).\($0)/zoe" }
            for (topic, chunk) in zip(chunkTopics, chunks) {  // each acknowledged before the next: a window of 1
                try await zoe.publish(to: topic, payload: Data(chunk), qos: .atLeastOnce, retain: true, properties: expiry)
            }
            let now = Int64(Date().timeIntervalSince1970 * 1_000)
            let record =
                #"{"added":{"c":0,"p":"zoe","t":\#(now)},"chunkSize":\#(chunkSize),"#
                + #""chunks":[\#(digests.map { "\"\($0)\"" }.joined(separator: ","))],"id":"\#(id)","#
                + #""metadata":{"caption":"from zoe"},"name":"pattern.bin","size":\#(content.count),"#
                + #""type":"application/octet-stream","v":2}"#
            try await zoe.publish(
                to: "\(root)/s/\(a.id)/journal/\(id)/zoe", string: record, qos: .atLeastOnce, retain: true, properties: expiry)

            try await waitUntil("alice lists zoe's attachment") { lists.elements.last?.count == 1 }
            let listed = try #require(GroupSessionJournal(session: a).attachments.first)
            #expect(listed.owner.id == "zoe" && listed.name == "pattern.bin" && listed.size == content.count)
            #expect(listed.metadata == ["caption": "from zoe"] && listed.digest == id)
            #expect(try await GroupSessionJournal(session: a).load(listed) == content)

            // Remove (the owner): the record first, then the chunks.
            try await zoe.publish(to: "\(root)/s/\(a.id)/journal/\(id)/zoe", payload: Data(), qos: .atLeastOnce, retain: true)
            for topic in chunkTopics { try await zoe.publish(to: topic, payload: Data(), qos: .atLeastOnce, retain: true) }
            try await waitUntil("alice's list is empty again") { lists.elements.last == [] }
            await zoe.disconnect()
            await group.closeAll()
        }
    }

    /// PROTOCOL.md, "Journal": a raw client that follows the document alone reads the record a Swift
    /// participant added, fetches every chunk from its exact topic and verifies the digests; `end()`
    /// clears the record and the chunks.
    @Test func aRawClientLoadsAnAttachmentSwiftAdded() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let root = "groupsync/v2/\(group.name)"
            let alice = try await group.join("alice")
            let a = try await alice.startJoined(Gallery(galleryID: "wire"))
            let photo = Data((0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 8) })
            _ = try await GroupSessionJournal(session: a).add(
                photo, name: "photo.jpg", mediaType: "image/jpeg", metadata: ["caption": "Lake"])

            let (raw, records) = try await rawSubscriber(broker, "\(root)/s/\(a.id)/journal/+/+")
            try await waitUntil("the journal record") { !records.elements.isEmpty }
            let message = records.elements[0]
            let levels = message.topic.split(separator: "/").map(String.init)
            let (attachment, owner) = (levels[6], levels[7])
            #expect(message.retain && (message.properties.messageExpiry ?? 0) > 0, "retained, with an expiry")
            let record = try DocumentedReader.object(message.payload)
            #expect(Set(record.keys) == ["v", "id", "name", "type", "size", "chunkSize", "chunks", "added", "metadata"])
            #expect(DocumentedReader.integer(record["v"]) == 2)
            #expect(record["id"] as? String == attachment && (record["added"] as? [String: Any])?["p"] as? String == owner)
            #expect(record["name"] as? String == "photo.jpg" && record["type"] as? String == "image/jpeg")
            #expect(record["metadata"] as? [String: String] == ["caption": "Lake"])
            let size = try #require(DocumentedReader.integer(record["size"]))
            let chunkSize = try #require(DocumentedReader.integer(record["chunkSize"]))
            let digests = try #require(record["chunks"] as? [String])
            #expect(size == photo.count && chunkSize == 65_536 && digests.count == Int((size + chunkSize - 1) / chunkSize))
            #expect(([attachment] + digests).allSatisfy { $0.utf8.count == 64 && $0.allSatisfy { "0123456789abcdef".contains($0) } })
            #expect(DocumentedReader.attachmentID(digests) == attachment, "the id binds the chunk digests")

            // Load: one exact topic per chunk (both fit one window), verify each: the id binds their digests.
            let chunkTopics = digests.indices.map { "groupsync/v2-chunks/\(group.name)/\(a.id)/\(attachment).\($0)/\(owner)" }
            let chunks = Collector(try await raw.subscribe(to: chunkTopics.map { TopicSubscription($0, qos: .atLeastOnce) }))
            try await waitUntil("every chunk") { Set(chunks.elements.map(\.topic)) == Set(chunkTopics) }
            var whole = Data()
            for (index, topic) in chunkTopics.enumerated() {
                let chunk = try #require(chunks.elements.first { $0.topic == topic })
                #expect(chunk.retain && (chunk.properties.messageExpiry ?? 0) > 0)
                #expect(SHA256.hex(chunk.payload) == digests[index], "chunk \(index)")
                #expect(index == digests.count - 1 ? chunk.payload.count <= chunkSize : chunk.payload.count == chunkSize)
                whole.append(chunk.payload)
            }
            #expect(whole == photo)
            if ProcessInfo.processInfo.environment["GROUPSYNC_PRINT_WIRE"] != nil {
                print("WIRE \(message.topic) \(message.string ?? "<binary>")")
                for chunk in chunks.elements { print("WIRE \(chunk.topic) <\(chunk.payload.count) bytes>") }
            }

            // End: the record and its chunks are cleared.
            await a.end()
            try await waitUntil("the record and the chunks cleared") {
                let cleared = Set(chunks.elements.filter(\.payload.isEmpty).map(\.topic))
                return cleared == Set(chunkTopics) && records.elements.last?.payload.isEmpty == true
            }
            await raw.disconnect()
            await group.closeAll()
        }
    }
}

/// A reader of protocol v2 written from docs/PROTOCOL.md alone: topic levels and `JSONSerialization`.
struct DocumentedReader {
    let group: String
    /// Which kinds of payload were seen: presence, announcement, member, state, and each message type.
    private(set) var kinds: Set<String> = []
    private(set) var presences: [String: (epoch: Int64, name: String?, statuses: [String])] = [:]
    private(set) var reliable: [String: [(type: String, seq: Int64)]] = [:]
    private(set) var control: [String: [String]] = [:]
    private(set) var unreliable: [String: [(type: String, seq: Int64)]] = [:]
    private(set) var catchUps: [MQTTMessage] = []
    private(set) var rejected: [String] = []

    init(group: String) { self.group = group }

    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    // MARK: Rules of the document

    /// `A–Z a–z 0–9 . _ - : @ ~`, 1–128 bytes.
    static func isIdentifier(_ value: String) -> Bool {
        let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-:@~".utf8)
        return (1...128).contains(value.utf8.count) && value.utf8.allSatisfy(allowed.contains)
    }

    /// FNV-1a 64 of the UTF-8 bytes.
    static func fnv1a64(_ text: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        return hash
    }

    /// The active participant (other than the newcomer) with the largest FNV-1a 64 of
    /// `"<newcomer>/<candidate>"`; on equal hashes the larger ID.
    static func catchUpResponder(newcomer: String, active: [String]) -> String {
        active.filter { $0 != newcomer }.max { (fnv1a64("\(newcomer)/\($0)"), $0) < (fnv1a64("\(newcomer)/\($1)"), $1) }!
    }

    /// A journal attachment's id: the SHA-256 of its chunks' digests, each as its 32 bytes, one after another.
    static func attachmentID(_ digests: [String]) -> String {
        let bytes = digests.flatMap { digest in
            stride(from: 0, to: 64, by: 2).map { UInt8(digest.dropFirst($0).prefix(2), radix: 16) ?? 0 }
        }
        return SHA256.hex(Data(bytes))
    }

    static func object(_ payload: Data) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: payload) as? [String: Any], "a JSON object")
    }

    static func isBool(_ value: Any?) -> Bool {
        guard let value, value is NSNumber else { return false }
        return String(describing: type(of: value)).contains("Boolean")
    }

    static func integer(_ value: Any?) -> Int64? {
        isBool(value) ? nil : value as? Int64
    }

    // MARK: Reading

    mutating func read(_ message: MQTTMessage) throws {
        let levels = message.topic.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        try #require(levels.count >= 5 && levels.count <= 8, "at most 8 levels: \(message.topic)")
        try #require(levels[0] == "groupsync" && levels[1] == "v2" && levels[2] == group, "\(message.topic)")
        #expect(levels.dropFirst(2).allSatisfy(DocumentedReader.isIdentifier), "\(message.topic)")
        // An empty payload clears a retained message: offline, ended, left, or state removed.
        guard !message.payload.isEmpty else { return }
        let json = try DocumentedReader.object(message.payload)
        #expect(DocumentedReader.integer(json["v"]) == 2, "\(message.topic)")
        // Compact JSON with sorted keys, `/` unescaped: byte for byte what a sorted-keys serializer writes.
        let canonical = try JSONSerialization.data(withJSONObject: json, options: [.sortedKeys, .withoutEscapingSlashes])
        #expect(canonical == message.payload, "\(message.string ?? "")")
        let last = levels[levels.count - 1]
        switch (levels.count, levels[3]) {
        case (5, "presence"):
            kinds.insert("presence")
            try expectKeys(json, ["v", "participant", "status", "epoch"], optional: ["name", "interval"], message)
            #expect(json["participant"] as? String == last)
            let status = try #require(json["status"] as? String)
            #expect(["online", "lost"].contains(status))
            let epoch = try #require(DocumentedReader.integer(json["epoch"]))
            presences[last, default: (epoch, nil, [])].statuses.append(status)
            presences[last]?.name = json["name"] as? String
            presences[last]?.epoch = epoch
        case (5, "alive"):
            kinds.insert("heartbeat")
            try expectKeys(json, ["v", "epoch", "interval"], message)
            #expect(DocumentedReader.integer(json["epoch"]) == presences[last]?.epoch)
            #expect((DocumentedReader.integer(json["interval"]) ?? 0) > 0)
        case (6, "session"):
            kinds.insert(json["ended"] as? Bool == true ? "ended" : "announcement")
            try expectKeys(json, ["v", "session", "activity", "createdBy", "createdAt", "revision", "ttl"], optional: ["ended"], message)
            #expect(json["session"] as? String == levels[4])
            #expect((DocumentedReader.integer(json["ttl"]) ?? 0) > 0)
            let activity = try #require(json["activity"] as? [String: Any])
            try expectKeys(activity, ["type", "metadata", "data"], message)
            #expect(activity["type"] as? String == Gallery.activityIdentifier)
            let metadata = try #require(activity["metadata"] as? [String: Any])
            try expectKeys(metadata, ["title", "type"], optional: ["subtitle"], message)
            #expect(metadata["title"] as? String == "Gallery wire" && metadata["type"] as? String == "exploreTogether")
            #expect((activity["data"] as? [String: Any])?["galleryID"] as? String == "wire")
            #expect(json["createdBy"] as? String == "alice")
            #expect(DocumentedReader.integer(json["createdAt"]) != nil)
            try expectClock(json["revision"], by: json["ended"] as? Bool == true ? last : "alice", message)
        case (7, "s") where levels[5] == "member":
            kinds.insert("member")
            try expectMember(json, message)
            #expect(json["participant"] as? String == last)
        case (8, "s") where levels[5] == "state":
            kinds.insert("state")
            try expectState(json, key: levels[6], writer: last, message)
        case (7, "s") where levels[5] == "all", (8, "s") where levels[5] == "to":
            try readEnvelope(json, sender: last, message)
        default:
            rejected.append(message.topic)
        }
    }

    private mutating func readEnvelope(_ json: [String: Any], sender: String, _ message: MQTTMessage) throws {
        let type = try #require(json["type"] as? String)
        kinds.insert(type)
        #expect(DocumentedReader.integer(json["epoch"]) == presences[sender]?.epoch, "the sender's connection epoch")
        #expect(DocumentedReader.isBool(json["reliable"]))
        if type.hasPrefix("$") {
            // A control message: reliable, in no stream.
            try expectKeys(json, ["v", "type", "epoch", "reliable", "body"], message)
            #expect(json["reliable"] as? Bool == true)
            control[sender, default: []].append(type)
        } else {
            try expectKeys(json, ["v", "type", "epoch", "seq", "reliable", "body"], message)
            let seq = try #require(DocumentedReader.integer(json["seq"]))
            if json["reliable"] as? Bool == true {
                #expect(seq > (reliable[sender]?.last?.seq ?? 0), "reliable seq increases per sender and stream")
                reliable[sender, default: []].append((type, seq))
            } else {
                unreliable[sender, default: []].append((type, seq))
            }
        }
        switch type {
        case "Chat":
            let body = try #require(json["body"] as? [String: Any])
            try expectKeys(body, ["text"], message)
        case "$end":
            #expect(json["body"] is NSNull)
            #expect(message.topic.contains("/all/"))
        case "$position":
            let body = try #require(json["body"] as? [String: Any])
            try expectKeys(body, ["all"], optional: ["direct"], message)
            #expect(DocumentedReader.integer(body["all"]) != nil && (body["direct"] == nil || body["direct"] is [String: Any]))
        case "$catchup":
            catchUps.append(message)
            #expect(message.topic.contains("/to/"))
            let body = try #require(json["body"] as? [String: Any])
            try expectKeys(body, ["states", "members"], message)
            for state in try #require(body["states"] as? [[String: Any]]) {
                let clock = try #require(state["clock"] as? [String: Any])
                try expectState(state, key: try #require(state["key"] as? String), writer: try #require(clock["p"] as? String), message)
            }
            for member in try #require(body["members"] as? [[String: Any]]) { try expectMember(member, message) }
        default:
            rejected.append("\(message.topic): unknown type \(type)")
        }
    }

    private func expectMember(_ json: [String: Any], _ message: MQTTMessage) throws {
        try expectKeys(json, ["v", "participant", "epoch"], message)
        let participant = try #require(json["participant"] as? String)
        #expect(DocumentedReader.integer(json["epoch"]) == presences[participant]?.epoch, "member epoch = presence epoch")
    }

    private func expectState(_ json: [String: Any], key: String, writer: String, _ message: MQTTMessage) throws {
        try expectKeys(json, ["v", "key", "value", "clock"], message)
        #expect(json["key"] as? String == key)
        #expect(json["value"] != nil)
        try expectClock(json["clock"], by: writer, message)
    }

    private func expectClock(_ value: Any?, by participant: String, _ message: MQTTMessage) throws {
        let clock = try #require(value as? [String: Any], "\(message.topic)")
        try expectKeys(clock, ["t", "c", "p"], message)
        #expect((DocumentedReader.integer(clock["t"]) ?? 0) > 1_600_000_000_000, "t: ms since 1970")
        #expect((DocumentedReader.integer(clock["c"]) ?? -1) >= 0)
        #expect(clock["p"] as? String == participant, "p: the writer")
    }

    private func expectKeys(_ json: [String: Any], _ required: Set<String>, optional: Set<String> = [], _ message: MQTTMessage) throws {
        let keys = Set(json.keys)
        #expect(required.isSubset(of: keys) && keys.isSubset(of: required.union(optional)), "\(message.topic): \(keys.sorted())")
    }
}
