import Foundation
import GroupSync
import GroupSyncTestSupport

/// 8. Coordinated playback: participants whose wall clocks are off by up to ±10 minutes and drift by up
/// to ±100 ppm (``SystemWallClock``), each with its own connection, follow one `PlaybackCoordinator`
/// timeline.
///
/// - Position spread: at one real instant, the largest minus the smallest `expectedMediaTime`, each taken
///   at that participant's own clock reading for the instant; sampled every 10 ms while the group plays,
///   seeks and changes rate.
/// - Start spread: for one scheduled `play()`, the real-time spread of the `starts()` deliveries; command
///   to started: from `play()` until the last delivery.
/// - Suspension: from one participant's `beginSuspension(for: .buffering)` until every participant's
///   `timelineUpdates()` has yielded a paused timeline; shown against a broker round trip (GroupSync messenger,
///   QoS 1) and the processing of one state record by everyone: a `SharedState.set` by the same
///   participant until every other one's `valueUpdates()` has it, measured in turn with the suspensions.
enum PlaybackBenchmark {
    /// The largest skew and drift given to a participant's clock.
    static let maxSkew = Duration.seconds(600)
    static let maxDrift = 100.0

    struct Plan: Sendable {
        var participants: Int
        var playSeconds: Double
        var commandEvery: Duration
        var starts: Int
        var suspensions: Int
        var roundTrips: Int
    }

    /// Participant `index`'s clock of `count`: offsets spread over ±``maxSkew`` (less a second, plus a
    /// fraction of one, so that no two agree to the millisecond), drifts over ±``maxDrift`` in the other
    /// order.
    static func clock(_ index: Int, of count: Int) -> SystemWallClock {
        let share = count > 1 ? Double(index) / Double(count - 1) : 0
        let milliseconds = (2 * share - 1) * Double(maxSkew.components.seconds - 1) * 1_000 + Double(index * 37)
        return SystemWallClock(offset: .milliseconds(Int64(milliseconds.rounded())), drift: (1 - 2 * share) * maxDrift)
    }

    static func run(url: String, group: String, plan: Plan) async throws -> BenchResults.Playback {
        let roundTrip = try await roundTripMilliseconds(url: url, group: "\(group)r", count: plan.roundTrips)
        let count = plan.participants
        let clocks = (0..<count).map { clock($0, of: count) }
        let cluster = try await SessionCluster.make(
            url: url, group: group, prefix: "pb", count: count, sharedState: true, clock: { clocks[$0] })
        let coordinators = cluster.members.map { PlaybackCoordinator(session: $0.session) }
        let recorders = coordinators.map { StartRecorder($0.starts()) }
        do {
            try await waitUntil(
                timeout: .seconds(20), pollEvery: .milliseconds(1), "every participant has the group clock of one reference"
            ) {
                coordinators.allSatisfy { $0.groupTime() != nil } && Set(coordinators.map { $0.clockReference?.id }).count == 1
            }
            // The burst of exchanges that follows a new reference (8, 5 ms apart) is over.
            try await Task.sleep(for: .milliseconds(300))

            let (startSpreads, commandToStarted, leads, lateness) = try await measureStarts(coordinators, recorders, samples: plan.starts)
            let position = try await measurePositions(coordinators, recorders, clocks, plan: plan)
            let (suspensions, fanouts) = try await measureSuspensions(cluster, coordinators, recorders, samples: plan.suspensions)
            for recorder in recorders { recorder.stop() }
            await cluster.close()
            let spread = Percentiles(startSpreads), suspension = Percentiles(suspensions)
            return .init(
                participants: count, maxSkewSeconds: Double(maxSkew.components.seconds), maxDriftPPM: maxDrift,
                positionP50: position.spread.p50, positionP99: position.spread.p99, positionMax: position.spread.max,
                groupTimeP50: position.groupTime.p50, groupTimeP99: position.groupTime.p99,
                positionSamples: position.spread.count, transitionSamples: position.transitions, positionSeconds: plan.playSeconds,
                commands: position.commands,
                startP50: spread.p50, startP99: spread.p99, startMax: spread.max, starts: spread.count,
                maxLateness: lateness, commandToStarted: Percentiles(commandToStarted).p50, lead: Percentiles(leads).p50,
                suspension: suspension.p50, suspensionMax: suspension.max, suspensions: suspension.count, roundTrip: roundTrip,
                stateFanout: Percentiles(fanouts).p50)
        } catch {
            for recorder in recorders { recorder.stop() }
            await cluster.close()
            throw error
        }
    }

    /// The GroupSync QoS 1 messenger round trip (p50, ms) between two participants of a session of their
    /// own: the broker round trip a suspension is judged against.
    private static func roundTripMilliseconds(url: String, group: String, count: Int) async throws -> Double {
        let pingPong = try await MessengerPingPong.make(url: url, group: group, mode: .reliable)
        do {
            _ = try await pingPong.run(first: 0, count: count / 4 + 1)
            let oneWay = try await pingPong.run(first: count / 4 + 1, count: count)
            await pingPong.close()
            return 2 * Percentiles(oneWay).p50 / 1_000
        } catch {
            await pingPong.close()
            throw error
        }
    }

    // MARK: - Starts

    /// `samples` times: everyone paused, then one participant (in turn) plays; the spread of the start
    /// deliveries and the time from `play()` to the last one (ms), the lead, the largest lateness.
    private static func measureStarts(
        _ coordinators: [PlaybackCoordinator], _ recorders: [StartRecorder], samples: Int
    ) async throws -> (spreads: [Double], commandToStarted: [Double], leads: [Double], maxLateness: Double) {
        var spreads: [Double] = [], commandToStarted: [Double] = [], leads: [Double] = []
        var maxLateness = 0.0
        for sample in 0..<samples {
            let commander = coordinators[sample % coordinators.count]
            try await commander.pause()
            try await waitUntil(timeout: .seconds(10), pollEvery: .microseconds(500), "everyone paused") {
                coordinators.allSatisfy { !$0.timeline.isPlaying }
            }
            let before = recorders.map(\.count)
            leads.append(milliseconds(commander.lead))
            let start = MonotonicClock.nanoseconds()
            try await commander.play()
            let delivered = try await waitForStarts(recorders, after: before)
            let times = delivered.map(\.at)
            spreads.append(MonotonicClock.milliseconds(from: times.min()!, to: times.max()!))
            commandToStarted.append(MonotonicClock.milliseconds(from: start, to: times.max()!))
            maxLateness = max(maxLateness, delivered.map { milliseconds($0.start.lateness) }.max()!)
        }
        return (spreads, commandToStarted, leads, maxLateness)
    }

    /// The first start each recorder got after it held `before` of them.
    private static func waitForStarts(_ recorders: [StartRecorder], after before: [Int]) async throws -> [StartRecorder.Delivery] {
        try await waitUntil(timeout: .seconds(10), pollEvery: .microseconds(500), "everyone started") {
            zip(recorders, before).allSatisfy { $0.count > $1 }
        }
        return zip(recorders, before).map { $0.delivery($1) }
    }

    // MARK: - Position

    /// Plays for `plan.playSeconds`, one participant after the other seeking or changing the rate every
    /// `plan.commandEvery`, while the position spread is sampled every 10 ms. A sample taken while the
    /// participants hold different timelines (a command on its way through the broker) is counted apart:
    /// it measures the command's propagation, not the clocks.
    private static func measurePositions(
        _ coordinators: [PlaybackCoordinator], _ recorders: [StartRecorder], _ clocks: [SystemWallClock], plan: Plan
    ) async throws -> (spread: Percentiles, groupTime: Percentiles, transitions: Int, commands: Int) {
        let before = recorders.map(\.count)
        try await coordinators[0].play()
        _ = try await waitForStarts(recorders, after: before)

        let driver = Task { () throws -> Int in
            var commands = 0
            let rates = [1.5, 0.5, 2, 1]
            while true {
                do { try await Task.sleep(for: plan.commandEvery) } catch { return commands }
                let commander = coordinators[(commands + 1) % coordinators.count]
                do {
                    if commands % 2 == 0 {
                        try await commander.seek(to: Double.random(in: 0...3_600))
                    } else {
                        try await commander.setRate(rates[(commands / 2) % rates.count])
                    }
                } catch {
                    // The sampling ended while a command was on its way: the run is over, not failed.
                    if Task.isCancelled { return commands }
                    throw error
                }
                commands += 1
            }
            return commands
        }
        var spreads: [Double] = [], groupTimes: [Double] = []
        var transitions = 0
        let end = ContinuousClock.now + .seconds(plan.playSeconds)
        while ContinuousClock.now < end {
            let timelines = coordinators.map(\.timeline)
            let real = realNanoseconds()
            var positions: [Double] = [], instants: [Int64] = []
            for (coordinator, clock) in zip(coordinators, clocks) {
                let local = clock.nanoseconds(atSystemTime: real)
                let instant = coordinator.groupTime(atLocal: local)
                instants.append(instant?.nanoseconds ?? 0)
                positions.append(coordinator.expectedMediaTime(at: instant))
            }
            if Set(timelines).count == 1 && coordinators.map(\.timeline) == timelines {
                spreads.append((positions.max()! - positions.min()!) * 1_000)
                groupTimes.append(Double(instants.max()! - instants.min()!) / 1e6)
            } else {
                transitions += 1
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        driver.cancel()
        let commands = try await driver.value
        guard !spreads.isEmpty else { throw SessionCluster.Failure(description: "no position sample with one timeline") }
        return (Percentiles(spreads), Percentiles(groupTimes), transitions, commands)
    }

    // MARK: - Suspension

    /// `samples` times while playing: one participant (in turn) begins a buffering suspension; until
    /// every participant's `timelineUpdates()` has yielded a paused one (ms). The suspension then ends and the
    /// group starts again before the next sample, and the same participant sets the shared state: until
    /// every other participant's `valueUpdates()` has it (ms), the processing of one record by everyone.
    private static func measureSuspensions(
        _ cluster: SessionCluster, _ coordinators: [PlaybackCoordinator], _ recorders: [StartRecorder], samples: Int
    ) async throws -> (suspensions: [Double], fanouts: [Double]) {
        let before = recorders.map(\.count)
        try await coordinators[0].setRate(1)
        _ = try await waitForStarts(recorders, after: before)
        var times: [Double] = [], fanouts: [Double] = []
        for sample in 0..<samples {
            let updates = coordinators.map { $0.timelineUpdates() }
            let start = MonotonicClock.nanoseconds()
            let suspender = (sample + 1) % coordinators.count
            let suspension = coordinators[suspender].beginSuspension(for: .buffering)
            let last = try await withTimeLimit(.seconds(10), "everyone paused for the suspension") {
                try await withThrowingTaskGroup(of: UInt64.self) { group in
                    for stream in updates {
                        group.addTask {
                            for await timeline in stream where !timeline.isPlaying {
                                return MonotonicClock.nanoseconds()
                            }
                            throw SessionCluster.Failure(description: "timelines ended")
                        }
                    }
                    return try await group.reduce(0) { max($0, $1) }
                }
            }
            times.append(MonotonicClock.milliseconds(from: start, to: last))
            let before = recorders.map(\.count)
            suspension.end()
            _ = try await waitForStarts(recorders, after: before)

            let value = sample + 1
            cluster.hub.expect(value, from: Set(cluster.members.map(\.index)).subtracting([suspender]))
            let set = MonotonicClock.nanoseconds()
            try await cluster.members[suspender].state!.set(value)
            fanouts.append(MonotonicClock.milliseconds(from: set, to: try await cluster.hub.wait(timeout: .seconds(10))))
        }
        return (times, fanouts)
    }

    private static func milliseconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) * 1_000 + Double(attoseconds) / 1e15
    }

    /// Real time (`CLOCK_REALTIME`, ns): a clock neither off nor drifting.
    private static func realNanoseconds() -> Int64 { SystemWallClock().nanoseconds() }
}
