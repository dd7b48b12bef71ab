import CMosquitto
import Dispatch
import Foundation
import Synchronization

/// One broker connection through libmosquitto's public API (`mosquitto.h`): the only type that holds a
/// libmosquitto handle. Facets: `+Options` (configuration), `+Loop` (the network thread), `+Callbacks`
/// (libmosquitto's callbacks turned into ``ConnectionStateMachine`` inputs), `+Properties`.
///
/// Threading: the handle is in threaded mode (`mosquitto_threaded_set(true)`), so publish, subscribe,
/// unsubscribe and disconnect may be called from any thread; they only queue a packet. Socket I/O —
/// connect, read, write, keepalive — runs under `io`: on the network thread this type starts, and on a
/// publishing thread that writes its own packet (``writeFromCaller()``). libmosquitto calls back on
/// whichever thread runs the step: the network thread, or a publisher for the publish callback of a QoS 0
/// message it wrote and the disconnect callback of a write that failed. A callback updates the state
/// machine under `state`'s lock, then — with the lock released — resumes continuations and yields to
/// sequences; neither runs user code synchronously nor blocks, so the network thread never waits on the
/// user.
///
/// `@unchecked Sendable` is sound because: `handle` is set once in `init` and destroyed only in `deinit`,
/// when no thread can reference `self` any more (the network thread holds a strong reference while it
/// runs); libmosquitto serialises its own state for the calls made from other threads (threaded mode), and
/// `io` serialises its socket I/O; every Swift mutable state lives in `state` (a ``LockedValue``)
/// or in atomics; `wake` is immutable (see ``WakeChannel``).
final class MosquittoConnection: @unchecked Sendable {
    let configuration: MQTTClient.Configuration
    let state: LockedValue<ConnectionStateMachine>
    let handle: OpaquePointer
    /// Wakes the network thread while it waits to reconnect.
    let wakeup = DispatchSemaphore(value: 0)
    /// Wakes the network thread out of `poll()`.
    let wake: WakeChannel
    /// Held by whichever thread is inside libmosquitto's socket I/O. Publishing threads only ever try it
    /// (``writeFromCaller()``), so they never wait on the network.
    let io = LockedValue(())
    /// Whether a publishing thread may write its own packet: never over TLS (an OpenSSL connection must
    /// not read on one thread while another writes), and no longer once the network thread stops.
    let callerWrites: Atomic<Bool>
    private let nextID = Atomic<UInt64>(1)
    let droppedMessages = Atomic<Int>(0)
    let expireSessionOnStop = Atomic<Bool>(false)
    let aborting = Atomic<Bool>(false)
    /// Message ID of the last UNSUBACK received (read by the network thread while stopping).
    let lastUnsubscribeAck = Atomic<Int32>(0)
    init(configuration: MQTTClient.Configuration) throws(MQTTError) {
        try configuration.validate()
        _ = MosquittoConnection.libraryInitialized
        guard let handle = mosquitto_new(configuration.clientID, configuration.cleanStart, nil) else {
            throw .invalidConfiguration("libmosquitto could not create a client (clean start off needs a client ID)")
        }
        do {
            wake = try WakeChannel()
        } catch {
            mosquitto_destroy(handle)
            throw error
        }
        self.configuration = configuration
        self.handle = handle
        self.callerWrites = Atomic(configuration.tls == nil)
        self.state = LockedValue(
            ConnectionStateMachine(
                backoff: configuration.reconnect, servers: configuration.servers, retainedMessages: configuration.retainedMessages))
        mosquitto_user_data_set(handle, Unmanaged.passUnretained(self).toOpaque())
        try configure()  // on failure `deinit` destroys the handle: `self` is initialised
        setCallbacks()
    }

    deinit {
        mosquitto_destroy(handle)
    }

    /// `mosquitto_lib_init` must run once per process before any client exists (after OpenSSL's own
    /// set-up, see ``OpenSSLLibrary``).
    private static let libraryInitialized: Void = {
        OpenSSLLibrary.initializeOnce()
        mosquitto_lib_init()
    }()

    func makeID() -> UInt64 { nextID.add(1, ordering: .relaxed).newValue }

    static func error(_ rc: Int32, topic: String?) -> MQTTError {
        let message = String(cString: mosquitto_strerror(rc))
        switch mosq_err_t(rawValue: rc) {
        case MOSQ_ERR_NO_CONN: return .notConnected
        case MOSQ_ERR_CONN_LOST: return .connectionLost
        case MOSQ_ERR_OVERSIZE_PACKET, MOSQ_ERR_PAYLOAD_SIZE: return .payloadTooLarge(size: -1, limit: -1)
        case MOSQ_ERR_ACL_DENIED: return .notAuthorized(topic: topic ?? "")
        case MOSQ_ERR_RETAIN_NOT_SUPPORTED: return .retainUnavailable
        case MOSQ_ERR_TLS, MOSQ_ERR_TLS_HANDSHAKE: return .tls(detail: message)
        case MOSQ_ERR_MALFORMED_UTF8: return .invalidTopic(topic ?? "")
        default: return .library(code: Int(rc), message: message)
        }
    }

    // MARK: - Calls from any thread

    /// Hands a PUBLISH to libmosquitto, and writes it at once if `writeNow` (see ``writeFromCaller()``).
    /// Returns its message ID and the connection generation it was sent on.
    func publish(
        topic: String, payload: UnsafeRawBufferPointer, qos: QoS, retain: Bool, properties: MQTTProperties, writeNow: Bool
    ) -> Result<(mid: Int32, generation: Int), MQTTError> {
        // Fixed header (≤ 5) + topic length prefix + topic + packet ID + properties (upper bound).
        let size = 5 + 2 + topic.utf8.count + 2 + payload.count + (properties.isEmpty ? 1 : 64)
        let generation: Int
        switch update({ $0.onPublishRequested(qos: qos, retain: retain, size: size) }) {
        case let .publish(current)?: generation = current
        case let .refuse(error)?: return .failure(error)
        case .subscribe?, nil: preconditionFailure("a publish request is answered with a generation or a refusal")
        }
        var list: OpaquePointer? = nil
        defer { mosquitto_property_free_all(&list) }
        if configuration.protocolVersion == .v5 {
            MosquittoConnection.add(properties, to: &list)
        }
        var mid: Int32 = 0
        let rc = mosquitto_publish_v5(
            handle, &mid, topic, Int32(payload.count), payload.baseAddress, qos.rawValue, retain, list)
        switch mosq_err_t(rawValue: rc) {
        case MOSQ_ERR_SUCCESS:
            if writeNow { writeFromCaller() }
            return .success((mid, generation))
        case MOSQ_ERR_NO_CONN where qos != .atMostOnce:
            // libmosquitto keeps QoS ≥ 1 messages queued and sends them once reconnected.
            return .success((mid, generation))
        default:
            return .failure(MosquittoConnection.error(rc, topic: topic))
        }
    }

    /// Sends one SUBSCRIBE for filters that share their QoS and options. Returns the message ID, or nil
    /// when not connected (the next connection subscribes them).
    func subscribe(_ requests: [TopicSubscription]) -> Result<Int32?, MQTTError> {
        guard let first = requests.first else { return .success(nil) }
        var mid: Int32 = 0
        let options = configuration.protocolVersion == .v5 ? first.optionBits : 0
        let rc = MosquittoConnection.withCStrings(requests.map(\.filter)) { count, strings in
            mosquitto_subscribe_multiple(handle, &mid, count, strings, first.qos.rawValue, options, nil)
        }
        switch mosq_err_t(rawValue: rc) {
        case MOSQ_ERR_SUCCESS:
            wake.signal()
            return .success(mid)
        case MOSQ_ERR_NO_CONN: return .success(nil)
        default: return .failure(MosquittoConnection.error(rc, topic: first.filter))
        }
    }

    /// Sends one UNSUBSCRIBE for `filters` without waiting for UNSUBACK. Nothing to do when disconnected:
    /// the next connection only restores live filters.
    func unsubscribe(_ filters: [String]) {
        guard !filters.isEmpty else { return }
        _ = MosquittoConnection.withCStrings(filters) { count, strings in mosquitto_unsubscribe_multiple(handle, nil, count, strings, nil) }
        wake.signal()
    }

    /// In threaded mode `mosquitto_publish_v5` only queues the packet. The publishing thread then writes
    /// it itself if it can take `io` at once — one `send()`, where waking the network thread to write it
    /// costs a wake-up and a context switch on each side —, and otherwise (the network thread or another
    /// publisher is in libmosquitto's I/O, TLS, stopping) wakes the network thread, which writes whatever
    /// is queued before it waits. A write that fails has closed the socket and reported the loss (the
    /// disconnect callback, on this thread); the network thread is woken to see the socket gone. Callbacks
    /// run in the write: see ``MQTTClient/enqueuePublish(to:payload:qos:retain:properties:writeNow:)``.
    func writeFromCaller() {
        let written =
            callerWrites.load(ordering: .relaxed)
            ? io.withLockIfAvailable { _ in
                mosquitto_socket(handle) == -1 ? MOSQ_ERR_NO_CONN.rawValue : mosquitto_loop_write(handle, 1)
            } : nil
        if written != MOSQ_ERR_SUCCESS.rawValue || mosquitto_want_write(handle) { wake.signal() }
    }

    /// Asks the network thread to stop as `stop` says (the state machine is `stopping` already). For a
    /// DISCONNECT the thread sends it itself, so that the broker does not publish the will: calling
    /// `mosquitto_disconnect` from here would let the network thread read a packet in the disconnected
    /// state, which libmosquitto treats as a protocol error and answers by closing the socket without
    /// DISCONNECT. For an abort the thread sends nothing and shuts the socket down as it ends.
    func requestStop(_ stop: ConnectionStateMachine.Stop) {
        switch stop {
        case .disconnect: break
        case .expireSession: expireSessionOnStop.store(true, ordering: .releasing)
        case .abort: aborting.store(true, ordering: .releasing)
        }
        wakeup.signal()
        wake.signal()
    }

    /// A filter nobody subscribes to, unsubscribed when stopping (see `sendDisconnect`) so that the
    /// UNSUBSCRIBE that quiesces the connection is never empty: it changes nothing on the broker.
    static let wakeFilter = "groupsync-client/wake"

    /// Shuts the socket down under the client as a crash would (no DISCONNECT is sent): libmosquitto
    /// then reads the end of the connection and reports it lost. For an abort, and for tests that cut a
    /// connection (the client then reconnects). Under `io`, so that the descriptor is the connection's
    /// own, not one closed meanwhile and reused by another.
    func closeSocketAbruptly() {
        io.withLock { _ in
            let socket = mosquitto_socket(handle)
            if socket != -1 { shutdown(socket, Int32(SHUT_RDWR)) }
        }
    }

    /// Feeds one input to the state machine under its lock, then runs its action with the lock released;
    /// returns the input's reply, if it has one.
    @discardableResult
    func update(_ input: (inout ConnectionStateMachine) -> ConnectionStateMachine.Action) -> ConnectionStateMachine.Reply? {
        MosquittoConnection.perform(state.withLock(input), on: self)
    }

    /// Runs `action`'s effects in the order the machine returned them, with its lock released; returns the
    /// reply, which is the caller's to act on. `connection` is nil only for the network thread's end
    /// (``ConnectionStateMachine/onStopped()``): it resumes its waiters after letting go of the connection,
    /// and that action asks nothing of it.
    @discardableResult
    static func perform(_ action: ConnectionStateMachine.Action, on connection: MosquittoConnection?) -> ConnectionStateMachine.Reply? {
        var reply: ConnectionStateMachine.Reply?
        for effect in action {
            switch effect {
            case let .resumeConnect(waiter, result): waiter.resume(returning: result)
            case let .resumePublish(.task(continuation), result): continuation.resume(returning: result)
            case let .resumePublish(.handler(handler), result): handler(result)
            case let .resumeSubscribe(waiter, result): waiter.resume(returning: result)
            case let .resumeStop(waiter): waiter.resume()
            case let .announce(event, listeners): for listener in listeners { listener.yield(event) }
            case let .tellConnected(sink, sessionPresent): sink.connected?(sessionPresent)
            case let .restore(request): connection!.restore(request)
            case let .deliver(message, sinks): connection!.deliver(message, to: sinks)
            case let .endBurst(sink): sink.endOfBurst?()
            case let .finishSubscription(sink): sink.finish()
            case let .finishListeners(listeners): for listener in listeners { listener.finish() }
            case .startNetworkThread: connection!.startNetworkThread()
            case let .stopNetworkThread(stop): connection!.requestStop(stop)
            case let .unsubscribe(filters): connection!.unsubscribe(filters)
            case let .reply(answer): reply = answer
            }
        }
        return reply
    }

    /// Calls `body` with `strings` as the C array libmosquitto's `…_multiple` functions take.
    static func withCStrings(
        _ strings: [String], _ body: (Int32, UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32
    ) -> Int32 {
        var copies = strings.map { strdup($0) }
        defer { copies.forEach { free($0) } }
        return copies.withUnsafeMutableBufferPointer { buffer in
            buffer.withMemoryRebound(to: UnsafeMutablePointer<CChar>?.self) { body(Int32($0.count), $0.baseAddress) }
        }
    }
}
