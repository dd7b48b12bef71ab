import Foundation
import MQTT
import Synchronization

/// Ping-pong between two raw libmosquitto clients through the broker: the pinger publishes, the
/// responder's message callback hands the ping to the responder thread (semaphore), which publishes the
/// pong; the pinger's callback hands it to the pinger thread. Half the round trip is one-way latency.
///
/// The hand-over to an application thread on both sides mirrors what GroupSync does (its messages reach
/// the app's task, not libmosquitto's thread), so the comparison is like for like.
///
/// With `awaitsAcknowledgement` (QoS 1 only) each side's thread also waits for its publish's PUBACK
/// (libmosquitto's publish callback) before it waits for the next message, as a GroupSync `.reliable`
/// `send` does: a reference that separates the cost of that guarantee from the cost of the wrapper.
final class RawPingPong: Sendable {
    let pinger: RawMosquittoClient
    let responder: RawMosquittoClient
    let pingTopic: String
    let pongTopic: String
    let qos: Int32
    let payloadSize: Int
    let awaitsAcknowledgement: Bool
    private let stopping = Atomic<Bool>(false)
    /// Why the responder thread stopped answering, if it failed (reported with the pong that never came).
    private let responderFailure = Mutex<String?>(nil)
    private let responderDone = DispatchSemaphore(value: 0)

    init(
        host: String, port: Int, pingTopic: String, pongTopic: String, qos: Int32, payloadSize: Int,
        awaitsAcknowledgement: Bool = false
    ) throws {
        precondition(!awaitsAcknowledgement || qos > 0, "only a QoS ≥ 1 publish is acknowledged")
        self.awaitsAcknowledgement = awaitsAcknowledgement
        self.pingTopic = pingTopic
        self.pongTopic = pongTopic
        self.qos = qos
        self.payloadSize = max(payloadSize, 8)
        let tag = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        pinger = try RawMosquittoClient(clientID: "raw-ping-\(tag)", handsOver: true)
        responder = try RawMosquittoClient(clientID: "raw-pong-\(tag)", handsOver: true)
        try pinger.connect(host: host, port: port)
        try responder.connect(host: host, port: port)
        try pinger.subscribe(pongTopic, qos: qos)
        try responder.subscribe(pingTopic, qos: qos)
        let thread = Thread { [self] in
            ThreadName.setCurrent("raw-responder")
            respond()
        }
        thread.start()
    }

    private func respond() {
        var payload = [UInt8](repeating: UInt8(ascii: "x"), count: payloadSize)
        while true {
            responder.inbox.wait()
            if stopping.load(ordering: .acquiring) { break }
            let sequence = Int64(responder.lastSequence.load(ordering: .relaxed)).littleEndian
            payload.withUnsafeMutableBytes { $0.storeBytes(of: sequence, as: Int64.self) }
            do {
                try payload.withUnsafeBytes { try publish(responder, pongTopic, $0) }
            } catch {
                responderFailure.withLock { $0 = "the responder failed: \(error)" }
                break
            }
        }
        responderDone.signal()
    }

    /// `count` exchanges, numbered from `first`; returns each one-way latency (half the round trip) in µs.
    /// Blocking: call it from a thread of its own (``BlockingThread``).
    func run(first: Int, count: Int) throws -> [Double] {
        var payload = [UInt8](repeating: UInt8(ascii: "x"), count: payloadSize)
        var samples: [Double] = []
        samples.reserveCapacity(count)
        for sequence in first..<(first + count) {
            payload.withUnsafeMutableBytes { $0.storeBytes(of: Int64(sequence).littleEndian, as: Int64.self) }
            let start = MonotonicClock.nanoseconds()
            try payload.withUnsafeBytes { try publish(pinger, pingTopic, $0) }
            guard pinger.inbox.wait(timeout: .now() + 5) == .success else {
                let cause = responderFailure.withLock { $0 }.map { " (\($0))" } ?? ""
                throw RawMosquittoClient.Failure.timeout("pong \(sequence)\(cause)")
            }
            let end = MonotonicClock.nanoseconds()
            guard pinger.lastSequence.load(ordering: .relaxed) == sequence else {
                throw RawMosquittoClient.Failure.timeout("pong \(sequence) (got \(pinger.lastSequence.load(ordering: .relaxed)))")
            }
            samples.append(MonotonicClock.microseconds(from: start, to: end) / 2)
        }
        return samples
    }

    /// Publishes, and with `awaitsAcknowledgement` returns once the PUBACK came (the client's window of
    /// one permit is taken before the publish and handed back by its publish callback).
    private func publish(_ client: RawMosquittoClient, _ topic: String, _ payload: UnsafeRawBufferPointer) throws {
        guard awaitsAcknowledgement else { return try client.publish(topic, payload, qos: qos) }
        client.window.wait()
        do {
            try client.publish(topic, payload, qos: qos)
        } catch {
            client.window.signal()
            throw error
        }
        guard client.window.wait(timeout: .now() + 5) == .success else {
            // The permit stays taken: a PUBACK that still comes hands it back. The run fails anyway.
            throw RawMosquittoClient.Failure.timeout("PUBACK on \(topic)")
        }
        client.window.signal()
    }

    func close() {
        stopping.store(true, ordering: .releasing)
        responder.inbox.signal()
        responderDone.wait()
        pinger.close()
        responder.close()
    }
}
