import Foundation
import GroupSync
import GroupSyncTestSupport
import MQTT

/// 4. Late join with the cluster present: a fresh participant connects (not timed), then `join()` is
/// timed until it returns holding the current value; then it leaves and closes. The messages its join
/// caused are counted on the wire by a ``WireSniffer`` on the session's topics, and the retained replay
/// its subscriptions get is counted by a probe client subscribing to the same filters.
///
/// Beside it, the raw libmosquitto floor (``RawLateJoin``): the same messages between raw clients — a
/// copy of every retained record of the session, at its size; per join the newcomer's subscriptions and
/// member record, the member record of the GroupSync join of the same name's size, answered by the
/// present client GroupSync picked, with a catch-up of the size GroupSync's had. GroupSync and raw joins
/// alternate, one each, so that a slow phase of the machine hits both alike.
enum LateJoinBenchmark {
    /// `join()` timed until `session` holds `expected` (ms); `stale` when it returned without it.
    static func timedJoin(_ session: GroupSession<AnyGroupActivity>, expected: Int) async throws -> (milliseconds: Double, stale: Bool) {
        let start = MonotonicClock.nanoseconds()
        try await session.join()
        let state = try SharedState(session, key: SessionCluster.stateKey, initialValue: 0)
        guard state.value != expected else { return (MonotonicClock.milliseconds(from: start, to: MonotonicClock.nanoseconds()), false) }
        try await withTimeLimit(.seconds(5), "\(session.localParticipant.id) gets the current value") {
            for await value in state.valueUpdates() where value == expected { return }
        }
        return (MonotonicClock.milliseconds(from: start, to: MonotonicClock.nanoseconds()), true)
    }

    /// `keyring`: the cluster's, when it is private (the newcomers get it too).
    static func run(cluster: SessionCluster, samples: Int, expected: Int, keyring: GroupKeyring? = nil) async throws
        -> BenchResults.LateJoin
    {
        let topics = cluster.topics
        let sessionID = cluster.sessionID
        let present = cluster.members.count
        let sniffer = try await WireSniffer.start(url: cluster.url, filters: ["\(topics.root)/s/\(sessionID)/#"])
        let replay = try await retainedReplay(url: cluster.url, topics: topics, sessionID: sessionID)
        var raw: RawLateJoin?
        var rawFailure: String?
        do {
            raw = try await makeRaw(cluster, replay: replay)
        } catch {
            rawFailure = "\(error)"
        }
        var times: [Double] = []
        var rawTimes: [Double] = []
        var rawEchoTimes: [Double] = []
        var rawRetained = 0
        var catchUps = 0, newcomerLive = 0, others = 0, stale = 0
        var memberBytes = 0, catchUpBytes = 0
        do {
            for sample in 0..<samples {
                let name = "late\(sample)"
                var configuration = try GroupCoordinator.Configuration(broker: cluster.url, group: cluster.group, participant: name)
                configuration.keyring = keyring
                let coordinator = try await GroupCoordinator.connect(configuration)
                let session = try await SessionCluster.findSession(coordinator, id: sessionID)
                try await sniffer.waitQuiet(.milliseconds(20))
                let mark = sniffer.count

                let join = try await timedJoin(session, expected: expected)
                times.append(join.milliseconds)
                if join.stale { stale += 1 }

                try await sniffer.waitQuiet(.milliseconds(30))
                var responder: String?
                for record in sniffer.records(from: mark) {
                    switch topics.parse(record.topic) {
                    case let .member(_, participant)?:
                        // Every joined participant subscribes to member/+ and state/+/+ (the publisher too).
                        others += present
                        newcomerLive += 1
                        if participant == name && record.size > 0 { memberBytes = record.size }
                    case .state?:
                        others += present
                        newcomerLive += 1
                    case let .broadcast(_, sender)?:
                        others += present - (sender == name ? 0 : 1)
                        newcomerLive += sender == name ? 0 : 1
                    case let .direct(_, recipient, sender)?:
                        if recipient == name {
                            catchUps += 1
                            newcomerLive += 1
                            catchUpBytes = record.size
                            responder = sender
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

                if let rawJoin = raw {
                    do {
                        // The raw side copies this join: its newcomer's name, sizes and responder.
                        let memberSize = memberBytes, catchUpSize = catchUpBytes
                        let responderIndex = responder.flatMap { rawJoin.names.firstIndex(of: $0) } ?? 0
                        if sample == 0 {
                            _ = try await BlockingThread.run("raw-late-warmup") {
                                Result {
                                    try rawJoin.join(
                                        name: "warm0", memberSize: memberSize, catchUpSize: catchUpSize, responder: responderIndex)
                                }
                            }.get()
                        }
                        let outcome = try await BlockingThread.run("raw-late") {
                            Result {
                                try rawJoin.join(name: name, memberSize: memberSize, catchUpSize: catchUpSize, responder: responderIndex)
                            }
                        }.get()
                        rawTimes.append(outcome.milliseconds)
                        rawEchoTimes.append(outcome.echoMilliseconds)
                        rawRetained += outcome.retained
                    } catch {
                        rawFailure = "\(error)"
                        await close(raw)
                        raw = nil
                    }
                }
            }
        } catch {
            await close(raw)
            await sniffer.stop()
            throw error
        }
        await close(raw)
        await sniffer.stop()
        let stats = Percentiles(times)
        let rawStats = Percentiles(rawFailure == nil ? rawTimes : [])
        let n = Double(samples)
        return .init(
            p50: stats.p50, p99: stats.p99, participants: present, samples: samples, catchUps: Double(catchUps) / n,
            retainedReplay: Double(replay.count), newcomerLive: Double(newcomerLive) / n, others: Double(others) / n,
            staleAtReturn: stale, rawP50: rawStats.p50, rawP99: rawStats.p99, rawEchoP50: Percentiles(rawEchoTimes).p50,
            rawRetainedReplay: rawTimes.isEmpty ? .nan : Double(rawRetained) / Double(rawTimes.count),
            memberBytes: memberBytes, catchUpBytes: catchUpBytes, rawFailure: rawFailure)
    }

    /// As many raw clients as members, on topics as long as GroupSync's (groupsync/v2/<group>/s/<session>/…,
    /// with the group's first letter changed), holding copies of the session's retained records.
    private static func makeRaw(_ cluster: SessionCluster, replay: [RawLateJoin.Retained]) async throws -> RawLateJoin {
        let address = try BrokerAddress(cluster.url)
        let prefix = "\(GroupTopics.protocolRoot)/r\(cluster.group.dropFirst())/s/\(cluster.sessionID)"
        return try await BlockingThread.run("raw-late-connect") {
            Result { try RawLateJoin(host: address.host, port: address.port, prefix: prefix, retained: replay) }
        }.get()
    }

    /// Clears the raw clients' retained records and disconnects them, on a thread of their own.
    private static func close(_ raw: RawLateJoin?) async {
        guard let raw else { return }
        await BlockingThread.run("raw-late-close") { raw.close() }
    }

    /// The retained messages the broker sends a newcomer's session subscriptions, each as its topic below
    /// the session prefix and its size: a probe subscribes to the same filters, then publishes a marker
    /// to itself, which arrives after every retained copy.
    static func retainedReplay(url: String, topics: GroupTopics, sessionID: String) async throws -> [RawLateJoin.Retained] {
        let probe = try MQTTClient(configuration: .init(url: url, clientID: "bench-probe-\(UInt32.random(in: 0...UInt32.max))"))
        try await probe.connect()
        let marker = "bench/marker/\(UInt32.random(in: 0...UInt32.max))"
        let filters = topics.sessionFilters(sessionID, participant: "probe")
        let subscription = try await probe.subscribe(to: (filters.shared + [filters.broadcast, marker]).map { TopicSubscription($0) })
        try await probe.publish(to: marker, payload: Data("m".utf8), qos: .atLeastOnce)
        let sessionPrefix = "\(topics.root)/s/\(sessionID)/"
        let records = try await withTimeLimit(.seconds(10), "retained replay counted") {
            var records: [RawLateJoin.Retained] = []
            for await message in subscription {
                if message.topic == marker { return records }
                if message.retain {
                    records.append(.init(topic: String(message.topic.dropFirst(sessionPrefix.count)), size: message.payload.count))
                }
            }
            return records
        }
        subscription.unsubscribe()
        await probe.disconnect()
        return records
    }
}
