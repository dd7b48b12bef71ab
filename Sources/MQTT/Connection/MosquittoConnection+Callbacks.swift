import CMosquitto
import Foundation

/// libmosquitto's callbacks, turned into state machine inputs. They never block: where they run is in
/// ``MosquittoConnection``'s threading.
extension MosquittoConnection {
    func setCallbacks() {
        if getenv("GROUPSYNC_MQTT_DEBUG") != nil {
            // Diagnostics on standard error; only when asked for, since it runs on the network thread.
            mosquitto_log_callback_set(handle) { _, _, level, text in
                if let text {
                    try? FileHandle.standardError.write(contentsOf: Data("[libmosquitto \(level)] \(String(cString: text))\n".utf8))
                }
            }
        }
        mosquitto_connect_v5_callback_set(handle) { _, context, rc, flags, properties in
            MosquittoConnection.from(context).didConnect(rc: rc, flags: flags, properties: properties)
        }
        mosquitto_disconnect_v5_callback_set(handle) { _, context, rc, _ in
            MosquittoConnection.from(context).didDisconnect(rc: rc)
        }
        mosquitto_publish_v5_callback_set(handle) { _, context, mid, reasonCode, _ in
            let now = ContinuousClock.now
            MosquittoConnection.from(context).update { $0.onPublishAcknowledged(mid: mid, reasonCode: Int(reasonCode), now: now) }
        }
        mosquitto_subscribe_v5_callback_set(handle) { _, context, mid, count, granted, _ in
            let codes = (0..<Int(count)).map { Int(granted![$0]) }
            MosquittoConnection.from(context).update { $0.onSubscribeAcknowledged(mid: mid, codes: codes) }
        }
        mosquitto_unsubscribe_v5_callback_set(handle) { _, context, mid, _ in
            MosquittoConnection.from(context).lastUnsubscribeAck.store(mid, ordering: .releasing)
        }
        mosquitto_message_v5_callback_set(handle) { _, context, message, properties in
            guard let message else { return }
            MosquittoConnection.from(context).didReceive(message.pointee, properties: properties)
        }
    }

    private static func from(_ context: UnsafeMutableRawPointer?) -> MosquittoConnection {
        Unmanaged<MosquittoConnection>.fromOpaque(context!).takeUnretainedValue()
    }

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
        let reason =
            configuration.protocolVersion == .v5
            ? String(cString: mosquitto_reason_string(rc)) : String(cString: mosquitto_connack_string(rc))
        update {
            $0.onConnack(
                reasonCode: Int(rc), reason: reason, sessionPresent: flags & 1 == 1, limits: limits,
                now: .now, random: .random(in: 0..<1))
        }
    }

    /// Subscribes a live filter again on a new connection, once its socket is open (see
    /// ``ConnectionStateMachine/onSocketOpened(restored:)``).
    func restore(_ request: TopicSubscription) {
        if case let .success(mid?) = subscribe([request]) { state.withLock { $0.onRestoreRegistered(mid: mid, filter: request.filter) } }
    }

    func didDisconnect(rc: Int32) {
        let reason = rc == 0 ? "disconnected by the client" : String(cString: mosquitto_strerror(rc))
        let cause = connectError(rc)
        update { $0.onConnectionLost(reason: reason, cause: cause, now: .now, random: .random(in: 0..<1)) }
    }

    private func didReceive(_ raw: mosquitto_message, properties: OpaquePointer?) {
        let topic = String(cString: raw.topic)
        let payload = raw.payloadlen > 0 ? Data(bytes: raw.payload, count: Int(raw.payloadlen)) : Data()
        let message = MQTTMessage(
            topic: topic, payload: payload, qos: QoS(rawValue: raw.qos) ?? .atMostOnce, retain: raw.retain,
            properties: properties.map(MosquittoConnection.readProperties) ?? MQTTProperties())
        update { $0.onMessage(message) }
    }

    /// Hands a received message to its sinks, on the thread that read it.
    func deliver(_ message: MQTTMessage, to sinks: [MessageSink]) {
        for sink in sinks where !sink.deliver(message) { droppedMessages.add(1, ordering: .relaxed) }
    }

    /// What a failed connect, or a connection that ended before CONNACK, reports to the first `connect()`.
    func connectError(_ rc: Int32) -> MQTTError {
        let server = state.withLock { $0.currentServer }
        let host = server.host, port = server.port
        switch mosq_err_t(rawValue: rc) {
        case MOSQ_ERR_ERRNO where errno == EMFILE || errno == ENFILE:
            return .tooManyOpenDescriptors
        case MOSQ_ERR_ERRNO:
            return .unreachable(host: host, port: port, detail: String(cString: strerror(errno)))
        case MOSQ_ERR_EAI, MOSQ_ERR_LOOKUP:
            return .unreachable(host: host, port: port, detail: "host name lookup failed")
        case MOSQ_ERR_TLS, MOSQ_ERR_TLS_HANDSHAKE:
            return .tls(detail: String(cString: mosquitto_strerror(rc)))
        case MOSQ_ERR_KEEPALIVE:
            // libmosquitto waits for the CONNACK as long as the keepalive, then gives up with this code.
            return .noAnswer(host: host, port: port, seconds: configuration.keepAlive)
        default:
            return .unreachable(host: host, port: port, detail: "\(String(cString: mosquitto_strerror(rc))) (libmosquitto \(rc))")
        }
    }
}
