import BrokerSupport
import Foundation
import GroupSync
import MQTT

/// Prints what happens, with milliseconds since the start.
final class Timeline: Sendable {
    private let start = ContinuousClock.now

    func note(_ who: String, _ what: String) {
        let elapsed = ContinuousClock.now - start
        let ms = Double(elapsed.components.seconds) * 1_000 + Double(elapsed.components.attoseconds) / 1e15
        Output.line(String(format: "%8.1f ms  %-8@ %@", ms, who as NSString, what as NSString))
    }
}
