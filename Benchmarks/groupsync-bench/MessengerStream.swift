import Foundation
import GroupSync
import Synchronization

/// One participant streaming ``Ping``s (or their sequence numbers as `Data`) to one other through
/// `GroupSessionMessenger`, with at most `window` sends not yet complete (`send` returns when written for
/// `.unreliable`, acknowledged for `.reliable`). The receiver's `messages(of:)` loops count what arrives,
/// decoded as the app gets it.
final class MessengerStream: Sendable {
    let cluster: SessionCluster
    let sender: GroupSessionMessenger
    private let counter: Counter
    private let receiverTasks: [Task<Void, Never>]

    private init(cluster: SessionCluster, mode: GroupSessionMessenger.DeliveryMode) {
        self.cluster = cluster
        sender = GroupSessionMessenger(session: cluster.members[0].session, deliveryMode: mode)
        let receiver = GroupSessionMessenger(session: cluster.members[1].session, deliveryMode: mode)
        let pings = receiver.messages(of: Ping.self)
        let bytes = receiver.messages(of: Data.self)
        counter = Counter()
        receiverTasks = [
            Task { [counter] in for await _ in pings { counter.arrived() } },
            Task { [counter] in for await _ in bytes { counter.arrived() } },
        ]
    }

    /// What the receiver counted (a class of its own so that the receiving task can hold it before `self`
    /// is fully initialised).
    final class Counter: Sendable {
        let received = Atomic<Int>(0)
        let lastArrival = Atomic<UInt64>(0)

        func arrived() {
            lastArrival.store(MonotonicClock.nanoseconds(), ordering: .relaxed)
            received.add(1, ordering: .releasing)
        }
    }

    static func make(
        url: String, group: String, mode: GroupSessionMessenger.DeliveryMode, keyring: GroupKeyring? = nil
    ) async throws -> MessengerStream {
        let cluster = try await SessionCluster.make(url: url, group: group, prefix: "t", count: 2, sharedState: false, keyring: keyring)
        return MessengerStream(cluster: cluster, mode: mode)
    }

    /// Sends `count` messages; returns how many arrived and the seconds from the first send to the last
    /// arrival (waiting for the last one, or until nothing arrived for `quiet`).
    func run(count: Int, window: Int, asData: Bool = false, quiet: Duration = .seconds(2)) async throws -> (
        received: Int, seconds: Double
    ) {
        counter.received.store(0, ordering: .sequentiallyConsistent)
        let sender = self.sender
        let start = MonotonicClock.nanoseconds()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for sequence in 0..<count {
                if sequence >= window { try await group.next() }
                group.addTask {
                    if asData { try await sender.send(Data(String(sequence).utf8)) } else { try await sender.send(Ping(seq: sequence)) }
                }
            }
            try await group.waitForAll()
        }
        var seen = -1
        var lastProgress = MonotonicClock.nanoseconds()
        let quietNanos = UInt64(quiet.components.seconds) * 1_000_000_000 + UInt64(quiet.components.attoseconds / 1_000_000_000)
        while true {
            let now = counter.received.load(ordering: .acquiring)
            if now >= count { break }
            if now != seen {
                seen = now
                lastProgress = MonotonicClock.nanoseconds()
            } else if MonotonicClock.nanoseconds() - lastProgress > quietNanos {
                break
            }
            try await Task.sleep(for: .milliseconds(1))
        }
        let total = counter.received.load(ordering: .acquiring)
        let end = counter.lastArrival.load(ordering: .acquiring)
        return (total, total == 0 ? .nan : Double(end &- start) / 1e9)
    }

    func close() async {
        for task in receiverTasks { task.cancel() }
        await cluster.close()
    }
}
