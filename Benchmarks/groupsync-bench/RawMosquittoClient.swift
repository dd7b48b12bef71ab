import CMosquitto
import Dispatch
import Foundation
import MQTT
import Synchronization

/// One MQTT connection driven directly through libmosquitto's C API — the baseline GroupSync is compared
/// with. No Swift layer of the project is involved: `mosquitto_new`, `MOSQ_OPT_TCP_NODELAY`,
/// `mosquitto_loop_start` (libmosquitto's own network thread), `mosquitto_publish`, and C callbacks that
/// hand a message over to the application thread with a semaphore (or just count it), optionally after
/// an ``onMessage`` hook that sees the message on libmosquitto's network thread (late join's responder
/// and newcomer).
///
/// `@unchecked Sendable` is sound because: `handle` is a `let` set in `init` and destroyed only in
/// `deinit`, after `close()` joined libmosquitto's network thread (`mosquitto_loop_stop`), so no callback
/// runs any more and nothing else can reference `self`; libmosquitto, once `mosquitto_loop_start` runs its
/// thread, is safe for `mosquitto_publish`/`mosquitto_subscribe`/`mosquitto_disconnect` from any thread;
/// every mutable Swift state is an `Atomic` or a `DispatchSemaphore`, both thread-safe; the remaining
/// properties are immutable (``onMessage`` is a `@Sendable` closure).
final class RawMosquittoClient: @unchecked Sendable {
    enum Failure: Error, CustomStringConvertible {
        case library(String, Int32)
        case timeout(String)
        var description: String {
            switch self {
            case let .library(call, rc): return "\(call) failed: \(String(cString: mosquitto_strerror(rc)))"
            case let .timeout(what): return "raw libmosquitto: \(what) timed out"
            }
        }
    }

    private let handle: OpaquePointer
    private let connected = DispatchSemaphore(value: 0)
    private let subscribed = DispatchSemaphore(value: 0)
    /// Signalled by the message callback: a message waits for the application thread.
    let inbox = DispatchSemaphore(value: 0)
    /// Sequence number (first 8 bytes of the payload) of the last message received.
    let lastSequence = Atomic<Int>(-1)
    let receivedCount = Atomic<Int>(0)
    let lastArrival = Atomic<UInt64>(0)
    /// When `receivedCount` reaches this, `allReceived` is signalled.
    let expectedCount = Atomic<Int>(Int.max)
    let allReceived = DispatchSemaphore(value: 0)
    /// One permit per publish that may be in flight: taken before `mosquitto_publish`, returned by the
    /// publish callback (QoS 0: written to the socket; QoS 1: PUBACK received).
    let window: DispatchSemaphore
    let windowSize: Int
    /// Whether the message callback signals `inbox` (ping-pong) or only counts (throughput).
    let handsOver: Bool
    /// Runs in the message callback, on libmosquitto's network thread, with the arrival time, before the
    /// message is counted. It must not block (the network thread reads nothing meanwhile); it may
    /// publish (libmosquitto queues it and writes it once the callback returns).
    typealias MessageHook = @Sendable (RawMosquittoClient, UnsafePointer<mosquitto_message>, _ arrival: UInt64) -> Void
    let onMessage: MessageHook?

    init(clientID: String, windowSize: Int = 1, handsOver: Bool, onMessage: MessageHook? = nil) throws {
        guard let handle = mosquitto_new(clientID, true, nil) else { throw Failure.library("mosquitto_new", MOSQ_ERR_NOMEM.rawValue) }
        self.handle = handle
        self.windowSize = windowSize
        self.window = DispatchSemaphore(value: windowSize)
        self.handsOver = handsOver
        self.onMessage = onMessage
        mosquitto_user_data_set(handle, Unmanaged.passUnretained(self).toOpaque())
        try check("MOSQ_OPT_PROTOCOL_VERSION", mosquitto_int_option(handle, MOSQ_OPT_PROTOCOL_VERSION, Int32(MQTT_PROTOCOL_V5)))
        try check("MOSQ_OPT_TCP_NODELAY", mosquitto_int_option(handle, MOSQ_OPT_TCP_NODELAY, 1))
        mosquitto_connect_callback_set(handle) { _, context, _ in
            ThreadName.setCurrent("raw-net")  // libmosquitto's own thread
            RawMosquittoClient.from(context).connected.signal()
        }
        mosquitto_subscribe_callback_set(handle) { _, context, _, _, _ in
            RawMosquittoClient.from(context).subscribed.signal()
        }
        mosquitto_publish_callback_set(handle) { _, context, _ in
            RawMosquittoClient.from(context).window.signal()
        }
        mosquitto_message_callback_set(handle) { _, context, message in
            guard let message else { return }
            let client = RawMosquittoClient.from(context)
            let now = MonotonicClock.nanoseconds()
            client.onMessage?(client, message, now)
            if message.pointee.payloadlen >= 8, let payload = message.pointee.payload {
                client.lastSequence.store(Int(Int64(littleEndian: payload.loadUnaligned(as: Int64.self))), ordering: .relaxed)
            }
            client.lastArrival.store(now, ordering: .relaxed)
            let count = client.receivedCount.add(1, ordering: .acquiringAndReleasing).newValue
            if count == client.expectedCount.load(ordering: .relaxed) { client.allReceived.signal() }
            if client.handsOver { client.inbox.signal() }
        }
    }

    deinit {
        mosquitto_destroy(handle)
    }

    private static func from(_ context: UnsafeMutableRawPointer?) -> RawMosquittoClient {
        Unmanaged<RawMosquittoClient>.fromOpaque(context!).takeUnretainedValue()
    }

    private func check(_ call: String, _ rc: Int32) throws {
        guard rc == MOSQ_ERR_SUCCESS.rawValue else { throw Failure.library(call, rc) }
    }

    /// Connects (blocking TCP connect), starts libmosquitto's network thread and waits for CONNACK.
    func connect(host: String, port: Int) throws {
        try check("mosquitto_connect", mosquitto_connect(handle, host, Int32(port), 60))
        try check("mosquitto_loop_start", mosquitto_loop_start(handle))
        guard connected.wait(timeout: .now() + 5) == .success else { throw Failure.timeout("CONNACK") }
    }

    func subscribe(_ filter: String, qos: Int32) throws {
        try check("mosquitto_subscribe", mosquitto_subscribe(handle, nil, filter, qos))
        guard subscribed.wait(timeout: .now() + 5) == .success else { throw Failure.timeout("SUBACK") }
    }

    /// Hands one SUBSCRIBE for `filters` (one QoS, one set of MQTT 5 subscription options, e.g.
    /// `MQTT_SUB_OPT_NO_LOCAL`) to libmosquitto, and does not wait for the SUBACK.
    func subscribeWithoutWaiting(_ filters: [String], qos: Int32, options: Int32 = 0) throws {
        var strings = filters.map { strdup($0) }
        defer { strings.forEach { free($0) } }
        let rc = strings.withUnsafeMutableBufferPointer { buffer in
            buffer.withMemoryRebound(to: UnsafeMutablePointer<CChar>?.self) { pointers in
                mosquitto_subscribe_multiple(handle, nil, Int32(pointers.count), pointers.baseAddress, qos, options, nil)
            }
        }
        try check("mosquitto_subscribe_multiple", rc)
    }

    /// Hands a PUBLISH to libmosquitto (its thread writes it). Does not wait.
    func publish(_ topic: String, _ payload: UnsafeRawBufferPointer, qos: Int32, retain: Bool = false) throws {
        try check("mosquitto_publish", mosquitto_publish(handle, nil, topic, Int32(payload.count), payload.baseAddress, qos, retain))
    }

    /// Waits until every publish of the window completed.
    func drainWindow(timeout: Double = 10) throws {
        for taken in 0..<windowSize {
            guard window.wait(timeout: .now() + timeout) == .success else {
                for _ in 0..<taken { window.signal() }
                throw Failure.timeout("publish completions")
            }
        }
        for _ in 0..<windowSize { window.signal() }
    }

    /// Sends DISCONNECT and joins the network thread.
    func close() {
        mosquitto_disconnect(handle)
        mosquitto_loop_stop(handle, false)
    }

    /// `mosquitto_lib_init` is not thread safe: called once, first thing in `main`.
    static func initializeLibrary() {
        mosquitto_lib_init()
    }
}
