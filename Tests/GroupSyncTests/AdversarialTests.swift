import BrokerSupport
import Foundation
import Testing

@testable import GroupSync
@testable import MQTT

/// What a raw MQTT client can publish at joined participants, with and without the example ACL: for every
/// record and control body, payloads with boundary and hostile values (0, −1, 2³¹, 2⁵³, 2⁶², Int64.max,
/// times far in the past and future), other activity types, other senders' IDs, duplicate and unknown
/// fields. Whatever arrives, nobody crashes, the participants, the shared state, the clocks and the
/// legitimate traffic stay as they were, and every payload a reader must reject is reported
/// (`onRejected`).
///
/// The generated forgeries are all of them for the quick run, each once; `GROUPSYNC_ADVERSARIAL_ROUNDS=N`
/// repeats the run N times with the payloads in a new seeded order each time (`GROUPSYNC_ADVERSARIAL_SEED`).
@Suite(.timeLimit(.minutes(timeLimitMinutes(3)))) struct AdversarialTests {
    /// One forged message: where it goes, its bytes, and whether a reader must reject it (and so report it).
    struct Forgery: CustomStringConvertible {
        var topic: String
        var payload: String
        var mustBeRejected: Bool
        var description: String { "\(topic) \(payload)" }
    }

    /// alice and bob joined to one session, with a shared value, messengers both ways and alice's reports.
    struct Scene {
        let broker: MosquittoBroker
        let group: Group
        let alice: GroupCoordinator
        let bob: GroupCoordinator
        let a: GroupSession<Gallery>
        let b: GroupSession<Gallery>
        let stateA: SharedState<Int>
        let stateB: SharedState<Int>
        let toAlice: Collector<(message: Chat, context: GroupSessionMessenger.MessageContext)>
        let toBob: Collector<(message: Chat, context: GroupSessionMessenger.MessageContext)>
        let gapsAtAlice: Collector<GroupSessionMessenger.Gap>
        let messengerA: GroupSessionMessenger
        let messengerB: GroupSessionMessenger
        /// The topics alice reported as rejected, in order.
        let reports: LockedValue<[String]>
        let mallory: MQTTClient
        let underTheACL: Bool

        var root: String { alice.topics.root }
        var session: String { a.id }

        static func with(underTheACL: Bool, _ body: (Scene) async throws -> Void) async throws {
            let configuration = underTheACL ? MosquittoBroker.Configuration(users: LifetimeTests.users, acl: LifetimeTests.acl) : .init()
            try await MosquittoBroker.withBroker(configuration) { broker in
                let group = Group(broker)
                let reports = LockedValue<[String]>([])
                let alice = try await group.join("alice") {
                    if underTheACL { LifetimeTests.login("alice")(&$0) }
                    $0.onRejected = { topic, _ in reports.withLock { $0.append(topic) } }
                    $0.catchUpTimeout = .milliseconds(100)  // how long after her join a member's catch-up is welcome
                }
                let bob = try await group.join("bob") { if underTheACL { LifetimeTests.login("bob")(&$0) } }
                let a = try await alice.startJoined(Gallery(galleryID: "adversarial"))
                let b = try await bob.joinSession(a.id, of: Gallery.self)
                let (stateA, stateB) = (try SharedState(a, key: "k", initialValue: 0), try SharedState(b, key: "k", initialValue: 0))
                try await stateA.set(7)
                try await waitUntil("bob has the shared value") { stateB.value == 7 }
                try await waitUntil("alice takes no catch-up any more: every one from now on is a forgery") {
                    a.core.read { machine in
                        guard case let .joined(joined) = machine.phase else { return false }
                        return a.core.context.clock.milliseconds() > joined.catchUpsUntil
                    }
                }
                let (messengerA, messengerB) = (GroupSessionMessenger(session: a), GroupSessionMessenger(session: b))
                let toAlice = Collector(messengerA.messages(of: Chat.self))
                let toBob = Collector(messengerB.messages(of: Chat.self))
                let gapsAtAlice = Collector(messengerA.gaps())
                var mqtt = try MQTTClient.Configuration(url: broker.url)
                if underTheACL {
                    mqtt.username = "mallory"
                    mqtt.password = LifetimeTests.users["mallory"]
                }
                let mallory = try MQTTClient(configuration: mqtt)
                try await mallory.connect()
                let scene = Scene(
                    broker: broker, group: group, alice: alice, bob: bob, a: a, b: b, stateA: stateA, stateB: stateB,
                    toAlice: toAlice, toBob: toBob, gapsAtAlice: gapsAtAlice, messengerA: messengerA, messengerB: messengerB,
                    reports: reports, mallory: mallory, underTheACL: underTheACL)
                do {
                    try await body(scene)
                } catch {
                    await scene.close()
                    throw error
                }
                await scene.close()
            }
        }

        func close() async {
            for collector in [toAlice, toBob] { collector.cancel() }
            gapsAtAlice.cancel()
            await mallory.disconnect()
            await group.closeAll()
        }

        /// Publishes each forgery as mallory (QoS 1, so that the broker has passed it on before it
        /// acknowledges), `retained` or not; returns how many the broker refused (the ACL).
        func publish(_ forgeries: [Forgery], retained: Bool = false) async throws -> Int {
            var refused = 0
            for forgery in forgeries {
                do {
                    try await mallory.publish(to: forgery.topic, payload: Data(forgery.payload.utf8), qos: .atLeastOnce, retain: retained)
                } catch {
                    guard case .notAuthorized = error else { throw error }
                    refused += 1
                }
            }
            return refused
        }

        /// Every message published before it has been handled by alice and bob once a reliable message of
        /// each reaches the other (a broker forwards in order, and alice's reports follow her handling).
        func fence(_ label: String) async throws {
            try await messengerB.send(Chat(text: "from bob \(label)"))
            try await messengerA.send(Chat(text: "from alice \(label)"))
            try await waitUntil("bob's fence \(label) reaches alice") {
                toAlice.elements.contains { $0.message.text == "from bob \(label)" }
            }
            try await waitUntil("alice's fence \(label) reaches bob") {
                toBob.elements.contains { $0.message.text == "from alice \(label)" }
            }
        }

        /// Nothing legitimate changed: both still see each other, the shared value, clocks no further
        /// ahead than the wall clock, every fence in order, and no gap.
        func expectUnharmed(_ fences: [String], sourceLocation: SourceLocation = #_sourceLocation) {
            let both: Set<String> = ["alice", "bob"]
            #expect(ids(a.activeParticipants) == both, sourceLocation: sourceLocation)
            #expect(ids(b.activeParticipants) == both, sourceLocation: sourceLocation)
            #expect(stateA.value == 7 && stateB.value == 7, sourceLocation: sourceLocation)
            let now = SystemWallClock().milliseconds()
            for coordinator in [alice, bob] {
                #expect(
                    coordinator.hlc.withLock { $0.latest.time } <= now + 1_000, "clock of \(coordinator.localParticipant.id)",
                    sourceLocation: sourceLocation)
            }
            #expect(toAlice.elements.map(\.message.text) == fences.map { "from bob \($0)" }, sourceLocation: sourceLocation)
            #expect(toBob.elements.map(\.message.text) == fences.map { "from alice \($0)" }, sourceLocation: sourceLocation)
            #expect(toAlice.elements.allSatisfy { $0.context.source.id == "bob" }, sourceLocation: sourceLocation)
            #expect(gapsAtAlice.elements.isEmpty, sourceLocation: sourceLocation)
        }

        /// Waits until alice reported every forgery she must reject (by topic, as often as it was sent).
        func expectReported(_ forgeries: [Forgery], since before: Int) async throws {
            let expected = forgeries.filter(\.mustBeRejected).map(\.topic)
            let reports = self.reports
            @Sendable func missing() -> [String] {
                var seen = reports.withLock { Array($0.dropFirst(before)) }
                var missing: [String] = []
                for topic in expected {
                    if let index = seen.firstIndex(of: topic) { seen.remove(at: index) } else { missing.append(topic) }
                }
                return missing
            }
            try await waitUntil("alice reports every rejected forgery") {
                missing().isEmpty
            } else: {
                "not reported: \(missing().prefix(10))"
            }
        }
    }

    // MARK: - The generated forgeries

    static let hour: Int64 = 3_600_000
    static let day: Int64 = 86_400_000

    /// The hostile numbers tried in every integer field.
    static func hostileNumbers(now: Int64) -> [Int64] {
        [0, -1, 1 << 31, 1 << 53, 1 << 62, .max, now - 4 * hour, now + 4 * hour, now + 2 * day]
    }

    /// Every forgery of the scene: each record and control body, each integer field set to each hostile
    /// number, plus identity, type, version, duplicate-key and unknown-field variants. Forgeries whose
    /// effect is the protocol's by design — a plausible record on mallory's own topics (she may come
    /// online, and her own plausible writes count), and an in-window message or `$end` on another
    /// member's topics without the ACL (indistinguishable from that member's own) — are left out.
    static func forgeries(_ scene: Scene) -> [Forgery] {
        let now = SystemWallClock().milliseconds()
        let (root, session) = (scene.root, scene.session)
        let (aliceEpoch, bobEpoch) = (scene.alice.epoch, scene.bob.epoch)
        let ttl = scene.a.core.announcement.ttl
        let numbers = hostileNumbers(now: now)
        func plausibleTime(_ value: Int64) -> Bool { Wire.Bounds.time.contains(value) && value <= now + day }
        var all: [Forgery] = []

        /// Each integer slot of `template` (`{name}` placeholders, with a default each) set to each number.
        func vary(
            _ topic: String, _ template: String, _ slots: [String: Int64], accepted: (String, Int64) -> Bool,
            keepAccepted: Bool = false
        ) {
            func fill(_ values: [String: Int64]) -> String {
                values.reduce(template) { $0.replacingOccurrences(of: "{\($1.key)}", with: "\($1.value)") }
            }
            for slot in slots.keys.sorted() {
                for number in numbers {
                    var values = slots
                    values[slot] = number
                    let ok = accepted(slot, number)
                    if ok && !keepAccepted { continue }
                    all.append(Forgery(topic: topic, payload: fill(values), mustBeRejected: !ok))
                }
            }
            let valid = fill(slots)
            // A key twice, and another version: rejected however right the rest is.
            all.append(
                Forgery(topic: topic, payload: valid.replacingOccurrences(of: #""v":2"#, with: #""v":2,"v":2"#), mustBeRejected: true))
            all.append(Forgery(topic: topic, payload: valid.replacingOccurrences(of: #""v":2"#, with: #""v":3"#), mustBeRejected: true))
        }

        // Presence and heartbeats: mallory's own (plausible ones only bring her online, which is no
        // session's business), and bob's, forged.
        for (who, epoch) in [("mallory", now - 1_000), ("bob", bobEpoch)] {
            let presence = #"{"epoch":{epoch},"interval":{interval},"participant":"\#(who)","status":"online","v":2}"#
            let accepted = { (slot: String, value: Int64) in
                slot == "epoch" ? plausibleTime(value) : Wire.Bounds.interval.contains(value)
            }
            vary("\(root)/presence/\(who)", presence, ["epoch": epoch, "interval": 2_500], accepted: accepted, keepAccepted: who == "bob")
            vary(
                "\(root)/alive/\(who)", #"{"epoch":{epoch},"interval":{interval},"v":2}"#, ["epoch": epoch, "interval": 2_500],
                accepted: accepted,
                keepAccepted: who == "bob")
            all.append(
                Forgery(
                    topic: "\(root)/presence/\(who)",
                    payload: presence.replacingOccurrences(of: #""participant":"\#(who)""#, with: #""participant":"alice""#)
                        .replacingOccurrences(of: "{epoch}", with: "\(epoch)").replacingOccurrences(of: "{interval}", with: "2500"),
                    mustBeRejected: true))
        }
        // Announcement copies of the session on mallory's own topic: other numbers, another type, another
        // session, another ttl.
        let copy =
            #"{"activity":{"data":{"galleryID":"adversarial"},"metadata":{"title":"Gallery adversarial","type":"exploreTogether"},"type":"{type}"},"createdAt":{createdAt},"createdBy":"alice","revision":{"c":{c},"p":"mallory","t":{t}},"session":"{session}","ttl":{ttl},"v":2}"#
        let copyDefaults = copy.replacingOccurrences(of: "{type}", with: Gallery.activityIdentifier).replacingOccurrences(
            of: "{session}", with: session)
        vary(
            "\(root)/session/\(session)/mallory", copyDefaults, ["createdAt": now, "c": 0, "t": 1, "ttl": ttl],
            accepted: { slot, value in
                switch slot {
                case "ttl": value == ttl
                case "c": Wire.Bounds.counter.contains(value)
                case "t": plausibleTime(value)
                default: Wire.Bounds.time.contains(value)
                }
            })
        for (type, other) in [(Whiteboard.activityIdentifier, session), (Gallery.activityIdentifier, "othersession0000")] {
            let payload = copy.replacingOccurrences(of: "{type}", with: type).replacingOccurrences(of: "{session}", with: other)
                .replacingOccurrences(of: "{createdAt}", with: "\(now)").replacingOccurrences(of: "{c}", with: "0")
                .replacingOccurrences(of: "{t}", with: "\(now + 12 * hour)").replacingOccurrences(of: "{ttl}", with: "\(ttl)")
            all.append(Forgery(topic: "\(root)/session/\(session)/mallory", payload: payload, mustBeRejected: true))
        }
        // Member records: mallory's (implausible only: a plausible one is her joining) and, forged,
        // bob's of another epoch than his connection's.
        vary(
            "\(root)/s/\(session)/member/mallory", #"{"epoch":{epoch},"participant":"mallory","v":2}"#, ["epoch": now],
            accepted: { _, value in plausibleTime(value) })
        vary(
            "\(root)/s/\(session)/member/bob", #"{"epoch":{epoch},"participant":"bob","v":2}"#, ["epoch": bobEpoch],
            accepted: { _, value in plausibleTime(value) }, keepAccepted: true)
        all.append(
            Forgery(
                topic: "\(root)/s/\(session)/member/mallory", payload: #"{"epoch":\#(bobEpoch),"participant":"bob","v":2}"#,
                mustBeRejected: true))
        // State records on mallory's topic and forged on bob's: numbers, and a clock of someone else.
        for writer in ["mallory", "bob"] {
            vary(
                "\(root)/s/\(session)/state/k/\(writer)", #"{"clock":{"c":{c},"p":"\#(writer)","t":{t}},"key":"k","v":2,"value":99}"#,
                ["c": 0, "t": now], accepted: { slot, value in slot == "c" ? Wire.Bounds.counter.contains(value) : plausibleTime(value) })
            all.append(
                Forgery(
                    topic: "\(root)/s/\(session)/state/k/\(writer)",
                    payload: #"{"clock":{"c":0,"p":"alice","t":\#(now + hour)},"key":"k","v":2,"value":99}"#, mustBeRejected: true))
        }
        // A journal record on mallory's topic: one chunk, so only size ≤ chunkSize is consistent.
        let (digest, id) = (String(repeating: "a", count: 64), SHA256.hex(ofDigests: [String(repeating: "a", count: 64)]))
        vary(
            "\(root)/s/\(session)/journal/\(id)/mallory",
            #"{"added":{"c":0,"p":"mallory","t":1},"chunkSize":{chunkSize},"chunks":["\#(digest)"],"id":"\#(id)","name":"x","size":{size},"type":"t","v":2}"#,
            ["chunkSize": 65_536, "size": 10],
            accepted: { slot, value in
                slot == "size"
                    ? Wire.Bounds.size.contains(value) && value >= 1 && value <= 65_536
                    : Wire.Bounds.chunkSize.contains(value) && value >= 10
            })
        // Envelopes. From mallory, who is no member: every one is rejected. From bob, forged: only
        // numbers no member could send (another epoch, a seq out of range or beyond the window).
        let chat = #"{"body":{"text":"forged"},"epoch":{epoch},"reliable":true,"seq":{seq},"type":"Chat","v":2}"#
        for (sender, epoch) in [("mallory", bobEpoch), ("bob", bobEpoch)] {
            for topic in ["\(root)/s/\(session)/all/\(sender)", "\(root)/s/\(session)/to/alice/\(sender)"] {
                vary(
                    topic, chat, ["epoch": epoch, "seq": 1 << 40],
                    accepted: { slot, value in sender == "bob" && slot == "epoch" && value == bobEpoch && false })
            }
        }
        let controls: [(type: String, body: String, slots: [String: Int64], bounds: [String: ClosedRange<Int64>])] = [
            (
                "$resend", #"{"from":{from},"stream":"all","to":{to}}"#, ["from": 1, "to": 2],
                ["from": Wire.Bounds.position, "to": Wire.Bounds.position]
            ),
            ("$skip", #"{"lost":[],"stream":"all","through":{through}}"#, ["through": 1 << 40], ["through": Wire.Bounds.position]),
            (
                "$position", #"{"all":{all},"direct":{"alice":{direct}}}"#, ["all": 1 << 40, "direct": 0],
                ["all": Wire.Bounds.position, "direct": Wire.Bounds.position]
            ),
            ("$ping", #"{"t0":{t0}}"#, ["t0": now], ["t0": -9_000_000_000_000...9_000_000_000_000]),
            (
                "$pong", #"{"t0":{t0},"t1":{t1},"t2":{t1}}"#, ["t0": now, "t1": now],
                ["t0": -9_000_000_000_000...9_000_000_000_000, "t1": -9_000_000_000_000...9_000_000_000_000]
            ),
            (
                "$catchup",
                #"{"members":[{"epoch":{epoch},"participant":"mallory","v":2}],"states":[{"clock":{"c":0,"p":"mallory","t":{t}},"key":"k","v":2,"value":99}]}"#,
                ["epoch": now, "t": now], ["epoch": Wire.Bounds.time, "t": Wire.Bounds.time]
            ),
        ]
        for control in controls {
            let envelope = #"{"body":\#(control.body),"epoch":\#(bobEpoch),"reliable":true,"type":"\#(control.type)","v":2}"#
            for sender in ["mallory", "bob"] {
                // From mallory (no member) every control message but a `$pong` is rejected; a `$catchup`
                // from anyone while alice is not joining too. Otherwise only numbers out of range are.
                vary(
                    "\(root)/s/\(session)/to/alice/\(sender)", envelope, control.slots,
                    accepted: { slot, value in
                        if control.type == "$catchup" { return false }
                        if sender == "mallory" && control.type != "$pong" { return false }
                        return control.bounds[slot]!.contains(value)
                    }, keepAccepted: control.type == "$pong" || control.type == "$ping")
            }
        }
        all.append(
            Forgery(
                topic: "\(root)/s/\(session)/all/mallory",
                payload: #"{"body":null,"epoch":\#(aliceEpoch),"reliable":true,"type":"$end","v":2}"#, mustBeRejected: true))
        // A welcome to alice from mallory, with numbers out of range inside.
        vary(
            "\(root)/welcome/alice/mallory",
            #"{"presences":[{"epoch":{epoch},"interval":{interval},"participant":"mallory","status":"online","v":2}],"sessions":[],"v":2}"#,
            ["epoch": now - 1_000, "interval": 2_500],
            accepted: { slot, value in slot == "epoch" ? Wire.Bounds.time.contains(value) : Wire.Bounds.interval.contains(value) })
        // Unknown fields are ignored: the same records with one more field change nothing either.
        all.append(
            Forgery(
                topic: "\(root)/presence/bob",
                payload: #"{"epoch":\#(bobEpoch),"interval":2500,"participant":"bob","status":"online","v":2,"x":{"y":[1]}}"#,
                mustBeRejected: false))
        return all
    }

    /// Under the ACL mallory may write her own topics only: a forgery on anyone else's is refused by the
    /// broker and reaches nobody.
    static func reachesAlice(_ forgery: Forgery, underTheACL: Bool) -> Bool {
        !underTheACL || forgery.topic.hasSuffix("/mallory")
    }

    @Test func generatedForgeriesChangeNothingAndAreReported() async throws {
        try await forgeriesChangeNothingAndAreReported(underTheACL: false)
    }

    @Test(.needsOwnBroker("the example ACL")) func generatedForgeriesChangeNothingAndAreReportedUnderTheACL() async throws {
        try await forgeriesChangeNothingAndAreReported(underTheACL: true)
    }

    private func forgeriesChangeNothingAndAreReported(underTheACL: Bool) async throws {
        let environment = ProcessInfo.processInfo.environment
        let rounds = environment["GROUPSYNC_ADVERSARIAL_ROUNDS"].flatMap(Int.init) ?? 1
        var generator = SeededGenerator(state: environment["GROUPSYNC_ADVERSARIAL_SEED"].flatMap(UInt64.init) ?? 0xADC0DE)
        try await Scene.with(underTheACL: underTheACL) { scene in
            var fences: [String] = []
            try await scene.fence("start")
            fences.append("start")
            for round in 0..<rounds {
                var forgeries = Self.forgeries(scene)
                if round > 0 { forgeries.shuffle(using: &generator) }
                // By the kind of record (the topic without its last level), so that a failure names it.
                let kinds = Dictionary(grouping: forgeries) { $0.topic.split(separator: "/").dropLast().joined(separator: "/") }
                for kind in kinds.keys.sorted() {
                    let batch = kinds[kind]!
                    let before = scene.reports.withLock { $0.count }
                    let refused = try await scene.publish(batch)
                    let reaching = batch.filter { Self.reachesAlice($0, underTheACL: underTheACL) }
                    #expect(refused == batch.count - reaching.count, "the ACL refuses exactly the forgeries of others' topics: \(kind)")
                    let label = "\(round) \(kind)"
                    try await scene.fence(label)
                    fences.append(label)
                    try await scene.expectReported(reaching, since: before)
                    scene.expectUnharmed(fences)
                }
                print(
                    "adversarial round \(round) (ACL: \(underTheACL)): \(forgeries.count) forgeries, \(forgeries.filter(\.mustBeRejected).count) to reject, \(kinds.count) kinds"
                )
            }
            // What mallory left retained on her own topics goes; the session is as it was.
            for topic in Set(Self.forgeries(scene).map(\.topic)) where topic.hasSuffix("/mallory") {
                try await scene.mallory.publish(to: topic, payload: Data(), qos: .atLeastOnce, retain: true)
            }
            try await scene.fence("end")
            fences.append("end")
            scene.expectUnharmed(fences)
        }
    }
}
