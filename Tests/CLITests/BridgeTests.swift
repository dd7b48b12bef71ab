import BrokerSupport
import Foundation
import GroupSync
import MQTT
import Synchronization
import Testing

/// `groupsync bridge` driven as a host program would: JSON lines in, JSON lines out (docs/BRIDGE.md).
@Suite(.timeLimit(.minutes(timeLimitMinutes(2)))) struct BridgeTests {
    static let activity = "com.example.gallery"

    @Test func twoBridgesStayInSync() async throws {
        try await MosquittoBroker.withBroker { broker in
            let alice = try BridgeProcess("alice", broker: broker.url, group: broker.unique("sync"))
            let bob = try BridgeProcess("bob", broker: broker.url, group: broker.unique("sync"))

            // bob follows announcements before there is any session: he hears of alice's without joining.
            let watching = try await bob.request("watch", #""activity":"\#(Self.activity)""#)
            #expect(watching["sessions"] == .array([]))
            let started = try await alice.request(
                "start", #""activity":"\#(Self.activity)","title":"Gallery paris","value":{"gallery":"paris"},"keys":["index"]"#)
            let session = try #require(started["session"]?.string)
            #expect(started["activity"] == .string(Self.activity))
            #expect(started["participant"] == .string("alice"))
            // Answers come after the effect: the session, its joined state and participants precede the ok.
            let aliceOrder = alice.events.map { $0["event"]?.string ?? "" }
            #expect(Array(aliceOrder.prefix(5)) == ["session", "state", "state", "participants", "ok"])
            let announced = try await bob.event("session event") { $0["event"] == "session" && $0["session"]?.string == session }
            #expect(announced["initiator"] == "alice")
            #expect(announced["title"] == "Gallery paris")
            #expect(announced["value"] == .object(["gallery": .string("paris")]))
            #expect(bob.events.contains { $0["event"] == "state" } == false, "bob has not joined")

            let joined = try await bob.request("join", #""activity":"\#(Self.activity)","session":"\#(session)""#)
            #expect(joined["session"]?.string == session)
            for bridge in [alice, bob] {
                _ = try await bridge.event("participants alice, bob") {
                    $0["event"] == "participants" && $0["participants"] == names("alice", "bob")
                }
            }

            // Values both ways; bob never named the key: it is discovered on the wire.
            _ = try await alice.request("set", #""key":"index","value":1"#)
            _ = try await bob.event("index 1") { $0["event"] == "value" && $0["key"] == "index" && $0["value"] == .int(1) }
            let set = try await bob.request("set", #""key":"index","value":{"photo":2,"zoom":1.5}"#)
            #expect(set["key"] == "index")
            let two = JSONValue.object(["photo": .int(2), "zoom": .double(1.5)])
            _ = try await alice.event("index {photo 2}") { $0["event"] == "value" && $0["key"] == "index" && $0["value"] == two }
            // bob's own value event came before his ok.
            let bobLines = bob.events
            let ownValue = bobLines.firstIndex { $0["event"] == "value" && $0["value"] == two }
            let setAnswer = bobLines.firstIndex { $0["event"] == "ok" && $0["key"] == "index" }
            #expect(ownValue != nil && setAnswer != nil && ownValue! < setAnswer!)

            // Messages: to one participant, and to everyone.
            _ = try await alice.request("send", #""value":{"text":"hello bob"},"to":["bob"]"#)
            let message = try await bob.event("message from alice") { $0["event"] == "message" }
            #expect(message["from"] == "alice")
            #expect(message["session"]?.string == session)
            #expect(message["value"] == .object(["text": .string("hello bob")]))
            _ = try await bob.request("send", #""value":[1,"two",null]"#)
            let reply = try await alice.event("message from bob") { $0["event"] == "message" }
            #expect(reply["from"] == "bob")
            #expect(reply["value"] == .array([.int(1), .string("two"), .null]))

            // bob leaves: his state says so before the ok; alice sees him go; bob can no longer set.
            _ = try await bob.request("leave")
            #expect(bob.events.contains { $0["event"] == "state" && $0["state"] == "invalidated" && $0["reason"] == "left" })
            _ = try await alice.event("participants alice") { $0["event"] == "participants" && $0["participants"] == names("alice") }
            let refused = try await bob.answer(bob.send("set", #""key":"index","value":3"#))
            #expect(refused["event"] == "error")

            // alice ends the session.
            _ = try await alice.request("end")
            #expect(alice.events.contains { $0["event"] == "state" && $0["reason"] == "ended" && $0["by"] == "alice" })

            for bridge in [alice, bob] { try await bridge.closeAndExpectACleanExit() }
        }
    }

    @Test func malformedRequestsGetAnErrorAndTheBridgeGoesOn() async throws {
        try await MosquittoBroker.withBroker { broker in
            let bridge = try BridgeProcess("mallory", broker: broker.url, group: broker.unique("malformed"))
            let huge = #"{"id":99,"op":"set","key":"k","value":""# + String(repeating: "x", count: 2 << 20) + #""}"#
            let cases: [(line: String, id: JSONValue?, mentions: String)] = [
                ("this is not json", nil, "not JSON"),
                ("[1,2,3]", nil, "object"),
                (#"{"id":1,"op":"fly"}"#, .int(1), "unknown op"),
                (#"{"op":"ping"}"#, nil, "missing \"id\""),
                (#"{"id":{"a":1},"op":"ping"}"#, nil, "\"id\""),
                (#"{"id":"two"}"#, .string("two"), "missing \"op\""),
                (#"{"id":3,"op":"set","value":1}"#, .int(3), "missing \"key\""),
                (#"{"id":4,"op":"set","key":7,"value":1}"#, .int(4), "\"key\" must be a string"),
                (#"{"id":5,"op":"set","key":"a/b","value":1}"#, .int(5), "invalid \"key\""),
                (#"{"id":6,"op":"send"}"#, .int(6), "missing \"value\""),
                (#"{"id":7,"op":"send","value":1,"to":"bob"}"#, .int(7), "array of strings"),
                (#"{"id":8,"op":"start","activity":["x"]}"#, .int(8), "\"activity\" must be a string"),
                (#"{"id":9,"op":"join","activity":"a.b","timeout":"soon"}"#, .int(9), "\"timeout\" must be a number"),
                (#"{"id":10,"op":"configure","broker":"http://example.com"}"#, .int(10), "http"),
                (#"{"id":11,"op":"set","key":"k","value":1}"#, .int(11), "not in a session"),
                (#"{"id":12,"op":"playback","action":"fly"}"#, .int(12), "unknown playback \"action\""),
                (#"{"id":13,"op":"playback","action":"seek","position":-1}"#, .int(13), "\"position\" must be"),
                (#"{"id":14,"op":"start","activity":"a.b","playback":"yes"}"#, .int(14), "\"playback\" must be true or false"),
                (#"{"id":15,"op":"playback","action":"play"}"#, .int(15), "not in a session"),
                (#"{"id":16,"op":"attach"}"#, .int(16), "missing \"path\""),
                (#"{"id":17,"op":"attach","path":"p.png","metadata":{"a":1}}"#, .int(17), "\"metadata\" must be an object of strings"),
                (#"{"id":18,"op":"load","digest":"xyz","path":"p"}"#, .int(18), "\"digest\" must be an attachment's digest"),
                (#"{"id":19,"op":"detach","digest":"abcd"}"#, .int(19), "not in a session"),
                (huge, nil, "limit of 1048576 bytes"),
            ]
            for (index, malformed) in cases.enumerated() {
                let before = bridge.events.count
                bridge.cli.send(malformed.line)
                // The bridge keeps answering: a ping after each bad line is answered, after its error.
                let ping = try await bridge.request("ping")
                #expect(ping["event"] == "ok")
                let between = Array(bridge.events[before...].dropLast())
                #expect(between.count == 1, "case \(index): one event for \(malformed.line.prefix(60)), got \(between)")
                let error = try #require(between.first)
                #expect(error["event"] == "error", "case \(index)")
                #expect(error["id"] == malformed.id, "case \(index): id")
                #expect(error["message"]?.string?.contains(malformed.mentions) == true, "case \(index): \(error)")
            }
            // Still fully working: it connects, starts a session and refuses a late configure.
            let started = try await bridge.request("start", #""activity":"\#(Self.activity)""#)
            #expect(started["session"]?.string != nil)
            let late = try await bridge.answer(bridge.send("configure", #""group":"other""#))
            #expect(late["event"] == "error")
            try await bridge.closeAndExpectACleanExit()
        }
    }

    @Test func endOfInputLeavesAndExitsZero() async throws {
        try await MosquittoBroker.withBroker { broker in
            let alice = try BridgeProcess("alice", broker: broker.url, group: broker.unique("eof"))
            let bob = try BridgeProcess("bob", broker: broker.url, group: broker.unique("eof"))
            let session = try #require(try await alice.request("start", #""activity":"\#(Self.activity)""#)["session"]?.string)
            // Without a session ID: the first live session of the activity.
            let joined = try await bob.request("join", #""activity":"\#(Self.activity)""#)
            #expect(joined["session"]?.string == session)
            _ = try await alice.event("participants alice, bob") {
                $0["event"] == "participants" && $0["participants"] == names("alice", "bob")
            }

            bob.cli.closeInput()
            #expect(try await bob.cli.wait() == 0)
            _ = try await bob.event("bob's state left") { $0["event"] == "state" && $0["reason"] == "left" }
            _ = try await alice.event("bob leaving") { $0["event"] == "participants" && $0["participants"] == names("alice") }

            // SIGTERM does the same.
            alice.cli.signal(SIGTERM)
            #expect(try await alice.cli.wait() == 0)
            _ = try await alice.event("alice's state left") { $0["event"] == "state" && $0["reason"] == "left" }
        }
    }

    /// A host that closes the bridge's output (while its input stays open) ends it as an interrupt does:
    /// the bridge leaves cleanly at its next event and exits 0, not on the failed write.
    @Test func aClosedOutputLeavesAndExitsZero() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = broker.unique("closed-output")
            let alice = try BridgeProcess("alice", broker: broker.url, group: group)
            _ = try await alice.request("start", #""activity":"\#(Self.activity)","keys":["index"]"#)
            let presence = try MQTTClient(configuration: .init(url: broker.url))
            try await presence.connect()
            let bobs = Collector(try await presence.subscribe(to: [TopicSubscription("groupsync/v2/\(group)/presence/bob")]))
            // The host: joins, reads the answer, closes its end of the bridge's output, keeps its input open.
            let host = """
                import subprocess, sys
                bridge = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                bridge.stdin.write(b'{"id":1,"op":"join","activity":"\(Self.activity)"}\\n')
                bridge.stdin.flush()
                while b'"id":1' not in bridge.stdout.readline():
                    pass
                bridge.stdout.close()
                print("closed", flush=True)
                print("exit", bridge.wait(timeout=20), flush=True)
                """
            let bob = try CLIProcess(
                ["python3", "-c", host, groupsyncExecutable, "bridge", "--broker", broker.url, "--group", group, "--as", "bob"],
                executable: "/usr/bin/env")
            _ = try await bob.waitForLine { $0 == "closed" }
            _ = try await alice.request("set", #""key":"index","value":1"#)  // an event for bob to write
            _ = try await bob.waitForLine(timeout: .seconds(25)) { $0.hasPrefix("exit ") }
            #expect(bob.output.last == "exit 0")
            try await waitUntil("bob's presence is cleared, not a will") { bobs.elements.last?.payload.isEmpty == true }
            _ = try await alice.event("bob leaving") { $0["event"] == "participants" && $0["participants"] == names("alice") }
            await presence.disconnect()
            try await alice.closeAndExpectACleanExit()
        }
    }

    /// Without `--as`, the bridge is the same participant on every run (USER@HOST-bridge), so that a
    /// rerun takes its own place instead of leaving records behind; it is not the `join` of the same user.
    @Test func theDefaultParticipantIDIsStableAcrossRuns() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = broker.unique("stable")
            var ids: [String] = []
            for _ in 0..<2 {
                let bridge = try BridgeProcess(nil, broker: broker.url, group: group)
                let started = try await bridge.request("start", #""activity":"\#(Self.activity)""#)
                ids.append(started["participant"]?.string ?? "")
                bridge.cli.closeInput()
                #expect(try await bridge.cli.wait() == 0)
            }
            #expect(ids[0] == ids[1] && ids[0].contains("@") && ids[0].hasSuffix("-bridge"), "\(ids)")
        }
    }

    /// Watching together: the hosts play the media, the bridges say when. Both get their `start` at the
    /// same real instant (as this test receives the lines), pauses land on one position, a buffering
    /// suspension holds the other bridge and its end restarts both; a bridge that asks for playback only
    /// later still starts, late, at the group's position.
    @Test func twoBridgesPlayTogether() async throws {
        try await MosquittoBroker.withBroker { broker in
            let alice = try BridgeProcess("alice", broker: broker.url, group: broker.unique("watch"))
            let bob = try BridgeProcess("bob", broker: broker.url, group: broker.unique("watch"))
            let started = try await alice.request("start", #""activity":"com.example.movie","playback":true"#)
            let session = try #require(started["session"]?.string)
            // The current timeline (nobody set one: paused at zero, no item) came before the ok.
            let first = try #require(alice.events.first { $0["event"] == "timeline" })
            #expect(first["playing"] == .bool(false) && first["item"] == .null && first["position"]?.number == 0)
            #expect(alice.events.firstIndex { $0["event"] == "timeline" }! < alice.events.firstIndex { $0["event"] == "ok" }!)
            _ = try await bob.request("join", #""session":"\#(session)","playback":true"#)
            #expect(bob.events.contains { $0["event"] == "timeline" })

            _ = try await alice.request("playback", #""action":"item","item":"movie-42""#)
            _ = try await bob.event("the item") { $0["event"] == "timeline" && $0["item"] == "movie-42" }

            // bob's join answered once he knew the group clock (alice serves it): a play starts both at once.
            let clock = try await bob.request("position")
            #expect(clock["group_ms"]?.number != nil && clock["reference"] == "alice")
            _ = try await alice.request("playback", #""action":"play""#)
            var spread = try await Self.startSpread([alice, bob], number: 1)
            // Under the whole suite's load a bridge process can still wait for a CPU: the bound leaves room.
            #expect(spread < Self.startSpreadBound, "start spread \(spread)")
            let start = try #require(bob.events.first { $0["event"] == "start" })
            // At the scheduled position plus its lateness. Late at all only when both processes waited for
            // the CPU past the lead together (the spread above held), as under the whole suite's load.
            let lateness = try #require(start["lateness_ms"]?.number)
            #expect(start["item"] == "movie-42" && start["rate"]?.number == 1)
            #expect(.milliseconds(lateness) < Self.lateStartBound, "\(start)")
            #expect(abs((start["position"]?.number ?? -1) - lateness / 1_000) < 0.000_01)

            // pause: both paused at one position.
            _ = try await bob.request("playback", #""action":"pause""#)
            let paused = try await [alice, bob].asyncMap { bridge in
                try await bridge.event("paused") {
                    $0["event"] == "timeline" && $0["playing"] == .bool(false) && ($0["position"]?.number ?? 0) > 0
                }
            }
            #expect(paused[0]["position"] == paused[1]["position"])
            let position = try await bob.request("position")
            #expect(position["position"] == paused[0]["position"] && position["reference"] == "alice")

            // seek while paused, play again; then bob buffers: alice's timeline waits for him, paused.
            _ = try await alice.request("playback", #""action":"seek","position":120"#)
            _ = try await alice.request("playback", #""action":"play""#)
            spread = try await Self.startSpread([alice, bob], number: 2)
            #expect(spread < Self.startSpreadBound, "start spread \(spread)")
            let suspended = try await bob.request("suspend", #""reason":"buffering""#)
            #expect(suspended["waits"] == .bool(true) && suspended["suspension"] == "s1")
            let waiting = try await [alice, bob].asyncMap { bridge in
                try await bridge.event("waiting for bob") { $0["event"] == "timeline" && $0["waiting"] == names("bob") }
            }
            #expect(waiting.allSatisfy { $0["playing"] == .bool(false) && ($0["position"]?.number ?? 0) >= 120 })
            #expect(waiting[0]["position"] == waiting[1]["position"])
            let resumed = try await bob.request("resume")
            #expect(resumed["ended"] == names("s1"))
            spread = try await Self.startSpread([alice, bob], number: 3)
            #expect(spread < Self.startSpreadBound, "start spread \(spread)")
            let restart = try #require(alice.events.last { $0["event"] == "start" })
            let held = try #require(waiting[0]["position"]?.number)
            #expect(abs((restart["position"]?.number ?? 0) - held - (restart["lateness_ms"]?.number ?? 0) / 1_000) < 0.000_01)

            // carol asks for playback only with her first playback op: the play under way starts her, late.
            let carol = try BridgeProcess("carol", broker: broker.url, group: broker.unique("watch"))
            _ = try await carol.request("join", #""session":"\#(session)""#)
            #expect(carol.events.contains { $0["event"] == "timeline" } == false, "no playback asked for yet")
            let carolPosition = try await carol.request("position")
            #expect(carolPosition["playing"] == .bool(true) && carolPosition["item"] == "movie-42")
            let late = try await carol.event("carol's late start") { $0["event"] == "start" }
            #expect((late["lateness_ms"]?.number ?? 0) > 0 && (late["position"]?.number ?? 0) > 120)

            for bridge in [alice, bob, carol] {
                // Every start came after the timeline event of what it starts.
                let events = bridge.events
                for (index, event) in events.enumerated() where event["event"] == "start" {
                    #expect(events[..<index].contains { $0["event"] == "timeline" && $0["anchor"] == event["scheduled"] }, "\(event)")
                }
                try await bridge.closeAndExpectACleanExit()
            }
        }
    }

    static let startSpreadBound = timeBound(.milliseconds(50))
    static let lateStartBound = timeBound(.milliseconds(250))

    /// The spread of the `number`th `start` event of `bridges`, which must all be for the same scheduled
    /// instant: the difference of the latenesses the bridges report, each on its own group clock — the
    /// bridges' own spread, free of the pipes and of this process's scheduling.
    private static func startSpread(_ bridges: [BridgeProcess], number: Int) async throws -> Duration {
        var latenesses: [Double] = []
        var scheduled: Set<JSONValue> = []
        for bridge in bridges {
            try await waitUntil("start \(number) of \(bridge.cli.pid)") {
                bridge.events.filter { $0["event"] == "start" }.count >= number
            }
            let start = bridge.events.filter { $0["event"] == "start" }[number - 1]
            latenesses.append(start["lateness_ms"]?.number ?? .infinity)
            scheduled.insert(start["scheduled"] ?? .null)
        }
        #expect(scheduled.count == 1, "one scheduled instant: \(scheduled)")
        return .microseconds(Int64((latenesses.max()! - latenesses.min()!) * 1_000))
    }

    /// A join waits for its session's announcement no longer than `--timeout`; Ctrl-C or SIGTERM ends that
    /// wait at once, with an error answer, and the bridge exits 0 — a frozen broker's too, and connecting
    /// to a frozen broker gives up after `--timeout` as well.
    @Test(.needsOwnBroker("reads its log to see a client connect")) func waitsEndOnTimeoutOrSignal() async throws {
        try await MosquittoBroker.withBroker { broker in
            let impatient = try BridgeProcess("carol", broker: broker.url, group: broker.unique("waits"), options: ["--timeout", "1"])
            let started = ContinuousClock.now
            let answer = try await impatient.answer(impatient.send("join", #""session":"nosuchsession""#))
            #expect(answer["event"] == "error" && answer["message"]?.string?.contains("within 1 s") == true, "\(answer)")
            #expect(ContinuousClock.now - started < timeBound(.seconds(5)))
            impatient.cli.closeInput()
            #expect(try await impatient.cli.wait() == 0)

            @Sendable func connections() -> Int { broker.logText.components(separatedBy: "New client connected").count }
            for number in [SIGINT, SIGTERM] {
                let before = connections()
                let waiting = try BridgeProcess("dave", broker: broker.url, group: broker.unique("waits"))
                let id = waiting.send("join", #""session":"nosuchsession""#)
                try await waitUntil("connected") { connections() > before }
                waiting.cli.signal(number)
                #expect(try await withTimeLimit(timeBound(.seconds(5)), "the bridge stops") { try await waiting.cli.wait() } == 0)
                #expect(try await waiting.answer(id)["event"] == "error")
            }

            // A broker that takes the connection and never answers.
            broker.pause()
            defer { broker.resume() }
            for number in [SIGINT, SIGTERM] {
                let waiting = try BridgeProcess(
                    "erin", broker: broker.url, group: broker.unique("waits"), environment: ["GROUPSYNC_MQTT_DEBUG": "1"])
                let id = waiting.send("join", #""session":"nosuchsession""#)
                try await waitUntil("its CONNECT is sent") { waiting.cli.errors.contains { $0.contains("sending CONNECT") } }
                waiting.cli.signal(number)
                #expect(try await withTimeLimit(timeBound(.seconds(5)), "the bridge stops") { try await waiting.cli.wait() } == 0)
                #expect(try await waiting.answer(id)["event"] == "error")
            }

            // Connecting waits no longer than --timeout either: the request gets its error answer, the
            // bridge goes on, and once the broker answers again the next request connects.
            let patient = try BridgeProcess("frank", broker: broker.url, group: broker.unique("waits"), options: ["--timeout", "1"])
            let began = ContinuousClock.now
            let timedOut = try await patient.answer(patient.send("watch", #""activity":"\#(Self.activity)""#))
            let message = timedOut["message"]?.string ?? ""
            #expect(timedOut["event"] == "error" && message.contains("timed out after 1 s waiting for the broker"), "\(timedOut)")
            #expect(ContinuousClock.now - began < timeBound(.seconds(5)))
            _ = try await patient.request("ping")
            broker.resume()
            let watching = try await patient.request("watch", #""activity":"\#(Self.activity)""#)
            #expect(watching["sessions"] == .array([]))
            patient.cli.closeInput()
            #expect(try await patient.cli.wait() == 0)
        }
    }

    /// The journal through bridges: a file added by path is listed everywhere, only its owner removes it,
    /// and a bridge that joins after the owner left loads it to a path, with progress.
    @Test func journalAddListLoadAndRemove() async throws {
        try await MosquittoBroker.withBroker { broker in
            let directory = try ScratchDirectory("gs-bridge-journal")
            defer { directory.remove() }
            // Four chunks of the default 64 KiB.
            let photo = Data((0..<(200 << 10)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) })
            let photoPath = try directory.write(photo, as: "photo.png")
            let notePath = try directory.write(Data("a note".utf8), as: "note.bin")

            let group = broker.unique("journal")
            let alice = try BridgeProcess("alice", broker: broker.url, group: group)
            let bob = try BridgeProcess("bob", broker: broker.url, group: group)
            let session = try #require(try await alice.request("start", #""activity":"\#(Self.activity)""#)["session"]?.string)
            _ = try await bob.request("join", #""session":"\#(session)""#)
            #expect(bob.events.contains { $0["event"] == "journal" } == false, "an empty journal is not reported")

            let attached = try await alice.request("attach", #""path":"\#(photoPath)","metadata":{"place":"Paris"}"#)
            let attachment = try #require(attached["attachment"]?.object)
            let digest = try #require(attachment["digest"]?.string)
            #expect(attachment["owner"] == "alice")
            #expect(attachment["name"] == "photo.png")
            #expect(attachment["type"] == "image/png", "guessed from the extension")
            #expect(attachment["size"] == .int(Int64(photo.count)))
            #expect(attachment["metadata"] == .object(["place": .string("Paris")]))
            #expect(digest.count == 64)
            // Answers come after the effect: alice's journal event precedes her ok.
            let aliceLines = alice.events
            let listed = aliceLines.firstIndex { $0["event"] == "journal" }
            let answer = aliceLines.firstIndex { $0["event"] == "ok" && $0["attachment"] != nil }
            #expect(listed != nil && answer != nil && listed! < answer!)
            _ = try await bob.event("bob's journal lists the photo") {
                $0["event"] == "journal" && $0["attachments"] == .array([.object(attachment)])
            }
            #expect(try await bob.request("attachments")["attachments"] == .array([.object(attachment)]))

            // Only the owner removes an attachment: bob's attempt is an error with the library's message.
            let refused = try await bob.answer(bob.send("detach", #""digest":"\#(digest)","owner":"alice""#))
            #expect(refused["event"] == "error")
            #expect(refused["message"]?.string?.contains("only the attachment's owner (alice) can remove it") == true, "\(refused)")
            let noted = try #require(try await alice.request("attach", #""path":"\#(notePath)","type":"text/plain""#)["attachment"]?.object)
            #expect(noted["type"] == "text/plain")
            _ = try await bob.event("bob lists two") { $0["event"] == "journal" && $0["attachments"]?.array?.count == 2 }
            let removed = try await alice.request("detach", #""digest":"\#(try #require(noted["digest"]?.string).prefix(10))""#)
            #expect(removed["attachment"] == .object(noted))
            try await waitUntil("bob lists the photo alone again") {
                let journals = bob.events.filter { $0["event"] == "journal" }
                return journals.count >= 3 && journals.last?["attachments"] == .array([.object(attachment)])
            }

            // The owner leaves; carol joins later and loads the photo from the broker.
            alice.cli.closeInput()
            #expect(try await alice.cli.wait() == 0)
            let carol = try BridgeProcess("carol", broker: broker.url, group: group)
            _ = try await carol.request("join", #""session":"\#(session)""#)
            #expect(carol.events.last { $0["event"] == "journal" }?["attachments"] == .array([.object(attachment)]), "listed before the ok")
            let copyPath = directory.path("copy.png")
            let started = try await carol.request("load", #""digest":"\#(digest)","owner":"alice","path":"\#(copyPath)""#)
            let load = try #require(started["load"]?.string)
            #expect(started["attachment"] == .object(attachment))
            let loaded = try await carol.event("the load's end") {
                $0["load"] == .string(load) && ($0["event"] == "loaded" || $0["event"] == "error")
            }
            #expect(loaded["event"] == "loaded", "\(loaded)")
            #expect(loaded["size"] == .int(Int64(photo.count)))
            #expect(loaded["path"] == .string(copyPath))
            #expect(try Data(contentsOf: URL(fileURLWithPath: copyPath)) == photo)
            let progress = carol.events.filter { $0["event"] == "progress" && $0["load"] == .string(load) }
            #expect(progress.first?["done"] == .int(0), "the first report: nothing yet")
            #expect(progress.last?["done"] == .int(Int64(photo.count)), "the last report: everything")
            #expect(progress.allSatisfy { $0["total"] == .int(Int64(photo.count)) && $0["digest"] == .string(digest) })
            let progressThenLoaded = carol.events.filter { $0["load"] == .string(load) }.map { $0["event"]?.string ?? "" }
            #expect(progressThenLoaded.last == "loaded", "\(progressThenLoaded)")

            // A load that cannot write its file ends with an error event carrying the library's message.
            let failing = try await carol.request(
                "load", #""digest":"\#(digest.prefix(8))","path":"\#(directory.path("missing/dir/copy.png"))""#)
            let failingLoad = try #require(failing["load"]?.string)
            let failed = try await carol.event("the failed load's end") { $0["load"] == .string(failingLoad) && $0["event"] == "error" }
            #expect(failed["message"]?.string?.contains("file error: cannot create") == true, "\(failed)")
            let unknown = try await carol.answer(carol.send("load", #""digest":"abcd","path":"\#(copyPath)""#))
            #expect(unknown["event"] == "error" && unknown["message"]?.string?.contains("no attachment abcd") == true)

            for bridge in [bob, carol] { try await bridge.closeAndExpectACleanExit() }
        }
    }

    /// `join` and `bridge` exchange one documented message type (PROTOCOL.md, "The command-line tools on
    /// the wire"), so the two tools can talk to each other.
    @Test func joinAndBridgeMessageEachOther() async throws {
        try await MosquittoBroker.withBroker { broker in
            let alice = try BridgeProcess("alice", broker: broker.url, group: broker.unique("tools"))
            let session = try #require(try await alice.request("start", #""activity":"\#(Self.activity)""#)["session"]?.string)
            let bob = try CLIProcess([
                "join", Self.activity, "--as", "bob", "--session", session, "--broker", broker.url, "--group", broker.unique("tools"),
            ])
            _ = try await bob.waitForLine { $0 == "participants alice,bob" }
            bob.send("!hello alice")
            let message = try await alice.event("bob's text") { $0["event"] == "message" }
            #expect(message["from"] == "bob")
            #expect(message["value"] == .object(["text": .string("hello alice")]))
            _ = try await alice.request("send", #""value":{"text":"hello bob"}"#)
            _ = try await bob.waitForLine { $0 == #"message alice {"text":"hello bob"}"# }
            bob.closeInput()
            #expect(try await bob.wait() == 0)
            alice.cli.closeInput()
            #expect(try await alice.cli.wait() == 0)
        }
    }

    /// Every message the bridge's participant rejects is a `rejected` event with its topic and size, always
    /// (`GROUPSYNC_LOG_REJECTED` still logs it on stderr as well): a malformed payload on the session's
    /// broadcast topic, reported by both bridges, and a `BridgeMessage` from a member whose body does not
    /// decode, reported by its recipient.
    @Test func rejectedMessagesAreEvents() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = broker.unique("rejected")
            let alice = try BridgeProcess("alice", broker: broker.url, group: group)
            let bob = try BridgeProcess("bob", broker: broker.url, group: group, environment: ["GROUPSYNC_LOG_REJECTED": "1"])
            let session = try #require(try await alice.request("start", #""activity":"\#(Self.activity)""#)["session"]?.string)
            _ = try await bob.request("join", #""session":"\#(session)""#)
            let mallory = try await Self.rawClient(broker)

            let malformed = "groupsync/v2/\(group)/s/\(session)/all/mallory"
            try await mallory.publish(to: malformed, string: "not json")
            for bridge in [alice, bob] {
                let rejected = try await bridge.event("the rejection of \(malformed)") {
                    $0["event"] == "rejected" && $0["topic"] == .string(malformed)
                }
                #expect(rejected == ["event": .string("rejected"), "topic": .string(malformed), "size": .int(8)])
            }
            try await waitUntil("bob's log of it (stderr: \(bob.cli.errors.suffix(3)))") {
                bob.cli.errors.contains("groupsync: rejected 8 bytes on \(malformed)")
            }
            if ProcessInfo.processInfo.environment["GROUPSYNC_LOG_REJECTED"] == nil {
                #expect(!alice.cli.errors.contains { $0.contains("rejected") }, "no log without the variable: \(alice.cli.errors)")
            }

            // In alice's name and epoch, well-formed but for its body: rejected when bob's bridge decodes it.
            let epoch = try await Self.memberEpoch(of: "alice", group: group, session: session, mallory)
            let direct = "groupsync/v2/\(group)/s/\(session)/to/bob/alice"
            let undecodable = #"{"body":{"text":"no value"},"epoch":\#(epoch),"reliable":false,"seq":1,"type":"BridgeMessage","v":2}"#
            try await mallory.publish(to: direct, string: undecodable, qos: .atMostOnce)
            let rejected = try await bob.event("the rejection of the undecodable body") {
                $0["event"] == "rejected" && $0["topic"] == .string(direct)
            }
            #expect(rejected["size"] == .int(Int64(undecodable.utf8.count)))
            #expect(!bob.events.contains { $0["event"] == "message" }, "nothing delivered")
            await mallory.disconnect()

            for bridge in [alice, bob] { try await bridge.closeAndExpectACleanExit() }
        }
    }

    /// Reliable messages that will never arrive are a `gap` event in their place. alice's bridge sends bob
    /// three messages to everyone and one to him alone; then a `$skip` in alice's name and member epoch,
    /// on bob's direct topic — what her process sends once a broker lost messages that have left her
    /// outbox — says the next two of each stream are lost for good. bob's bridge reports both gaps, and
    /// alice's next broadcasts, seqs 4 and 5 (the gap's), are passed over: her sixth follows the gap.
    @Test func lostMessagesAreGapEvents() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = broker.unique("gaps")
            let alice = try BridgeProcess("alice", broker: broker.url, group: group)
            let bob = try BridgeProcess("bob", broker: broker.url, group: group)
            let session = try #require(try await alice.request("start", #""activity":"\#(Self.activity)""#)["session"]?.string)
            _ = try await bob.request("join", #""session":"\#(session)""#)
            _ = try await alice.event("participants alice, bob") {
                $0["event"] == "participants" && $0["participants"] == names("alice", "bob")
            }
            for n in 1...3 { _ = try await alice.request("send", #""value":{"n":\#(n)}"#) }
            _ = try await alice.request("send", #""value":{"n":"direct"},"to":["bob"]"#)
            @Sendable func received() -> [JSONValue] {
                bob.events.filter { $0["event"] == "message" && $0["from"] == "alice" }.compactMap { $0["value"]?.object?["n"] }
            }
            try await waitUntil("bob has alice's four messages (has \(received()))") { received().count == 4 }

            let mallory = try await Self.rawClient(broker)
            let epoch = try await Self.memberEpoch(of: "alice", group: group, session: session, mallory)
            let direct = "groupsync/v2/\(group)/s/\(session)/to/bob/alice"
            for (stream, through, lost) in [("all", 5, "[4,5]"), ("direct", 3, "[2,3]")] {
                let body = #"{"lost":[\#(lost)],"stream":"\#(stream)","through":\#(through)}"#
                try await mallory.publish(to: direct, string: #"{"body":\#(body),"epoch":\#(epoch),"reliable":true,"type":"$skip","v":2}"#)
            }
            await mallory.disconnect()
            for toEveryone in [true, false] {
                let gap = try await bob.event("the gap of alice's \(toEveryone ? "broadcasts" : "direct messages")") {
                    $0["event"] == "gap" && $0["to_everyone"] == .bool(toEveryone)
                }
                #expect(
                    gap == [
                        "event": .string("gap"), "session": .string(session), "from": .string("alice"), "count": .int(2),
                        "to_everyone": .bool(toEveryone),
                    ])
            }

            for n in 4...6 { _ = try await alice.request("send", #""value":{"n":\#(n)}"#) }
            try await waitUntil("bob has alice's sixth message (has \(received()))") { received().contains(.int(6)) }
            #expect(received().filter { $0 != .string("direct") } == [.int(1), .int(2), .int(3), .int(6)], "4 and 5 were the gap's")
            let lines = bob.events
            let gap = try #require(lines.firstIndex { $0["event"] == "gap" && $0["to_everyone"] == .bool(true) })
            let sixth = try #require(lines.firstIndex { $0["event"] == "message" && $0["value"]?.object?["n"] == .int(6) })
            #expect(gap < sixth)
            #expect(!lines.contains { $0["event"] == "rejected" }, "the skips were well-formed")

            for bridge in [alice, bob] { try await bridge.closeAndExpectACleanExit() }
        }
    }

    /// A plain MQTT client, connected: what anyone without an ACL can publish.
    private static func rawClient(_ broker: MosquittoBroker) async throws -> MQTTClient {
        let client = try MQTTClient(configuration: .init(url: broker.url))
        try await client.connect()
        return client
    }

    /// The `epoch` of `participant`'s member record in `session`, read from the broker as any subscriber
    /// can (the record is retained).
    private static func memberEpoch(of participant: String, group: String, session: String, _ client: MQTTClient) async throws -> Int64 {
        let topic = "groupsync/v2/\(group)/s/\(session)/member/\(participant)"
        let subscription = try await client.subscribe(to: [TopicSubscription(topic)])
        let records = Collector(subscription)
        try await waitUntil("\(participant)'s member record") { !records.elements.isEmpty }
        subscription.unsubscribe()
        let record = try #require(Wire.decode(JSONValue.self, from: records.elements[0].payload)?.object)
        guard case let .int(epoch)? = record["epoch"] else { throw MemberRecordWithoutEpoch(record: record) }
        return epoch
    }

    @Test func pythonSampleHostSucceeds() async throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let script = root.appendingPathComponent("Examples/bridge_host.py").path
        try await MosquittoBroker.withBroker { broker in
            let host = try CLIProcess(["python3", script, groupsyncExecutable, broker.url], executable: "/usr/bin/env")
            host.closeInput()
            let status = try await host.wait(timeout: .seconds(60))
            #expect(status == 0, "bridge_host.py: \((host.output + host.errors).joined(separator: "\n"))")
            // Its last line may still be in the pipe when it exits.
            try await waitUntil("bridge_host.py's OK line (output: \(host.output))") {
                host.output.contains { $0.hasPrefix("OK: both bridges showed index") }
            }
        }
    }
}

/// A `groupsync bridge` child: requests written as JSON lines, its stdout parsed as JSON objects.
private final class BridgeProcess: Sendable {
    let cli: CLIProcess
    private let nextID = LockedValue(100)

    /// A bridge for `participant` (nil: its default ID, without `--as`).
    init(_ participant: String?, broker: String, group: String, options: [String] = [], environment: [String: String] = [:]) throws {
        cli = try CLIProcess(
            ["bridge", "--broker", broker, "--group", group] + (participant.map { ["--as", $0] } ?? []) + options, environment: environment)
    }

    /// Every line on stdout, parsed.
    var events: [[String: JSONValue]] {
        cli.output.compactMap { line in
            guard case let .object(object)? = Wire.decode(JSONValue.self, from: Data(line.utf8)) else { return nil }
            return object
        }
    }

    /// Closes its standard input and expects it to end with status 0, its stdout holding only JSON events.
    func closeAndExpectACleanExit(sourceLocation: SourceLocation = #_sourceLocation) async throws {
        cli.closeInput()
        #expect(try await cli.wait() == 0, sourceLocation: sourceLocation)
        #expect(unparsedLines.isEmpty, "stdout holds only JSON events: \(unparsedLines)", sourceLocation: sourceLocation)
    }

    /// Lines on stdout that are not JSON objects (there must be none).
    var unparsedLines: [String] {
        cli.output.filter { line in
            guard case .object? = Wire.decode(JSONValue.self, from: Data(line.utf8)) else { return true }
            return false
        }
    }

    /// Writes `{"id":N,"op":op,<fields>}` and returns N.
    func send(_ op: String, _ fields: String = "") -> Int {
        let id = nextID.withLock { id in
            id += 1
            return id
        }
        cli.send(#"{"id":\#(id),"op":"\#(op)"\#(fields.isEmpty ? "" : "," + fields)}"#)
        return id
    }

    /// The answer (ok or error) to request `id`.
    func answer(_ id: Int) async throws -> [String: JSONValue] {
        try await event("the answer to request \(id)") { $0["id"] == .int(Int64(id)) }
    }

    /// Sends a request and returns its answer, which must be ok.
    func request(_ op: String, _ fields: String = "") async throws -> [String: JSONValue] {
        let answer = try await answer(send(op, fields))
        guard answer["event"] == "ok" else { throw BridgeRequestFailed(op: op, answer: answer) }
        return answer
    }

    /// The first event (since the start) that matches.
    func event(
        _ what: String, timeout: Duration = .seconds(10), _ predicate: @escaping @Sendable ([String: JSONValue]) -> Bool
    ) async throws -> [String: JSONValue] {
        try await waitUntil(timeout: timeout, "\(what) (last events: \(cli.output.suffix(4)), stderr: \(cli.errors.suffix(3)))") {
            self.events.contains(where: predicate)
        }
        return events.first(where: predicate)!
    }
}

/// A fresh temporary directory for a test's files.
struct ScratchDirectory {
    let url: URL

    init(_ prefix: String) throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID())")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    func path(_ name: String) -> String { url.appendingPathComponent(name).path }

    /// Writes `bytes` to the file `name` in the directory; returns its path.
    func write(_ bytes: Data, as name: String) throws -> String {
        try bytes.write(to: url.appendingPathComponent(name))
        return path(name)
    }

    func remove() { try? FileManager.default.removeItem(at: url) }
}

private struct MemberRecordWithoutEpoch: Error {
    let record: [String: JSONValue]
}

private struct BridgeRequestFailed: Error, CustomStringConvertible {
    let op: String
    let answer: [String: JSONValue]
    var description: String { "request \(op) failed: \(answer)" }
}

extension JSONValue {
    fileprivate var string: String? {
        if case let .string(value) = self { return value }
        return nil
    }

    fileprivate var object: [String: JSONValue]? {
        if case let .object(value) = self { return value }
        return nil
    }

    fileprivate var array: [JSONValue]? {
        if case let .array(value) = self { return value }
        return nil
    }

    fileprivate var number: Double? {
        switch self {
        case let .int(value): return Double(value)
        case let .double(value): return value
        default: return nil
        }
    }
}

extension Array where Element: Sendable {
    /// `transform` applied to each element in turn.
    fileprivate func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var results: [T] = []
        for element in self { results.append(try await transform(element)) }
        return results
    }
}

/// A JSON array of participant IDs.
private func names(_ ids: String...) -> JSONValue {
    .array(ids.map(JSONValue.string))
}

/// `event["state"] == "joined"`: compares with a JSON string.
private func == (lhs: JSONValue?, rhs: String) -> Bool {
    lhs == .string(rhs)
}
