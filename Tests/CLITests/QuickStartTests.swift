import BrokerSupport
import Foundation
import Testing

/// README's "Try it in one minute", played as written: two `groupsync join`s and `mosquitto_sub` print what
/// the README shows, up to the session's ID, times and what the README cuts with `…`.
@Suite(.needsOwnBroker("compares every message of the group with the README's capture"), .timeLimit(.minutes(timeLimitMinutes(1))))
struct QuickStartTests {
    static let readme = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("README.md")

    /// The `text` blocks of the quick start: alice's output, bob's, the wire.
    static func captures() throws -> [[String]] {
        let readme = try String(contentsOf: readme, encoding: .utf8)
        let section = try #require(readme.components(separatedBy: "## Try it in one minute").dropFirst().first)
            .components(separatedBy: "\n## ")[0]
        return section.components(separatedBy: "```text\n").dropFirst().map {
            $0.components(separatedBy: "\n```")[0].split(separator: "\n").map(String.init)
        }
    }

    /// `line` with the session's ID and the group named as in the README, and times (milliseconds since
    /// 1970) as `<time>`.
    static func normalized(_ line: String, session: String, group: String, readmeSession: String) -> String {
        timesHidden(
            line.replacingOccurrences(of: session, with: readmeSession)
                .replacingOccurrences(of: "groupsync/v2/\(group)/", with: "groupsync/v2/default/"))
    }

    static func timesHidden(_ line: String) -> String {
        var line = line
        while let time = line.range(of: #"\d{13}"#, options: .regularExpression) {
            line.replaceSubrange(time, with: "<time>")
        }
        return line
    }

    @Test func theQuickStartPrintsWhatTheReadmeShows() async throws {
        let captures = try Self.captures()
        try #require(captures.count == 3, "alice's output, bob's and the wire")
        let (aliceShown, bobShown, wireShown) = (captures[0], captures[1], captures[2])
        let readmeSession = String(try #require(aliceShown.first?.split(separator: " ").dropFirst().first))

        try await MosquittoBroker.withBroker { broker in
            let group = broker.unique("quickstart")
            let wire = try CLIProcess(
                ["-h", "127.0.0.1", "-p", "\(broker.port)", "-v", "-t", "groupsync/v2/\(group)/#", "-T", "groupsync/v2/+/alive/+"],
                executable: try MosquittoBroker.locate("mosquitto_sub", extraDirectories: []))
            // Subscribed once its own marker comes back.
            let marker = try MQTTClient(configuration: .init(url: broker.url))
            try await marker.connect()
            try await waitUntil("mosquitto_sub subscribed") {
                try await marker.publish(to: "groupsync/v2/\(group)/marker", string: "m")
                return wire.output.contains { $0.hasPrefix("groupsync/v2/\(group)/marker") }
            }
            await marker.disconnect()

            let common = ["--broker", broker.url, "--group", group]
            let alice = try CLIProcess(["join", "com.example.board", "--as", "alice"] + common)
            _ = try await alice.waitForLine { $0 == "participants alice" }
            let bob = try CLIProcess(["join", "com.example.board", "--as", "bob"] + common)
            _ = try await alice.waitForLine { $0 == "participants alice,bob" }
            _ = try await bob.waitForLine { $0 == "state value null" }
            bob.send(#"{"page": 3}"#)
            for participant in [alice, bob] { _ = try await participant.waitForLine { $0 == #"state value {"page":3}"# } }
            alice.send("!hello bob")
            _ = try await bob.waitForLine { $0.hasPrefix("message alice") }
            bob.closeInput()
            #expect(try await bob.wait() == 0)
            try await waitUntil("alice sees bob leave") { alice.output.filter { $0 == "participants alice" }.count == 2 }
            alice.closeInput()
            #expect(try await alice.wait() == 0)
            _ = try await wire.waitForLine { $0.hasSuffix("presence/alice (null)") }
            wire.signal(SIGTERM)
            _ = try await wire.wait()

            let session = String(try #require(alice.output.first?.split(separator: " ").dropFirst().first))
            func normalized(_ lines: [String]) -> [String] {
                lines.filter { !$0.contains("/marker ") }.map {
                    Self.normalized($0, session: session, group: group, readmeSession: readmeSession)
                }
            }
            #expect(normalized(alice.output) == aliceShown)
            #expect(normalized(bob.output) == bobShown)
            // The wire in any order (the two joins publish concurrently), each shown line matching one
            // message: whole, or up to the README's `…`.
            // A sender states its position (`$position`) 1, 3, 9 and 27 heartbeat intervals after its last
            // reliable message: whether that falls within the run depends on its pace, so the README
            // mentions it without showing it.
            var unmatched = normalized(wire.output).filter { !$0.contains(#""type":"$position""#) }
            for shown in wireShown.map(Self.timesHidden) {
                let index = unmatched.firstIndex { line in
                    shown.hasSuffix("…") ? line.hasPrefix(shown.dropLast()) : line == shown
                }
                #expect(index != nil, "the README shows \(shown)")
                if let index { unmatched.remove(at: index) }
            }
            #expect(unmatched.isEmpty, "published but not shown in the README")
        }
    }
}
