import BrokerSupport
import Foundation
import GroupSync
import MQTT

/// The participants' names, in order of appearance.
enum DemoNames {
    static let all = [
        "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
        "mallory", "niaj", "olivia", "peggy", "rupert", "sybil", "trent", "victor", "walter", "zoe",
    ]
}
