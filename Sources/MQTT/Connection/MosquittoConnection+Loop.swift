import CMosquitto
import Foundation

/// The network thread: ``ConnectionStateMachine/nextStep`` says whether to connect (after a backoff
/// delay), to run the open connection, or to stop.
///
/// An open connection runs in turns (`turn(timeout:lastKeepaliveCheck:)`) of `poll()` and the functions
/// `mosquitto.h` offers for a loop of one's own. Not `mosquitto_loop`: it waits with `select()`, which
/// cannot watch a descriptor at or above `FD_SETSIZE` (1024), about 340 connections per process. What
/// this thread adds to libmosquitto's loop: the state machine's connect policy (a first connect that
/// fails is reported, not retried; reconnects back off with jitter), the subscriptions restored as soon
/// as the socket is open, the end of a burst of messages reported, and a stop that quiesces the
/// connection before DISCONNECT (see ``sendDisconnect()``).
extension MosquittoConnection {
    /// Starts the network thread. It runs until `disconnect` (or a failed first connect) stops it.
    ///
    /// The thread holds the connection only while it runs, and resumes the waiters of its end (a failed
    /// first `connect()`, `disconnect()`) after letting go of it. Whoever they wake then holds the last
    /// reference, so libmosquitto's handle — its TLS state included — is destroyed on their side, never by
    /// this thread while a command that failed is already running the process's exit handlers.
    func startNetworkThread() {
        let thread = Thread { [weak self] in
            if let ended = self?.run() { MosquittoConnection.perform(ended, on: nil) }
        }
        #if canImport(Darwin)
        thread.name = "mqtt:\(configuration.clientID)"  // Darwin passes it on; Linux: `ThreadName`
        #endif
        thread.stackSize = 512 * 1024
        thread.start()
    }

    /// Runs until the state machine says exit; returns what the end resumes.
    private func run() -> ConnectionStateMachine.Action {
        ThreadName.setCurrent("mqtt:" + configuration.clientID)
        var lastKeepaliveCheck = ContinuousClock.now
        loop: while true {
            switch state.withLock({ $0.nextStep }) {
            case .exit:
                break loop
            case let .connect(server, notBefore):
                if let notBefore, !sleepOnWakeup(until: notBefore) { continue }
                let rc = io.withLock { _ in
                    let rc = server.map { connect(to: configuration.servers[$0]) } ?? mosquitto_reconnect(handle)
                    // Still under `io`: a publisher's failed write cannot report this socket lost before
                    // the state machine knows it is open. Resubscribed first (see `onSocketOpened`).
                    if rc == MOSQ_ERR_SUCCESS.rawValue {
                        let restored = state.withLock { $0.liveFilters }
                        for request in restored { restore(request) }
                        update { $0.onSocketOpened(restored: restored) }
                    }
                    return rc
                }
                if rc != MOSQ_ERR_SUCCESS.rawValue {
                    let error = connectError(rc)
                    update { $0.onConnectFailed(error, now: .now, random: .random(in: 0..<1)) }
                }
            case .loop:
                // Wake-ups are events (a packet left to write, a stop, the socket closed), so the timeout
                // only paces the keepalive check.
                let rc = turn(timeout: 1000, lastKeepaliveCheck: &lastKeepaliveCheck)
                if rc != MOSQ_ERR_SUCCESS.rawValue && mosquitto_socket(handle) == -1 {
                    // Reported by the disconnect callback as a rule; this covers a socket libmosquitto
                    // closed without it (e.g. a failed TLS read). Once reported, it changes nothing.
                    didDisconnect(rc: rc)
                }
            }
        }
        callerWrites.store(false, ordering: .releasing)
        if aborting.load(ordering: .acquiring) {
            closeSocketAbruptly()  // as a crash would: the broker publishes the will
        } else if mosquitto_socket(handle) != -1 {
            sendDisconnect()
        }
        return state.withLock { $0.onStopped() }
    }

    /// `mosquitto_loop_misc` only checks the keepalive (it sends PINGREQ, or gives up on a missing
    /// PINGRESP, in whole seconds): this often is plenty against a keepalive of at least 5 s, and spares
    /// the other turns libmosquitto's lock and clock read.
    static let keepaliveCheckInterval: Duration = .milliseconds(100)

    /// One turn of the open connection: waits up to `timeout` milliseconds for the socket or a wake-up,
    /// lets libmosquitto read and write, and — once ``keepaliveCheckInterval`` has passed since
    /// `lastKeepaliveCheck` (updated) — keep the connection alive; then ends a burst of messages unless
    /// more bytes wait (``ConnectionStateMachine/onTurnEnded(moreWaiting:)``). Returns libmosquitto's
    /// result, like `mosquitto_loop`.
    private func turn(timeout: Int32, lastKeepaliveCheck: inout ContinuousClock.Instant) -> Int32 {
        defer { update { $0.onTurnEnded { bytesWaiting() } } }
        let socket = mosquitto_socket(handle)
        guard socket != -1 else { return MOSQ_ERR_NO_CONN.rawValue }
        let buffered = tlsHoldsReceivedBytes()
        guard let events = waitForEvents(on: socket, timeout: buffered ? 0 : timeout) else {
            // Interrupted: poll again. Any other failure (out of kernel memory) would come back at once:
            // pause a little first, rather than spin.
            if errno != EINTR { _ = poll(nil, 0, 10) }
            return MOSQ_ERR_SUCCESS.rawValue
        }
        // Read on data, end of file or error (libmosquitto then reports the loss), on bytes OpenSSL holds
        // already, and — TLS only — when writable: a handshake that wants to write goes on in a read.
        let readable = events & Int16(POLLIN | POLLHUP | POLLERR | POLLNVAL) != 0
        if readable || buffered || (configuration.tls != nil && events & Int16(POLLOUT) != 0) {
            let rc = step(on: socket) { mosquitto_loop_read(handle, 1) }
            if rc != MOSQ_ERR_SUCCESS.rawValue || mosquitto_socket(handle) == -1 { return rc }
        }
        // Write what is queued now, without waiting for POLLOUT: the socket is non-blocking, and a packet
        // queued by another thread (the wake-up above) or by a callback (a PUBACK) leaves in this turn.
        if mosquitto_want_write(handle) {
            let rc = step(on: socket) { mosquitto_loop_write(handle, 1) }
            if rc != MOSQ_ERR_SUCCESS.rawValue || mosquitto_socket(handle) == -1 { return rc }
        }
        let now = ContinuousClock.now
        guard now - lastKeepaliveCheck >= MosquittoConnection.keepaliveCheckInterval else { return MOSQ_ERR_SUCCESS.rawValue }
        lastKeepaliveCheck = now
        return step(on: socket) { mosquitto_loop_misc(handle) }
    }

    /// Runs one libmosquitto step under `io` if the connection still has the socket that was polled: a
    /// publisher whose write failed may have closed it meanwhile (and reported the loss), and libmosquitto
    /// would report it a second time.
    private func step(on socket: Int32, _ body: () -> Int32) -> Int32 {
        io.withLock { _ in mosquitto_socket(handle) == socket ? body() : MOSQ_ERR_NO_CONN.rawValue }
    }

    /// Polls `socket` — for writing too while libmosquitto has something to send — and the wake-up
    /// channel, which it drains. Returns the socket's events, or nil if `poll()` failed (see `errno`).
    private func waitForEvents(on socket: Int32, timeout: Int32) -> Int16? {
        let events = mosquitto_want_write(handle) ? Int16(POLLIN | POLLOUT) : Int16(POLLIN)
        var descriptors = (
            pollfd(fd: socket, events: events, revents: 0), pollfd(fd: wake.descriptor, events: Int16(POLLIN), revents: 0)
        )
        let ready = withUnsafeMutablePointer(to: &descriptors) {
            $0.withMemoryRebound(to: pollfd.self, capacity: 2) { poll($0, 2, timeout) }
        }
        guard ready >= 0 else { return nil }
        if descriptors.1.revents != 0 { wake.drain() }
        return descriptors.0.revents
    }

    /// Whether OpenSSL holds received bytes that `poll()` cannot see any more: decrypted from a record
    /// that also carried the packets just read. `mosquitto_loop_read` reads them only while it goes on
    /// reading, and it stops after a packet whenever `errno` is EAGAIN — which libmosquitto's own wake-up
    /// pair leaves behind once it is full (see ``WakeChannel``) — so without this check such packets could
    /// wait for the broker's next one.
    private func tlsHoldsReceivedBytes() -> Bool {
        guard configuration.tls != nil, let ssl = mosquitto_ssl_get(handle) else { return false }
        return SSL_pending(OpaquePointer(ssl)) > 0
    }

    /// Whether received bytes wait on the socket.
    private func bytesWaiting() -> Bool {
        var waiting: Int32 = 0
        let socket = mosquitto_socket(handle)
        return socket != -1 && ioctl(socket, UInt(FIONREAD), &waiting) == 0 && waiting > 0
    }

    /// Blocks the network thread on its wake-up semaphore until `instant` (a reconnect back-off); returns
    /// false if woken early (stop requested).
    private func sleepOnWakeup(until instant: ContinuousClock.Instant) -> Bool {
        let remaining = instant - .now
        guard remaining > .zero else { return true }
        _ = wakeup.wait(timeout: .now() + .nanoseconds(Int(remaining / .nanoseconds(1))))
        return ContinuousClock.now >= instant
    }

    /// Opens a socket to `server`. libmosquitto keeps the messages still queued and sends them on the new
    /// connection, as after a reconnect. Safe while other threads publish: `mosquitto_connect_bind_v5`
    /// changes only the host, port, keepalive and CONNECT properties, which only this thread reads, and
    /// resets the send quota that the reconnect then recomputes under libmosquitto's lock; the socket pair
    /// that publishers write to is made once, by `mosquitto_new` (libmosquitto 2.0).
    private func connect(to server: MQTTClient.Server) -> Int32 {
        var properties: OpaquePointer? = nil
        defer { mosquitto_property_free_all(&properties) }
        if configuration.protocolVersion == .v5, let expiry = configuration.sessionExpiry {
            mosquitto_property_add_int32(&properties, Int32(MQTT_PROP_SESSION_EXPIRY_INTERVAL.rawValue), expiry)
        }
        return mosquitto_connect_bind_v5(handle, server.host, Int32(server.port), Int32(configuration.keepAlive), nil, properties)
    }

    /// Once stopping: quiesce, then DISCONNECT (at most a second in all).
    ///
    /// libmosquitto closes the socket as soon as DISCONNECT is written. A socket closed with unread data
    /// in its receive buffer sends a TCP reset, which can reach the broker before it has read the
    /// DISCONNECT — it then sees a broken connection and publishes the will. So first the connection is
    /// made quiet: one UNSUBSCRIBE of every live filter, and everything up to its UNSUBACK is read. The
    /// broker answers in order, so after that UNSUBACK nothing more is on its way.
    ///
    /// A session that outlives the connection keeps its subscriptions: then only ``wakeFilter`` is
    /// unsubscribed, its UNSUBACK marks the end of what the broker sent before, and what still arrives is
    /// read while more waits — a message that arrives later can still cause the reset, and the will.
    private func sendDisconnect() {
        let deadline = ContinuousClock.now + .seconds(1)
        let sessionEnds =
            configuration.protocolVersion == .v5
            ? expireSessionOnStop.load(ordering: .acquiring) || (configuration.sessionExpiry ?? 0) == 0 : configuration.cleanStart
        let filters = (sessionEnds ? state.withLock { $0.liveFilters.map(\.filter) } : []) + [MosquittoConnection.wakeFilter]
        var mid: Int32 = 0
        let rc = MosquittoConnection.withCStrings(filters) { count, strings in
            mosquitto_unsubscribe_multiple(handle, &mid, count, strings, nil)
        }
        if rc == MOSQ_ERR_SUCCESS.rawValue {
            var lastKeepaliveCheck = ContinuousClock.now
            while mosquitto_socket(handle) != -1, lastUnsubscribeAck.load(ordering: .acquiring) != mid,
                ContinuousClock.now < deadline
            {
                if turn(timeout: 50, lastKeepaliveCheck: &lastKeepaliveCheck) != MOSQ_ERR_SUCCESS.rawValue { break }
            }
            while bytesWaiting(), ContinuousClock.now < deadline {
                if turn(timeout: 0, lastKeepaliveCheck: &lastKeepaliveCheck) != MOSQ_ERR_SUCCESS.rawValue { break }
            }
        }
        var properties: OpaquePointer? = nil
        defer { mosquitto_property_free_all(&properties) }
        if expireSessionOnStop.load(ordering: .acquiring) && configuration.protocolVersion == .v5
            && (configuration.sessionExpiry ?? 0) > 0
        {
            mosquitto_property_add_int32(&properties, Int32(MQTT_PROP_SESSION_EXPIRY_INTERVAL.rawValue), 0)
        }
        guard mosquitto_socket(handle) != -1,
            mosquitto_disconnect_v5(handle, 0, properties) == MOSQ_ERR_SUCCESS.rawValue
        else { return }
        // From here on only writes: reading in the disconnected state is a protocol error to libmosquitto.
        while case let socket = mosquitto_socket(handle), socket != -1, ContinuousClock.now < deadline {
            var descriptor = pollfd(fd: socket, events: Int16(POLLOUT), revents: 0)
            _ = poll(&descriptor, 1, 50)
            if io.withLock({ _ in mosquitto_loop_write(handle, 1) }) != MOSQ_ERR_SUCCESS.rawValue { break }
        }
    }
}
