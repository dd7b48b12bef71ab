import GroupSync
import MQTT

/// Every topic `groupsync dashboard` publishes for one group (docs/DASHBOARDS.md): the flat topics under
/// `groupsync/dashboard/<group>/`, and the Home Assistant discovery topics
/// `<prefix>/<component>/groupsync_<group>/<object_id>/config`. The dashboard owns both subtrees: at
/// start-up it clears whatever retained message in them it would not publish itself (leftovers of an
/// earlier run).
///
/// Home Assistant's entities are per group and activity, not per session, so that their IDs are the
/// same in every session and automations can name them: an activity's entities show its newest live
/// session.
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
    /// `online` while the participant's connection is alive, `offline` once it left or was lost.
    func participant(_ id: String) -> String { "\(root)/participant/\(id)" }
    /// Everything flat, for one subscription.
    var flatFilter: String { "\(root)/#" }

    // MARK: - Home Assistant discovery

    /// Where Home Assistant announces itself: `online` after every start (its birth message).
    var homeAssistantStatus: String { "\(discoveryPrefix)/status" }
    /// Every config topic of this group, of any component.
    var discoveryFilter: String { "\(discoveryPrefix)/+/\(nodeID)/+/config" }
    func discoveryConfig(_ component: HomeAssistantEntityConfig.Component = .sensor, objectID: String) -> String {
        "\(discoveryPrefix)/\(component.rawValue)/\(nodeID)/\(objectID)/config"
    }

    /// The group's sensor: the number of live sessions.
    var sessionCountObjectID: String { "sessions" }
    /// A participant's connectivity binary sensor.
    func connectivityObjectID(_ participant: String) -> String { "\(DashboardTopics.homeAssistantID(participant))_connected" }
    /// An activity's sensor of the participants in its session.
    func participantCountObjectID(activity: String) -> String { "\(DashboardTopics.homeAssistantID(activity))_participants" }
    /// An activity's sensor of one state key of its session.
    func stateObjectID(activity: String, key: String) -> String {
        "\(DashboardTopics.homeAssistantID(activity))_state_\(DashboardTopics.homeAssistantID(key))"
    }
    /// `unique_id` (and `object_id`) of an entity: node and object ID, so unique across groups.
    func uniqueID(objectID: String) -> String { "\(nodeID)_\(objectID)" }
    /// The Home Assistant device of the group (the session count, the participants' connectivity).
    var groupDeviceID: String { nodeID }
    /// The Home Assistant device of one activity (its session's participant count and state keys).
    func activityDeviceID(_ activity: String) -> String { "\(nodeID)_\(DashboardTopics.homeAssistantID(activity))" }

    /// The component and object ID of one of this dashboard's config topics; nil for any other topic.
    func discoveryEntity(_ topic: String) -> (component: HomeAssistantEntityConfig.Component, objectID: String)? {
        guard topic.hasPrefix(discoveryPrefix + "/") else { return nil }
        let levels = topic.dropFirst(discoveryPrefix.count + 1).split(separator: "/", omittingEmptySubsequences: false)
        guard levels.count == 4, levels[1] == nodeID, !levels[2].isEmpty, levels[3] == "config",
            let component = HomeAssistantEntityConfig.Component(rawValue: String(levels[0]))
        else { return nil }
        return (component, String(levels[2]))
    }

    /// Whether `topic` is one of this dashboard's config topics.
    func isDiscoveryConfig(_ topic: String) -> Bool { discoveryEntity(topic) != nil }

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
