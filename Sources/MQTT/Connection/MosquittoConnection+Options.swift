import CMosquitto
import Foundation

extension MosquittoConnection {
    /// Applies the configuration to the handle: protocol version, TCP_NODELAY, receive maximum,
    /// credentials, TLS and will.
    func configure() throws(MQTTError) {
        try check(mosquitto_threaded_set(handle, true))
        let version = configuration.protocolVersion == .v5 ? MQTT_PROTOCOL_V5 : MQTT_PROTOCOL_V311
        try check(mosquitto_int_option(handle, MOSQ_OPT_PROTOCOL_VERSION, Int32(version)))
        // Nagle's algorithm holds small packets back ~40 ms per hop: a QoS 1 round trip on loopback takes
        // tens of milliseconds with it and a fraction of one without.
        try check(mosquitto_int_option(handle, MOSQ_OPT_TCP_NODELAY, 1))
        // Receive Maximum: why 65,535 by default, and what it costs, is on `Configuration.receiveMaximum`.
        try check(mosquitto_int_option(handle, MOSQ_OPT_RECEIVE_MAXIMUM, Int32(max(configuration.receiveMaximum, 1))))
        if configuration.username != nil || configuration.password != nil {
            try check(mosquitto_username_pw_set(handle, configuration.username, configuration.password))
        }
        if let tls = configuration.tls {
            if tls.caFile == nil { try check(mosquitto_int_option(handle, MOSQ_OPT_TLS_USE_OS_CERTS, 1)) }
            // Without a CA file and without a client certificate, the system's trust store alone is the
            // configuration; libmosquitto takes a client certificate only with a CA file or directory.
            if tls.caFile != nil || tls.certificateFile != nil {
                let directory = tls.caFile == nil ? ProcessInfo.processInfo.environment["SSL_CERT_DIR"] ?? "/etc/ssl/certs" : nil
                let rc = mosquitto_tls_set(handle, tls.caFile, directory, tls.certificateFile, tls.keyFile, nil)
                if rc != MOSQ_ERR_SUCCESS.rawValue {
                    throw .invalidConfiguration(
                        "TLS files unusable (\(String(cString: mosquitto_strerror(rc)))): CA \(tls.caFile ?? directory ?? "")")
                }
            }
            let verifyPeer: Int32 = 1  // OpenSSL's SSL_VERIFY_PEER
            try check(mosquitto_tls_opts_set(handle, verifyPeer, nil, nil))
            try check(mosquitto_tls_insecure_set(handle, !tls.verifyHostname))
        }
        if let will = configuration.will {
            var properties: OpaquePointer? = nil
            if will.delayInterval > 0 {
                mosquitto_property_add_int32(&properties, Int32(MQTT_PROP_WILL_DELAY_INTERVAL.rawValue), will.delayInterval)
            }
            if let expiry = will.messageExpiry {
                mosquitto_property_add_int32(&properties, Int32(MQTT_PROP_MESSAGE_EXPIRY_INTERVAL.rawValue), expiry)
            }
            let rc = will.payload.withUnsafeBytes { bytes in
                mosquitto_will_set_v5(handle, will.topic, Int32(bytes.count), bytes.baseAddress, will.qos.rawValue, will.retain, properties)
            }
            if rc != MOSQ_ERR_SUCCESS.rawValue {
                mosquitto_property_free_all(&properties)  // on success libmosquitto owns them
                throw .invalidConfiguration("will rejected: \(String(cString: mosquitto_strerror(rc)))")
            }
        }
    }

    private func check(_ rc: Int32) throws(MQTTError) {
        guard rc == MOSQ_ERR_SUCCESS.rawValue else { throw MosquittoConnection.error(rc, topic: nil) }
    }
}
