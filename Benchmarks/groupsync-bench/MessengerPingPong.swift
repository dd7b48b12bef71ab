import Foundation
import GroupSync
import GroupSyncTestSupport

/// Ping-pong between two participants' `GroupSessionMessenger`s through the broker: the pinger sends a
/// ``Ping`` — or the same sequence number as raw bytes, `send(Data)` — to everyone (`.all`: just the
/// responder), the responder's `messages(of:)` loops send it back, the pinger's `messages(of:)` iterator
/// receives it. Half the round trip is the one-way latency.
final class MessengerPingPong: Sendable {
    let cluster: SessionCluster
    let mode: GroupSessionMessenger.DeliveryMode
    let pinger: GroupSessionMessenger
    let responder: GroupSessionMessenger
    private let responderTasks: [Task<Void, Never>]

    private init(cluster: SessionCluster, mode: GroupSessionMessenger.DeliveryMode) {
        self.cluster = cluster
        self.mode = mode
        pinger = GroupSessionMessenger(session: cluster.members[0].session, deliveryMode: mode)
        let responder = GroupSessionMessenger(session: cluster.members[1].session, deliveryMode: mode)
        self.responder = responder
        let pings = responder.messages(of: Ping.self)
        let bytes = responder.messages(of: Data.self)
        responderTasks = [
            Task { for await (ping, _) in pings { try? await responder.send(ping) } },
            Task { for await (data, _) in bytes { try? await responder.send(data) } },
        ]
    }

    static func make(
        url: String, group: String, mode: GroupSessionMessenger.DeliveryMode, keyring: GroupKeyring? = nil
    ) async throws -> MessengerPingPong {
        let cluster = try await SessionCluster.make(url: url, group: group, prefix: "p", count: 2, sharedState: false, keyring: keyring)
        return MessengerPingPong(cluster: cluster, mode: mode)
    }

    /// The topic the pinger's messages travel on.
    var pingTopic: String { cluster.topics.broadcast(cluster.sessionID, from: cluster.members[0].name) }

    /// `count` exchanges numbered from `first` (as ``Ping``s, or as `Data` with `asData`); each one-way
    /// latency (half the round trip) in µs.
    func run(first: Int, count: Int, asData: Bool = false) async throws -> [Double] {
        let pinger = self.pinger
        return try await withTimeLimit(.seconds(30 + Double(count) / 100), "messenger ping-pong") {
            asData
                ? try await MessengerPingPong.dataExchanges(pinger, first: first, count: count)
                : try await MessengerPingPong.exchanges(pinger, first: first, count: count)
        }
    }

    /// As ``exchanges(_:first:count:)``, with each sequence number sent as its decimal digits in `Data`.
    static func dataExchanges(_ pinger: GroupSessionMessenger, first: Int, count: Int) async throws -> [Double] {
        try await exchanges(
            first: first, count: count, pongs: pinger.messages(of: Data.self), read: { Int(String(decoding: $0, as: UTF8.self)) },
            send: { try await pinger.send(Data(String($0).utf8)) })
    }

    /// `count` exchanges numbered from `first` between `pinger` and whoever sends its pings back (here,
    /// or a responder process: ``ProcessPingPong``); each one-way latency (half the round trip) in µs.
    static func exchanges(_ pinger: GroupSessionMessenger, first: Int, count: Int) async throws -> [Double] {
        try await exchanges(
            first: first, count: count, pongs: pinger.messages(of: Ping.self), read: { $0.seq },
            send: { try await pinger.send(Ping(seq: $0)) })
    }

    /// Sends each sequence number with `send` and waits for it to come back on `pongs` (`read` says which
    /// number a pong carries).
    private static func exchanges<Message>(
        first: Int, count: Int, pongs: GroupMessages<Message>, read: (Message) -> Int?, send: (Int) async throws -> Void
    ) async throws -> [Double] {
        var pongs = pongs.makeAsyncIterator()
        var samples: [Double] = []
        samples.reserveCapacity(count)
        for sequence in first..<(first + count) {
            let start = MonotonicClock.nanoseconds()
            try await send(sequence)
            guard let (pong, _) = await pongs.next() else { throw CancellationError() }
            let end = MonotonicClock.nanoseconds()
            guard read(pong) == sequence else {
                throw SessionCluster.Failure(description: "pong \(read(pong) ?? -1) for ping \(sequence)")
            }
            samples.append(MonotonicClock.microseconds(from: start, to: end) / 2)
        }
        return samples
    }

    /// The size of the pinger's messages on the wire (the envelope), seen by a sniffing client.
    func envelopeSize(sequence: Int) async throws -> Int {
        let sniffer = try await WireSniffer.start(url: cluster.url, filters: [pingTopic])
        _ = try await run(first: sequence, count: 1)
        let record = try await sniffer.next(after: 0)
        await sniffer.stop()
        return record.size
    }

    func close() async {
        for task in responderTasks { task.cancel() }
        await cluster.close()
    }
}
