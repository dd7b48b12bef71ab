import Foundation
import Synchronization

/// The raw libmosquitto floor of the fan-out figure. `count` clients — as many as the GroupSync session
/// has participants — each subscribed (QoS 1) to one topic, as long as the GroupSync state topic: the
/// publisher too, as a GroupSync writer gets its own state record back (the state filter is not
/// no-local), so the broker sends `count` copies on either side. Per sample the first client publishes
/// one retained QoS 1 message, padded to a GroupSync state record's size, its first 8 bytes the sample's
/// number. Timed from the instant before `mosquitto_publish` until the last of the other `count − 1`
/// clients' message callbacks has it. Messages are counted in libmosquitto's message callback, on its
/// network thread, with no hand-over to an application thread: the transport's floor. A sample ends once
/// every client (the publisher's own copy included) has the message and its PUBACK is in, so nothing is
/// in flight when the next one starts.
final class RawFanout: Sendable {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    let clients: [RawMosquittoClient]
    let topic: String
    let payloadSize: Int
    /// The last sample's number (0 before the first), written into the payload and checked on arrival.
    private let sampleNumber = Atomic<Int>(0)

    /// Connects and subscribes the `count` clients (blocking: call it from a thread of its own,
    /// ``BlockingThread``). `topic` should be as long as the GroupSync state topic.
    init(host: String, port: Int, topic: String, count: Int, payloadSize: Int) throws {
        guard count >= 2 else { throw Failure(description: "raw fan-out: needs a publisher and a receiver, not \(count) client(s)") }
        self.topic = topic
        self.payloadSize = max(payloadSize, 8)
        let tag = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        clients = try (0..<count).map { try RawMosquittoClient(clientID: "raw-fan\($0)-\(tag)", handsOver: false) }
        do {
            for client in clients {
                try client.connect(host: host, port: port)
                try client.subscribe(topic, qos: 1)
            }
        } catch {
            for client in clients { client.close() }
            throw error
        }
    }

    /// One change: the first client publishes, every client receives. Returns the milliseconds from the
    /// publish call until the last of the other clients had it. Blocking: call it from a thread of its
    /// own (``BlockingThread``).
    func sample(timeout: Double = 10) throws -> Double {
        let number = sampleNumber.add(1, ordering: .relaxed).newValue
        for client in clients {
            while client.allReceived.wait(timeout: .now()) == .success {}  // a late signal, if any
            // Nothing is in flight between samples: the count is exactly where the last sample left it.
            client.expectedCount.store(client.receivedCount.load(ordering: .acquiring) + 1, ordering: .sequentiallyConsistent)
        }
        var payload = [UInt8](repeating: UInt8(ascii: "x"), count: payloadSize)
        payload.withUnsafeMutableBytes { $0.storeBytes(of: Int64(number).littleEndian, as: Int64.self) }
        let publisher = clients[0]
        // Free at once: the last sample's PUBACK is in (drained below).
        guard publisher.window.wait(timeout: .now() + timeout) == .success else {
            throw RawMosquittoClient.Failure.timeout("raw fan-out publish window")
        }
        let start = MonotonicClock.nanoseconds()
        do {
            try payload.withUnsafeBytes { try publisher.publish(topic, $0, qos: 1, retain: true) }
        } catch {
            publisher.window.signal()  // no PUBACK will return the permit
            throw error
        }
        for (index, client) in clients.enumerated() {
            guard client.allReceived.wait(timeout: .now() + timeout) == .success else {
                throw Failure(description: "raw fan-out: client \(index) did not get change \(number)")
            }
            let got = client.lastSequence.load(ordering: .relaxed)
            guard got == number else { throw Failure(description: "raw fan-out: client \(index) got change \(got), not \(number)") }
        }
        try publisher.drainWindow(timeout: timeout)
        let last = clients.dropFirst().map { $0.lastArrival.load(ordering: .acquiring) }.max()!
        return last > start ? MonotonicClock.milliseconds(from: start, to: last) : 0
    }

    /// Clears the retained message (a zero-length retained publish deletes it, as the GroupSync
    /// session's end clears its records), waits for its PUBACK, and disconnects every client. Blocking.
    func close() {
        let publisher = clients[0]
        if publisher.window.wait(timeout: .now() + 5) == .success {
            do {
                try publisher.publish(topic, UnsafeRawBufferPointer(start: nil, count: 0), qos: 1, retain: true)
            } catch {
                publisher.window.signal()
            }
        }
        try? publisher.drainWindow(timeout: 5)
        for client in clients { client.close() }
    }
}
