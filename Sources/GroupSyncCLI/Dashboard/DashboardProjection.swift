import Foundation
import GroupSync
import MQTT

/// What `groupsync dashboard` publishes, as a pure function of the MQTT messages it received: no I/O.
/// The command feeds every message to ``apply(_:)`` and publishes the returned ``Publication``s in order.
///
/// It works by reconciliation: from the group as a ``GroupView`` sees it, it derives the complete set of
/// retained topics the dashboard should hold (``desired()``), compares it with what it holds
/// (``retained``), and returns the difference — changed values, and empty payloads for topics that must
/// go. So a session that ends loses its flat topics (and its activity's entities, unless another session
/// of the activity is live), a new state key gets its sensor, and leftovers of an earlier run are cleared.
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
    /// Where nothing is retained, the welcome this dashboard asks for (``observe(as:)``): it synchronizes
    /// once that is complete, instead of once the retained replay is in.
    private(set) var welcome: ObserverWelcome?
    /// Topic → payload of every retained message under the dashboard's own topics, as far as it knows:
    /// learnt from the broker before synchronizing, then kept up to date with what it publishes.
    private(set) var retained: [String: String] = [:]
    /// How each state sensor (by object ID) shows its values, once decided (see ``StateKind``).
    private(set) var kinds: [String: StateKind] = [:]
    /// Who took part in each live session while the dashboard watched it (its members then, and at the
    /// start its member records): their connectivity entities stay, off while they are offline, until
    /// the session ends — across restarts of the dashboard too, as long as their member records do.
    private(set) var sessionParticipants: [String: Set<String>] = [:]

    /// Every participant with a connectivity entity, on or off: those online, and those of a live session.
    var participants: Set<String> { Set(view.online.keys).union(sessionParticipants.values.joined()) }

    /// How a state key's sensor shows its values. Decided once per activity and key — by the config an
    /// earlier run left retained, else by the key's first value that is not null — and then kept: Home
    /// Assistant applies a changed config in the background, so a value of a new kind could meet the old
    /// config, and a sensor that loses its state class breaks its statistics. A value of the other kind
    /// then shows as unknown (number) or as its JSON text (text).
    enum StateKind: Equatable {
        /// A `measurement`: graphs and statistics. Anything but a number is unknown.
        case number
        /// A string as its text, any other value as JSON; an object's fields are also attributes.
        case text
    }

    /// `keyring`: the group's keys, when it is private; without them its sessions show their participants
    /// and counts, not their values.
    init(group: String, discoveryPrefix: String = DashboardTopics.defaultDiscoveryPrefix, keyring: GroupKeyring? = nil) {
        topics = DashboardTopics(group: group, discoveryPrefix: discoveryPrefix)
        view = GroupView(group: group, keyring: keyring)
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
    var filters: [String] { groupFilters + [topics.flatFilter, topics.discoveryFilter, topics.homeAssistantStatus] }

    /// The welcomes and catch-ups addressed to it, if it asks for them (``observe(as:)``).
    var welcomeFilters: [String] { welcome.map { ObserverWelcome.filters(view.topics, observer: $0.observer) } ?? [] }

    /// On a group without retained messages: learn it from the welcome that `observer` asks for.
    mutating func observe(as observer: String) {
        welcome = ObserverWelcome(observer: observer)
        view = GroupView(group: topics.group, observer: observer, keyring: view.keyring)
    }

    /// Asks for the welcome (after the marker, ``observe(as:)``) at `now` (wall clock, ms).
    mutating func askWelcome(_ client: MQTTClient, now: Int64) throws(MQTTError) {
        try welcome?.ask(client, topics: view.topics, now: now)
    }

    /// The MQTT will: the broker marks the dashboard offline when its connection dies.
    var will: Publication { Publication(topics.availability, "offline") }

    // MARK: - Inputs

    /// Applies one message received at `now` (wall clock, ms) and returns what to publish.
    mutating func apply(_ message: MQTTMessage, now: Int64) -> [Publication] {
        if message.topic == topics.homeAssistantStatus {
            // Home Assistant (re)started: it wants every config again (its birth message is `online`).
            guard isSynchronized, message.payload == Data("online".utf8) else { return [] }
            return desired().filter { topics.isDiscoveryConfig($0.topic) }
        }
        if topics.isOwned(message.topic) {
            // Our own topics only matter before synchronizing: what an earlier run left behind.
            if !isSynchronized {
                retained[message.topic] = message.payload.isEmpty ? nil : String(decoding: message.payload, as: UTF8.self)
                learnKind(fromConfig: message)
            }
            return []
        }
        guard let event = view.apply(message, now: now) else { return [] }
        if welcome?.onEvent(event, view: view, now: now) == true { return synchronize() }
        return reconcile()
    }

    /// Forgets the sessions no copy keeps alive at `now` (wall clock, ms, ``GroupView/nextExpiry``) and
    /// returns what to publish.
    mutating func expire(now: Int64) -> [Publication] {
        let expired = !view.expire(now: now).isEmpty
        if welcome?.onAlarm(now: now) == true { return synchronize() }
        guard expired, isSynchronized else { return [] }
        return reconcile()
    }

    /// When ``expire(now:)`` is due next: a copy's expiry, or the end of the welcome's wait.
    var nextAlarm: Int64? { [view.nextExpiry, welcome?.deadline].compactMap { $0 }.min() }

    /// Every retained message was delivered: from now on, publish. Returns the whole projection (minus
    /// what is already retained as it should be) and clears for leftovers.
    mutating func synchronize() -> [Publication] {
        isSynchronized = true
        return reconcile()
    }

    /// After a reconnect: forget everything and learn it again from the retained messages (a session may
    /// have ended, a participant may have gone, while the connection was down).
    mutating func restart() {
        view = GroupView(group: topics.group, observer: welcome?.observer, keyring: view.keyring)
        welcome = welcome.map { ObserverWelcome(observer: $0.observer) }
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
        let sessions = liveSessions
        var result = [Publication(topics.availability, "online")]
        result.append(config(sessionCountConfig()))
        for participant in participants.sorted() { result.append(config(connectivityConfig(participant))) }
        for (activity, session) in shownSessions {
            result.append(config(participantCountConfig(activity, session)))
            for key in session.states.keys.sorted() {
                guard let kind = kinds[topics.stateObjectID(activity: activity, key: key)] else { continue }
                result.append(config(stateConfig(activity, session, key: key, kind: kind)))
            }
        }
        result.append(Publication(topics.sessionCount, String(sessions.count)))
        result.append(Publication(topics.sessionList, json(.array(sessions.map { .string($0.announcement.session) }))))
        for participant in participants.sorted() {
            result.append(Publication(topics.participant(participant), view.online[participant] == nil ? "offline" : "online"))
        }
        for session in sessions {
            let id = session.announcement.session
            let active = view.active(session)
            let title = session.announcement.activity.title
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

    /// The live sessions, oldest first.
    private var liveSessions: [GroupView.Session] {
        view.sessions.values.sorted {
            ($0.announcement.createdAt, $0.announcement.session) < ($1.announcement.createdAt, $1.announcement.session)
        }
    }

    /// The session each activity's entities show — its newest live session — by activity identifier.
    private var shownSessions: [(activity: String, session: GroupView.Session)] {
        var newest: [String: GroupView.Session] = [:]
        for session in liveSessions { newest[session.announcement.activity.type] = session }
        return newest.keys.sorted().map { ($0, newest[$0]!) }
    }

    /// The difference between ``desired()`` and ``retained``, which it then updates: first clears of
    /// configs that must go (Home Assistant removes the entity), then new and changed values, then
    /// clears of flat topics that must go.
    private mutating func reconcile() -> [Publication] {
        guard isSynchronized else { return [] }
        for (id, session) in view.sessions { sessionParticipants[id, default: []].formUnion(session.members.keys) }
        sessionParticipants = sessionParticipants.filter { view.sessions[$0.key] != nil }
        learnKinds()
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

    // MARK: - Kinds of state sensors

    /// Decides the kind of every shown state key that has none yet, from its value unless it is null.
    private mutating func learnKinds() {
        for (activity, session) in shownSessions {
            for (key, record) in session.states {
                let objectID = topics.stateObjectID(activity: activity, key: key)
                guard kinds[objectID] == nil else { continue }
                switch record.value {
                case .null: continue
                case .int, .double: kinds[objectID] = .number
                default: kinds[objectID] = .text
                }
            }
        }
    }

    /// Takes the kind of a state sensor from its config left retained by an earlier run.
    private mutating func learnKind(fromConfig message: MQTTMessage) {
        guard let (component, objectID) = topics.discoveryEntity(message.topic), component == .sensor,
            objectID.contains("_state_"), case let .object(config)? = Wire.decode(JSONValue.self, from: message.payload)
        else { return }
        kinds[objectID] = config["state_class"] == nil ? .text : .number
    }

    // MARK: - Discovery configs

    private func config(_ entity: HomeAssistantEntityConfig) -> Publication {
        Publication(topics.discoveryConfig(entity.component, objectID: entity.topicObjectID), entity.json)
    }

    private var groupDevice: HomeAssistantEntityConfig.Device {
        .init(identifiers: [topics.groupDeviceID], name: "GroupSync \(topics.group)", manufacturer: "GroupSync", model: "Group")
    }

    /// An activity's device, named after the title of the session it shows.
    private func activityDevice(_ activity: String, _ session: GroupView.Session) -> HomeAssistantEntityConfig.Device {
        let title = session.announcement.activity.title
        return .init(
            identifiers: [topics.activityDeviceID(activity)], name: title.isEmpty ? activity : title, manufacturer: "GroupSync",
            model: activity, viaDevice: topics.groupDeviceID)
    }

    /// An entity of this group: its IDs from `objectID`, available while the dashboard is.
    private func entity(
        _ objectID: String, component: HomeAssistantEntityConfig.Component = .sensor, name: String, stateTopic: String,
        device: HomeAssistantEntityConfig.Device
    ) -> HomeAssistantEntityConfig {
        let id = topics.uniqueID(objectID: objectID)
        return HomeAssistantEntityConfig(
            component: component, topicObjectID: objectID, name: name, uniqueID: id, objectID: id, stateTopic: stateTopic,
            availabilityTopic: topics.availability, device: device)
    }

    func sessionCountConfig() -> HomeAssistantEntityConfig {
        var config = entity(topics.sessionCountObjectID, name: "Sessions", stateTopic: topics.sessionCount, device: groupDevice)
        config.stateClass = "measurement"
        config.unitOfMeasurement = "sessions"
        config.icon = "mdi:account-group"
        return config
    }

    /// Whether a participant's connection is alive: `online` and `offline` on its flat topic.
    func connectivityConfig(_ participant: String) -> HomeAssistantEntityConfig {
        var config = entity(
            topics.connectivityObjectID(participant), component: .binarySensor, name: participant,
            stateTopic: topics.participant(participant), device: groupDevice)
        config.deviceClass = "connectivity"
        config.payloadOn = "online"
        config.payloadOff = "offline"
        return config
    }

    func participantCountConfig(_ activity: String, _ session: GroupView.Session) -> HomeAssistantEntityConfig {
        var config = entity(
            topics.participantCountObjectID(activity: activity), name: "Participants",
            stateTopic: topics.participantCount(session.announcement.session), device: activityDevice(activity, session))
        config.stateClass = "measurement"
        config.unitOfMeasurement = "participants"
        config.icon = "mdi:account-multiple"
        return config
    }

    /// A state key's sensor, of its kept kind. Its templates accept any payload — another kind, JSON
    /// null, or the empty payload that clears the topic when the session ends — without an error.
    func stateConfig(_ activity: String, _ session: GroupView.Session, key: String, kind: StateKind) -> HomeAssistantEntityConfig {
        let topic = topics.state(session.announcement.session, key: key)
        var config = entity(
            topics.stateObjectID(activity: activity, key: key), name: key, stateTopic: topic, device: activityDevice(activity, session))
        switch kind {
        case .number:
            config.stateClass = "measurement"
            config.valueTemplate = DashboardProjection.numberTemplate
        case .text:
            config.valueTemplate = DashboardProjection.textTemplate
            config.jsonAttributesTopic = topic
            config.jsonAttributesTemplate = DashboardProjection.attributesTemplate
        }
        return config
    }

    /// A number (not a boolean) as itself; anything else as None, which Home Assistant shows as unknown.
    static let numberTemplate =
        "{{ value_json if value_json is defined and value_json is number and value_json is not boolean else None }}"
    /// A JSON string as its text, any other JSON value as JSON, at most 255 characters (Home Assistant's
    /// limit for a state); None for a payload that is not JSON.
    static let textTemplate =
        "{{ (value_json if value_json is string else value_json | to_json)[:255] if value_json is defined else None }}"
    /// An object's fields; for anything else no attributes (so an object that becomes an array or a
    /// number leaves no stale attributes behind).
    static let attributesTemplate = "{{ value_json | to_json if value_json is defined and value_json is mapping else '{}' }}"

    private func json(_ value: JSONValue) -> String { view.json(value) }
}
