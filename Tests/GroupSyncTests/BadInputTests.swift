import BrokerSupport
import Foundation
import Testing

@testable import GroupSync
@testable import MQTT

/// Garbage and impostors under the group's root change nothing and are counted.
@Suite(.timeLimit(.minutes(timeLimitMinutes(2)))) struct BadInputTests {
    static let validPayloads: [String] = [
        #"{"epoch":1,"name":"A","participant":"alice","status":"online","v":2}"#,
        #"{"epoch":1,"interval":2500,"v":2}"#,
        #"{"activity":{"data":{"galleryID":"x"},"metadata":{"title":"t","type":"generic"},"type":"com.example.gallery"},"createdAt":1,"createdBy":"alice","revision":{"c":0,"p":"alice","t":1},"session":"s1","ttl":60,"v":2}"#,
        #"{"epoch":1,"participant":"alice","v":2}"#,
        #"{"clock":{"c":0,"p":"alice","t":5},"key":"index","v":2,"value":{"a":[1,2.5,"x",null,true]}}"#,
        #"{"body":{"text":"hi"},"epoch":1,"reliable":true,"seq":1,"type":"Chat","v":2}"#,
        #"{"body":{"members":[{"epoch":1,"participant":"a","v":2}],"states":[]},"epoch":1,"reliable":true,"seq":2,"type":"$catchup","v":2}"#,
    ]

    /// One generated input: random bytes, a truncated or mutated valid payload, deep nesting, wrong types,
    /// other versions, huge numbers.
    static func generate(_ generator: inout SeededGenerator) -> Data {
        let valid = Array(validPayloads.randomElement(using: &generator)!.utf8)
        switch Int.random(in: 0..<8, using: &generator) {
        case 0:
            return Data((0..<Int.random(in: 0..<256, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) })
        case 1:
            return Data(valid.prefix(Int.random(in: 0...valid.count, using: &generator)))
        case 2:
            var bytes = valid
            for _ in 0..<Int.random(in: 1...8, using: &generator) {
                bytes[Int.random(in: 0..<bytes.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
            }
            return Data(bytes)
        case 3:
            let depth = Int.random(in: 1...5_000, using: &generator)
            let open = Bool.random(using: &generator) ? "[" : #"{"a":"#
            let close = open == "[" ? "]" : "}"
            return Data((String(repeating: open, count: depth) + "1" + String(repeating: close, count: depth)).utf8)
        case 4:
            let text = String(decoding: valid, as: UTF8.self)
                .replacingOccurrences(of: #""v":2"#, with: #""v":\#([1, 3, 99].randomElement(using: &generator)!)"#)
            return Data(text.utf8)
        case 5:
            let text = String(decoding: valid, as: UTF8.self)
                .replacingOccurrences(
                    of: "1", with: ["\"1\"", "1e400", "-9223372036854775809", "null", "[]"].randomElement(using: &generator)!)
            return Data(text.utf8)
        case 6:
            var bytes = valid
            bytes.insert(contentsOf: Array(#"{"x":"#.utf8), at: 0)
            return Data(bytes + Array("}".utf8))
        default:
            return Data(valid)
        }
    }

    /// The one reader, on 10,000 generated inputs (`GROUPSYNC_FUZZ_INPUTS` changes the count): it never
    /// crashes, accepts only what `JSONSerialization` accepts, and whatever record it reads is stable
    /// (written again and read again, it is the same bytes).
    @Test func theReaderSurvivesGeneratedInputs() throws {
        let count = ProcessInfo.processInfo.environment["GROUPSYNC_FUZZ_INPUTS"].flatMap { Int($0) } ?? 10_000
        var generator = SeededGenerator(state: 0x5EED)
        var accepted = 0
        func stable<T: Wire.Readable & Encodable>(_ type: T.Type, _ input: Data) throws -> Bool {
            guard let value = Wire.decode(type, from: input) else { return false }
            let written = try Wire.encode(value)
            #expect(try Wire.encode(try type.read(written)) == written)
            return true
        }
        for index in 0..<count {
            let input = BadInputTests.generate(&generator)
            guard let json = try? JSONParser.parse(input) else { continue }
            #expect((try? JSONSerialization.jsonObject(with: input, options: .fragmentsAllowed)) != nil, "input \(index)")
            var any = try stable(Wire.Presence.self, input)
            any = try stable(Wire.Announcement.self, input) || any
            any = try stable(Wire.Member.self, input) || any
            any = try stable(Wire.StateRecord.self, input) || any
            if let envelope = Wire.decodeEnvelope(input) {
                any = true
                #expect(envelope.header == Wire.decode(Wire.EnvelopeHeader.self, from: input))
                guard case let .object(fields) = json else {
                    Issue.record("not an object")
                    continue
                }
                #expect(envelope.body == (try JSONParser.parseObject(input).located))
                #expect(try JSONParser.parse(input[envelope.body]) == fields["body"])
                _ = try stable(Wire.CatchUp.self, input[envelope.body])
            }
            if any { accepted += 1 }
        }
        // The valid share of the inputs still decodes: the fuzzer reached the records' happy paths.
        #expect(accepted > count / 10)
    }

    /// Every topic fits brokers that allow 8 levels (AWS IoT Core, ejabberd's default), even with the
    /// longest identifiers, and no SUBSCRIBE carries more than 8 filters.
    @Test func topicsHaveAtMostEightLevelsAndSubscriptionsAtMostEightFilters() {
        let id = String(repeating: "x", count: 128)
        let topics = GroupTopics(group: id)
        let all = [
            topics.presence(id), topics.heartbeat(id), topics.announcement(id, by: id), topics.welcome(to: id, from: id),
            topics.member(id, id), topics.state(id, key: id, writer: id), topics.broadcast(id, from: id),
            topics.direct(id, to: id, from: id),
        ]
        for topic in all {
            #expect(topic.split(separator: "/").count <= 8, "\(topic.prefix(60))…")
            #expect(topics.parse(topic) != nil)
        }
        let session = topics.sessionFilters(id, participant: id)
        #expect(session.shared.count + 1 <= 8)
        let group = [topics.presenceFilter, topics.heartbeatFilter, topics.announcementFilter, topics.welcomeFilter(for: id)]
        #expect(group.count <= 8)
        for filter in session.shared + [session.broadcast] + group { #expect(filter.split(separator: "/").count <= 8) }
    }

    @Test func topicsWithInvalidLevelsAreNotParsed() {
        let topics = GroupTopics(group: "g")
        for bad in [
            "groupsync/v2/g/presence/a b", "groupsync/v2/g/presence/", "groupsync/v2/g/s/x/state/k", "groupsync/v2/g/s/x/state/k/w/extra",
            "groupsync/v2/g/s/x/to/a", "groupsync/v2/g/session/$x/a", "groupsync/v2/g/session/x", "groupsync/v2/other/presence/a",
            "groupsync/v1/g/presence/a", "groupsync/v2/g/alive/a/b",
        ] {
            #expect(topics.parse(bad) == nil, "\(bad)")
        }
        #expect(topics.parse("groupsync/v2/g/s/x/to/bob/alice") == .direct(session: "x", recipient: "bob", sender: "alice"))
        for bad in [
            "groupsync/v2/g", "groupsync/v2/g/", "groupsync/v2/gg/presence/a", "groupsync/v2/g/presence/a/", "groupsync/v2/g//presence/a",
            "groupsync/v2/g/s/x/to/a/b/c", "groupsync/v2/g/s/x/member/" + String(repeating: "a", count: 129),
        ] {
            #expect(topics.parse(bad) == nil, "\(bad)")
        }
    }

    @Test func everyTopicOfTheLayoutParsesBack() {
        let topics = GroupTopics(group: "g-1")
        let cases: [(String, GroupTopics.Kind)] = [
            (topics.presence("a.b"), .presence(participant: "a.b")),
            (topics.heartbeat("a.b"), .heartbeat(participant: "a.b")),
            (topics.announcement("s1", by: "a"), .announcement(session: "s1", publisher: "a")),
            (topics.member("s1", "p@x"), .member(session: "s1", participant: "p@x")),
            (topics.state("s1", key: "k~", writer: "w"), .state(session: "s1", key: "k~", writer: "w")),
            (topics.broadcast("s1", from: "a"), .broadcast(session: "s1", sender: "a")),
            (topics.direct("s1", to: "b", from: "a"), .direct(session: "s1", recipient: "b", sender: "a")),
            (
                topics.member("s1", String(repeating: "m", count: 128)),
                .member(session: "s1", participant: String(repeating: "m", count: 128))
            ),
        ]
        for (topic, kind) in cases { #expect(topics.parse(topic) == kind, "\(topic)") }
    }

    @Test func garbageOnTheWireChangesNothingAndIsCounted() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice")
            let logged = LockedValue<[String]>([])
            let bob = try await group.join("bob") { configuration in
                configuration.onRejected = { topic, _ in logged.withLock { $0.append(topic) } }
            }
            let a = try await alice.startJoined(Gallery(galleryID: "garbage"))
            let b = try await bob.joinSession(a.id, of: Gallery.self)
            let state = try SharedState(b, key: "index", initialValue: 0)
            try await SharedState(a, key: "index", initialValue: 0).set(5)
            try await waitUntil("bob at 5") { state.value == 5 }
            let values = Collector(state.valueUpdates())
            let chats = Collector(GroupSessionMessenger(session: b).messages(of: Chat.self))
            let participants = Collector(b.activeParticipantUpdates())
            try await values.waitForCount(1)

            let attacker = try MQTTClient(configuration: .init(url: broker.url))
            try await attacker.connect()
            let root = "\(GroupTopics.protocolRoot)/\(group.name)"
            let session = "\(root)/s/\(a.id)"
            var generator = SeededGenerator(state: 42)
            let targets = [
                "\(session)/state/index/mallory", "\(session)/all/mallory", "\(session)/to/bob/mallory",
                "\(session)/member/mallory", "\(root)/presence/mallory", "\(root)/session/\(a.id)/mallory", "\(root)/alive/mallory",
                "\(session)/state/index/alice",
            ]
            for i in 0..<300 {
                try await attacker.publish(to: targets[i % targets.count], payload: BadInputTests.generate(&generator))
            }
            // Forged identity: a state record whose clock claims to be alice's, on mallory's topic.
            let forged = #"{"clock":{"c":0,"p":"alice","t":99999999999999},"key":"index","v":2,"value":666}"#
            try await attacker.publish(to: "\(session)/state/index/mallory", string: forged)
            // A replayed old record of alice's: older than the current value.
            try await attacker.publish(
                to: "\(session)/state/index/alice", string: #"{"clock":{"c":0,"p":"alice","t":1},"key":"index","v":2,"value":1}"#)
            // Unknown version, wrong types, a huge payload.
            try await attacker.publish(
                to: "\(session)/all/mallory", string: #"{"body":{"text":"x"},"epoch":1,"reliable":true,"seq":1,"type":"Chat","v":1}"#)
            try await attacker.publish(
                to: "\(session)/all/mallory", string: #"{"body":{"text":5},"epoch":1,"reliable":true,"seq":2,"type":"Chat","v":2}"#)
            try await attacker.publish(to: "\(session)/all/mallory", payload: Data(repeating: UInt8(ascii: "["), count: 10_000_000))

            // A legitimate message after all that still arrives, and state still works.
            try await GroupSessionMessenger(session: a).send(Chat(text: "still here"))
            try await chats.waitForCount(1)
            #expect(chats.elements.map(\.message.text) == ["still here"])
            #expect(state.value == 5, "no garbage changed the shared state")
            try await SharedState(a, key: "index", initialValue: 0).set(6)
            try await waitUntil("state still flows") { state.value == 6 && values.last == 6 }
            #expect(values.elements == [5, 6])
            #expect(!values.isFinished && !chats.isFinished && !participants.isFinished, "no sequence ended")
            #expect(ids(b.activeParticipants) == ["alice", "bob"])
            #expect(bob.rejectedMessageCount > 100, "rejections are counted (\(bob.rejectedMessageCount))")
            #expect(logged.withLock { $0.count } > 100, "and reported to the configured log")
            await attacker.disconnect()
            await group.closeAll()
        }
    }

    /// A forged clock at Int64.max must not overflow anyone's HLC, and an activity change to another type
    /// or shape must not break `session.activity`.
    @Test func extremeClocksAndForeignActivityChangesAreRejected() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let root = "\(GroupTopics.protocolRoot)/\(group.name)"
            let attacker = try MQTTClient(configuration: .init(url: broker.url))
            try await attacker.connect()
            let huge = #"{"c":9223372036854775807,"p":"evil","t":9223372036854775807}"#
            try await attacker.publish(
                to: "\(root)/session/evil/evil",
                string:
                    #"{"activity":{"data":{"galleryID":"x"},"metadata":{"title":"t","type":"generic"},"type":"com.example.gallery"},"createdAt":1,"createdBy":"evil","revision":\#(huge),"session":"evil","ttl":60,"v":2}"#,
                retain: true)
            let (alice, _, a, b) = try await group.pair(Gallery(galleryID: "clock"))
            #expect(alice.currentSessions(activityIdentifier: nil).map(\.id) == [a.id], "the forged announcement was rejected")
            try await attacker.publish(
                to: "\(root)/s/\(a.id)/state/index/alice",
                string: #"{"clock":\#(huge.replacingOccurrences(of: "evil", with: "alice")),"key":"index","v":2,"value":9}"#)
            // Someone changes the activity to another type, then to a value of another shape.
            var announcement = a.core.announcement
            announcement.revision = HLCTimestamp(time: announcement.revision.time + 1, counter: 0, participant: "alice")
            announcement.activity.type = "com.example.other"
            try await attacker.publish(to: "\(root)/session/\(a.id)/mallory", payload: try Wire.encode(announcement), retain: true)
            announcement.activity.type = Gallery.activityIdentifier
            announcement.activity.data = .int(42)
            announcement.revision.counter += 1
            try await attacker.publish(to: "\(root)/session/\(a.id)/mallory", payload: try Wire.encode(announcement), retain: true)
            try await SharedState(a, key: "index", initialValue: 0).set(1)
            try await waitUntil("state still flows") { try SharedState(b, key: "index", initialValue: 0).value == 1 }
            #expect(b.activity.galleryID == "clock", "the last activity that decodes stays in place")
            #expect(b.activityIdentifier == Gallery.activityIdentifier)
            #expect(alice.rejectedMessageCount > 0)
            await attacker.disconnect()
            await group.closeAll()
        }
    }
}
