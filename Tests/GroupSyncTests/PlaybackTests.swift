import BrokerSupport
import Foundation
import Testing

@testable import GroupSync

struct Movie: GroupActivity {
    static let activityIdentifier = "com.example.movie"
    var title: String
}

/// Coordinated playback against a real broker: participants whose clocks disagree by minutes follow one
/// timeline and start together.
@Suite(.timeLimit(.minutes(2))) struct PlaybackTests {
    /// Real time in nanoseconds, to compare what skewed participants do at the same instant.
    static func real() -> Int64 { SystemWallClock().nanoseconds() }

    @Test func skewedClocksShareOneTimelineAndStartTogether() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            defer { Task { await group.closeAll() } }
            let clocks: [String: SystemWallClock] = [
                "alice": SystemWallClock(offset: .seconds(-600), drift: 80),
                "bob": SystemWallClock(offset: .seconds(590), drift: -100),
                "carol": SystemWallClock(offset: .milliseconds(1_234), drift: 30),
            ]
            let alice = try await group.join("alice", clock: clocks["alice"]!)
            let bob = try await group.join("bob", clock: clocks["bob"]!)
            let carol = try await group.join("carol", clock: clocks["carol"]!)
            let a = try await alice.startJoined(Movie(title: "m"))
            let b = try await bob.joinSession(a.id, of: Movie.self)
            let c = try await carol.joinSession(a.id, of: Movie.self)
            let coordinators = [a, b, c].map { $0.playbackCoordinator() }
            try await waitUntil("one reference, every clock known") {
                coordinators.allSatisfy { $0.groupTime() != nil } && Set(coordinators.compactMap { $0.clockReference?.id }).count == 1
            }
            #expect(coordinators[0].clockReference?.id == "alice", "the initiator serves the clock")

            let starts = coordinators.map { coordinator in
                let recorded = LockedValue<[(start: PlaybackStart, real: Int64)]>([])
                let sequence = coordinator.starts()
                let task = Task { for await start in sequence { recorded.withLock { $0.append((start, Self.real())) } } }
                return (recorded, task)
            }
            defer { for (_, task) in starts { task.cancel() } }
            try await coordinators[1].play()
            try await waitUntil("everyone started") { starts.allSatisfy { !$0.0.withLock { $0 }.isEmpty } }
            let reals = starts.map { $0.0.withLock { $0[0].real } }
            let spread = Double(reals.max()! - reals.min()!) / 1e6
            #expect(spread < 10, "start spread \(spread) ms")
            for (recorded, _) in starts { #expect(recorded.withLock { $0[0].start.rate } == 1) }

            // At one real instant, every participant expects the same media time.
            let instant = Self.real()
            let positions = zip(["alice", "bob", "carol"], coordinators).map { name, coordinator -> Double in
                let local = instant + clocks[name]!.nanoseconds() - Self.real()  // this participant's clock at `instant`
                return coordinator.expectedMediaTime(at: coordinator.groupTime(atLocal: local))
            }
            #expect(positions.max()! - positions.min()! < 0.005, "position spread \(positions)")

            try await coordinators[2].pause()
            try await waitUntil("everyone paused") { coordinators.allSatisfy { !$0.timeline.isPlaying } }
            let paused = coordinators.map(\.timeline.position)
            #expect(Set(paused).count == 1)
        }
    }
}
