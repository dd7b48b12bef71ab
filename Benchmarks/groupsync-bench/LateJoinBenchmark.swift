import Foundation
import GroupSync
import MQTT

/// 4. Late join with the cluster present: a fresh participant connects (not timed), then `join()` is
/// timed until it returns holding the current value; then it leaves and closes. The messages its join
/// caused are counted on the wire by a ``WireSniffer`` on the session's topics, and the retained replay
/// its subscriptions get is counted by a probe client subscribing to the same filters.
enum LateJoinBenchmark {
    static func run(cluster: SessionCluster, samples: Int, expected: Int) async throws -> BenchResults.LateJoin {
        let topics = cluster.topics
        let sessionID = cluster.sessionID
        let present = cluster.members.count
        let sniffer = try await WireSniffer.start(url: cluster.url, filters: ["\(topics.root)/s/\(sessionID)/#"])
        let replay = try await retainedReplay(url: cluster.url, topics: topics, sessionID: sessionID)
        var times: [Double] = []
        var catchUps = 0, newcomerLive = 0, others = 0, stale = 0
        for sample in 0..<samples {
            let name = "late\(sample)"
            let coordinator = try await GroupCoordinator.connect(.init(broker: cluster.url, group: cluster.group, participant: name))
            let session = try await SessionCluster.findSession(coordinator, id: sessionID)
            try await sniffer.waitQuiet(.milliseconds(20))
            let mark = sniffer.count

            let start = MonotonicClock.nanoseconds()
            try await session.join()
            var end = MonotonicClock.nanoseconds()
            let state = try SharedState(session, key: SessionCluster.stateKey, initialValue: 0)
            if state.value != expected {
                stale += 1
                try await TimeLimit.run(.seconds(5), "\(name) gets the current value") {
                    for await value in state.values() where value == expected { return }
                }
                end = MonotonicClock.nanoseconds()
            }
            times.append(MonotonicClock.milliseconds(from: start, to: end))

            try await sniffer.waitQuiet(.milliseconds(30))
            for record in sniffer.records(from: mark) {
                switch topics.parse(record.topic) {
                case .member?, .state?:
                    // Every joined participant subscribes to member/+ and state/+/+ (the publisher too).
                    others += present
                    newcomerLive += 1
                case let .broadcast(_, sender)?:
                    others += present - (sender == name ? 0 : 1)
                    newcomerLive += sender == name ? 0 : 1
                case let .direct(_, recipient, _)?:
                    if recipient == name {
                        catchUps += 1
                        newcomerLive += 1
                    } else {
                        others += 1
                    }
                default:
                    break
                }
            }
            await session.leave()
            await coordinator.close()
            try await sniffer.waitQuiet(.milliseconds(20))
        }
        await sniffer.stop()
        let stats = Percentiles(times)
        let n = Double(samples)
        return .init(
            p50: stats.p50, p99: stats.p99, participants: present, samples: samples, catchUps: Double(catchUps) / n,
            retainedReplay: Double(replay), newcomerLive: Double(newcomerLive) / n, others: Double(others) / n,
            staleAtReturn: stale)
    }

    /// How many retained messages the broker sends a newcomer's session subscriptions: a probe subscribes
    /// to the same filters, then publishes a marker to itself, which arrives after every retained copy.
    static func retainedReplay(url: String, topics: GroupTopics, sessionID: String) async throws -> Int {
        let probe = try MQTTClient(configuration: .init(url: url, clientID: "bench-probe-\(UInt32.random(in: 0...UInt32.max))"))
        try await probe.connect()
        let marker = "bench/marker/\(UInt32.random(in: 0...UInt32.max))"
        let filters = topics.sessionFilters(sessionID, participant: "probe")
        let subscription = try await probe.subscribe(to: (filters.shared + [filters.broadcast, marker]).map { TopicSubscription($0) })
        try await probe.publish(to: marker, payload: Data("m".utf8), qos: .atLeastOnce)
        let count = try await TimeLimit.run(.seconds(10), "retained replay counted") {
            var count = 0
            for await message in subscription {
                if message.topic == marker { return count }
                if message.retain { count += 1 }
            }
            return count
        }
        subscription.unsubscribe()
        await probe.disconnect()
        return count
    }
}
