import BrokerSupport
import Foundation
import GroupSync
import Testing

/// A participant in another process dies or freezes: everyone else's `activeParticipants` drops it.
@Suite(.timeLimit(.minutes(timeLimitMinutes(1)))) struct CrashDetectionTests {
    /// Alice joins in this process; the victim is a `groupsync join` child process.
    func withVictim(_ body: (GroupSession<AnyGroupActivity>, CLIProcess) async throws -> Void) async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = broker.unique("crash")
            let alice = try await GroupCoordinator.connect(.init(broker: broker.url, group: group, participant: "alice"))
            let id = try await alice.activate(activityIdentifier: "com.example.gallery", value: .object([:]))
            try await waitUntil("own announcement arrives") {
                alice.currentSessions(activityIdentifier: "com.example.gallery").contains { $0.id == id }
            }
            let session = alice.currentSessions(activityIdentifier: "com.example.gallery").first { $0.id == id }!
            try await session.join()
            let victim = try CLIProcess([
                "join", "com.example.gallery", "--session", id, "--as", "victim", "--keepalive", "5",
                "--broker", broker.url, "--group", group,
            ])
            try await waitUntil("victim active") { session.activeParticipants.contains(Participant(id: "victim")) }
            try await body(session, victim)
            victim.signal(SIGKILL)
            await alice.close()
        }
    }

    @Test func aKilledProcessDisappearsWithinOneSecond() async throws {
        try await withVictim { session, victim in
            let start = ContinuousClock.now
            victim.signal(SIGKILL)
            try await waitUntil(timeout: timeBound(.seconds(1)), pollEvery: .milliseconds(1), "victim gone within 1 s") {
                !session.activeParticipants.contains(Participant(id: "victim"))
            }
            #expect(ContinuousClock.now - start < timeBound(.seconds(1)))
        }
    }

    /// A frozen participant stops sending presence heartbeats (every keepalive / 2) and everyone drops it
    /// 1.5 × keepalive after its last one: 7.5 s with the default keepalive of 5 s. (The broker alone
    /// would take ~11 s: Debian's mosquitto 2.0.11 checks keepalives only every 5 s.)
    @Test func aFrozenProcessDisappearsWithinOneAndAHalfKeepalives() async throws {
        try await withVictim { session, victim in
            let start = ContinuousClock.now
            victim.signal(SIGSTOP)
            let bound = timeBound(.milliseconds(7_500))
            try await waitUntil(timeout: bound, pollEvery: .milliseconds(10), "victim gone within keepalive × 1.5") {
                !session.activeParticipants.contains(Participant(id: "victim"))
            }
            #expect(ContinuousClock.now - start <= bound)
            // Thawed, it is back with its next heartbeat.
            victim.signal(SIGCONT)
            try await waitUntil(timeout: timeBound(.seconds(5)), "victim back after SIGCONT") {
                session.activeParticipants.contains(Participant(id: "victim"))
            }
        }
    }
}
