import CMosquitto
import Dispatch
import Foundation
import Synchronization

/// The boundary with libmosquitto: the only file that holds its handle, sets its callbacks and runs its
/// network thread.
///
/// The network thread waits with `poll()` — on the socket and on a ``WakeChannel`` — and drives
/// libmosquitto with `mosquitto_loop_read`, `mosquitto_loop_write` and `mosquitto_loop_misc`, not with
/// `mosquitto_loop`, whose `select()` refuses any descriptor ≥ `FD_SETSIZE` (1024): with three
/// descriptors per connection, that capped a process at about 340 connections.
///
/// Threading: libmosquitto calls back on the network thread this class starts — and on a publishing
/// thread that writes its packet itself (``writeFromCaller(preWake:)``: the publish callback of a QoS 0 message,
/// the disconnect callback of a failed write). A callback only updates ``ConnectionStateMachine`` under
/// `state`'s lock, then — with the lock released — resumes continuations and yields to `AsyncStream`s.
/// Neither runs user code synchronously (resumed tasks run on their own executors) and neither blocks, so
/// the network thread never waits on the user.
///
/// `@unchecked Sendable` is sound because: `handle` is set once in `init` and destroyed only in `deinit`,
/// when no thread can reference `self` any more (the network thread holds a strong reference while it
/// runs); libmosquitto is thread-safe for publish, subscribe, unsubscribe and disconnect from any thread
/// once `mosquitto_threaded_set(true)` is set; its socket I/O (connect, reconnect, the loop functions)
/// runs under `io`, by the network thread or by a publisher that could take it; every Swift mutable
/// state lives in `state` (a ``LockedValue``) or in atomics; `wake` is immutable (its descriptors are
/// read and written with system calls, which are thread-safe).
final class Mosquitto: @unchecked Sendable {
    let configuration: MQTTClient.Configuration
    let state: LockedValue<ConnectionStateMachine>
    private let handle: OpaquePointer
    /// Wakes the network thread out of `poll()` (see ``WakeChannel``).
    let wake: WakeChannel
    /// Wakes the network thread while it waits to reconnect.
    private let wakeup = DispatchSemaphore(value: 0)
    private let nextID = Atomic<UInt64>(1)
    let droppedMessages = Atomic<Int>(0)
    private let expireSessionOnStop = Atomic<Bool>(false)
    private let aborting = Atomic<Bool>(false)
    /// Message ID of the last UNSUBACK received (read by the network thread while stopping).
    private let lastUnsubscribeAck = Atomic<Int32>(0)
    /// Sinks that received messages of the current burst and want to hear of its end. Only the network
    /// thread touches it (in `didReceive` and `run`).
    private let burst = LockedValue(Burst())
    /// Held by whichever thread is inside libmosquitto's socket I/O: the network thread around each
    /// connect, read, write and keepalive step, a publishing thread around its direct write (see
    /// ``writeFromCaller(preWake:)``). Publishing threads only ever try it, so they never wait on the network.
    /// The final DISCONNECT is written without it: direct writes are off by then (`directWrites`).
    ///
    /// A plain `pthread_mutex_t` (``LockedValue``), not `Synchronization.Mutex`, which on Linux spins
    /// about a thousand times before it sleeps (≈ 4,600 instructions per contended lock under
    /// callgrind). The network thread finds `io` held just when a publisher is writing — 5–20 µs of
    /// loopback TCP — and on two vCPUs that spin took the CPU the broker needed (finding AM: throughput
    /// at QoS 0 0.79× → 0.90× raw libmosquitto's, eight alternating pairs; latency unchanged).
    private let io = LockedValue(())
    /// Whether a publishing thread may write its packet itself (see ``writeFromCaller(preWake:)``): not over TLS,
    /// and no longer once the network thread has begun to disconnect.
    private let directWrites: Atomic<Bool>
    /// The network thread's `pthread_self()`, 0 before it starts: a publish it makes from inside a
    /// callback (a session answering a newcomer) must not try `io`, which it holds already.
    private let networkThread = Atomic<UInt>(0)
    /// Direct writes attempted by publishing threads, and those that failed (for tests).
    let callerWrites = Atomic<Int>(0)
    let callerWriteFailures = Atomic<Int>(0)
    /// When this connection last published (`DispatchTime` nanoseconds); see ``writeFromCaller(preWake:)``.
    private let lastPublish = Atomic<UInt64>(0)

    private struct Burst {
        var sinks: [MessageSink] = []
        var messages = 0
    }

    /// A burst ends after this many messages even if more are waiting, so that a continuous stream
    /// never holds back what the first messages changed.
    static let maximumBurst = 64

    /// - Parameter wakeSource: tests choose ``WakeChannel/Source/ownPipeOnly`` to run the fallback path.
    init(configuration: MQTTClient.Configuration, wakeSource: WakeChannel.Source = .silencedLibraryPairIfVerified) throws(MQTTError) {
        try configuration.validate()
        MosquittoLibrary.initializeOnce()
        guard let handle = mosquitto_new(configuration.clientID, configuration.cleanStart, nil) else {
            throw .invalidConfiguration("libmosquitto could not create a client (clean start off needs a client ID)")
        }
        guard let wake = WakeChannel.make(for: handle, source: wakeSource) else {
            mosquitto_destroy(handle)
            throw .library(code: Int(MOSQ_ERR_ERRNO.rawValue), message: "no pipe for the network thread: \(String(cString: strerror(errno)))")
        }
        self.configuration = configuration
        self.handle = handle
        self.wake = wake
        self.directWrites = Atomic(configuration.tls == nil)
        self.state = LockedValue(ConnectionStateMachine(backoff: configuration.reconnect, host: configuration.host, port: configuration.port))
        mosquitto_user_data_set(handle, Unmanaged.passUnretained(self).toOpaque())
        do {
            try configure()
        } catch {
            wake.close()
            mosquitto_destroy(handle)
            throw error
        }
    }

    deinit {
        wake.close()
        mosquitto_destroy(handle)
    }

    func makeID() -> UInt64 { nextID.add(1, ordering: .relaxed).newValue }

    /// The connection's socket descriptor, -1 while there is none.
    var socketDescriptor: Int32 { mosquitto_socket(handle) }

    // MARK: - Set-up

    private func configure() throws(MQTTError) {
        try check(mosquitto_threaded_set(handle, true))
        let version = configuration.protocolVersion == .v5 ? MQTT_PROTOCOL_V5 : MQTT_PROTOCOL_V311
        try check(mosquitto_int_option(handle, MOSQ_OPT_PROTOCOL_VERSION, Int32(version)))
        // Nagle's algorithm holds small packets back ~40 ms per hop: a QoS 1 round trip on loopback took
        // 88 ms with it and 0.16 ms without.
        try check(mosquitto_int_option(handle, MOSQ_OPT_TCP_NODELAY, 1))
        // Receive Maximum: why 65,535 by default, and what it costs, is on `Configuration.receiveMaximum`.
        try check(mosquitto_int_option(handle, MOSQ_OPT_RECEIVE_MAXIMUM, Int32(max(configuration.receiveMaximum, 1))))
        if configuration.username != nil || configuration.password != nil {
            try check(mosquitto_username_pw_set(handle, configuration.username, configuration.password))
        }
        if let tls = configuration.tls {
            let rc = mosquitto_tls_set(handle, tls.caFile, nil, tls.certificateFile, tls.keyFile, nil)
            if rc != MOSQ_ERR_SUCCESS.rawValue {
                throw .invalidConfiguration("TLS files unusable (\(String(cString: mosquitto_strerror(rc)))): CA \(tls.caFile)")
            }
            try check(mosquitto_tls_opts_set(handle, 1 /* SSL_VERIFY_PEER */, nil, nil))
            try check(mosquitto_tls_insecure_set(handle, !tls.verifyHostname))
        }
        if let will = configuration.will {
            var properties: OpaquePointer? = nil
            if will.delayInterval > 0 {
                mosquitto_property_add_int32(&properties, Int32(MQTT_PROP_WILL_DELAY_INTERVAL.rawValue), will.delayInterval)
            }
            let rc = will.payload.withUnsafeBytes { bytes in
                mosquitto_will_set_v5(handle, will.topic, Int32(bytes.count), bytes.baseAddress, will.qos.rawValue, will.retain, properties)
            }
            if rc != MOSQ_ERR_SUCCESS.rawValue {
                mosquitto_property_free_all(&properties)  // on success libmosquitto owns them
                throw .invalidConfiguration("will rejected: \(String(cString: mosquitto_strerror(rc)))")
            }
        }
        if getenv("GROUPSYNC_MQTT_DEBUG") != nil {  // not ProcessInfo.environment: it copies the whole environment (~350,000 instructions)
            // Diagnostics on standard error; only when asked for, since it runs on the network thread.
            mosquitto_log_callback_set(handle) { _, _, level, text in
                if let text { FileHandle.standardError.write(Data("[libmosquitto \(level)] \(String(cString: text))\n".utf8)) }
            }
        }
        mosquitto_connect_v5_callback_set(handle) { _, context, rc, flags, properties in
            Mosquitto.from(context).didConnect(rc: rc, flags: flags, properties: properties)
        }
        mosquitto_disconnect_v5_callback_set(handle) { _, context, rc, _ in
            Mosquitto.from(context).didDisconnect(rc: rc)
        }
        mosquitto_publish_v5_callback_set(handle) { _, context, mid, reasonCode, _ in
            Mosquitto.from(context).didPublish(mid: mid, reasonCode: reasonCode)
        }
        mosquitto_subscribe_v5_callback_set(handle) { _, context, mid, count, granted, _ in
            let codes = (0..<Int(count)).map { Int(granted![$0]) }
            Mosquitto.from(context).didSubscribe(mid: mid, codes: codes)
        }
        mosquitto_unsubscribe_v5_callback_set(handle) { _, context, mid, _ in
            Mosquitto.from(context).lastUnsubscribeAck.store(mid, ordering: .releasing)
        }
        mosquitto_message_v5_callback_set(handle) { _, context, message, properties in
            guard let message else { return }
            Mosquitto.from(context).didReceive(message.pointee, properties: properties)
        }
    }

    private static func from(_ context: UnsafeMutableRawPointer?) -> Mosquitto {
        Unmanaged<Mosquitto>.fromOpaque(context!).takeUnretainedValue()
    }

    private func check(_ rc: Int32) throws(MQTTError) {
        guard rc == MOSQ_ERR_SUCCESS.rawValue else { throw Mosquitto.error(rc, topic: nil) }
    }

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

    // MARK: - Network thread

    /// Starts the network thread. It runs until `disconnect` (or a failed first connect) stops it.
    func startNetworkThread() {
        let thread = Thread { [self] in self.run() }
        #if canImport(Darwin)
        thread.name = "mqtt:\(configuration.clientID)"  // Darwin passes it on; Linux: `ThreadName`
        #endif
        thread.stackSize = 512 * 1024
        thread.start()
    }

    private func run() {
        ThreadName.setCurrent("mqtt:" + configuration.clientID)
        networkThread.store(UInt(pthread_self()), ordering: .relaxed)
        var isFirstConnect = true
        var lastKeepaliveCheck: UInt64 = 0
        loop: while true {
            switch state.withLock({ $0.nextStep }) {
            case .exit:
                break loop
            case let .connect(first, notBefore):
                if let notBefore, !waitUntil(notBefore) { continue }
                let rc = io.withLock { _ in
                    let rc = first && isFirstConnect ? connectFirst() : mosquitto_reconnect(handle)
                    // Still under `io`: a publisher's failed write cannot report this socket lost before
                    // the state machine knows it is open.
                    if rc == MOSQ_ERR_SUCCESS.rawValue { state.withLock { $0.onSocketOpened() } }
                    return rc
                }
                isFirstConnect = false
                if rc != MOSQ_ERR_SUCCESS.rawValue {
                    let error = connectError(rc)
                    let effects = state.withLock { $0.onConnectFailed(error, now: .now, random: .random(in: 0..<1)) }
                    effects.resumeAll()
                }
            case .loop:
                // Wake-ups are events (a packet queued, the socket closed), so the timeout only paces
                // keepalive: `mosquitto_loop_misc` runs about once a second (at most 1.1 s apart) when idle.
                let rc = serviceConnection(timeout: 1000, lastKeepaliveCheck: &lastKeepaliveCheck)
                endBurstUnlessMoreIsWaiting()
                if rc != MOSQ_ERR_SUCCESS.rawValue && mosquitto_socket(handle) == -1 {
                    // The socket closed without the disconnect callback (e.g. a failed TLS read).
                    let reason = String(cString: mosquitto_strerror(rc))
                    let cause = connectError(rc)
                    let effects = state.withLock { machine -> ConnectionStateMachine.Effects in
                        guard machine.phase == .connected || machine.phase == .connecting else { return .init() }
                        return machine.onConnectionLost(reason: reason, cause: cause, now: .now, random: .random(in: 0..<1))
                    }
                    effects.resumeAll()
                }
            }
        }
        if mosquitto_socket(handle) != -1 && !aborting.load(ordering: .acquiring) {
            sendDisconnect()
        }
        let effects = state.withLock { $0.onStopped() }
        effects.resumeAll()
    }

    /// Tells the sinks of the messages just handled that the burst is over, unless more bytes are already
    /// waiting on the socket (they belong to the same burst and are read at once).
    private func endBurstUnlessMoreIsWaiting() {
        let ended = burst.withLock { burst -> [MessageSink] in
            guard !burst.sinks.isEmpty else { return [] }
            if burst.messages < Mosquitto.maximumBurst, case let socket = mosquitto_socket(handle), socket != -1 {
                var waiting: Int32 = 0
                if ioctl(socket, UInt(FIONREAD), &waiting) == 0, waiting > 0 { return [] }
            }
            defer { burst = Burst() }
            return burst.sinks
        }
        for sink in ended { sink.endOfBurst?() }
    }

    /// Sleeps until `instant`; returns false if woken early (stop requested or spurious signal).
    private func waitUntil(_ instant: ContinuousClock.Instant) -> Bool {
        let remaining = instant - .now
        guard remaining > .zero else { return true }
        let (seconds, attoseconds) = remaining.components
        let nanoseconds = Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
        _ = wakeup.wait(timeout: .now() + .nanoseconds(nanoseconds))
        return ContinuousClock.now >= instant
    }

    /// `mosquitto_loop_misc` only checks the keepalive (it sends PINGREQ, or gives up on a missing
    /// PINGRESP, in whole seconds): once per this many nanoseconds is plenty against a keepalive of at
    /// least 5 s, and spares every other turn of the loop `io` and libmosquitto's own lock and clock read.
    static let keepaliveCheckInterval: UInt64 = 100_000_000

    /// One turn of the open connection, in place of `mosquitto_loop`: waits up to `timeout` milliseconds
    /// for the socket or a wake-up, then lets libmosquitto read, write and — if ``keepaliveCheckInterval``
    /// passed since `lastKeepaliveCheck` (`DispatchTime` nanoseconds, updated) — keep the connection
    /// alive. Returns libmosquitto's result, like `mosquitto_loop`.
    private func serviceConnection(timeout: Int32, lastKeepaliveCheck: inout UInt64) -> Int32 {
        let socket = mosquitto_socket(handle)
        guard socket != -1 else { return MOSQ_ERR_NO_CONN.rawValue }
        let buffered = tlsHasBufferedData()
        guard let revents = waitForEvents(on: socket, timeout: buffered ? 0 : timeout) else {
            return errno == EINTR ? MOSQ_ERR_SUCCESS.rawValue : MOSQ_ERR_ERRNO.rawValue
        }
        // Read on data, end of file or error (libmosquitto then reports the loss), on bytes OpenSSL holds
        // already, and — TLS only — when writable: a handshake that wants to write continues in a read.
        let readable = revents & Int16(POLLIN | POLLHUP | POLLERR | POLLNVAL) != 0
        if readable || buffered || (configuration.tls != nil && revents & Int16(POLLOUT) != 0) {
            let rc = withSocket(socket) { mosquitto_loop_read(handle, 1) }
            if rc != MOSQ_ERR_SUCCESS.rawValue || mosquitto_socket(handle) == -1 { return rc }
        }
        // Write whatever is queued now, without waiting for POLLOUT: the socket is non-blocking, and a
        // packet queued by another thread (the wake-up above) should leave in this turn.
        if mosquitto_want_write(handle) {
            let rc = withSocket(socket) { mosquitto_loop_write(handle, 1) }
            if rc != MOSQ_ERR_SUCCESS.rawValue || mosquitto_socket(handle) == -1 { return rc }
        }
        let now = DispatchTime.now().uptimeNanoseconds
        guard now &- lastKeepaliveCheck >= Mosquitto.keepaliveCheckInterval else { return MOSQ_ERR_SUCCESS.rawValue }
        lastKeepaliveCheck = now
        return withSocket(socket) { mosquitto_loop_misc(handle) }
    }

    /// Runs one libmosquitto step under `io` if the connection still has the socket that was polled.
    /// A publisher whose write failed may have closed it meanwhile (and reported the loss); libmosquitto
    /// would report it a second time.
    private func withSocket(_ socket: Int32, _ step: () -> Int32) -> Int32 {
        io.withLock { _ in mosquitto_socket(handle) == socket ? step() : MOSQ_ERR_NO_CONN.rawValue }
    }

    /// Polls `socket` — for writing too while libmosquitto has something to send — and the wake-up
    /// channel, which it drains. Returns the socket's events, or nil if `poll()` failed (see `errno`).
    private func waitForEvents(on socket: Int32, timeout: Int32) -> Int16? {
        let events = mosquitto_want_write(handle) ? Int16(POLLIN | POLLOUT) : Int16(POLLIN)
        var descriptors = (
            pollfd(fd: socket, events: events, revents: 0), pollfd(fd: wake.descriptor, events: Int16(POLLIN), revents: 0))
        let ready = withUnsafeMutablePointer(to: &descriptors) {
            $0.withMemoryRebound(to: pollfd.self, capacity: 2) { poll($0, 2, timeout) }
        }
        guard ready >= 0 else { return nil }
        if descriptors.1.revents != 0 { wake.drain() }
        return descriptors.0.revents
    }

    /// Whether OpenSSL holds received bytes that `poll()` cannot see any more (decrypted from a record
    /// that also carried the packets just read). `mosquitto_loop_read` reads them only while it goes on
    /// reading, and it stops early whenever `errno` is EAGAIN after a packet: left by a full wake-up pair
    /// (see ``WakeChannel``) or by whatever ran in a callback. `PollLoopTests` sends CONNACK and 400 QoS 1
    /// PUBLISH in one TLS record: without this check a client received 157 of them, or none, and then
    /// nothing until the broker sent something else.
    private func tlsHasBufferedData() -> Bool {
        guard configuration.tls != nil, let pending = MosquittoLibrary.sslPending,
              let ssl = mosquitto_ssl_get(handle) else { return false }
        return pending(ssl) > 0
    }

    private func connectFirst() -> Int32 {
        var properties: OpaquePointer? = nil
        defer { mosquitto_property_free_all(&properties) }
        if configuration.protocolVersion == .v5, let expiry = configuration.sessionExpiry {
            mosquitto_property_add_int32(&properties, Int32(MQTT_PROP_SESSION_EXPIRY_INTERVAL.rawValue), expiry)
        }
        return mosquitto_connect_bind_v5(
            handle, configuration.host, Int32(configuration.port), Int32(configuration.keepAlive), nil, properties)
    }

    private func connectError(_ rc: Int32) -> MQTTError {
        switch mosq_err_t(rawValue: rc) {
        case MOSQ_ERR_ERRNO:
            return .unreachable(host: configuration.host, port: configuration.port, detail: String(cString: strerror(errno)))
        case MOSQ_ERR_EAI, MOSQ_ERR_LOOKUP:
            return .unreachable(host: configuration.host, port: configuration.port, detail: "host name lookup failed")
        case MOSQ_ERR_TLS, MOSQ_ERR_TLS_HANDSHAKE:
            return .tls(detail: String(cString: mosquitto_strerror(rc)))
        case MOSQ_ERR_KEEPALIVE:
            // libmosquitto waits for the CONNACK as long as the keepalive, then gives up with this code.
            return .unreachable(
                host: configuration.host, port: configuration.port,
                detail: "it took the connection but sent no CONNACK within the keepalive (\(configuration.keepAlive) s): "
                    + "it may be overloaded; a longer keepAlive waits longer")
        default:
            return .unreachable(
                host: configuration.host, port: configuration.port, detail: "\(String(cString: mosquitto_strerror(rc))) (libmosquitto \(rc))")
        }
    }

    // MARK: - Callbacks (network thread; also a publisher's, see `writeFromCaller`)

    private func didConnect(rc: Int32, flags: Int32, properties: OpaquePointer?) {
        var limits = ConnectionStateMachine.BrokerLimits()
        var byte: UInt8 = 1
        if mosquitto_property_read_byte(properties, Int32(MQTT_PROP_RETAIN_AVAILABLE.rawValue), &byte, false) != nil {
            limits.retainAvailable = byte != 0
        }
        var size: UInt32 = 0
        if mosquitto_property_read_int32(properties, Int32(MQTT_PROP_MAXIMUM_PACKET_SIZE.rawValue), &size, false) != nil {
            limits.maximumPacketSize = Int(size)
        }
        let reason = configuration.protocolVersion == .v5
            ? String(cString: mosquitto_reason_string(rc)) : String(cString: mosquitto_connack_string(rc))
        let effects = state.withLock {
            $0.onConnack(
                reasonCode: Int(rc), reason: reason, sessionPresent: flags & 1 == 1, limits: limits,
                now: .now, random: .random(in: 0..<1))
        }
        for sink in effects.connectedSinks { sink.connected?(flags & 1 == 1) }
        // Restore the subscriptions before anyone hears of the connection: a publish made in reaction
        // to `.connected` must reach the broker after them, or a retained copy of it would come back
        // as a stored message instead of live.
        for request in effects.subscribe {
            var mid: Int32 = 0
            let rc = mosquitto_subscribe_v5(handle, &mid, request.filter, request.qos.rawValue, request.optionBits, nil)
            if rc == MOSQ_ERR_SUCCESS.rawValue {
                state.withLock { $0.onRestoreRegistered(mid: mid, filter: request.filter) }
            }
        }
        effects.resumeAll()
    }

    private func didDisconnect(rc: Int32) {
        let reason = rc == 0 ? "disconnected by the client" : String(cString: mosquitto_strerror(rc))
        let cause = connectError(rc)
        let effects = state.withLock {
            $0.onConnectionLost(reason: reason, cause: cause, now: .now, random: .random(in: 0..<1))
        }
        effects.resumeAll()
    }

    private func didPublish(mid: Int32, reasonCode: Int32) {
        let effects = state.withLock { $0.onPublishAcknowledged(mid: mid, reasonCode: Int(reasonCode), topic: nil) }
        effects.resumeAll()
    }

    private func didSubscribe(mid: Int32, codes: [Int]) {
        let effects = state.withLock { $0.onSubscribeAcknowledged(mid: mid, codes: codes) }
        effects.resumeAll()
    }

    private func didReceive(_ raw: mosquitto_message, properties: OpaquePointer?) {
        let topic = String(cString: raw.topic)
        let payload = raw.payloadlen > 0 ? Data(bytes: raw.payload, count: Int(raw.payloadlen)) : Data()
        let message = MQTTMessage(
            topic: topic, payload: payload, qos: QoS(rawValue: raw.qos) ?? .atMostOnce, retain: raw.retain,
            properties: properties.map(Mosquitto.readProperties) ?? MQTTProperties())
        let targets = state.withLock { $0.onMessage(topic: topic, remember: !raw.retain) }
        for target in targets where !target.deliver(message) {
            droppedMessages.add(1, ordering: .relaxed)
        }
        for target in targets where target.endOfBurst != nil {
            burst.withLock { burst in
                burst.messages += 1
                if !burst.sinks.contains(where: { $0.id == target.id }) { burst.sinks.append(target) }
            }
        }
    }

    private static func readProperties(_ list: OpaquePointer) -> MQTTProperties {
        var result = MQTTProperties()
        var property: OpaquePointer? = list
        while let current = property {
            switch Int(mosquitto_property_identifier(current)) {
            case Int(MQTT_PROP_MESSAGE_EXPIRY_INTERVAL.rawValue):
                var value: UInt32 = 0
                mosquitto_property_read_int32(current, Int32(MQTT_PROP_MESSAGE_EXPIRY_INTERVAL.rawValue), &value, false)
                result.messageExpiry = value
            case Int(MQTT_PROP_CONTENT_TYPE.rawValue):
                result.contentType = readString(current, MQTT_PROP_CONTENT_TYPE)
            case Int(MQTT_PROP_RESPONSE_TOPIC.rawValue):
                result.responseTopic = readString(current, MQTT_PROP_RESPONSE_TOPIC)
            case Int(MQTT_PROP_CORRELATION_DATA.rawValue):
                var value: UnsafeMutableRawPointer? = nil
                var length: UInt16 = 0
                mosquitto_property_read_binary(current, Int32(MQTT_PROP_CORRELATION_DATA.rawValue), &value, &length, false)
                if let value {
                    result.correlationData = Array(UnsafeRawBufferPointer(start: value, count: Int(length)))
                    free(value)
                }
            case Int(MQTT_PROP_USER_PROPERTY.rawValue):
                var name: UnsafeMutablePointer<CChar>? = nil
                var value: UnsafeMutablePointer<CChar>? = nil
                mosquitto_property_read_string_pair(current, Int32(MQTT_PROP_USER_PROPERTY.rawValue), &name, &value, false)
                if let name, let value {
                    result.userProperties.append(.init(String(cString: name), String(cString: value)))
                }
                free(name)
                free(value)
            case Int(MQTT_PROP_SUBSCRIPTION_IDENTIFIER.rawValue):
                var value: UInt32 = 0
                mosquitto_property_read_varint(current, Int32(MQTT_PROP_SUBSCRIPTION_IDENTIFIER.rawValue), &value, false)
                result.subscriptionIdentifiers.append(value)
            default:
                break
            }
            property = mosquitto_property_next(current)
        }
        return result
    }

    private static func readString(_ property: OpaquePointer, _ identifier: mqtt5_property) -> String? {
        var value: UnsafeMutablePointer<CChar>? = nil
        mosquitto_property_read_string(property, Int32(identifier.rawValue), &value, false)
        defer { free(value) }
        return value.map { String(cString: $0) }
    }

    // MARK: - Calls from any thread

    /// Hands a PUBLISH to libmosquitto. Returns its message ID and the connection generation it was sent on.
    func publish(
        topic: String, payload: UnsafeRawBufferPointer, qos: QoS, retain: Bool, properties: MQTTProperties
    ) -> Result<(mid: Int32, generation: Int), MQTTError> {
        let (phase, limits, generation) = state.withLock { ($0.phase, $0.limits, $0.generation) }
        switch phase {
        case .stopped, .stopping: return .failure(.disconnected)
        case .idle: return .failure(.notConnected)
        case .connecting, .backingOff: if qos == .atMostOnce { return .failure(.notConnected) }
        case .connected: break
        }
        if retain && !limits.retainAvailable { return .failure(.retainUnavailable) }
        if let limit = limits.maximumPacketSize {
            // Fixed header (≤ 5) + topic length prefix + topic + packet ID + properties (upper bound).
            let size = 5 + 2 + topic.utf8.count + 2 + payload.count + (properties.isEmpty ? 1 : 64)
            if size > limit { return .failure(.payloadTooLarge(size: size, limit: limit)) }
        }
        var list: OpaquePointer? = nil
        defer { mosquitto_property_free_all(&list) }
        if configuration.protocolVersion == .v5 {
            Mosquitto.add(properties, to: &list)
        }
        var mid: Int32 = 0
        let rc = mosquitto_publish_v5(
            handle, &mid, topic, Int32(payload.count), payload.baseAddress, qos.rawValue, retain, list)
        if rc == MOSQ_ERR_SUCCESS.rawValue && phase == .connected {
            writeFromCaller(preWake: qos == .atMostOnce)
        } else {
            wake.signal()
        }
        switch mosq_err_t(rawValue: rc) {
        case MOSQ_ERR_SUCCESS:
            return .success((mid, generation))
        case MOSQ_ERR_NO_CONN where qos != .atMostOnce:
            // libmosquitto keeps QoS ≥ 1 messages queued and sends them once reconnected.
            return .success((mid, generation))
        default:
            return .failure(Mosquitto.error(rc, topic: topic))
        }
    }

    /// Writes the packets libmosquitto has queued from the calling thread, unless the network thread or
    /// another publisher is inside libmosquitto's I/O right now (or the connection is TLS, or stopping);
    /// wakes the network thread for whatever it leaves.
    ///
    /// In threaded mode `mosquitto_publish_v5` only queues a packet; the network thread, once woken,
    /// writes it — one thread hand-over more per message than raw libmosquitto publishing from its own
    /// callback. Here the caller writes it at once. `io` keeps libmosquitto's socket I/O to one thread at a
    /// time — its write path is serialised by its own mutexes, but its read path and its socket close are
    /// not — and the caller only *tries* it, so a publishing thread never waits for the network. A packet
    /// the caller could not write, or wrote only in part, is left to the network thread, which is woken.
    ///
    /// After a quiet spell (``quietSpell``) a QoS 0 publish (`preWake`) wakes the network thread *before*
    /// the write as well, though it will find nothing to do: on the 2-vCPU VM of BENCHMARKS.md (finding
    /// AJ) that wake-up brings the second CPU out of idle while the packet goes through the loopback stack,
    /// and an isolated message's one-way latency dropped from 1.25× raw libmosquitto's to 1.05×; without
    /// it the direct write gained nothing. Within a stream of publishes the CPUs are busy anyway and that
    /// wake-up only costs (throughput fell from 0.78× to 0.72× raw when every publish made it), so it is
    /// skipped. At QoS 1 and 2 the broker's acknowledgement wakes the network thread one trip later
    /// anyway, and the early turn only competed with the message's delivery for the CPUs (finding AL:
    /// QoS 1 latency 1.43× → 1.36× raw, lower in six alternating pairs of six). The wake-up is sent once
    /// the caller holds `io` (finding AK): sent before, it let a network thread that was still awake take
    /// `io` first and write the packet itself, late.
    ///
    /// `mosquitto_loop_write` calls back on this thread: the publish callback of a QoS 0 message it wrote
    /// and, if the write fails, the disconnect callback, after which it closes the socket. Both only update
    /// the state machine under its lock and resume continuations, as on the network thread; the network
    /// thread, which may be polling the socket just closed, is then woken to see it gone.
    private func writeFromCaller(preWake: Bool) {
        // On the network thread (a callback publishing) nothing to do: it looks for something to write
        // before every poll().
        guard networkThread.load(ordering: .relaxed) != UInt(pthread_self()) else { return }
        guard directWrites.load(ordering: .relaxed) else {
            wake.signal()
            return
        }
        let now = DispatchTime.now().uptimeNanoseconds
        let previous = lastPublish.exchange(now, ordering: .relaxed)
        let quiet = preWake && now &- previous >= Mosquitto.quietSpell
        let outcome = io.withLockIfAvailable { _ -> Int32? in
            // Woken while we hold `io`, the network thread cannot take the write from us: it waits for
            // `io`, then finds nothing left to write.
            if quiet { wake.signal() }
            guard directWrites.load(ordering: .relaxed), mosquitto_socket(handle) != -1,
                  mosquitto_want_write(handle) else { return nil }
            callerWrites.add(1, ordering: .relaxed)
            return mosquitto_loop_write(handle, 1)
        }
        switch outcome {
        case let rc?? where rc != MOSQ_ERR_SUCCESS.rawValue:
            callerWriteFailures.add(1, ordering: .relaxed)
            wake.signal()  // the socket is closed: even a thread woken before must look again
        case .some(.some), .some(.none):
            // Written (in whole or in part), or nothing left to write: if part of it is still queued,
            // poll() must wait for the socket to take it.
            if !quiet && mosquitto_want_write(handle) { wake.signal() }
        case .none:
            wake.signal()  // `io` was busy: the packet is the network thread's
        }
    }

    /// A connection that has not published for this long (in nanoseconds) is taken to be idle: its next
    /// publish, if at QoS 0, wakes the network thread before writing (see ``writeFromCaller(preWake:)``). A ping-pong's
    /// messages are a round trip apart (≥ 80 µs here); a stream's, 10–20 µs.
    static let quietSpell: UInt64 = 50_000

    private static func add(_ properties: MQTTProperties, to list: inout OpaquePointer?) {
        if let expiry = properties.messageExpiry {
            mosquitto_property_add_int32(&list, Int32(MQTT_PROP_MESSAGE_EXPIRY_INTERVAL.rawValue), expiry)
        }
        if let contentType = properties.contentType {
            mosquitto_property_add_string(&list, Int32(MQTT_PROP_CONTENT_TYPE.rawValue), contentType)
        }
        if let responseTopic = properties.responseTopic {
            mosquitto_property_add_string(&list, Int32(MQTT_PROP_RESPONSE_TOPIC.rawValue), responseTopic)
        }
        if let data = properties.correlationData {
            data.withUnsafeBytes { bytes in
                _ = mosquitto_property_add_binary(
                    &list, Int32(MQTT_PROP_CORRELATION_DATA.rawValue), bytes.baseAddress, UInt16(clamping: bytes.count))
            }
        }
        for pair in properties.userProperties {
            mosquitto_property_add_string_pair(&list, Int32(MQTT_PROP_USER_PROPERTY.rawValue), pair.name, pair.value)
        }
    }

    /// Sends one SUBSCRIBE for filters that share their QoS and options. Returns the message ID, or nil
    /// when not connected (the next connection subscribes them).
    func subscribe(_ requests: [TopicSubscription]) -> Result<Int32?, MQTTError> {
        guard let first = requests.first else { return .success(nil) }
        var mid: Int32 = 0
        let options = configuration.protocolVersion == .v5 ? first.optionBits : 0
        let rc = Mosquitto.withCStrings(requests.map(\.filter)) { count, strings in
            mosquitto_subscribe_multiple(handle, &mid, count, strings, first.qos.rawValue, options, nil)
        }
        wake.signal()
        switch mosq_err_t(rawValue: rc) {
        case MOSQ_ERR_SUCCESS: return .success(mid)
        case MOSQ_ERR_NO_CONN: return .success(nil)
        default: return .failure(Mosquitto.error(rc, topic: first.filter))
        }
    }

    /// Sends UNSUBSCRIBE without waiting for UNSUBACK. Nothing to do when disconnected: the next
    /// connection only restores live filters.
    func unsubscribe(_ filters: [String]) {
        for filter in filters {
            _ = mosquitto_unsubscribe_v5(handle, nil, filter, nil)
        }
        wake.signal()
    }

    /// Asks the network thread to stop. It sends DISCONNECT itself (so the broker does not publish the
    /// will): calling `mosquitto_disconnect` from here would let the network
    /// thread read a packet in the disconnected state, which libmosquitto treats as a protocol error
    /// and answers by closing the socket without DISCONNECT.
    func requestStop(expireSession: Bool = false) {
        if expireSession { expireSessionOnStop.store(true, ordering: .releasing) }
        wakeup.signal()
        wake.signal()  // out of poll() at once
    }

    /// Network thread, once stopping: quiesce, then DISCONNECT (at most a second in all).
    ///
    /// libmosquitto closes the socket as soon as DISCONNECT is written. A socket closed with unread data
    /// in its receive buffer sends a TCP reset, which can reach the broker before it has read the
    /// DISCONNECT — it then sees a broken connection and publishes the will. So first the connection is
    /// made quiet: one UNSUBSCRIBE of every live filter, and everything up to its UNSUBACK is read
    /// normally. The broker answers in order, so after that UNSUBACK nothing more is on its way.
    private func sendDisconnect() {
        let deadline = ContinuousClock.now + .seconds(1)
        // From here on the network thread writes alone: a publishing thread must not write the
        // DISCONNECT (libmosquitto closes the socket right after it). A direct write in progress ends first.
        io.withLock { _ in directWrites.store(false, ordering: .relaxed) }
        let filters = state.withLock { $0.liveFilters } + [Mosquitto.wakeFilter]
        var mid: Int32 = 0
        let rc = Mosquitto.withCStrings(filters) { count, strings in
            mosquitto_unsubscribe_multiple(handle, &mid, count, strings, nil)
        }
        if rc == MOSQ_ERR_SUCCESS.rawValue {
            var lastKeepaliveCheck: UInt64 = 0
            while mosquitto_socket(handle) != -1, lastUnsubscribeAck.load(ordering: .acquiring) != mid,
                  ContinuousClock.now < deadline {
                if serviceConnection(timeout: 50, lastKeepaliveCheck: &lastKeepaliveCheck) != MOSQ_ERR_SUCCESS.rawValue { break }
            }
        }
        var properties: OpaquePointer? = nil
        defer { mosquitto_property_free_all(&properties) }
        if expireSessionOnStop.load(ordering: .acquiring) && configuration.protocolVersion == .v5
            && (configuration.sessionExpiry ?? 0) > 0 {
            mosquitto_property_add_int32(&properties, Int32(MQTT_PROP_SESSION_EXPIRY_INTERVAL.rawValue), 0)
        }
        guard mosquitto_socket(handle) != -1,
              mosquitto_disconnect_v5(handle, 0, properties) == MOSQ_ERR_SUCCESS.rawValue else { return }
        // From here on only writes: reading in the disconnected state is a protocol error to libmosquitto.
        while case let socket = mosquitto_socket(handle), socket != -1, ContinuousClock.now < deadline {
            var descriptor = pollfd(fd: socket, events: Int16(POLLOUT), revents: 0)
            _ = poll(&descriptor, 1, 50)
            if mosquitto_loop_write(handle, 1) != MOSQ_ERR_SUCCESS.rawValue { break }
        }
    }

    /// Calls `body` with `strings` as the C array libmosquitto's `…_multiple` functions take.
    private static func withCStrings(
        _ strings: [String], _ body: (Int32, UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> Int32
    ) -> Int32 {
        var copies = strings.map { strdup($0) }
        defer { copies.forEach { free($0) } }
        return copies.withUnsafeMutableBufferPointer { buffer in
            buffer.withMemoryRebound(to: UnsafeMutablePointer<CChar>?.self) { body(Int32($0.count), $0.baseAddress) }
        }
    }

    /// A filter nobody subscribes to: unsubscribing it changes nothing on the broker.
    static let wakeFilter = "groupsync-client/wake"

    /// Stops the network thread without DISCONNECT: the broker sees the connection die.
    func abort() {
        aborting.store(true, ordering: .releasing)
        closeSocketAbruptly()  // poll() wakes on the shut-down socket
        wakeup.signal()
    }

    /// Test hook: shuts the socket down under the client as a crash would (no DISCONNECT is sent) —
    /// both ways, or with `SHUT_WR` only its sending side, so that the next write fails. Under `io` when
    /// that can be had within about 50 ms (a blocking connect holds it longer): the descriptor shut down
    /// is then the connection's, not a number that a close on another thread has freed for reuse.
    func closeSocketAbruptly(_ how: Int32 = Int32(SHUT_RDWR)) {
        let shut = { [handle] in
            let socket = mosquitto_socket(handle)
            if socket != -1 { shutdown(socket, how) }
        }
        for _ in 0..<50 {
            if io.withLockIfAvailable({ _ in shut() }) != nil { return }
            usleep(1_000)
        }
        shut()
    }
}

/// `mosquitto_lib_init` must run once per process before any client exists.
enum MosquittoLibrary {
    private static let initialized: Bool = {
        mosquitto_lib_init()
        return true
    }()

    static func initializeOnce() {
        _ = initialized
    }

    /// OpenSSL's `SSL_pending`, found in the libssl that libmosquitto loaded (nil when it was built
    /// without TLS). Looked up at run time so that building needs neither OpenSSL's headers nor its
    /// development library; the search starts at the loaded libmosquitto, whose dependencies include libssl.
    static let sslPending: (@convention(c) (UnsafeMutableRawPointer) -> Int32)? = {
        guard let library = dlopen(libraryName, RTLD_LAZY | RTLD_NOLOAD),
              let symbol = dlsym(library, "SSL_pending") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutableRawPointer) -> Int32).self)
    }()

    #if canImport(Darwin)
    private static let libraryName = "libmosquitto.1.dylib"
    #else
    private static let libraryName = "libmosquitto.so.1"
    #endif
}
