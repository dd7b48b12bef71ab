/// MQTT quality of service of a publish or a subscription.
public enum QoS: Int32, Sendable, Hashable, Comparable, CaseIterable {
    /// Fire and forget: delivered at most once, lost if the connection drops.
    case atMostOnce = 0
    /// Acknowledged: delivered at least once; the broker resends until acknowledged.
    case atLeastOnce = 1
    /// Four-way handshake: delivered exactly once.
    case exactlyOnce = 2

    public static func < (lhs: QoS, rhs: QoS) -> Bool { lhs.rawValue < rhs.rawValue }
}
