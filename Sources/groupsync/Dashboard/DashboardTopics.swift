import GroupSync
import MQTT

/// Every topic `groupsync dashboard` publishes for one group (docs/DASHBOARDS.md): the flat topics under
/// `groupsync/dashboard/<group>/`, and the Home Assistant discovery topics
/// `<prefix>/sensor/groupsync_<group>/<object_id>/config`. The dashboard owns both subtrees: at start-up it
/// clears whatever retained message in them it would not publish itself (leftovers of an earlier run).
struct DashboardTopics: Sendable, Hashable {
    static let flatRoot = "groupsync/dashboard"
    static let defaultDiscoveryPrefix = "homeassistant"

    let group: String
    let discoveryPrefix: String
    /// `groupsync/dashboard/<group>`
    let root: String
    /// The Home Assistant `node_id` of every config topic: `groupsync_<group>` (encoded, see ``homeAssistantID(_:)``).
    let nodeID: String

    init(group: String, discoveryPrefix: String = DashboardTopics.defaultDiscoveryPrefix) {
        self.group = group
        self.discoveryPrefix = discoveryPrefix
        self.root = "\(DashboardTopics.flatRoot)/\(group)"
        self.nodeID = "groupsync_\(DashboardTopics.homeAssistantID(group))"
    }

    /// Whether `prefix` can be a discovery prefix: a topic name without wildcards and without empty levels.
    static func isValidDiscoveryPrefix(_ prefix: String) -> Bool {
        Topic.isValidName(prefix) && !prefix.split(separator: "/", omittingEmptySubsequences: false).contains(where: \.isEmpty)
    }

    // MARK: - Flat topics (plain retained payloads, for Node-RED, Grafana, mosquitto_sub)

    /// `online` while the dashboard runs; `offline` after a clean exit or (as the MQTT will) a crash.
    var availability: String { "\(root)/availability" }
    /// The number of live sessions.
    var sessionCount: String { "\(root)/sessions" }
    /// The live session IDs as a JSON array, oldest first.
    var sessionList: String { "\(root)/session_list" }
    func session(_ id: String) -> String { "\(root)/session/\(id)" }
    func title(_ session: String) -> String { "\(self.session(session))/title" }
    func activity(_ session: String) -> String { "\(self.session(session))/activity" }
    func participantCount(_ session: String) -> String { "\(self.session(session))/participants" }
    func participantList(_ session: String) -> String { "\(self.session(session))/participant_list" }
    func state(_ session: String, key: String) -> String { "\(self.session(session))/state/\(key)" }
    /// Everything flat, for one subscription.
    var flatFilter: String { "\(root)/#" }

    // MARK: - Home Assistant discovery

    /// Where Home Assistant announces itself: `online` after every start (its birth message).
    var homeAssistantStatus: String { "\(discoveryPrefix)/status" }
    /// Every config topic of this group.
    var discoveryFilter: String { "\(discoveryPrefix)/sensor/\(nodeID)/+/config" }
    func discoveryConfig(objectID: String) -> String { "\(discoveryPrefix)/sensor/\(nodeID)/\(objectID)/config" }

    /// The group's sensor: the number of live sessions.
    var sessionCountObjectID: String { "sessions" }
    func participantCountObjectID(_ session: String) -> String { "\(DashboardTopics.homeAssistantID(session))_participants" }
    func stateObjectID(_ session: String, key: String) -> String {
        "\(DashboardTopics.homeAssistantID(session))_state_\(DashboardTopics.homeAssistantID(key))"
    }
    /// `unique_id` of a sensor: node and object ID, so unique across groups and sessions.
    func uniqueID(objectID: String) -> String { "\(nodeID)_\(objectID)" }
    /// The Home Assistant device of the group (its sensor: the session count).
    var groupDeviceID: String { nodeID }
    /// The Home Assistant device of one session (its sensors: participant count and one per state key).
    func sessionDeviceID(_ session: String) -> String { "\(nodeID)_\(DashboardTopics.homeAssistantID(session))" }

    /// Whether `topic` is one of this dashboard's config topics.
    func isDiscoveryConfig(_ topic: String) -> Bool {
        topic.hasPrefix("\(discoveryPrefix)/sensor/\(nodeID)/") && topic.hasSuffix("/config")
    }

    /// Whether `topic` is in a subtree this dashboard owns (flat or discovery).
    func isOwned(_ topic: String) -> Bool {
        topic.hasPrefix(root + "/") || isDiscoveryConfig(topic)
    }

    /// A GroupSync identifier (`A–Z a–z 0–9 . _ - : @ ~`) as a Home Assistant `node_id`/`object_id` part
    /// (`[a-zA-Z0-9_-]`, and without `_`, which separates the parts). Letters, digits and `-` stay; when
    /// anything else had to become `-`, a hash of the original follows (`page_no` → `page-no-1f0e3c2a`),
    /// so two identifiers never share a Home Assistant ID.
    static func homeAssistantID(_ identifier: String) -> String {
        var changed = false
        let mapped = identifier.unicodeScalars.map { scalar -> Character in
            switch scalar {
            case "a"..."z", "A"..."Z", "0"..."9", "-": return Character(scalar)
            default:
                changed = true
                return "-"
            }
        }
        guard changed else { return identifier }
        return String(mapped) + "-" + fnv1a(identifier)
    }

    /// 32-bit FNV-1a as 8 hex digits: stable across runs and platforms (unlike `Hasher`).
    private static func fnv1a(_ text: String) -> String {
        var hash: UInt32 = 0x811c_9dc5
        for byte in text.utf8 {
            hash ^= UInt32(byte)
            hash = hash &* 0x0100_0193
        }
        let hex = String(hash, radix: 16)
        return String(repeating: "0", count: 8 - hex.count) + hex
    }
}
