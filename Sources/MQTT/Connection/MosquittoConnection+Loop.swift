import CMosquitto
import Foundation

/// The network thread: ``ConnectionStateMachine/nextStep`` says whether to connect (after a backoff
/// delay), to run the open connection, or to stop.
///
/// An open connection runs in turns of `mosquitto_loop`, as libmosquitto's own threaded loop
/// (`mosquitto_loop_forever`) does. A packet another thread queues (publish, subscribe, unsubscribe)
/// wakes its `select()` through libmosquitto's internal socket pair, so the thread needs no wake-up
/// channel of its own. What this thread adds to libmosquitto's loop: the state machine's connect
/// policy (a first connect that fails is reported, not retried; reconnects back off with jitter), the
/// subscriptions restored before `.connected` is announced, the end of a burst of messages reported,
/// and a stop that quiesces the connection before DISCONNECT (see ``sendDisconnect()``).
///
/// `mosquitto_loop` waits with `select()`, which cannot watch a descriptor at or above `FD_SETSIZE`
/// (1024): with three descriptors per connection (its socket and libmosquitto's socket pair) that
/// allows about 340 connections per process. A connection beyond it fails with
/// ``MQTTError/tooManyOpenDescriptors``.
extension MosquittoConnection {
    /// Starts the network thread. It runs until `disconnect` (or a failed first connect) stops it.
    ///
    /// The thread holds the connection only while it runs, and resumes the waiters of its end (a failed
    /// first `connect()`, `disconnect()`) after letting go of it. Whoever they wake then holds the last
    /// reference, so libmosquitto's handle — its TLS state included — is destroyed on their side, never by
    /// this thread while a command that failed is already running the process's exit handlers.
    func startNetworkThread() {
        let thread = Thread { [weak self] in
            let ended = self?.run()
            ended?.resumeAll()
        }
        #if canImport(Darwin)
        thread.name = "mqtt:\(configuration.clientID)"  // Darwin passes it on; Linux: `ThreadName`
        #endif
        thread.stackSize = 512 * 1024
        thread.start()
    }

    /// Runs until the state machine says exit; returns what the end resumes.
    private func run() -> ConnectionStateMachine.Effects {
        ThreadName.setCurrent("mqtt:" + configuration.clientID)
        loop: while true {
            switch state.withLock({ $0.nextStep }) {
            case .exit:
                break loop
            case let .connect(server, notBefore):
                if let notBefore, !sleepOnWakeup(until: notBefore) { continue }
                let rc = server.map { connect(to: configuration.servers[$0]) } ?? mosquitto_reconnect(handle)
                if rc == MOSQ_ERR_SUCCESS.rawValue {
                    state.withLock { $0.onSocketOpened() }
                } else {
                    let error = connectError(rc)
                    state.withLock { $0.onConnectFailed(error, now: .now, random: .random(in: 0..<1)) }.resumeAll()
                }
            case .loop:
                // Wake-ups are events (a packet queued, the socket closed), so the timeout only paces
                // the keepalive check that ends every turn.
                let rc = turn(timeout: 1000)
                if rc == MOSQ_ERR_INVAL.rawValue {
                    giveUpAboveSelectLimit()
                } else if rc != MOSQ_ERR_SUCCESS.rawValue && mosquitto_socket(handle) == -1 {
                    // Reported by the disconnect callback as a rule; this covers a socket libmosquitto
                    // closed without it (e.g. a failed TLS read). Once reported, it changes nothing.
                    let reason = String(cString: mosquitto_strerror(rc))
                    let cause = connectError(rc)
                    state.withLock { $0.onConnectionLost(reason: reason, cause: cause, now: .now, random: .random(in: 0..<1)) }
                        .resumeAll()
                }
            }
        }
        if mosquitto_socket(handle) != -1 && !aborting.load(ordering: .acquiring) {
            sendDisconnect()
        }
        return state.withLock { $0.onStopped() }
    }

    /// One turn of the open connection: `mosquitto_loop` waits up to `timeout` milliseconds, reads,
    /// writes and keeps the connection alive; then ``endBurstUnlessMoreIsWaiting()``. Returns
    /// libmosquitto's result.
    ///
    /// Over TLS the turn reads once more. `mosquitto_loop` reads only when `select()` sees the socket
    /// readable, and `mosquitto_loop_read` stops after a packet whenever `errno` is EAGAIN — which
    /// libmosquitto's wake-up pair leaves behind once it is full (it drains one byte per turn, and every
    /// queued packet, PUBACKs included, adds one). Bytes OpenSSL has already decrypted are invisible to
    /// `select()`, so without this read packets that arrived in one TLS record with many others could
    /// wait for the broker's next packet. When OpenSSL holds nothing, the read costs one `recv` that
    /// returns EAGAIN.
    private func turn(timeout: Int32) -> Int32 {
        var rc = mosquitto_loop(handle, timeout, 1)
        if rc == MOSQ_ERR_SUCCESS.rawValue && configuration.tls != nil && mosquitto_socket(handle) != -1 {
            rc = mosquitto_loop_read(handle, 1)
        }
        endBurstUnlessMoreIsWaiting()
        return rc
    }

    /// Tells the sinks of the messages read in this turn that their burst is over — unless more bytes
    /// already wait on the socket: they came with these (records a broker sent together), and the next
    /// turn reads them at once. A burst ends after ``maximumBurst`` messages even so, so that a
    /// continuous stream never holds back what its first messages changed.
    private func endBurstUnlessMoreIsWaiting() {
        let ended = burst.withLock { burst -> [MessageSink] in
            guard !burst.sinks.isEmpty else { return [] }
            if burst.messages < MosquittoConnection.maximumBurst, case let socket = mosquitto_socket(handle), socket != -1 {
                var waiting: Int32 = 0
                if ioctl(socket, UInt(FIONREAD), &waiting) == 0, waiting > 0 { return [] }
            }
            defer { burst = Burst() }
            return burst.sinks
        }
        for sink in ended { sink.endOfBurst?() }
    }

    static let maximumBurst = 64

    /// `mosquitto_loop` refuses descriptors `select()` cannot watch (every argument we pass it is
    /// valid, so `MOSQ_ERR_INVAL` means that): the connection is given up as lost — a first `connect()`
    /// fails with ``MQTTError/tooManyOpenDescriptors``, a reconnect backs off and tries again.
    private func giveUpAboveSelectLimit() {
        let error = MQTTError.tooManyOpenDescriptors
        state.withLock { $0.onConnectionLost(reason: error.description, cause: error, now: .now, random: .random(in: 0..<1)) }
            .resumeAll()
        closeSocketAbruptly()
        _ = mosquitto_loop_read(handle, 1)  // libmosquitto reads the end of the connection and closes the socket
    }

    /// Blocks the network thread on its wake-up semaphore until `instant` (a reconnect back-off); returns
    /// false if woken early (stop requested).
    private func sleepOnWakeup(until instant: ContinuousClock.Instant) -> Bool {
        let remaining = instant - .now
        guard remaining > .zero else { return true }
        let (seconds, attoseconds) = remaining.components
        let nanoseconds = Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
        _ = wakeup.wait(timeout: .now() + .nanoseconds(nanoseconds))
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
    /// made quiet: one UNSUBSCRIBE of every live filter, and everything up to its UNSUBACK is read
    /// normally. The broker answers in order, so after that UNSUBACK nothing more is on its way.
    private func sendDisconnect() {
        let deadline = ContinuousClock.now + .seconds(1)
        let filters = state.withLock { $0.liveFilters.map(\.filter) } + [MosquittoConnection.wakeFilter]
        var mid: Int32 = 0
        let rc = MosquittoConnection.withCStrings(filters) { count, strings in
            mosquitto_unsubscribe_multiple(handle, &mid, count, strings, nil)
        }
        if rc == MOSQ_ERR_SUCCESS.rawValue {
            while mosquitto_socket(handle) != -1, lastUnsubscribeAck.load(ordering: .acquiring) != mid,
                ContinuousClock.now < deadline
            {
                if turn(timeout: 50) != MOSQ_ERR_SUCCESS.rawValue { break }
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
            if mosquitto_loop_write(handle, 1) != MOSQ_ERR_SUCCESS.rawValue { break }
        }
    }
}
