import Foundation
import MQTT  // LockedValue
import Synchronization

/// The raw libmosquitto floor of the convergence figure. `count` clients, each subscribed (QoS 1) to one
/// filter, `<root>/+`, that matches every client's topic `<root>/c<i>` — its own included, as a GroupSync
/// participant gets its own state record back (the state filter is not no-local). Per burst each client
/// publishes one retained QoS 1 message, padded to a GroupSync state record's size, from a thread of its
/// own; the `count` threads are released together, as the GroupSync side calls its `count` `set`s in
/// concurrent tasks. Timed from the last publish call (the instant before `mosquitto_publish`) until every
/// client has received all `count` messages of the burst. Messages are counted in libmosquitto's message
/// callback, on its network thread, with no hand-over to an application thread: the transport's floor.
final class RawConvergence: Sendable {
    let clients: [RawMosquittoClient]
    let topics: [String]
    let payloadSize: Int
    private let writers: [Writer]
    /// Signalled by a writer thread once it published (or failed), and once when it exits.
    private let done = DispatchSemaphore(value: 0)
    private let stopping = Atomic<Bool>(false)
    private let burstNumber = Atomic<Int>(0)

    /// One publishing thread's gate and outcome.
    private final class Writer: Sendable {
        let go = DispatchSemaphore(value: 0)
        /// The instant before this burst's `mosquitto_publish`.
        let publishedAt = Atomic<UInt64>(0)
        let failure = LockedValue<String?>(nil)
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// Connects and subscribes the `count` clients, and starts their writer threads (blocked until a
    /// burst). `root` should be as long as the GroupSync state topic's prefix, so that both sides' topics
    /// have the same length.
    init(host: String, port: Int, root: String, count: Int, payloadSize: Int) throws {
        self.payloadSize = max(payloadSize, 8)
        let tag = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        clients = try (0..<count).map { try RawMosquittoClient(clientID: "raw-conv\($0)-\(tag)", handsOver: false) }
        topics = (0..<count).map { "\(root)/c\($0)" }
        writers = (0..<count).map { _ in Writer() }
        for client in clients {
            try client.connect(host: host, port: port)
            try client.subscribe("\(root)/+", qos: 1)
        }
        for index in 0..<count {
            let thread = Thread { [self] in
                ThreadName.setCurrent("raw-writer\(index)")
                write(index)
            }
            thread.start()
        }
    }

    private func write(_ index: Int) {
        let client = clients[index], writer = writers[index], topic = topics[index]
        var payload = [UInt8](repeating: UInt8(ascii: "x"), count: payloadSize)
        while true {
            writer.go.wait()
            if stopping.load(ordering: .acquiring) { break }
            let sequence = Int64(burstNumber.load(ordering: .acquiring) * clients.count + index).littleEndian
            payload.withUnsafeMutableBytes { $0.storeBytes(of: sequence, as: Int64.self) }
            do {
                // Free at once: the last burst's PUBACK is in (``burst()`` drained it).
                guard client.window.wait(timeout: .now() + 10) == .success else {
                    throw RawMosquittoClient.Failure.timeout("publish window of writer \(index)")
                }
                let time = MonotonicClock.nanoseconds()
                try payload.withUnsafeBytes { try client.publish(topic, $0, qos: 1, retain: true) }
                writer.publishedAt.store(time, ordering: .relaxed)
            } catch {
                writer.failure.withLock { $0 = "\(error)" }
            }
            done.signal()
        }
        done.signal()
    }

    /// One burst: every client publishes once, all at once. Returns the milliseconds from the last publish
    /// call until the last client had every message of the burst, once every PUBACK is in too (so nothing
    /// of this burst is still in flight when the next measurement starts). Blocking: call it from a
    /// thread of its own (``BlockingThread``).
    func burst(timeout: Double = 10) throws -> Double {
        let count = clients.count
        for client in clients {
            while client.allReceived.wait(timeout: .now()) == .success {}  // a late signal, if any
            // Nothing is in flight between bursts: the count is exactly where the last burst left it.
            client.expectedCount.store(client.receivedCount.load(ordering: .acquiring) + count, ordering: .sequentiallyConsistent)
        }
        burstNumber.add(1, ordering: .releasing)
        for writer in writers { writer.go.signal() }
        for _ in 0..<count {
            guard done.wait(timeout: .now() + timeout) == .success else {
                throw Failure(description: "raw convergence: a writer did not publish")
            }
        }
        for (index, writer) in writers.enumerated() {
            if let failure = writer.failure.withLock({ $0 }) { throw Failure(description: "raw convergence: writer \(index): \(failure)") }
        }
        for (index, client) in clients.enumerated() {
            guard client.allReceived.wait(timeout: .now() + timeout) == .success else {
                let base = client.expectedCount.load(ordering: .relaxed) - count
                throw Failure(
                    description: "raw convergence: client \(index) got \(client.receivedCount.load(ordering: .relaxed) - base) of \(count)")
            }
        }
        for client in clients { try client.drainWindow(timeout: timeout) }
        let lastWrite = writers.map { $0.publishedAt.load(ordering: .relaxed) }.max()!
        let converged = clients.map { $0.lastArrival.load(ordering: .acquiring) }.max()!
        return converged > lastWrite ? MonotonicClock.milliseconds(from: lastWrite, to: converged) : 0
    }

    /// Stops the writer threads, clears the retained messages (a zero-length retained publish deletes
    /// one, as the GroupSync session's end clears its records) and disconnects.
    func close() {
        stopping.store(true, ordering: .releasing)
        for writer in writers { writer.go.signal() }
        for _ in writers { _ = done.wait(timeout: .now() + 5) }
        for (client, topic) in zip(clients, topics) where client.window.wait(timeout: .now() + 5) == .success {
            try? client.publish(topic, UnsafeRawBufferPointer(start: nil, count: 0), qos: 1, retain: true)
        }
        for client in clients { try? client.drainWindow(timeout: 5) }
        for client in clients { client.close() }
    }
}
