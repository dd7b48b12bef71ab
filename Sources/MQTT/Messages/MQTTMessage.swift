import Foundation

/// MQTT 5 properties carried by a PUBLISH. Ignored (and must be empty) under MQTT 3.1.1.
public struct MQTTProperties: Sendable, Hashable {
    /// Seconds after which the broker discards the message if it is still undelivered.
    public var messageExpiry: UInt32?
    /// MIME type of the payload, e.g. `application/json`.
    public var contentType: String?
    public var responseTopic: String?
    public var correlationData: [UInt8]?
    /// Application key/value pairs, in order; a key may repeat.
    public var userProperties: [UserProperty]
    /// Subscription identifiers of the subscriptions that matched (received messages only).
    public var subscriptionIdentifiers: [UInt32]

    public struct UserProperty: Sendable, Hashable {
        public var name: String
        public var value: String
        public init(_ name: String, _ value: String) {
            self.name = name
            self.value = value
        }
    }

    public init(
        messageExpiry: UInt32? = nil, contentType: String? = nil, responseTopic: String? = nil,
        correlationData: [UInt8]? = nil, userProperties: [UserProperty] = [], subscriptionIdentifiers: [UInt32] = []
    ) {
        self.messageExpiry = messageExpiry
        self.contentType = contentType
        self.responseTopic = responseTopic
        self.correlationData = correlationData
        self.userProperties = userProperties
        self.subscriptionIdentifiers = subscriptionIdentifiers
    }

    /// Whether no property is set.
    public var isEmpty: Bool { self == MQTTProperties() }
}

/// A message received from the broker.
public struct MQTTMessage: Sendable, Hashable {
    public var topic: String
    public var payload: Data
    public var qos: QoS
    /// Set when the broker delivered a stored retained message (or, with retain-as-published, kept the flag).
    public var retain: Bool
    public var properties: MQTTProperties

    public init(topic: String, payload: Data, qos: QoS = .atMostOnce, retain: Bool = false, properties: MQTTProperties = .init()) {
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.properties = properties
    }

    /// The payload read as UTF-8 text (nil when it is not valid UTF-8).
    public var string: String? { String(data: payload, encoding: .utf8) }
}

/// What the broker answered to a publish.
public struct PublishReceipt: Sendable, Hashable {
    /// MQTT 5 reason code of the PUBACK/PUBREC (0 for QoS 0 and MQTT 3.1.1).
    public var reasonCode: Int
    /// When the network thread learned the outcome: right after writing a QoS 0 message to the socket, on
    /// reading the acknowledgement of a QoS ≥ 1 one. For a QoS 0 message, the moment it left.
    public var completed: ContinuousClock.Instant
    /// The broker reported that no subscription matched (reason code 16). Only known for QoS ≥ 1 on MQTT 5.
    public var noMatchingSubscribers: Bool { reasonCode == 16 }
}
