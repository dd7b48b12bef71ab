import BrokerSupport
import Foundation
import GroupSync
import Testing

/// Observers (`sessions`, `watch`) forget a session as participants do: once every copy of its
/// announcement has expired, without a message saying so (the broker drops expired copies silently).
@Suite(.timeLimit(.minutes(timeLimitMinutes(1)))) struct ObserverTests {
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
            let id = try await alice.activate(activityIdentifier: "com.example.short", value: .null, timeToLive: .seconds(2))
            _ = try await sessions.waitForLine { $0.contains(id) }
            await alice.simulateCrash()
            let crashed = ContinuousClock.now
            try await waitUntil(timeout: timeBound(.seconds(6)), "the listing without the session") {
                let output = sessions.output
                guard let listed = output.lastIndex(where: { $0.contains(id) }) else { return false }
                return output[(listed + 1)...].contains { $0.contains(#""sessions":[]"#) }
            }
            _ = try await watch.waitForLine(timeout: timeBound(.seconds(6))) { $0.contains("session \(id) expired") }
            #expect(ContinuousClock.now - crashed >= .seconds(1), "not before its copy's lifetime")
            for process in [sessions, watch] { process.signal(SIGTERM) }
            #expect(try await sessions.wait() == 0)
            #expect(try await watch.wait() == 0)
        }
    }
}
