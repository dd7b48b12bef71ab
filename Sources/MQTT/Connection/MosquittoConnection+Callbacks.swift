import CMosquitto
import Foundation

/// libmosquitto's callbacks, turned into state machine inputs. libmosquitto calls back from the loop
/// functions: on the network thread, and on a publisher that writes its own packet (see
/// ``MosquittoConnection``'s threading), so a callback never blocks.
extension MosquittoConnection {
    func setCallbacks() {
        if getenv("GROUPSYNC_MQTT_DEBUG") != nil {
            // Diagnostics on standard error; only when asked for, since it runs on the network thread.
            mosquitto_log_callback_set(handle) { _, _, level, text in
                if let text { FileHandle.standardError.write(Data("[libmosquitto \(level)] \(String(cString: text))\n".utf8)) }
            }
        }
        mosquitto_connect_v5_callback_set(handle) { _, context, rc, flags, properties in
            MosquittoConnection.from(context).didConnect(rc: rc, flags: flags, properties: properties)
        }
        mosquitto_disconnect_v5_callback_set(handle) { _, context, rc, _ in
            MosquittoConnection.from(context).didDisconnect(rc: rc)
        }
        mosquitto_publish_v5_callback_set(handle) { _, context, mid, reasonCode, _ in
            let connection = MosquittoConnection.from(context)
            let now = ContinuousClock.now
            if let (waiter, result) = connection.state.withLock({
                $0.onPublishAcknowledged(mid: mid, reasonCode: Int(reasonCode), now: now)
            }) {
                waiter.resume(returning: result)
            }
        }
        mosquitto_subscribe_v5_callback_set(handle) { _, context, mid, count, granted, _ in
            let codes = (0..<Int(count)).map { Int(granted![$0]) }
            MosquittoConnection.from(context).state.withLock { $0.onSubscribeAcknowledged(mid: mid, codes: codes) }.resumeAll()
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
        let effects = state.withLock {
            $0.onConnack(
                reasonCode: Int(rc), reason: reason, sessionPresent: flags & 1 == 1, limits: limits,
                now: .now, random: .random(in: 0..<1))
        }
        for sink in effects.connectedSinks { sink.connected?(flags & 1 == 1) }
        // Restore the subscriptions before anyone hears of the connection: a publish made in reaction
        // to `.connected` must reach the broker after them, or a retained copy of it would come back
        // as a stored message instead of live.
        for request in effects.restore {
            var mid: Int32 = 0
            let options = configuration.protocolVersion == .v5 ? request.optionBits : 0
            let rc = mosquitto_subscribe_v5(handle, &mid, request.filter, request.qos.rawValue, options, nil)
            if rc == MOSQ_ERR_SUCCESS.rawValue {
                state.withLock { $0.onRestoreRegistered(mid: mid, filter: request.filter) }
            }
        }
        effects.resumeAll()
    }

    private func didDisconnect(rc: Int32) {
        let reason = rc == 0 ? "disconnected by the client" : String(cString: mosquitto_strerror(rc))
        let cause = connectError(rc)
        state.withLock { $0.onConnectionLost(reason: reason, cause: cause, now: .now, random: .random(in: 0..<1)) }.resumeAll()
    }

    private func didReceive(_ raw: mosquitto_message, properties: OpaquePointer?) {
        let topic = String(cString: raw.topic)
        let payload = raw.payloadlen > 0 ? Data(bytes: raw.payload, count: Int(raw.payloadlen)) : Data()
        let message = MQTTMessage(
            topic: topic, payload: payload, qos: QoS(rawValue: raw.qos) ?? .atMostOnce, retain: raw.retain,
            properties: properties.map(MosquittoConnection.readProperties) ?? MQTTProperties())
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
            return .unreachable(
                host: host, port: port,
                detail: "it took the connection but sent no CONNACK within the keepalive (\(configuration.keepAlive) s): "
                    + "it may be overloaded; a longer keepAlive waits longer")
        default:
            return .unreachable(host: host, port: port, detail: "\(String(cString: mosquitto_strerror(rc))) (libmosquitto \(rc))")
        }
    }
}
