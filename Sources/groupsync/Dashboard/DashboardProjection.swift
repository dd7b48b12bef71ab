import Foundation
import GroupSync
import MQTT

/// What `groupsync dashboard` publishes, as a pure function of the MQTT messages it received: no I/O.
/// The command feeds every message to ``apply(_:)`` and publishes the returned ``Publication``s in order.
///
/// It works by reconciliation: from the group as a ``GroupView`` sees it, it derives the complete set of
/// retained topics the dashboard should hold (``desired()``), compares it with what it holds
/// (``retained``), and returns the difference — changed values, and empty payloads for topics that must
/// go. So a session that ends loses its discovery configs and flat topics, a new state key gets its
/// sensor, a title change updates the device name, and leftovers of an earlier run are cleared.
///
/// Life cycle: until ``synchronize()`` (called once the broker delivered every retained message) it only
/// learns — the group's traffic, and the retained messages already under its own topics; it publishes
/// nothing, so start-up does not flicker through partial states.
struct DashboardProjection {
    /// One retained publish (QoS 1). An empty payload clears the topic.
    struct Publication: Hashable, Sendable, CustomStringConvertible {
        var topic: String
        var payload: String

        init(_ topic: String, _ payload: String) {
            self.topic = topic
            self.payload = payload
        }

        var isClear: Bool { payload.isEmpty }
        /// As `mosquitto_sub -v` prints it: `topic payload`, `(null)` for an empty payload.
        var description: String { "\(topic) \(isClear ? "(null)" : payload)" }
    }

    let topics: DashboardTopics
    private(set) var view: GroupView
    private(set) var isSynchronized = false
    /// Topic → payload of every retained message under the dashboard's own topics, as far as it knows:
    /// learnt from the broker before synchronizing, then kept up to date with what it publishes.
    private(set) var retained: [String: String] = [:]

    init(group: String, discoveryPrefix: String = DashboardTopics.defaultDiscoveryPrefix) {
        topics = DashboardTopics(group: group, discoveryPrefix: discoveryPrefix)
        view = GroupView(group: group)
    }

    /// The GroupSync filters to subscribe to, in this order (announcements before the members and state
    /// records of their sessions, which ``GroupView`` ignores for unknown sessions).
    var groupFilters: [String] {
        [
            view.topics.presenceFilter, view.topics.announcementFilter, "\(view.topics.root)/s/+/member/+",
            "\(view.topics.root)/s/+/state/+/+",
        ]
    }

    /// Everything the dashboard subscribes to: the group, its own topics (to find leftovers) and Home
    /// Assistant's status.
    var filters: [String] {
        groupFilters + [topics.flatFilter, topics.discoveryFilter, topics.homeAssistantStatus]
    }

    /// The MQTT will: the broker marks the dashboard offline when its connection dies.
    var will: Publication { Publication(topics.availability, "offline") }

    // MARK: - Inputs

    /// Applies one received message and returns what to publish.
    mutating func apply(_ message: MQTTMessage) -> [Publication] {
        if message.topic == topics.homeAssistantStatus {
            // Home Assistant (re)started: it wants every config again (its birth message is `online`).
            guard isSynchronized, message.payload == Data("online".utf8) else { return [] }
            return desired().filter { topics.isDiscoveryConfig($0.topic) }
        }
        if topics.isOwned(message.topic) {
            // Our own topics only matter before synchronizing: what an earlier run left behind.
            if !isSynchronized {
                retained[message.topic] = message.payload.isEmpty ? nil : String(decoding: message.payload, as: UTF8.self)
            }
            return []
        }
        guard view.apply(message) != nil else { return [] }
        return reconcile()
    }

    /// Every retained message was delivered: from now on, publish. Returns the whole projection (minus
    /// what is already retained as it should be) and clears for leftovers.
    mutating func synchronize() -> [Publication] {
        isSynchronized = true
        return reconcile()
    }

    /// After a reconnect: forget everything and learn it again from the retained messages (a session may
    /// have ended, a participant may have gone, while the connection was down).
    mutating func restart() {
        view = GroupView(group: topics.group)
        retained = [:]
        isSynchronized = false
    }

    /// A clean exit: mark the dashboard offline (the retained values stay, so dashboards show the last
    /// known state, flagged unavailable).
    mutating func stop() -> [Publication] {
        retained[topics.availability] = "offline"
        return [will]
    }

    // MARK: - The projection

    /// Every retained message the dashboard should hold now, in publishing order: availability, discovery
    /// configs, then the flat topics. Empty before ``synchronize()``.
    func desired() -> [Publication] {
        guard isSynchronized else { return [] }
        let sessions = view.sessions.values.sorted {
            ($0.announcement.createdAt, $0.announcement.session) < ($1.announcement.createdAt, $1.announcement.session)
        }
        var result = [Publication(topics.availability, "online")]
        result.append(Publication(topics.discoveryConfig(objectID: topics.sessionCountObjectID), sessionCountConfig().json))
        for session in sessions {
            let id = session.announcement.session
            result.append(
                Publication(topics.discoveryConfig(objectID: topics.participantCountObjectID(id)), participantCountConfig(session).json))
            for key in session.states.keys.sorted() {
                guard let record = session.states[key] else { continue }
                result.append(
                    Publication(
                        topics.discoveryConfig(objectID: topics.stateObjectID(id, key: key)),
                        stateConfig(session, key: key, value: record.value).json))
            }
        }
        result.append(Publication(topics.sessionCount, String(sessions.count)))
        result.append(Publication(topics.sessionList, json(.array(sessions.map { .string($0.announcement.session) }))))
        for session in sessions {
            let id = session.announcement.session
            let active = view.active(session)
            let title = session.announcement.activity.metadata.title
            // An empty retained payload would clear the topic: an empty title has none.
            if !title.isEmpty { result.append(Publication(topics.title(id), title)) }
            result.append(Publication(topics.activity(id), session.announcement.activity.type))
            result.append(Publication(topics.participantCount(id), String(active.count)))
            result.append(Publication(topics.participantList(id), json(.array(active.map(JSONValue.string)))))
            for key in session.states.keys.sorted() {
                guard let record = session.states[key] else { continue }
                result.append(Publication(topics.state(id, key: key), json(record.value)))
            }
        }
        return result
    }

    /// The difference between ``desired()`` and ``retained``, which it then updates: first clears of
    /// configs that must go (Home Assistant removes the entity), then new and changed values, then
    /// clears of flat topics that must go.
    private mutating func reconcile() -> [Publication] {
        guard isSynchronized else { return [] }
        let wanted = desired()
        let wantedTopics = Set(wanted.map(\.topic))
        let gone = retained.keys.filter { !wantedTopics.contains($0) }.sorted()
        var result = gone.filter(topics.isDiscoveryConfig).map { Publication($0, "") }
        result += wanted.filter { retained[$0.topic] != $0.payload }
        result += gone.filter { !topics.isDiscoveryConfig($0) }.map { Publication($0, "") }
        for publication in result {
            retained[publication.topic] = publication.isClear ? nil : publication.payload
        }
        return result
    }

    // MARK: - Discovery configs

    private var groupDevice: HomeAssistantSensorConfig.Device {
        .init(identifiers: [topics.groupDeviceID], name: "GroupSync \(topics.group)", manufacturer: "GroupSync", model: "Group")
    }

    private func sessionDevice(_ session: GroupView.Session) -> HomeAssistantSensorConfig.Device {
        let id = session.announcement.session
        let title = session.announcement.activity.metadata.title
        return .init(
            identifiers: [topics.sessionDeviceID(id)], name: "\(title.isEmpty ? session.announcement.activity.type : title) (\(id))",
            manufacturer: "GroupSync", model: session.announcement.activity.type, viaDevice: topics.groupDeviceID)
    }

    func sessionCountConfig() -> HomeAssistantSensorConfig {
        HomeAssistantSensorConfig(
            name: "Sessions", uniqueID: topics.uniqueID(objectID: topics.sessionCountObjectID), stateTopic: topics.sessionCount,
            availabilityTopic: topics.availability, device: groupDevice, stateClass: "measurement", unitOfMeasurement: "sessions",
            icon: "mdi:account-group")
    }

    func participantCountConfig(_ session: GroupView.Session) -> HomeAssistantSensorConfig {
        let id = session.announcement.session
        return HomeAssistantSensorConfig(
            name: "Participants", uniqueID: topics.uniqueID(objectID: topics.participantCountObjectID(id)),
            stateTopic: topics.participantCount(id), availabilityTopic: topics.availability, device: sessionDevice(session),
            stateClass: "measurement", unitOfMeasurement: "participants", icon: "mdi:account-multiple")
    }

    /// A state key's sensor. Its config follows the kind of the current value: a number is a
    /// `measurement`; anything else is text (JSON, cut to Home Assistant's 255 characters), and an
    /// object's fields also become attributes. When the kind changes, the config is published again.
    func stateConfig(_ session: GroupView.Session, key: String, value: JSONValue) -> HomeAssistantSensorConfig {
        let id = session.announcement.session
        var config = HomeAssistantSensorConfig(
            name: key, uniqueID: topics.uniqueID(objectID: topics.stateObjectID(id, key: key)), stateTopic: topics.state(id, key: key),
            availabilityTopic: topics.availability, device: sessionDevice(session))
        switch value {
        case .int, .double:
            config.stateClass = "measurement"
            config.valueTemplate = "{{ value_json }}"
        case .object:
            config.valueTemplate = DashboardProjection.textTemplate
            config.jsonAttributesTopic = topics.state(id, key: key)
        default:
            config.valueTemplate = DashboardProjection.textTemplate
        }
        return config
    }

    /// A JSON string as its text, any other JSON value as JSON; at most 255 characters (Home Assistant's
    /// limit for a state).
    static let textTemplate = "{{ (value_json if value_json is string else value_json | tojson)[:255] }}"

    private func json(_ value: JSONValue) -> String { view.json(value) }
}
