import BrokerSupport
import Foundation
import Testing

@testable import GroupSync

/// Participants who join one session at random moments, within a second of each other or not, on brokers
/// without retained messages: within the catch-up timeout plus 1 s of the last join, every one lists
/// every other and holds the value participant 0 wrote before most of them joined, and nobody's broadcast
/// is rejected. Each round is seeded: a failure names its seed, and
/// `GROUPSYNC_STRESS_SEED=<seed> GROUPSYNC_STRESS_ROUNDS=1` with `--filter` on its case replays its schedule.
@Suite(.timeLimit(.minutes(timeLimitMinutes(10)))) struct RetainlessMembershipTests {
    /// Rounds per case: `GROUPSYNC_STRESS_ROUNDS` (`scripts/stress-check.sh` runs this suite alone at 50),
    /// else 2, one at a time: inside the whole suite, hundreds of participants would slow the suites
    /// beside them past their timing bounds. None under a sanitizer unless asked: there even one round
    /// put the farewell bounds beside it over, and its heartbeats come later than the silence allows.
    static let requestedRounds = ProcessInfo.processInfo.environment["GROUPSYNC_STRESS_ROUNDS"].flatMap { Int($0) }.flatMap {
        $0 > 0 ? $0 : nil
    }
    static let rounds = requestedRounds ?? (timeScale > 1 ? 0 : 2)

    /// The seed of a case's first round: `GROUPSYNC_STRESS_SEED`, or one per case and topology.
    static func seed(_ participants: Int, bridged: Bool) -> UInt64 {
        ProcessInfo.processInfo.environment["GROUPSYNC_STRESS_SEED"].flatMap { UInt64($0) }
            ?? 0x5eed &+ UInt64(participants) << (bridged ? 40 : 32)
    }

    /// On a mosquitto without retained messages, or on the external broker the suite is given (the
    /// participants use none there either).
    @Test(arguments: [2, 5, 20]) func membershipConvergesOnOneBroker(participants: Int) async throws {
        var configuration = MosquittoBroker.Configuration()
        if !ExternalBroker.isConfigured { configuration.retainAvailable = false }
        try await MosquittoBroker.withBroker(configuration) { broker in
            try await Self.stress(participants: participants, seedBase: Self.seed(participants, bridged: false)) { _ in broker }
        }
    }

    /// Every other participant on the second of two bridged brokers (or of the two nodes of a cluster
    /// the suite is given: `GROUPSYNC_TEST_BROKER=URL1,URL2`).
    @Test(.needsTwoBrokers, arguments: [2, 5, 20])
    func membershipConvergesOnBridgedBrokers(participants: Int) async throws {
        try await MosquittoBroker.withBridgedBrokers { first, second in
            try await Self.stress(participants: participants, seedBase: Self.seed(participants, bridged: true)) { index in
                index.isMultiple(of: 2) ? first : second
            }
        }
    }

    /// A join is answered by each member with one `$member` to the newcomer, and nothing else: no member
    /// record but the newcomer's own goes to everyone (one message per member per join, not one per member
    /// and reader).
    @Test func aJoinIsAnsweredToTheNewcomerOnly() async throws {
        var configuration = MosquittoBroker.Configuration()
        if !ExternalBroker.isConfigured { configuration.retainAvailable = false }
        try await MosquittoBroker.withBroker(configuration) { broker in
            let group = Group(broker)
            func join(_ name: String) async throws -> GroupCoordinator {
                try await group.join(name) { $0.mqtt.retainedMessages = false }
            }
            let alice = try await join("alice")
            let a = try await alice.startJoined(Gallery(galleryID: "answers"))
            let b = try await join("bob").joinSession(a.id, of: Gallery.self)
            try await waitUntil("alice and bob list each other") {
                ids(a.activeParticipants) == ["alice", "bob"] && ids(b.activeParticipants) == ["alice", "bob"]
            }
            let session = "\(GroupTopics.protocolRoot)/\(group.name)/s/\(a.id)"
            let (tap, seen) = try await rawSubscriber(broker, "\(session)/#")
            let c = try await join("carol").joinSession(a.id, of: Gallery.self)
            #expect(ids(c.activeParticipants) == ["alice", "bob", "carol"])
            @Sendable func answers() -> [String] {
                seen.elements.filter { String(decoding: $0.payload, as: UTF8.self).contains(#""type":"$member""#) }.map(\.topic).sorted()
            }
            try await waitUntil("alice and bob answer carol") { answers().count >= 2 }
            // Whatever else they sent with their answers is in by the time the tap's own message is back.
            try await tap.publish(to: "\(session)/marker", string: "m")
            try await waitUntil("the tap's marker") { seen.elements.contains { $0.topic.hasSuffix("/marker") } }
            await tap.disconnect()
            #expect(answers() == ["\(session)/to/carol/alice", "\(session)/to/carol/bob"])
            let members = seen.elements.filter { $0.topic.contains("/member/") }.map(\.topic)
            #expect(members == ["\(session)/member/carol"], "only carol's own record")
            await group.closeAll()
        }
    }

    /// Runs ``rounds`` rounds: alone (``requestedRounds``), as many at once as keep about 40 participants
    /// connected (10 under a sanitizer); inside the whole suite, one at a time.
    static func stress(
        participants: Int, seedBase: UInt64, broker: @escaping @Sendable (Int) -> MosquittoBroker
    ) async throws {
        let wave = requestedRounds == nil ? 1 : max(1, (timeScale > 1 ? 10 : 40) / participants)
        for start in stride(from: 0, to: rounds, by: wave) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for round in start..<min(start + wave, rounds) {
                    group.addTask {
                        try await Self.round(
                            participants: participants, seed: seedBase &+ UInt64(round), broker: broker)
                    }
                }
                try await group.waitForAll()
            }
        }
    }

    /// One round: participant 0 starts a session at once; each participant connects at its offset (0–3 s,
    /// drawn from `seed`), joins the session and, once everyone has joined, broadcasts one message.
    static func round(participants: Int, seed: UInt64, broker: @Sendable (Int) -> MosquittoBroker) async throws {
        var random = SeededGenerator(state: seed)
        let offsets = (0..<participants).map { $0 == 0 ? 0 : Int.random(in: 0...3_000, using: &random) }
        let group = broker(0).unique("stress-\(seed)")
        let catchUpTimeout = timeBound(.seconds(1))
        let everyone = Set((0..<participants).map { "p\($0)" })
        let joined = LockedValue<[(GroupCoordinator, GroupSession<Gallery>, Collector<(Chat, Participant)>)]>([])
        let sessionID = LockedValue<String?>(nil)
        let rejections = LockedValue<[String]>([])
        func replay() -> String { "seed \(seed), offsets (ms) \(offsets)" }
        do {
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                for (index, offset) in offsets.enumerated() {
                    let host = broker(index)
                    tasks.addTask {
                        try await Task.sleep(for: timeBound(.milliseconds(offset)))  // the schedule under test
                        var configuration = try GroupCoordinator.Configuration(
                            broker: host.url, group: group, participant: "p\(index)", catchUpTimeout: catchUpTimeout)
                        configuration.mqtt.retainedMessages = false
                        configuration.onRejected = { topic, _ in rejections.withLock { $0.append("p\(index): \(topic)") } }
                        let coordinator = try await GroupCoordinator.connect(configuration)
                        let session: GroupSession<Gallery>
                        do {
                            if index == 0 {
                                session = try await coordinator.startJoined(Gallery(galleryID: "stress"))
                                try await SharedState(session, key: "index", initialValue: 0).set(42)
                                sessionID.withLock { $0 = session.id }
                            } else {
                                session = try await coordinator.firstSession(of: Gallery.self, timeout: timeBound(.seconds(10)))
                                try await session.join()
                            }
                        } catch {
                            await coordinator.close()
                            throw error
                        }
                        let chats = Collector(GroupSessionMessenger(session: session).messages(of: Chat.self).map { ($0, $1.source) })
                        joined.withLock { $0.append((coordinator, session, chats)) }
                    }
                }
                try await tasks.waitForAll()
            }
            let members = joined.withLock { $0 }
            #expect(Set(members.map(\.1.id)) == [sessionID.withLock { $0 }!], "one session: \(replay())")
            for (_, session, _) in members {
                try await GroupSessionMessenger(session: session).send(Chat(text: session.localParticipant.id))
            }
            try await waitUntil(
                timeout: catchUpTimeout + timeBound(.seconds(1)),
                "every participant lists every other, holds the value and has their messages",
                {
                    members.allSatisfy { _, session, chats in
                        ids(session.activeParticipants) == everyone
                            && (try? SharedState(session, key: "index", initialValue: 0).value) == 42
                            && Set(chats.elements.map(\.1.id)) == everyone.subtracting([session.localParticipant.id])
                    }
                },
                else: {
                    "\(replay()): "
                        + members.map { _, session, chats in
                            "\(session.localParticipant.id) lists \(ids(session.activeParticipants).sorted()), value \((try? SharedState(session, key: "index", initialValue: 0).value) ?? -1), heard from "
                                + "\(Set(chats.elements.map(\.1.id)).sorted())"
                        }.sorted().joined(separator: "; ") + "; rejected: \(rejections.withLock { $0 })"
                })
            let rejected = rejections.withLock { $0 }
            #expect(rejected.isEmpty, "rejected: \(rejected), \(replay())")
        } catch {
            Issue.record("\(replay()): \(error)")
        }
        for (coordinator, _, chats) in joined.withLock({ $0 }) {
            chats.cancel()
            await coordinator.close()
        }
    }
}
