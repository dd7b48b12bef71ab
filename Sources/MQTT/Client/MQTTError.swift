/// Everything that can go wrong with an ``MQTTClient``. Each case says what happened and what to do.
public enum MQTTError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The broker could not be reached (refused, unresolvable, unroutable). Start a broker or fix the URL.
    case unreachable(host: String, port: Int, detail: String)
    /// Something took the TCP connection but sent no CONNACK within `seconds` (the keepalive): an
    /// overloaded or frozen broker, or a server that is no MQTT broker. A longer keepAlive waits longer.
    case noAnswer(host: String, port: Int, seconds: Int)
    /// The broker refused the connection (CONNACK reason code). For 134/135 check user name, password and ACL.
    case connectionRefused(reasonCode: Int, reason: String)
    /// The TLS handshake failed: the CA, the certificates or the host name do not match.
    case tls(detail: String)
    /// The operation needs a live connection and there is none (QoS 0 while disconnected, or never connected).
    case notConnected
    /// ``MQTTClient/disconnect()`` was called: the client is closed for good. Make a new client.
    case disconnected
    /// The connection dropped before a QoS 0 message was written; it is lost. Send it again after reconnecting.
    case connectionLost
    /// The payload plus topic exceed the maximum packet size the broker announced in CONNACK.
    case payloadTooLarge(size: Int, limit: Int)
    /// The broker refused the publish or subscription for this client (ACL). Grant it in the broker's ACL.
    case notAuthorized(topic: String)
    /// The broker announced `retain_available false`; libmosquitto would silently drop the retain flag.
    /// Publish without retain, or enable retained messages on the broker.
    case retainUnavailable
    /// The topic name is empty, contains a wildcard (`+`, `#`) or a NUL, or is not valid UTF-8.
    case invalidTopic(String)
    /// The topic filter is malformed (e.g. `a/#/b`, `a+`), or empty.
    case invalidTopicFilter(String)
    /// The broker refused the subscription with this SUBACK reason code.
    case subscriptionRefused(filter: String, reasonCode: Int)
    /// The broker rejected the publish with this reason code (MQTT 5 PUBACK/PUBREC).
    case publishRefused(topic: String, reasonCode: Int)
    /// The waiting task was cancelled. A publish already handed to the connection may still be delivered.
    case cancelled
    /// The configuration is invalid (URL, client ID, will, TLS files). The message says which part.
    case invalidConfiguration(String)
    /// The process may not open another descriptor (`EMFILE`, or the system's `ENFILE`): each connection
    /// uses four (five off Linux, where the wake-up is a pipe). Raise the process's limit (`ulimit -n`, or
    /// `setrlimit(RLIMIT_NOFILE)`) or use fewer connections per process.
    case tooManyOpenDescriptors
    /// libmosquitto returned an unexpected error code.
    case library(code: Int, message: String)

    public var description: String {
        switch self {
        case let .unreachable(host, port, detail):
            return
                "MQTT broker at \(host):\(port) is unreachable (\(detail)); start one (e.g. `groupsync broker` or `docker compose up`) or check the URL"
        case let .noAnswer(host, port, seconds):
            return "\(host):\(port) took the connection but sent no CONNACK within the keepalive (\(seconds) s): "
                + "an overloaded or frozen broker, or no MQTT broker; a longer keepAlive waits longer"
        case let .connectionRefused(code, reason):
            return "the broker refused the connection: \(reason) (reason code \(code)); check credentials and the broker's ACL"
        case let .tls(detail):
            return "TLS handshake failed (\(detail)); check the CA file, client certificate and host name"
        case .notConnected:
            return "not connected to the broker; wait for the connection or call connect()"
        case .disconnected:
            return "the client was disconnected with disconnect(); create a new client"
        case .connectionLost:
            return "the connection dropped before the message was written; send it again"
        case let .payloadTooLarge(size, limit):
            return "message of \(size) bytes exceeds the broker's maximum packet size of \(limit) bytes"
        case let .notAuthorized(topic):
            return "the broker did not authorize this client for '\(topic)'; grant it in the broker's ACL"
        case .retainUnavailable:
            return "the broker does not support retained messages (retain_available false); publish without retain"
        case let .invalidTopic(topic):
            return "invalid topic name '\(topic)': it must be non-empty UTF-8 without '+', '#' or NUL"
        case let .invalidTopicFilter(filter):
            return "invalid topic filter '\(filter)'"
        case let .subscriptionRefused(filter, code):
            return "the broker refused the subscription to '\(filter)' (reason code \(code))"
        case let .publishRefused(topic, code):
            return "the broker refused the publish to '\(topic)' (reason code \(code))"
        case .cancelled:
            return "the operation was cancelled"
        case let .invalidConfiguration(message):
            return "invalid MQTT configuration: \(message)"
        case .tooManyOpenDescriptors:
            return "too many open descriptors for another MQTT connection (each uses four, five off Linux): raise the process's limit "
                + "(ulimit -n) or use fewer connections per process"
        case let .library(code, message):
            return "libmosquitto error \(code): \(message)"
        }
    }
}
