import Foundation

/// One raw libmosquitto sender streaming to one raw libmosquitto receiver as fast as the window allows:
/// at most `window` publishes not yet completed (QoS 0: written to the socket; QoS 1: PUBACK received).
/// The receiver's message callback only counts.
final class RawStream: Sendable {
    let sender: RawMosquittoClient
    let receiver: RawMosquittoClient
    let topic: String
    let qos: Int32
    let payloadSize: Int

    init(host: String, port: Int, topic: String, qos: Int32, payloadSize: Int, window: Int) throws {
        self.topic = topic
        self.qos = qos
        self.payloadSize = max(payloadSize, 8)
        let tag = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        sender = try RawMosquittoClient(clientID: "raw-tx-\(tag)", windowSize: window, handsOver: false)
        receiver = try RawMosquittoClient(clientID: "raw-rx-\(tag)", handsOver: false)
        try sender.connect(host: host, port: port)
        try receiver.connect(host: host, port: port)
        try receiver.subscribe(topic, qos: qos)
    }

    /// Sends `count` messages; returns how many arrived and the seconds from the first send to the last
    /// arrival. Waits for the last message, or until nothing arrived for `quiet` seconds (QoS 0 may lose).
    /// Blocking: call it from a thread of its own.
    func run(count: Int, quiet: Double = 2) throws -> (received: Int, seconds: Double) {
        while receiver.allReceived.wait(timeout: .now()) == .success {}  // a late signal of the last run
        receiver.receivedCount.store(0, ordering: .sequentiallyConsistent)
        receiver.expectedCount.store(count, ordering: .sequentiallyConsistent)
        var payload = [UInt8](repeating: UInt8(ascii: "x"), count: payloadSize)
        let start = MonotonicClock.nanoseconds()
        for sequence in 0..<count {
            guard sender.window.wait(timeout: .now() + 10) == .success else {
                throw RawMosquittoClient.Failure.timeout("publish window")
            }
            payload.withUnsafeMutableBytes { $0.storeBytes(of: Int64(sequence).littleEndian, as: Int64.self) }
            try payload.withUnsafeBytes { try sender.publish(topic, $0, qos: qos) }
        }
        var seen = -1
        while receiver.allReceived.wait(timeout: .now() + quiet) == .timedOut {
            let now = receiver.receivedCount.load(ordering: .acquiring)
            if now == seen { break }
            seen = now
        }
        try sender.drainWindow()
        let received = receiver.receivedCount.load(ordering: .acquiring)
        let end = receiver.lastArrival.load(ordering: .acquiring)
        receiver.expectedCount.store(Int.max, ordering: .sequentiallyConsistent)
        return (received, received == 0 ? .nan : Double(end &- start) / 1e9)
    }

    func close() {
        sender.close()
        receiver.close()
    }
}
