import Foundation
import GroupSync
import GroupSyncTestSupport

/// Idle: `sessions` joined session objects in this process (one participant starts half of them, a
/// second joins those), doing nothing. How often the process wakes (voluntary context switches of all
/// its threads, per second) and how much CPU it burns per minute: first as they are (heartbeats and
/// keepalives), then with a playback coordinator in each session (a follower then also exchanges with
/// the clock's reference, every synchronization interval at first, backing off to the longest one),
/// measured once the followers' pace has reached the longest when `settled`.
enum IdleBenchmark {
    struct Figures: Sendable {
        var wakeupsPerSecond: Double
        var cpuSecondsPerMinute: Double
    }

    static let activity = "dev.groupsync.bench.idle"

    static func run(url: String, group: String, sessions: Int, seconds: Double, settled: Bool) async throws -> BenchResults.Idle {
        let configuration = PlaybackCoordinator.Configuration()
        let alice = try await GroupCoordinator.connect(.init(broker: url, group: group, participant: "alice"))
        let bob = try await GroupCoordinator.connect(.init(broker: url, group: group, participant: "bob"))
        var joined: [GroupSession<AnyGroupActivity>] = []
        for index in 0..<max(sessions / 2, 1) {
            let id = try await alice.activate(activityIdentifier: activity, value: .object(["index": .int(Int64(index))]))
            for coordinator in [alice, bob] {
                let session = try await SessionCluster.findSession(coordinator, id: id, activity: activity)
                try await session.join()
                joined.append(session)
            }
        }
        let plain = try await measure(for: seconds)
        let players = joined.map { PlaybackCoordinator(session: $0, configuration: configuration) }
        try await waitUntil(timeout: .seconds(30), "every session's group clock") { players.allSatisfy { $0.groupTime() != nil } }
        // The drift is fitted within about a second; from the first interval, doubling, the longest is
        // reached in less than itself.
        if settled { try await Task.sleep(for: .seconds(2) + configuration.longestSynchronizationInterval) }
        let withPlayback = try await measure(for: seconds)
        for session in joined { await session.leave() }
        await alice.close()
        await bob.close()
        return BenchResults.Idle(
            sessions: joined.count, seconds: seconds, plain: plain, playback: withPlayback,
            synchronizationInterval: Self.seconds(configuration.synchronizationInterval),
            longestSynchronizationInterval: Self.seconds(configuration.longestSynchronizationInterval))
    }

    /// The process's wake-ups and CPU over `seconds`, after a second to settle.
    private static func measure(for seconds: Double) async throws -> Figures {
        try await Task.sleep(for: .seconds(1))
        let (switches, cpu, start) = (voluntarySwitches(), cpuSeconds(), ContinuousClock.now)
        try await Task.sleep(for: .seconds(seconds))
        let elapsed = Self.seconds(ContinuousClock.now - start)
        return Figures(
            wakeupsPerSecond: Double(voluntarySwitches() - switches) / elapsed,
            cpuSecondsPerMinute: (cpuSeconds() - cpu) / elapsed * 60)
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// Voluntary context switches of this process, over all its threads, ended ones included: each is a
    /// thread going to sleep, so as many wake-ups.
    private static func voluntarySwitches() -> Int {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return usage.ru_nvcsw
    }

    /// User and system CPU time of this process, in seconds.
    private static func cpuSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }
}
