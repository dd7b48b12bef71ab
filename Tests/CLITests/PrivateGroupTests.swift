import BrokerSupport
import Foundation
import MQTT
import Testing

/// A private group from the shell (`--secret-file`, `GROUPSYNC_SECRET`): members read each other; an
/// observer without the key sees a private session and its participants, not its values, and cannot join;
/// the broker carries no clear content; no key is ever printed.
@Suite(.timeLimit(.minutes(timeLimitMinutes(2)))) struct PrivateGroupTests {
    @Test func aPrivateGroupFromTheShell() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = broker.unique("private")
            let common = ["--broker", broker.url, "--group", group]
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gs-secret-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let secret = Data((0..<32).map { UInt8($0 &* 7 &+ 1) }).base64EncodedString()
            let keyFile = directory.appendingPathComponent("group.key").path
            try "# the board's key\nk1 \(secret)\n".write(toFile: keyFile, atomically: true, encoding: .utf8)

            let probe = try MQTTClient(configuration: .init(url: broker.url))
            try await probe.connect()
            let wire = Collector(try await probe.subscribe(to: [TopicSubscription("groupsync/v2/\(group)/#")]))

            let alice = try CLIProcess(
                ["join", "com.example.board", "--as", "alice", "--title", "Hush board", "--state-key", "note", "--secret-file", keyFile]
                    + common)
            let session = String(try await alice.waitForLine { $0.hasPrefix("session ") }.split(separator: " ")[1])
            alice.send("\"whispered\"\n")
            _ = try await alice.waitForLine { $0 == #"state note "whispered""# }
            // bob has the key from the environment.
            let bob = try CLIProcess(
                ["join", "com.example.board", "--as", "bob", "--session", session, "--state-key", "note"] + common,
                environment: ["GROUPSYNC_SECRET": "k1 \(secret)"])
            _ = try await bob.waitForLine { $0 == #"state note "whispered""# }
            bob.send("!psst\n")
            _ = try await alice.waitForLine { $0.hasPrefix("message bob ") && $0.contains("psst") }

            let outsider = try await runCLI(["sessions", "--json"] + common)
            #expect(outsider.status == 0, "\(outsider.errors)")
            #expect(outsider.output.joined().contains("private session") && outsider.output.joined().contains("alice"))
            #expect(!outsider.output.joined().contains("Hush board"))
            let refused = try await runCLI(["join", "com.example.board", "--as", "eve", "--session", session, "--timeout", "5"] + common)
            #expect(refused.status == 1 && refused.errors.joined().contains("private"), "\(refused)")

            // Two forged copies of the announcement, a day ahead: one in clear, one sealed with a key nobody
            // has. Neither changes what a keyed observer lists (participants reject both too).
            let topic = "groupsync/v2/\(group)/session/\(session)/alice"
            let real = try #require(wire.elements.last { $0.topic == topic }?.payload)
            for (forger, activity) in [
                ("mallory", ["type": "com.example.board", "metadata": ["title": "Forged board", "type": "generic"], "data": [:]]),
                ("mallet", ["type": "com.example.board", "data": "eA==", "sealed": "zz"]),
            ] {
                var copy = try #require(try JSONSerialization.jsonObject(with: real) as? [String: Any])
                var revision = try #require(copy["revision"] as? [String: Any])
                revision["t"] = try #require(revision["t"] as? Int64) + 86_000_000
                (copy["revision"], copy["activity"]) = (revision, activity)
                let forged = try JSONSerialization.data(withJSONObject: copy)
                try await probe.publish(to: "groupsync/v2/\(group)/session/\(session)/\(forger)", payload: forged, retain: true)
            }
            let keyed = try await runCLI(["sessions", "--json", "--secret-file", keyFile] + common)
            #expect(keyed.status == 0 && keyed.output.joined().contains("Hush board"), "\(keyed)")
            #expect(!keyed.output.joined().contains("Forged") && !keyed.output.joined().contains("private session"), "\(keyed)")

            for run in [alice, bob] {
                run.closeInput()
                #expect(try await run.wait() == 0)
            }
            let seen = wire.elements.map { String(decoding: $0.payload, as: UTF8.self) }
            #expect(seen.contains { $0.contains(#""sealed":"k1""#) })
            for clear in ["Hush board", "whispered", "psst"] {
                #expect(!seen.contains { $0.contains(clear) }, "\(clear) on the wire")
            }
            let printed = (alice.output + alice.errors + bob.output + bob.errors + keyed.output + keyed.errors).joined()
            #expect(!printed.contains(secret), "the key is never printed")
            await probe.disconnect()
        }
    }

    /// `demo --private`: the same script and verdict with sealed sessions, and nothing of the gallery —
    /// its title, its state, the photo's name or bytes — in clear on the broker.
    @Test func theDemoRunsPrivate() async throws {
        try await MosquittoBroker.withBroker { broker in
            let probe = try MQTTClient(configuration: .init(url: broker.url))
            try await probe.connect()
            // The demo's group only: on a broker the suite shares (GROUPSYNC_TEST_BROKER) others talk in clear.
            let group = broker.unique("private-demo")
            let wire = Collector(
                try await probe.subscribe(to: [
                    TopicSubscription("groupsync/v2/\(group)/#"), TopicSubscription("groupsync/v2-chunks/\(group)/#"),
                ]))
            let result = try await runCLI(["demo", "--private", "--broker", broker.url, "--group", group], timeout: .seconds(60))
            #expect(result.status == 0, "\(result.errors)\n\(result.output.joined(separator: "\n"))")
            #expect(result.output.contains { $0.contains("sealed end to end with group key demo") })
            #expect(result.output.contains { $0.contains("shared photo:") && $0.contains("opened it") })
            let seen = wire.elements.map { String(decoding: $0.payload, as: UTF8.self) }
            #expect(seen.contains { $0.contains(#""sealed":"demo""#) })
            for clear in ["Gallery ", "paris-evening", "image/png", "IHDR", "IDAT"] {
                #expect(!seen.contains { $0.contains(clear) }, "\(clear) on the wire")
            }
            await probe.disconnect()
        }
    }

    /// Where nothing is retained an observer learns who is in a session from the catch-up a member sends
    /// it: in a private group that catch-up is not sealed as a whole, so an observer without the key lists
    /// the participants of a "private session", and its values stay sealed.
    @Test func anObserverWithoutTheKeyListsWhoIsInAPrivateSessionWhereNothingIsRetained() async throws {
        try await MosquittoBroker.withBroker { broker in
            let common = ["--broker", broker.url, "--group", broker.unique("observed"), "--no-retain"]
            let secret = ["GROUPSYNC_SECRET": "k1 \(Data((0..<32).map { UInt8($0 &+ 9) }).base64EncodedString())"]
            let alice = try CLIProcess(
                ["join", "com.example.board", "--as", "alice", "--title", "Hush", "--state-key", "page"] + common, environment: secret)
            let session = String(try await alice.waitForLine { $0.hasPrefix("session ") }.split(separator: " ")[1])
            let bob = try CLIProcess(
                ["join", "com.example.board", "--as", "bob", "--session", session, "--state-key", "page"] + common, environment: secret)
            _ = try await alice.waitForLine { $0 == "participants alice,bob" }
            alice.send("\"quiet\"")
            _ = try await bob.waitForLine { $0 == #"state page "quiet""# }
            let listing = try await runCLI(["sessions", "--json", "--timeout", "5"] + common)
            #expect(listing.status == 0, "\(listing.errors)")
            let text = listing.output.joined()
            #expect(text.contains(#""participants":["alice","bob"]"#) && text.contains("private session"), "\(text)")
            #expect(!text.contains("Hush") && !text.contains("quiet"))
            for process in [alice, bob] {
                process.closeInput()
                #expect(try await process.wait() == 0)
            }
        }
    }

    @Test func aSecretThatIsNoKeyIsAUsageError() async throws {
        let result = try await runCLI(["sessions", "--broker", "mqtt://127.0.0.1:1"], environment: ["GROUPSYNC_SECRET": "k1 c2hvcnQ="])
        #expect(result.status == 2 && result.errors.joined().contains("32"), "\(result.errors)")
        #expect(!result.errors.joined().contains("c2hvcnQ="))
    }
}
