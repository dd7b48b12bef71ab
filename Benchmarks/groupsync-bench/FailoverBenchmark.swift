import BrokerSupport
import Foundation
import GroupSync
import GroupSyncTestSupport
import MQTT

/// 7. Failover: a participant given two bridged brokers (`mqtt://first,mqtt://second`) streams small
/// reliable messages to a peer connected to the second only; the first broker is killed (SIGKILL) and the
/// participant moves to the second. Each sample starts a fresh pair of mosquittos of its own, whatever
/// `--broker` says: one of them is killed.
///
/// Per sample: the move (kill until the participant's presence, which it publishes again as soon as it is
/// connected, comes from the second broker to a plain subscriber there), the delivery gap (kill until the
/// peer has the first message sent after the move), the longest pause between two consecutive arrivals
/// at the peer, whether the peer ever saw the participant leave, and the messages lost or duplicated.
enum FailoverBenchmark {
    /// The moving participant's message: its number, and when `send` was called (``MonotonicClock``).
    struct Tick: Codable, Sendable {
        var n: Int
        var sentAt: UInt64
    }

    /// The moving participant's cadence (ms): one message to everyone, awaited, every 5 ms.
    static let sendIntervalMilliseconds = 5
    /// Both participants' keepalive (the library's default): peers drop a participant they have not heard
    /// of for 1.5 × this.
    static let keepAlive = 5
    static let mover = Participant(id: "mover")
    static let peer = Participant(id: "peer")

    /// One sample; times in ms from the kill (``longestGap`` between two arrivals).
    struct Sample: Sendable {
        var move: Double
        var deliveryGap: Double
        var longestGap: Double
        var left: Bool
        var sent: Int
        var lost: Int
        var duplicated: Int
        var failedSends: Int
    }

    static func run(samples: Int, run: String) async throws -> BenchResults.Failover {
        var measured: [Sample] = []
        for index in 0..<samples {
            let sample = try await MosquittoBroker.withBroker { survivor in
                try await MosquittoBroker.withBroker(.bridged(to: survivor.port)) { doomed in
                    try await doomed.waitForBridge(to: survivor)
                    return try await measure(doomed: doomed, survivor: survivor, group: "bo\(index)-\(run)")
                }
            }
            Log.progress(
                "failover sample \(index + 1): move \(String(format: "%.1f", sample.move)) ms, delivery gap "
                    + "\(String(format: "%.1f", sample.deliveryGap)) ms")
            measured.append(sample)
        }
        let moves = Percentiles(measured.map(\.move))
        let gaps = Percentiles(measured.map(\.deliveryGap))
        let longest = Percentiles(measured.map(\.longestGap))
        return .init(
            moveP50: moves.p50, moveMax: moves.max, deliveryGapP50: gaps.p50, deliveryGapMax: gaps.max,
            longestGapP50: longest.p50, longestGapMax: longest.max, samples: samples,
            leftSamples: measured.filter(\.left).count, sent: measured.map(\.sent).reduce(0, +),
            lost: measured.map(\.lost).reduce(0, +), duplicated: measured.map(\.duplicated).reduce(0, +),
            failedSends: measured.map(\.failedSends).reduce(0, +),
            sendIntervalMilliseconds: sendIntervalMilliseconds, keepAlive: keepAlive)
    }

    /// Connects the two participants, measures one sample, and closes them, whether it was measured or not.
    private static func measure(doomed: MosquittoBroker, survivor: MosquittoBroker, group: String) async throws -> Sample {
        let moving = try await GroupCoordinator.connect(
            .init(broker: "\(doomed.url),\(survivor.url)", group: group, participant: mover.id, keepAlive: keepAlive))
        let staying: GroupCoordinator
        do {
            staying = try await GroupCoordinator.connect(.init(broker: survivor.url, group: group, participant: peer.id, keepAlive: keepAlive))
        } catch {
            await moving.close()
            throw error
        }
        let result: Result<Sample, any Error>
        do {
            result = .success(try await measure(moving, staying, group: group, survivor: survivor, kill: doomed.kill))
        } catch {
            result = .failure(error)
        }
        await moving.close()
        await staying.close()
        return try result.get()
    }

    /// One sample between two connected coordinators: `moving` on the broker that `kill` kills (the
    /// survivor its fallback), `staying` on the survivor.
    private static func measure(
        _ moving: GroupCoordinator, _ staying: GroupCoordinator, group: String, survivor: MosquittoBroker, kill: () -> Void
    ) async throws -> Sample {
        let sessionID = try await moving.activate(activityIdentifier: SessionCluster.activity, value: .object([:]))
        let movingSession = try await SessionCluster.findSession(moving, id: sessionID)
        try await movingSession.join()
        let stayingSession = try await SessionCluster.findSession(staying, id: sessionID)
        try await stayingSession.join()
        try await waitUntil(timeout: .seconds(10), pollEvery: .milliseconds(1), "both active on both sides") {
            [movingSession, stayingSession].allSatisfy { $0.activeParticipants.isSuperset(of: [mover, peer]) }
        }

        // Only live messages: the participant's presence comes again once it is connected to the survivor.
        let sniffer = try await WireSniffer.start(url: survivor.url, filters: [GroupTopics(group: group).presence(mover.id)])
        let view = Collector(stayingSession.activeParticipantUpdates())
        let arrivals = Collector(
            GroupSessionMessenger(session: stayingSession).messages(of: Tick.self).map { @Sendable in ($0.message, MonotonicClock.nanoseconds()) })
        let stop = LockedValue(false)
        let sender = Task { () -> (delivered: Set<Int>, attempted: Int, failed: Int) in
            let messenger = GroupSessionMessenger(session: movingSession, deliveryMode: .reliable)
            var delivered = Set<Int>(), attempted = 0, failed = 0
            var next = ContinuousClock.now
            while !stop.withLock({ $0 }) {
                attempted += 1
                do {
                    try await messenger.send(Tick(n: attempted, sentAt: MonotonicClock.nanoseconds()))
                    delivered.insert(attempted)
                } catch {
                    failed += 1
                }
                next = max(next + .milliseconds(sendIntervalMilliseconds), .now)
                try? await Task.sleep(until: next)
            }
            return (delivered, attempted, failed)
        }
        @Sendable func finish() async -> (delivered: Set<Int>, attempted: Int, failed: Int) {
            stop.withLock { $0 = true }
            return await sender.value
        }
        defer {
            sender.cancel()
            view.cancel()
            arrivals.cancel()
        }

        let killedAt: UInt64
        let movedAt: UInt64
        do {
            try await waitUntil(timeout: .seconds(10), pollEvery: .milliseconds(1), "messages flow before the kill") {
                arrivals.count >= 40
            }
            killedAt = MonotonicClock.nanoseconds()
            kill()
            try await waitUntil(timeout: .seconds(10), pollEvery: .microseconds(200), "the participant's presence on the survivor") {
                sniffer.records(from: 0).contains { $0.at > killedAt }
            }
            movedAt = sniffer.records(from: 0).first { $0.at > killedAt }!.at
            try await waitUntil(timeout: .seconds(10), pollEvery: .milliseconds(1), "messages flow after the move") {
                arrivals.elements.filter { $0.0.sentAt >= movedAt }.count >= 20
            }
        } catch {
            _ = await finish()
            await sniffer.stop()
            throw error
        }
        await sniffer.stop()
        let sent = try await withTimeLimit(.seconds(15), "the sender stops") { await finish() }
        // What has not arrived once every sent message could have is lost.
        try? await waitUntil(timeout: .seconds(5), pollEvery: .milliseconds(5), "every sent message arrives") {
            sent.delivered.isSubset(of: arrivals.elements.map(\.0.n))
        }

        let received = arrivals.elements
        let numbers = received.map(\.0.n)
        let resumedAt = received.first { $0.0.sentAt >= movedAt }!.1
        let times = received.map(\.1)
        let longestGap = zip(times, times.dropFirst()).map { $1 &- $0 }.max() ?? 0
        return Sample(
            move: MonotonicClock.milliseconds(from: killedAt, to: movedAt),
            deliveryGap: MonotonicClock.milliseconds(from: killedAt, to: resumedAt),
            longestGap: Double(longestGap) / 1e6,
            left: view.elements.contains { !$0.contains(mover) },
            sent: sent.attempted, lost: sent.delivered.subtracting(numbers).count,
            duplicated: numbers.count - Set(numbers).count, failedSends: sent.failed)
    }
}
