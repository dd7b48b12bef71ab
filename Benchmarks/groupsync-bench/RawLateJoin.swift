import CMosquitto
import Foundation
import MQTT  // LockedValue
import Synchronization

/// The raw libmosquitto floor of the late-join figure: the messages of a GroupSync join, sent and
/// received by raw libmosquitto clients on topics as long as GroupSync's.
///
/// Present: one raw client per GroupSync member record (100), each subscribed at QoS 1 to
/// `<prefix>/member/+` and holding its retained member record; the other retained records of the
/// session (the state record) are copied too, each at its GroupSync size. Per join, one present client —
/// the one GroupSync picked as responder for the newcomer of the same name — answers the newcomer's
/// member record from its message callback (on libmosquitto's network thread) with one QoS 1 message,
/// of a GroupSync `$catchup`'s size, to `<prefix>/to/<newcomer>/<responder>`.
///
/// The newcomer connects (not timed); timed from its first SUBSCRIBE until its message callback has
/// both its own member record back and the catch-up: one SUBSCRIBE for `member/+`, `state/+/+` and
/// `to/<newcomer>/+`, one for `all/+` (no-local), then its retained member record (QoS 1), all
/// handed to libmosquitto without waiting for any acknowledgement — GroupSync's packets, in its order.
/// No hand-over to an application thread: the transport's floor. Then it clears its record and
/// disconnects.
final class RawLateJoin: Sendable {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// A retained message of the GroupSync session, to be copied: its topic below the session prefix
    /// (`member/<participant>`, `state/<key>/<writer>`) and its payload's size.
    struct Retained: Sendable {
        let topic: String
        let size: Int
    }

    struct Sample: Sendable {
        let milliseconds: Double
        /// Until the newcomer's own member record was back (the retained replay comes before it).
        let echoMilliseconds: Double
        /// Retained messages the newcomer's callback had when both live messages were in.
        let retained: Int
    }

    let host: String
    let port: Int
    /// `groupsync/v2/r<group…>/s/<session>`: as long as GroupSync's session prefix.
    let prefix: String
    let names: [String]
    let present: [RawMosquittoClient]
    private let retained: [Retained]
    private let responder: Responder
    private let tag: String

    /// What the present clients' message hook needs: which of them answers, and with how many bytes.
    private final class Responder: Sendable {
        /// Index into `present` of the client that answers the next newcomer; -1 none.
        let index = Atomic<Int>(-1)
        let size = Atomic<Int>(0)
        /// `"x"` bytes; a catch-up is the first `size` of them.
        let padding = [UInt8](repeating: UInt8(ascii: "x"), count: 1 << 16)
        let failure = LockedValue<String?>(nil)
    }

    /// What the newcomer's message hook records.
    private final class Arrivals: Sendable {
        let memberTopic: String
        let catchUpPrefix: String
        let retained = Atomic<Int>(0)
        let echoAt = Atomic<UInt64>(0)
        let catchUpAt = Atomic<UInt64>(0)
        let retainedAtEnd = Atomic<Int>(0)
        private let live = Atomic<Int>(0)
        let both = DispatchSemaphore(value: 0)

        init(memberTopic: String, catchUpPrefix: String) {
            self.memberTopic = memberTopic
            self.catchUpPrefix = catchUpPrefix
        }

        func handle(_ message: UnsafePointer<mosquitto_message>, at time: UInt64) {
            // The retained replay: only counted (a live message is forwarded with retain 0).
            if message.pointee.retain {
                retained.add(1, ordering: .relaxed)
                return
            }
            let topic = String(cString: message.pointee.topic)
            if topic == memberTopic {
                echoAt.store(time, ordering: .relaxed)
            } else if topic.hasPrefix(catchUpPrefix) {
                catchUpAt.store(time, ordering: .relaxed)
            } else {
                return
            }
            if live.add(1, ordering: .acquiringAndReleasing).newValue == 2 {
                retainedAtEnd.store(retained.load(ordering: .relaxed), ordering: .relaxed)
                both.signal()
            }
        }
    }

    /// Connects one present client per member record of `retained`, publishes every retained record
    /// (and waits for their PUBACKs), then subscribes them, in the order of `retained`'s member records.
    /// Blocking: call it from a thread of its own (``BlockingThread``).
    init(host: String, port: Int, prefix: String, retained: [Retained]) throws {
        self.host = host
        self.port = port
        self.prefix = prefix
        self.retained = retained
        let responder = Responder()
        self.responder = responder
        let memberPrefix = "\(prefix)/member/"
        let directPrefix = "\(prefix)/to/"
        let names = retained.compactMap { $0.topic.hasPrefix("member/") ? String($0.topic.dropFirst("member/".count)) : nil }
        guard !names.isEmpty else { throw Failure(description: "raw late join: no member record to copy") }
        self.names = names
        let tag = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        self.tag = tag
        present = try names.enumerated().map { index, name in
            try RawMosquittoClient(clientID: "raw-late-\(name)-\(tag)", handsOver: false) { client, message, _ in
                // A newcomer's member record, live (not the replay, not a clear), and this client's turn.
                guard !message.pointee.retain, message.pointee.payloadlen > 0,
                    responder.index.load(ordering: .acquiring) == index
                else { return }
                let topic = String(cString: message.pointee.topic)
                guard topic.hasPrefix(memberPrefix) else { return }
                let newcomer = topic.dropFirst(memberPrefix.count)
                let size = min(responder.size.load(ordering: .acquiring), responder.padding.count)
                do {
                    try responder.padding.withUnsafeBytes { bytes in
                        try client.publish("\(directPrefix)\(newcomer)/\(name)", UnsafeRawBufferPointer(rebasing: bytes[..<size]), qos: 1)
                    }
                } catch {
                    responder.failure.withLock { $0 = "\(error)" }
                }
            }
        }
        do {
            for client in present { try client.connect(host: host, port: port) }
            try publishRetained { record in record.size }
            for client in present { try client.subscribe("\(prefix)/member/+", qos: 1) }
        } catch {
            for client in present { client.close() }
            throw error
        }
    }

    /// The client that publishes a retained record: its member's, or for a state record its writer's
    /// (the first client when the writer is not present).
    private func owner(of record: Retained) -> RawMosquittoClient {
        let last = record.topic.split(separator: "/").last.map(String.init) ?? ""
        return present[names.firstIndex(of: last) ?? 0]
    }

    /// Publishes every retained record (QoS 1), `size(record)` bytes each (0 clears it), and waits for the
    /// PUBACKs.
    private func publishRetained(size: (Retained) -> Int) throws {
        for record in retained {
            let client = owner(of: record)
            guard client.window.wait(timeout: .now() + 5) == .success else {
                throw RawMosquittoClient.Failure.timeout("PUBACK of a retained record")
            }
            let payload = [UInt8](repeating: UInt8(ascii: "x"), count: size(record))
            try payload.withUnsafeBytes { try client.publish("\(prefix)/\(record.topic)", $0, qos: 1, retain: true) }
        }
        for client in present { try client.drainWindow() }
    }

    /// One join of a fresh newcomer `name`: `memberSize` bytes of member record, answered by
    /// `present[responder]` with `catchUpSize` bytes. Blocking: call it from a thread of its own.
    func join(name: String, memberSize: Int, catchUpSize: Int, responder index: Int, timeout: Double = 5) throws -> Sample {
        let memberTopic = "\(prefix)/member/\(name)"
        let arrivals = Arrivals(memberTopic: memberTopic, catchUpPrefix: "\(prefix)/to/\(name)/")
        let newcomer = try RawMosquittoClient(clientID: "raw-late-\(name)-\(tag)", handsOver: false) { _, message, time in
            arrivals.handle(message, at: time)
        }
        defer { newcomer.close() }
        try newcomer.connect(host: host, port: port)
        responder.size.store(catchUpSize, ordering: .releasing)
        responder.index.store(index, ordering: .releasing)
        defer { responder.index.store(-1, ordering: .releasing) }
        let shared = ["\(prefix)/member/+", "\(prefix)/state/+/+", "\(prefix)/to/\(name)/+"]
        let broadcast = "\(prefix)/all/+"
        let member = [UInt8](repeating: UInt8(ascii: "x"), count: max(memberSize, 1))
        // Quiet before timing, as the GroupSync side waits for 20 ms without a message on the session.
        Thread.sleep(forTimeInterval: 0.02)
        guard newcomer.window.wait(timeout: .now() + timeout) == .success else {
            throw RawMosquittoClient.Failure.timeout("publish window")
        }

        let start = MonotonicClock.nanoseconds()
        try newcomer.subscribeWithoutWaiting(shared, qos: 1)
        try newcomer.subscribeWithoutWaiting([broadcast], qos: 1, options: Int32(MQTT_SUB_OPT_NO_LOCAL.rawValue))
        try member.withUnsafeBytes { try newcomer.publish(memberTopic, $0, qos: 1, retain: true) }
        guard arrivals.both.wait(timeout: .now() + timeout) == .success else {
            if let failure = responder.failure.withLock({ $0 }) { throw Failure(description: "raw late join: responder: \(failure)") }
            throw Failure(
                description: "raw late join \(name): echo \(arrivals.echoAt.load(ordering: .relaxed) != 0 ? "in" : "missing"), "
                    + "catch-up \(arrivals.catchUpAt.load(ordering: .relaxed) != 0 ? "in" : "missing"), \(arrivals.retained.load(ordering: .relaxed)) retained"
            )
        }
        let end = max(arrivals.echoAt.load(ordering: .relaxed), arrivals.catchUpAt.load(ordering: .relaxed))
        let sample = Sample(
            milliseconds: MonotonicClock.milliseconds(from: start, to: end),
            echoMilliseconds: MonotonicClock.milliseconds(from: start, to: arrivals.echoAt.load(ordering: .relaxed)),
            retained: arrivals.retainedAtEnd.load(ordering: .relaxed))

        // The catch-up's PUBACK gave the responder a window permit it never took: take it back.
        _ = present[index].window.wait(timeout: .now() + timeout)
        // Leave: clear the member record (once the record's own PUBACK is in), then disconnect (defer).
        guard newcomer.window.wait(timeout: .now() + timeout) == .success else {
            throw RawMosquittoClient.Failure.timeout("member record PUBACK")
        }
        try newcomer.publish(memberTopic, UnsafeRawBufferPointer(start: nil, count: 0), qos: 1, retain: true)
        try newcomer.drainWindow(timeout: timeout)
        return sample
    }

    /// Clears every retained record it published (a zero-length retained publish deletes one) and
    /// disconnects. Blocking.
    func close() {
        try? publishRetained { _ in 0 }
        for client in present { client.close() }
    }
}
