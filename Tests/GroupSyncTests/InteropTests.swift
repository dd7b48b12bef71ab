import BrokerSupport
import Foundation
import Testing

@testable import GroupSync
@testable import MQTT

/// A participant written in Python from docs/PROTOCOL.md alone (docs/interop/participant.py) beside
/// Swift participants on a real mosquitto: the document is enough to interoperate, in both directions.
/// Skipped when no python3 with paho-mqtt is installed (scripts/install-deps.sh installs it).
@Suite(
    .enabled(if: PythonParticipant.interpreter != nil, PythonParticipant.missingReason),
    .timeLimit(.minutes(timeLimitMinutes(1))))
struct InteropTests {
    @Test func aPythonParticipantJoinsASwiftSessionBothWays() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let (alice, bob, a, b) = try await group.pair(Gallery(galleryID: "interop"))
            let sa = try SharedState(a, key: "index", initialValue: 0)
            let sb = try SharedState(b, key: "index", initialValue: 0)
            try await sa.set(3)
            try await waitUntil("bob has alice's write") { sb.value == 3 }

            // Python joins the Swift session: caught up, active for everyone.
            let py = try PythonParticipant(broker, group: group.name, participant: "py", ["--session", a.id])
            let joined = try await py.event("joined")
            #expect(joined["participants"] as? [String] == ["alice", "bob", "py"])
            #expect((joined["state"] as? [String: Any])?["index"] as? Int == 3, "caught up with the current state")
            try await waitUntil("the Swift participants see py") {
                ids(a.activeParticipants) == ["alice", "bob", "py"] && ids(b.activeParticipants) == ["alice", "bob", "py"]
            }

            // Shared state, both ways.
            try await sa.set(4)
            _ = try await py.event("value") { $0["value"] as? Int == 4 && $0["writer"] as? String == "alice" }
            py.command(["op": "set", "key": "index", "value": 5])
            try await waitUntil("py's write reaches Swift") { sa.value == 5 && sb.value == 5 }

            // Messages, broadcast and direct, both ways.
            let aMessenger = GroupSessionMessenger(session: a)
            let aChats = Collector(aMessenger.messages(of: Chat.self))
            let bChats = Collector(GroupSessionMessenger(session: b).messages(of: Chat.self))
            try await aMessenger.send(Chat(text: "hello py"))
            try await aMessenger.send(Chat(text: "only py"), to: .only(Participant(id: "py")))
            for (text, direct) in [("hello py", false), ("only py", true)] {
                let message = try await py.event("message") { ($0["body"] as? [String: Any])?["text"] as? String == text }
                #expect(message["from"] as? String == "alice")
                #expect(message["direct"] as? Bool == direct)
                #expect(message["type"] as? String == "Chat")
            }
            py.command(["op": "send", "type": "Chat", "body": ["text": "py to bob"], "to": ["bob"]])
            py.command(["op": "send", "type": "Chat", "body": ["text": "from py"]])
            try await waitUntil("bob has both") { bChats.elements.map(\.message.text) == ["hello py", "py to bob", "from py"] }
            try await waitUntil("alice has the broadcast") { aChats.elements.map(\.message.text) == ["from py"] }
            #expect(bChats.elements.filter { $0.message.text != "hello py" }.allSatisfy { $0.context.source.id == "py" })

            // A Swift newcomer is caught up, by py: the newcomer is named so that py wins the rendezvous hash.
            py.command(["op": "set", "key": "index", "value": 6])
            try await waitUntil("py's last write everywhere") { sa.value == 6 && sb.value == 6 }
            let newcomer = try #require(
                (1...500).map { "n\($0)" }.first { rendezvousWinner(newcomer: $0, among: ["alice", "bob", "py"]) == "py" })
            // A catch-up timeout far above the bound: a join inside the bound was released by py's
            // $catchup, however slowly a loaded machine runs py.
            let newcomerCoordinator = try await group.join(newcomer) { $0.catchUpTimeout = .seconds(20) }
            let joining = ContinuousClock.now
            let n = try await newcomerCoordinator.joinSession(a.id, of: Gallery.self)
            #expect(ContinuousClock.now - joining < timeBound(.seconds(10)), "py's $catchup accepted (no catch-up timeout)")
            #expect(try SharedState(n, key: "index", initialValue: 0).value == 6, "the newcomer starts with the current value")
            _ = try await py.event("catchup") { $0["to"] as? String == newcomer }
            try await waitUntil("everyone active everywhere") {
                [a, b, n].allSatisfy { ids($0.activeParticipants) == ["alice", "bob", "py", newcomer] }
            }
            _ = try await py.event("participants") { $0["active"] as? [String] == ["alice", "bob", newcomer, "py"].sorted() }

            // py leaves, the others see it at once; it joins again and crashes: its will tells them.
            py.command(["op": "leave"])
            try await waitUntil("py left") { [a, b, n].allSatisfy { !ids($0.activeParticipants).contains("py") } }
            py.command(["op": "join", "session": a.id])
            try await waitUntil("py back") { [a, b, n].allSatisfy { ids($0.activeParticipants).contains("py") } }
            py.kill()
            try await waitUntil(timeout: timeBound(.seconds(3)), "py's crash seen") {
                [a, b, n].allSatisfy { ids($0.activeParticipants) == ["alice", "bob", newcomer] }
            }

            #expect(py.events("rejected").isEmpty, "py rejected: \(py.events("rejected"))")
            for coordinator in [alice, bob, newcomerCoordinator] {
                #expect(coordinator.rejectedMessageCount == 0, "Swift rejected some of py's records")
            }
            await group.closeAll()
        }
    }

    /// PROTOCOL.md, "Journal": py lists an attachment a Swift participant added and loads it, window by
    /// window, after its owner left; when py ends the session, nothing of the journal stays on the broker.
    @Test func aPythonParticipantLoadsAnAttachmentSwiftAdded() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let (alice, bob, a, _) = try await group.pair(Gallery(galleryID: "journal"))
            // Chunks of 4 KiB: 49 of them, more than three of py's windows of 16.
            let content = Data((0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) })
            let added = try await GroupSessionJournal(session: a, configuration: .init(chunkSize: 4_096)).add(
                content, name: "notes.txt", mediaType: "text/plain", metadata: ["lang": "en"])
            await a.leave()  // bob keeps the session; the bytes stay on the broker

            let py = try PythonParticipant(broker, group: group.name, participant: "py", ["--session", a.id])
            _ = try await py.event("joined")
            let listed = try await py.event("attachment") { $0["id"] as? String == added.digest }
            #expect(listed["owner"] as? String == "alice" && listed["name"] as? String == "notes.txt")
            #expect(listed["size"] as? Int == content.count && listed["metadata"] as? [String: String] == ["lang": "en"])
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("groupsync-\(UUID().uuidString).txt")
            defer { try? FileManager.default.removeItem(at: file) }
            py.command(["op": "load", "id": added.digest, "owner": "alice", "path": file.path])
            let loaded = try await py.event("loaded")
            #expect(loaded["rejected"] as? Int == 0)
            #expect(try Data(contentsOf: file) == content)

            py.command(["op": "end"])
            _ = try await py.event("ended")
            try await waitUntil("no chunk left on the broker") {
                try await retainedTopics(broker, under: "groupsync/v2-chunks/\(group.name)").isEmpty
            }
            #expect(py.events("rejected").isEmpty, "py rejected: \(py.events("rejected"))")
            #expect(alice.rejectedMessageCount == 0 && bob.rejectedMessageCount == 0, "Swift rejected some of py's records")
            try await py.close()
            await group.closeAll()
        }
    }

    @Test func aSwiftParticipantJoinsAPythonSession() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let py = try PythonParticipant(
                broker, group: group.name, participant: "py",
                ["--activate", Gallery.activityIdentifier, "--title", "Gallery py", "--data", #"{"galleryID":"py"}"#])
            let id = try #require(try await py.event("joined")["session"] as? String)
            py.command(["op": "set", "key": "index", "value": 9])
            _ = try await py.event("value") { $0["value"] as? Int == 9 }

            // A catch-up timeout far above the bound: a join inside the bound was released by py's
            // $catchup, however slowly a loaded machine runs py.
            let alice = try await group.join("alice") { $0.catchUpTimeout = .seconds(20) }
            let joining = ContinuousClock.now
            let a = try await alice.joinSession(id, of: Gallery.self)
            #expect(ContinuousClock.now - joining < timeBound(.seconds(10)), "py's $catchup accepted (no catch-up timeout)")
            #expect(a.activity.galleryID == "py")
            #expect(try SharedState(a, key: "index", initialValue: 0).value == 9, "caught up by py")
            _ = try await py.event("catchup") { $0["to"] as? String == "alice" }
            try await waitUntil("alice sees py") { ids(a.activeParticipants) == ["alice", "py"] }
            _ = try await py.event("participants") { $0["active"] as? [String] == ["alice", "py"] }

            let messenger = GroupSessionMessenger(session: a)
            let chats = Collector(messenger.messages(of: Chat.self))
            try await messenger.send(Chat(text: "hi py"))
            _ = try await py.event("message") { ($0["body"] as? [String: Any])?["text"] as? String == "hi py" }
            py.command(["op": "send", "type": "Chat", "body": ["text": "hi alice"], "to": ["alice"]])
            try await waitUntil("alice has py's message") { chats.elements.map(\.message.text) == ["hi alice"] }

            // py closes cleanly: it leaves, and the session goes on for alice.
            try await py.close()
            try await waitUntil("py gone") { ids(a.activeParticipants) == ["alice"] }
            #expect(a.state == .joined)
            #expect(py.events("rejected").isEmpty, "py rejected: \(py.events("rejected"))")
            #expect(alice.rejectedMessageCount == 0)
            await group.closeAll()
        }
    }

    /// PROTOCOL.md, "Private sessions": py, given the group's key, joins a private Swift session (state,
    /// messages both ways, the journal) and Swift joins py's private session; without the key py cannot
    /// join; nothing is rejected on either side and nothing of it travels in clear.
    @Test func aPythonParticipantInAPrivateGroupBothWays() async throws {
        try await MosquittoBroker.withBroker { broker in
            let key = try GroupKey.random(id: "k1")
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gs-interop-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let keyFile = directory.appendingPathComponent("group.key").path
            try "k1 \(key.base64Secret)\n".write(toFile: keyFile, atomically: true, encoding: .utf8)
            let group = Group(broker)
            let (tap, wire) = try await rawSubscriber(
                broker, "\(GroupTopics.protocolRoot)/\(group.name)/#", "\(GroupTopics.chunkProtocolRoot)/\(group.name)/#")
            let keyring = try GroupKeyring([key])
            let alice = try await group.join("alice") { $0.keyring = keyring }
            let a = try await alice.startJoined(Gallery(galleryID: "hush-interop"))
            let sa = try SharedState(a, key: "index", initialValue: 0)
            try await sa.set(3)
            let content = Data((0..<12_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 5) })  // 3 chunks: the Python AES is slow
            let added = try await GroupSessionJournal(session: a, configuration: .init(chunkSize: 4_096)).add(
                content, name: "quiet-notes.txt", mediaType: "text/plain", metadata: ["lang": "en"])

            let py = try PythonParticipant(broker, group: group.name, participant: "py", ["--session", a.id, "--secret-file", keyFile])
            let joined = try await py.event("joined")
            #expect((joined["state"] as? [String: Any])?["index"] as? Int == 3, "caught up, the value opened")
            py.command(["op": "set", "key": "index", "value": 5])
            try await waitUntil("py's sealed write reaches alice") { sa.value == 5 }
            try await sa.set(6)
            _ = try await py.event("value") { $0["value"] as? Int == 6 && $0["writer"] as? String == "alice" }
            let chats = Collector(GroupSessionMessenger(session: a).messages(of: Chat.self))
            try await GroupSessionMessenger(session: a).send(Chat(text: "whisper to py"), to: .only(Participant(id: "py")))
            _ = try await py.event("message") { ($0["body"] as? [String: Any])?["text"] as? String == "whisper to py" }
            py.command(["op": "send", "type": "Chat", "body": ["text": "whisper from py"]])
            try await waitUntil("alice has py's sealed message") { chats.elements.map(\.message.text) == ["whisper from py"] }
            let listed = try await py.event("attachment") { $0["id"] as? String == added.digest }
            #expect(listed["name"] as? String == "quiet-notes.txt" && listed["metadata"] as? [String: String] == ["lang": "en"])
            let file = directory.appendingPathComponent("loaded.txt")
            py.command(["op": "load", "id": added.digest, "owner": "alice", "path": file.path])
            _ = try await py.event("loaded")
            #expect(try Data(contentsOf: file) == content)

            // py's own private session, joined by Swift.
            let pyHost = try PythonParticipant(
                broker, group: group.name, participant: "pyhost",
                [
                    "--activate", Gallery.activityIdentifier, "--title", "Gallery pyhost", "--data", #"{"galleryID":"pyhost"}"#,
                    "--secret-file", keyFile,
                ])
            let hosted = try #require(try await pyHost.event("joined")["session"] as? String)
            let bob = try await group.join("bob") { $0.keyring = keyring }
            let b = try await bob.joinSession(hosted, of: Gallery.self)
            #expect(b.activity.galleryID == "pyhost" && b.metadata.title == "Gallery pyhost")

            // Without the key, py cannot join.
            let outsider = try PythonParticipant(broker, group: group.name, participant: "eve", ["--session", a.id])
            _ = try await outsider.event("error") { ($0["message"] as? String)?.contains("private") == true }

            for participant in [py, pyHost] { #expect(participant.events("rejected").isEmpty, "\(participant.events("rejected"))") }
            #expect(alice.rejectedMessageCount == 0 && bob.rejectedMessageCount == 0)
            await tap.disconnect()
            for clear in ["hush-interop", "whisper", "quiet-notes", "Gallery pyhost"] {
                #expect(!wire.elements.contains { String(decoding: $0.payload, as: UTF8.self).contains(clear) }, "\(clear) in clear")
            }
            try await py.close()
            try await pyHost.close()
            await group.closeAll()
        }
    }

    /// Under the example ACL, where only its owner may clear a record: alice ends a session py is in
    /// (py clears its own records), then py ends one alice is in; nothing of either is left on the broker.
    @Test(.needsOwnBroker("users and an ACL")) func endingWorksBothWaysUnderTheExampleACL() async throws {
        let users = LifetimeTests.users.merging(["py": "py-pw"]) { $1 }
        try await MosquittoBroker.withBroker(.init(users: users, acl: LifetimeTests.acl)) { broker in
            let group = Group(broker)
            let root = "\(GroupTopics.protocolRoot)/\(group.name)"
            @Sendable func stored(_ id: String) async throws -> [String] {
                try await retainedTopics(broker, under: root, marker: "\(root)/alive/bob", user: "bob", password: users["bob"])
                    .filter { $0.contains(id) }
            }
            let (wireClient, wire) = try await rawSubscriber(broker, "\(root)/#", user: "bob", password: users["bob"])
            let alice = try await group.join("alice", LifetimeTests.login("alice"))
            let a = try await alice.startJoined(Gallery(galleryID: "ended by alice"))
            let py = try PythonParticipant(
                broker, group: group.name, participant: "py", ["--password", users["py"]!, "--session", a.id])
            _ = try await py.event("joined")
            py.command(["op": "set", "key": "index", "value": 1])
            try await waitUntil("py's records stored") {
                try await stored(a.id).contains("\(root)/s/\(a.id)/state/index/py")
            }
            await a.end()
            #expect(try await py.event("ended")["by"] as? String == "alice")
            let endedCopy = "\(root)/session/\(a.id)/alice"
            try await py.waitUntil("nothing but alice's ended copy left") {
                try await stored(a.id).allSatisfy { $0 == endedCopy }
            } else: {
                "left: \(try await stored(a.id))\nwire:\n"
                    + wire.elements.filter { !$0.topic.contains("/alive/") }.map {
                        "\($0.retain ? "R" : "-") \($0.topic) \($0.string ?? "")"
                    }.joined(separator: "\n")
            }

            // alice clears her ended copy once the last other copy is cleared, whichever order the clears come in.
            try await waitUntil("alice's ended copy cleared") { try await stored(a.id).isEmpty }

            let b = try await alice.startJoined(Gallery(galleryID: "ended by py"))
            py.command(["op": "join", "session": b.id])
            _ = try await py.event("joined") { $0["session"] as? String == b.id }
            try await waitUntil("alice sees py") { ids(b.activeParticipants) == ["alice", "py"] }
            py.command(["op": "end"])
            try await waitUntil("alice's session ended by py") {
                b.state == .invalidated(reason: .ended(by: Participant(id: "py")))
            }
            try await py.waitUntil("nothing of py's session left") {
                try await stored(b.id).isEmpty
            } else: {
                "left: \(try await stored(b.id))"
            }

            try await py.close()
            await wireClient.disconnect()
            // The probe's markers on alive/bob are rejected (not heartbeats), by alice too; nothing else is.
            let rejected = py.events("rejected").filter { $0["topic"] as? String != "\(root)/alive/bob" }
            #expect(rejected.isEmpty, "py rejected: \(rejected)")
            await group.closeAll()
        }
    }

    /// py states a heartbeat interval of 1 s (keepalive 2 s): frozen, it leaves alice's active set
    /// within 3 × 1 s − 0.5 s of its last heartbeat, judged by its own interval, not alice's; thawed, it
    /// comes back (by its next heartbeat, or by reconnecting if the broker dropped it) and talks again.
    @Test func aFrozenPythonParticipantIsDroppedByItsOwnIntervalAndComesBack() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice")
            let a = try await alice.startJoined(Gallery(galleryID: "frozen"))
            let chats = Collector(GroupSessionMessenger(session: a).messages(of: Chat.self))
            let py = try PythonParticipant(broker, group: group.name, participant: "py", ["--keepalive", "2", "--session", a.id])
            _ = try await py.event("joined")
            try await waitUntil("alice sees py") { ids(a.activeParticipants) == ["alice", "py"] }

            py.signal(SIGSTOP)
            let frozen = ContinuousClock.now
            try await waitUntil(timeout: .seconds(5), "py dropped") { ids(a.activeParticipants) == ["alice"] }
            // 2.5 s after its last heartbeat (≤ 1 s before the freeze), checked every 0.25 s; far below the 7 s
            // alice's own interval would give.
            #expect(ContinuousClock.now - frozen < timeBound(.seconds(3.5)), "judged by py's interval, not alice's")
            py.signal(SIGCONT)
            try await waitUntil(timeout: .seconds(8), "py back") { ids(a.activeParticipants) == ["alice", "py"] }
            py.command(["op": "send", "type": "Chat", "body": ["text": "back"]])
            try await waitUntil("py talks again") { chats.elements.map(\.message.text) == ["back"] }

            try await py.close()
            try await waitUntil("py gone") { ids(a.activeParticipants) == ["alice"] }
            #expect(py.events("rejected").isEmpty, "py rejected: \(py.events("rejected"))")
            #expect(alice.rejectedMessageCount == 0)
            await group.closeAll()
        }
    }

    /// The broker crashes (SIGKILL, no persistence) while py and alice stream numbered reliable messages to
    /// each other: what the broker lost comes back from the senders' outboxes — by the gaps the receivers
    /// see, and the `$position` and open `$resend`s both send after reconnecting — once each, in order,
    /// without a gap.
    @Test(.needsOwnBroker("kills and restarts it")) func reliableMessagesCrossABrokerCrashBothWays() async throws {
        try await MosquittoBroker.withBroker(.init(persistence: false)) { broker in
            let group = Group(broker)
            let alice = try await group.join("alice")
            let a = try await alice.startJoined(Gallery(galleryID: "crash"))
            let messenger = GroupSessionMessenger(session: a)
            let fromPy = Collector(messenger.messages(of: ReliabilityTests.Numbered.self))
            let gaps = Collector(messenger.gaps())
            let py = try PythonParticipant(broker, group: group.name, participant: "py", ["--session", a.id])
            _ = try await py.event("joined")
            try await waitUntil("alice sees py") { ids(a.activeParticipants) == ["alice", "py"] }

            let count = 100
            for n in 1...count { py.command(["op": "send", "type": "Numbered", "body": ["from": "py", "n": n]]) }
            let sender = Task { () -> [Int] in
                var sent: [Int] = []
                for n in 1...count where (try? await messenger.send(ReliabilityTests.Numbered(from: "alice", n: n))) != nil {
                    sent.append(n)
                }
                return sent
            }
            try await waitUntil("mid-stream") { fromPy.count >= 5 && !py.events("message").isEmpty }
            try await broker.restart(after: .crash)
            let sentByAlice = try await withTimeLimit(.seconds(30), "alice's sends return") { await sender.value }

            @Sendable func pyReceived() -> [Int] {
                py.events("message").compactMap { ($0["body"] as? [String: Any])?["n"] as? Int }
            }
            try await py.waitUntil(timeout: .seconds(20), "every message arrives both ways") {
                fromPy.count >= count && pyReceived().count >= sentByAlice.count
            } else: {
                "alice has \(fromPy.elements.map(\.message.n)), py has \(pyReceived()), alice sent \(sentByAlice)"
            }
            #expect(fromPy.elements.map(\.message.n) == Array(1...count), "py to alice: once each, in order")
            #expect(pyReceived() == sentByAlice, "alice to py: once each, in order")
            #expect(gaps.elements.isEmpty, "alice saw gaps: \(gaps.elements)")
            #expect(py.events("gap").isEmpty, "py saw gaps: \(py.events("gap"))")

            try await py.close()
            #expect(py.events("rejected").isEmpty, "py rejected: \(py.events("rejected"))")
            #expect(alice.rejectedMessageCount == 0)
            await group.closeAll()
        }
    }
}

/// The participant that answers `newcomer`'s catch-up (docs/PROTOCOL.md#catch-up).
private func rendezvousWinner(newcomer: String, among candidates: [String]) -> String? {
    func fnv1a64(_ s: String) -> UInt64 {
        s.utf8.reduce(0xcbf2_9ce4_8422_2325) { ($0 ^ UInt64($1)) &* 0x0000_0100_0000_01b3 }
    }
    return candidates.max { (fnv1a64("\(newcomer)/\($0)"), $0) < (fnv1a64("\(newcomer)/\($1)"), $1) }
}

/// docs/interop/participant.py as a child process: commands as JSON lines on its input, events as JSON
/// lines from its output. Killed when released.
final class PythonParticipant: Sendable {
    /// A python3 that has paho-mqtt, or nil.
    static let interpreter: String? = ["/usr/bin/python3", "/usr/local/bin/python3"].first { path in
        FileManager.default.isExecutableFile(atPath: path)
            && (try? ChildProcess.run(path, ["-c", "import paho.mqtt"]).termination) == .exited(0)
    }
    static let missingReason: Comment = "needs python3 with paho-mqtt (Debian: python3-paho-mqtt, see scripts/install-deps.sh)"
    static let script = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("docs/interop/participant.py").path

    /// `--password` with the password of the broker's URL, if it has one (an external broker may need
    /// one; the user name is the participant's ID either way).
    static func password(of broker: MosquittoBroker) -> [String] {
        guard let password = try? MQTTClient.Configuration(url: broker.url).password else { return [] }
        return ["--password", password]
    }

    private let child: ChildProcess
    private let output = LockedValue<(lines: [String], partial: [UInt8])>(([], []))
    private let errors = LockedValue<[UInt8]>([])

    init(_ broker: MosquittoBroker, group: String, participant: String, _ arguments: [String]) throws {
        let output = output
        let errors = errors
        child = try ChildProcess(
            Self.interpreter!,
            ["-u", Self.script, "--broker", "\(broker.host):\(broker.port)", "--group", group, "--participant", participant]
                + Self.password(of: broker) + arguments,
            input: .pipe,
            output: .handler { chunk in
                output.withLock { output in
                    output.partial += chunk
                    while let newline = output.partial.firstIndex(of: UInt8(ascii: "\n")) {
                        output.lines.append(String(decoding: output.partial[..<newline], as: UTF8.self))
                        output.partial.removeSubrange(...newline)
                    }
                }
            },
            errors: .handler { chunk in errors.withLock { $0 += chunk } })
    }

    deinit { child.signal(SIGKILL) }

    /// Every event named `name` so far, in order.
    func events(_ name: String) -> [[String: Any]] {
        output.withLock { $0.lines }.compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
        }.filter { $0["event"] as? String == name }
    }

    /// Waits for the first event named `name` that satisfies `condition`, and returns it.
    func event(
        _ name: String, timeout: Duration = .seconds(10),
        where condition: @escaping @Sendable ([String: Any]) -> Bool = { _ in true }
    ) async throws -> [String: Any] {
        do {
            try await GroupSyncTestSupport.waitUntil(timeout: timeout, "py's event \(name)") {
                self.events(name).contains(where: condition)
            }
        } catch {
            Issue.record("py's output so far:\n\(transcript)")
            throw error
        }
        return events(name).first(where: condition)!  // events are only ever appended
    }

    /// `waitUntil`, recording `diagnosis` and py's output when the deadline passes.
    func waitUntil(
        timeout: Duration = .seconds(5), _ description: String, _ condition: @Sendable () async throws -> Bool,
        else diagnosis: () async throws -> String
    ) async throws {
        try await GroupSyncTests.waitUntil(timeout: timeout, description, condition) {
            "\(try await diagnosis())\npy's output:\n\(transcript)"
        }
    }

    /// Everything py wrote, for failure messages.
    var transcript: String {
        output.withLock { $0.lines }.joined(separator: "\n") + "\nstderr:\n"
            + String(decoding: errors.withLock { $0 }, as: UTF8.self)
    }

    func command(_ command: [String: Any]) {
        let line = try! JSONSerialization.data(withJSONObject: command, options: [.sortedKeys])
        child.write(Array(line) + [UInt8(ascii: "\n")])
    }

    /// Crashes it: no DISCONNECT, so the broker publishes its will.
    func kill() { child.signal(SIGKILL) }

    /// Sends `number` (SIGSTOP freezes it, SIGCONT thaws it).
    func signal(_ number: Int32) { child.signal(number) }

    /// `{"op":"close"}`, then waits for it to exit.
    func close() async throws {
        command(["op": "close"])
        child.closeInput()
        let termination = await child.wait(until: .after(.seconds(5)))
        #expect(termination == .exited(0), "py's exit: \(String(describing: termination))\n\(transcript)")
    }
}
