/// One topic filter to subscribe to, with its MQTT 5 subscription options.
public struct TopicSubscription: Sendable, Hashable {
    /// What the broker does with retained messages when the subscription is made.
    public enum RetainHandling: Int32, Sendable, Hashable {
        /// Send matching retained messages on every SUBSCRIBE (MQTT's default).
        case sendOnSubscribe = 0
        /// Send them only if the subscription did not exist yet in the session.
        case sendIfNew = 0x10
        /// Never send retained messages for this subscription.
        case doNotSend = 0x20
    }

    public var filter: String
    /// The highest QoS the broker may use to deliver matching messages.
    public var qos: QoS
    /// Do not receive messages this same connection published (MQTT 5).
    public var noLocal: Bool
    /// Keep the retain flag as the publisher set it on forwarded messages (MQTT 5).
    public var retainAsPublished: Bool
    public var retainHandling: RetainHandling

    public init(
        _ filter: String, qos: QoS = .atLeastOnce, noLocal: Bool = false, retainAsPublished: Bool = false,
        retainHandling: RetainHandling = .sendOnSubscribe
    ) {
        self.filter = filter
        self.qos = qos
        self.noLocal = noLocal
        self.retainAsPublished = retainAsPublished
        self.retainHandling = retainHandling
    }

    /// The libmosquitto `options` bit field (MQTT_SUB_OPT_*).
    var optionBits: Int32 {
        (noLocal ? 0x04 : 0) | (retainAsPublished ? 0x08 : 0) | retainHandling.rawValue
    }
}
