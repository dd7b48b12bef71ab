import Foundation
import Testing

@testable import GroupSync

/// Broker restarts in the middle of a stream of reliable messages: crashes (SIGKILL, which loses what the
/// broker had not saved yet) mixed with graceful stops (SIGTERM), with persistence on and off. The promise
/// checked is end to end: every message whose `send` returned reaches every other joined participant
/// exactly once, in its sender's order.
@Suite(.needsOwnBroker("crashes and restarts it"), .timeLimit(.minutes(timeLimitMinutes(3)))) struct BrokerCrashTests {
    typealias Numbered = ReliabilityTests.Numbered

    /// Ten restarts alternating a crash and a graceful stop, beginning with a crash.
    static let mixedRestarts: [MosquittoBroker.Shutdown] = (0..<10).map { $0.isMultiple(of: 2) ? .crash : .graceful }

    /// The autosave of the shipped `deploy/mosquitto/mosquitto.conf` (every 60 s): within a test that short,
    /// a crash loses everything since the last graceful stop, and a crash before the first one everything.
    static func broker(persistence: Bool) -> MosquittoBroker.Configuration {
        MosquittoBroker.Configuration(persistence: persistence, autosave: .every(seconds: 60))
    }

    @Test(arguments: [true, false])
    func tenCrashesAndStopsMidStreamLoseDuplicateAndReorderNothing(persistence: Bool) async throws {
        let tally = try await Self.stream(Self.broker(persistence: persistence), through: Self.mixedRestarts)
        #expect(tally.isClean, "persistence \(persistence): \(tally)")
    }

    /// Graceful restarts of a persistent broker: the broker itself keeps every queued message.
    @Test func tenGracefulRestartsOfAPersistentBrokerLoseDuplicateAndReorderNothing() async throws {
        let tally = try await Self.stream(Self.broker(persistence: true), through: Array(repeating: .graceful, count: 10))
        #expect(tally.isClean, "\(tally)")
    }

    /// How far a sender may run ahead of its slowest receiver: well inside the sender's outbox (the last
    /// 1,000 messages) that end-to-end recovery re-sends from, so that every loss counted is one recovery
    /// could repair. Unbounded, a sender publishes thousands of messages while a receiver of a broker
    /// restarted without persistence has not subscribed again.
    static let window = 100

    /// Three participants join one session and each sends numbered reliable messages to all, without
    /// pause but at most ``window`` ahead of its slowest receiver (for up to a second), while the broker
    /// goes through `restarts`, each once every receiver got at least 30 new messages from every sender.
    /// Once traffic flows after the last restart the senders stop; the receivers get up to 5 s to receive
    /// what was sent, then what they received is tallied.
    static func stream(_ configuration: MosquittoBroker.Configuration, through restarts: [MosquittoBroker.Shutdown]) async throws -> Tally {
        try await MosquittoBroker.withBroker(configuration) { broker in
            let group = Group(broker)
            let names = ["alice", "bob", "carol"]
            let sessions = try await group.joinOneSession(names, Gallery(galleryID: "crashes"))
            let arrivals = sessions.map { Arrivals(GroupSessionMessenger(session: $0).messages(of: Numbered.self)) }
            let stop = ReliabilityTests.Flag()
            defer { stop.set() }  // also when a wait below throws: no sender outlives the test
            let pace = LockedValue([String: Int]())
            let senders = sessions.enumerated().map { index, session in
                send(
                    as: names[index], in: session, to: arrivals.indices.filter { $0 != index }.map { arrivals[$0] }, pacedBy: pace,
                    until: stop)
            }
            @Sendable func counts() -> [[Int]] { arrivals.map { receiver in names.map { receiver.count(from: $0) } } }
            @Sendable func flows(_ what: String) async throws {
                let before = counts()
                try await waitUntil(timeout: timeBound(.seconds(10)), pollEvery: .milliseconds(10), "traffic flows \(what)") {
                    let now = counts()
                    return names.indices.allSatisfy { r in names.indices.allSatisfy { s in r == s || now[r][s] >= before[r][s] + 30 } }
                } else: {
                    let highest = arrivals.map { receiver in names.map { receiver.highest(from: $0) } }
                    return "received per receiver and sender (\(names)): \(before) before, \(counts()) now; highest now \(highest); "
                        + sessions.map(receiverState).joined(separator: "; ")
                }
            }
            for (index, shutdown) in restarts.enumerated() {
                try await flows("before restart \(index + 1)")
                try await broker.restart(after: shutdown)
            }
            try await flows("after the last restart")
            stop.set()
            var sent: [Sent] = []
            for sender in senders { sent.append(try await withTimeLimit(.seconds(15), "a sender stops") { await sender.value }) }
            let delivered = sent.map(\.delivered)
            // Recovery gets a bounded time; what has not arrived by then counts as lost.
            try? await waitUntil(timeout: timeBound(.seconds(5)), pollEvery: .milliseconds(20), "every sent message arrives") {
                arrivals.enumerated().allSatisfy { r, receiver in
                    names.indices.allSatisfy { s in r == s || delivered[s].isSubset(of: receiver.numbers(from: names[s])) }
                }
            }
            #expect(sessions.allSatisfy { $0.state == .joined }, "every participant stays joined")
            var tally = Tally(failedSends: Dictionary(uniqueKeysWithValues: zip(names, sent.map(\.failed))))
            for (r, receiver) in arrivals.enumerated() {
                for (s, name) in names.enumerated() where s != r {
                    tally.deliveries.append(
                        Delivery(receiver: names[r], sender: name, sent: delivered[s], received: receiver.numbers(from: name)))
                }
            }
            await group.closeAll()
            return tally
        }
    }

    /// `name` sends numbered reliable messages to everyone in `session`, without pause but at most
    /// ``window`` ahead of its slowest receiver and of the slowest sender in `pace` (for up to a second: a
    /// receiver that lost the last `window` messages for good gets the next one after a second, as a gap
    /// it can see), until `stop`. In step with the others: a receiver flooded by two senders takes the
    /// third's acknowledgements late (they queue behind what it reads), and beside the whole suite under
    /// ThreadSanitizer that sender fell thousands of messages behind and starved.
    static func send(
        as name: String, in session: GroupSession<Gallery>, to receivers: [Arrivals], pacedBy pace: LockedValue<[String: Int]>,
        until stop: ReliabilityTests.Flag
    ) -> Task<Sent, Never> {
        Task {
            let messenger = GroupSessionMessenger(session: session)
            var sent = Sent()
            while !stop.isSet {
                let n = sent.attempted + 1
                await awaitTurn(n, of: name, receivers: receivers, pace: pace)
                sent.attempted = n
                do {
                    try await messenger.send(Numbered(from: name, n: n))
                    sent.delivered.insert(n)
                } catch {
                    sent.failed.append("\(n): \(error)")
                }
            }
            return sent
        }
    }

    /// Waits (for up to a second) until message `n` of `name` is within ``window`` of what each of
    /// `receivers` has from it and of every sender's count in `pace`, then records `n` as sent in `pace`.
    static func awaitTurn(_ n: Int, of name: String, receivers: [Arrivals], pace: LockedValue<[String: Int]>) async {
        try? await waitUntil(timeout: .seconds(1), pollEvery: .milliseconds(2)) {
            receivers.allSatisfy { $0.highest(from: name) >= n - window } && pace.withLock { $0.values.allSatisfy { $0 >= n - window } }
        }
        pace.withLock { $0[name] = n }
    }

    /// The numbered messages one participant receives, per sender in arrival order.
    final class Arrivals: Sendable {
        private struct Received {
            var numbers: [String: [Int]] = [:]
            var highest: [String: Int] = [:]
        }

        private let received: LockedValue<Received>
        private let consumer: Task<Void, Never>

        init(_ messages: GroupMessages<Numbered>) {
            let received = LockedValue(Received())
            self.received = received
            consumer = Task {
                for await (message, _) in messages {
                    received.withLock { received in
                        received.numbers[message.from, default: []].append(message.n)
                        received.highest[message.from] = max(received.highest[message.from] ?? 0, message.n)
                    }
                }
            }
        }

        deinit { consumer.cancel() }

        func numbers(from sender: String) -> [Int] { received.withLock { $0.numbers[sender] ?? [] } }
        func count(from sender: String) -> Int { received.withLock { $0.numbers[sender]?.count ?? 0 } }
        func highest(from sender: String) -> Int { received.withLock { $0.highest[sender] ?? 0 } }
    }

    /// One sender's numbered messages: those whose `send` returned and those whose `send` threw.
    struct Sent: Sendable {
        var attempted = 0
        var delivered: Set<Int> = []
        var failed: [String] = []
    }

    /// What one receiver got of one sender's messages.
    struct Delivery: Sendable, CustomStringConvertible {
        var receiver: String
        var sender: String
        /// Messages whose `send` returned without error.
        var sent: Int
        /// Sent and never received.
        var lost: Int
        /// Arrivals of a number that had arrived before.
        var duplicated: Int
        /// First arrivals after a higher number of the same sender.
        var reordered: Int

        init(receiver: String, sender: String, sent: Set<Int>, received: [Int]) {
            self.receiver = receiver
            self.sender = sender
            self.sent = sent.count
            var seen: Set<Int> = []
            var highest = 0
            var duplicated = 0
            var reordered = 0
            for n in received {
                if !seen.insert(n).inserted {
                    duplicated += 1
                } else if n < highest {
                    reordered += 1
                }
                highest = max(highest, n)
            }
            self.lost = sent.subtracting(seen).count
            self.duplicated = duplicated
            self.reordered = reordered
        }

        var description: String {
            "\(receiver)←\(sender): \(sent) sent, \(lost) lost, \(duplicated) duplicated, \(reordered) reordered"
        }
    }

    /// Every receiver's deliveries, and the sends that threw.
    struct Tally: Sendable, CustomStringConvertible {
        var deliveries: [Delivery] = []
        var failedSends: [String: [String]]

        var lost: Int { deliveries.reduce(0) { $0 + $1.lost } }
        var duplicated: Int { deliveries.reduce(0) { $0 + $1.duplicated } }
        var reordered: Int { deliveries.reduce(0) { $0 + $1.reordered } }
        var isClean: Bool { lost == 0 && duplicated == 0 && reordered == 0 }

        var description: String {
            let failures = failedSends.sorted { $0.key < $1.key }.filter { !$0.value.isEmpty }
                .map { "\($0.key): \($0.value.count) sends threw (\($0.value.prefix(3).joined(separator: "; ")))" }
            return (["\(lost) lost, \(duplicated) duplicated, \(reordered) reordered"] + deliveries.map(\.description) + failures)
                .joined(separator: "\n")
        }
    }
}
