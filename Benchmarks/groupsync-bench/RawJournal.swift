import CMosquitto
import Foundation
import GroupSync
import MQTT
import Synchronization

/// The raw libmosquitto floor of the journal fan-out: one publisher and `receivers` subscribers, plain
/// libmosquitto clients. Per round the publisher publishes the attachment's bytes in chunks of
/// `chunkSize` (QoS 1, at most `window` unacknowledged, as a journal's `add` sends them), chunk `i` on
/// `<root>/<i>`, which every subscriber reads through one `<root>/#` subscription (QoS 1). Each subscriber
/// hashes every chunk it receives once, with the library's SHA-256, and checks it against the chunk's
/// digest, as a journal load verifies a chunk: the goal is GroupSync against moving the bytes plus one
/// SHA-256 pass per receiver. Timed from the first publish call until the last subscriber's message
/// callback has verified every byte (on libmosquitto's network thread, no hand-over to an application
/// thread). Live, not retained: the floor of moving the bytes through the broker to everyone once.
final class RawJournal: Sendable {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// What one subscriber's callback has verified: the bytes of the chunks that matched their digest, and
    /// when it last finished one.
    private final class Receipt: Sendable {
        let bytes = Atomic<Int>(0)
        let verifiedAt = Atomic<UInt64>(0)
    }

    let publisher: RawMosquittoClient
    let subscribers: [RawMosquittoClient]
    private let receipts: [Receipt]
    /// The SHA-256 of each chunk of the round, by index (as a journal record lists them), set before its
    /// first publish.
    private let digests = LockedValue<[String]>([])
    let root: String
    let chunkSize: Int

    /// Connects and subscribes everyone (blocking: call it from a thread of its own, ``BlockingThread``).
    init(host: String, port: Int, root: String, receivers: Int, chunkSize: Int, window: Int) throws {
        self.root = root
        self.chunkSize = chunkSize
        let tag = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let receipts = (0..<receivers).map { _ in Receipt() }
        self.receipts = receipts
        publisher = try RawMosquittoClient(clientID: "raw-jp-\(tag)", windowSize: window, handsOver: false)
        let digests = self.digests
        subscribers = try (0..<receivers).map { index in
            let receipt = receipts[index]
            return try RawMosquittoClient(clientID: "raw-jr\(index)-\(tag)", handsOver: false) { _, message, _ in
                guard let payload = message.pointee.payload,
                    let chunkIndex = Int(String(cString: message.pointee.topic).split(separator: "/").last ?? "")
                else { return }
                // The bytes where libmosquitto holds them, not copied: one pass, as a journal load hashes a chunk.
                let chunk = Data(bytesNoCopy: payload, count: Int(message.pointee.payloadlen), deallocator: .none)
                if SHA256.hex(chunk) == digests.withLock({ chunkIndex < $0.count ? $0[chunkIndex] : nil }) {
                    receipt.bytes.add(chunk.count, ordering: .relaxed)
                }
                receipt.verifiedAt.store(MonotonicClock.nanoseconds(), ordering: .relaxed)
            }
        }
        do {
            try publisher.connect(host: host, port: port)
            for subscriber in subscribers {
                try subscriber.connect(host: host, port: port)
                try subscriber.subscribe("\(root)/#", qos: 1)
            }
        } catch {
            close()
            throw error
        }
    }

    /// One round: publishes `data` in chunks, returns the milliseconds from the first publish call until
    /// the last subscriber had verified every byte. Blocking: call it from a thread of its own.
    func round(_ data: Data, timeout: Double = 60) throws -> Double {
        let chunks = (data.count + chunkSize - 1) / chunkSize
        let expected = data.withUnsafeBytes { bytes in
            (0..<chunks).map { SHA256.hex(Data(bytes[($0 * chunkSize)..<min(($0 + 1) * chunkSize, bytes.count)])) }
        }
        digests.withLock { $0 = expected }
        for subscriber in subscribers {
            while subscriber.allReceived.wait(timeout: .now()) == .success {}  // a late signal, if any
            // Nothing is in flight between rounds: the count is exactly where the last round left it.
            subscriber.expectedCount.store(
                subscriber.receivedCount.load(ordering: .acquiring) + chunks, ordering: .sequentiallyConsistent)
        }
        let bytesBefore = receipts.map { $0.bytes.load(ordering: .acquiring) }
        let start = MonotonicClock.nanoseconds()
        try data.withUnsafeBytes { bytes in
            for index in 0..<chunks {
                guard publisher.window.wait(timeout: .now() + timeout) == .success else {
                    throw RawMosquittoClient.Failure.timeout("raw journal publish window")
                }
                let range = (index * chunkSize)..<min((index + 1) * chunkSize, bytes.count)
                do {
                    try publisher.publish("\(root)/\(index)", UnsafeRawBufferPointer(rebasing: bytes[range]), qos: 1)
                } catch {
                    publisher.window.signal()  // no PUBACK will return the permit
                    throw error
                }
            }
        }
        for (index, subscriber) in subscribers.enumerated() {
            guard subscriber.allReceived.wait(timeout: .now() + timeout) == .success else {
                throw Failure(description: "raw journal: subscriber \(index) did not get all \(chunks) chunks")
            }
            let got = receipts[index].bytes.load(ordering: .acquiring) - bytesBefore[index]
            guard got == data.count else {
                throw Failure(description: "raw journal: subscriber \(index) verified \(got) bytes, not \(data.count)")
            }
        }
        try publisher.drainWindow(timeout: timeout)
        let last = receipts.map { $0.verifiedAt.load(ordering: .acquiring) }.max()!
        return MonotonicClock.milliseconds(from: start, to: last)
    }

    /// Disconnects everyone. Blocking.
    func close() {
        publisher.close()
        for subscriber in subscribers { subscriber.close() }
    }
}
