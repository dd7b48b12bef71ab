import BrokerSupport
import Foundation
import GroupSync
import Testing

/// Observers (`sessions`, `watch`, `dashboard`) know a group as its participants do: they forget a
/// session once every copy of its announcement has expired, and where nothing is retained they are
/// welcomed with what began before them.
@Suite(.timeLimit(.minutes(timeLimitMinutes(2)))) struct ObserverTests {
    /// Participants that use no retained messages (`--no-retain`, for clusters whose nodes keep none in
    /// common) leave nothing for an observer to read: with `--no-retain` it asks, and the participants
    /// online welcome it with the sessions, their members and state, without listing it anywhere. The
    /// clients are spread over two brokers that share the group's topics (bridged mosquittos, or the
    /// nodes of a cluster: `GROUPSYNC_TEST_BROKER=URL1,URL2`).
    @Test(.needsTwoBrokers) func observersAreWelcomedWhereNothingIsRetained() async throws {
        try await MosquittoBroker.withBridgedBrokers { broker, other in
            let group = broker.unique("welcomed")
            let common = ["--broker", broker.url, "--group", group, "--no-retain"]
            let across = ["--broker", other.url, "--group", group, "--no-retain"]
            let alice = try CLIProcess(["join", "com.example.board", "--as", "alice", "--title", "Quiz", "--state-key", "page"] + common)
            let started = try? await alice.waitForLine { $0.hasPrefix("session ") }
            let id = String(try #require(started, "\(alice.errors)").split(separator: " ")[1])
            let bob = try CLIProcess(["join", "com.example.board", "--as", "bob", "--session", id, "--state-key", "page"] + across)
            _ = try await alice.waitForLine { $0 == "participants alice,bob" }
            alice.send("3")
            _ = try await bob.waitForLine { $0 == "state page 3" }

            let listing = try await runCLI(["sessions", "--json", "--timeout", "5"] + across)
            #expect(listing.status == 0, "\(listing.errors)")
            let row = try #require(listing.output.last.flatMap { Self.object($0) }?["sessions"] as? [[String: Any]])
            #expect(row.count == 1)
            #expect(row.first?["id"] as? String == id)
            #expect(row.first?["participants"] as? [String] == ["alice", "bob"])

            let watch = try CLIProcess(["watch", "--json"] + across)
            _ = try await watch.waitForLine { $0.contains(#""kind":"welcome""#) && $0.contains(#""sessions":1"#) }
            _ = try await watch.waitForLine { $0.contains(#""kind":"catch-up""#) && $0.contains(id) }

            let dashboard = try CLIProcess(["dashboard", "--verbose"] + common)
            _ = try await dashboard.waitForLine { $0.hasPrefix("synchronized: 1 live sessions") }
            let flat = "groupsync/dashboard/\(group)/session/\(id)"
            let published = dashboard.output
            #expect(published.contains("\(flat)/participants 2"), "\(published)")
            #expect(published.contains("\(flat)/state/page 3"), "\(published)")

            // Nobody lists an observer, and `end` finds the session through its own welcome.
            #expect(!alice.output.contains { $0.hasPrefix("participants") && $0 != "participants alice,bob" && $0 != "participants alice" })
            let ended = try await runCLI(["end", id, "--as", "carol", "--timeout", "5"] + across)
            #expect(ended.status == 0, "\(ended.errors)")
            _ = try await alice.waitForLine { $0.hasPrefix("ended ") }
            _ = try await watch.waitForLine { $0.contains(#""kind":"end""#) || $0.contains(#""kind":"ended""#) }
            for process in [watch, dashboard] { process.signal(SIGTERM) }
            #expect(try await watch.wait() == 0)
            #expect(try await dashboard.wait() == 0)
            for process in [alice, bob] { process.closeInput() }
            _ = try await alice.wait()
            _ = try await bob.wait()
        }
    }

    private static func object(_ line: String) -> [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
    }

    @Test func aSessionWhoseCopiesExpiredLeavesTheListingAndTheLog() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = broker.unique("observed")
            let common = ["--broker", broker.url, "--group", group]
            let sessions = try CLIProcess(["sessions", "--watch", "--json"] + common)
            let watch = try CLIProcess(["watch"] + common)
            _ = try await sessions.waitForLine { $0.contains(#""sessions":[]"#) }
            _ = try await watch.waitForLine { $0.hasPrefix("watching ") }

            // alice opens a session that lives 2 s past its last refresh, and crashes: nobody keeps it.
            let alice = try await GroupCoordinator.connect(.init(broker: broker.url, group: group, participant: "alice"))
            let announced = ContinuousClock.now  // the copy's lifetime runs from its publish, after this
            let id = try await alice.activate(activityIdentifier: "com.example.short", value: .null, timeToLive: .seconds(2))
            _ = try await sessions.waitForLine { $0.contains(id) }
            await alice.simulateCrash()
            try await waitUntil(timeout: timeBound(.seconds(6)), "the listing without the session") {
                let output = sessions.output
                guard let listed = output.lastIndex(where: { $0.contains(id) }) else { return false }
                return output[(listed + 1)...].contains { $0.contains(#""sessions":[]"#) }
            }
            _ = try await watch.waitForLine(timeout: timeBound(.seconds(6))) { $0.contains("session \(id) expired") }
            // Its 2 s lifetime, less what an observer's clock in whole milliseconds may round off.
            #expect(ContinuousClock.now - announced >= .milliseconds(1_990), "not before its copy's lifetime")
            for process in [sessions, watch] { process.signal(SIGTERM) }
            #expect(try await sessions.wait() == 0)
            #expect(try await watch.wait() == 0)
        }
    }
}
