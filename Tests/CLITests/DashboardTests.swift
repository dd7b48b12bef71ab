import BrokerSupport
import Foundation
import GroupSync
import MQTT
import Synchronization
import Testing

/// `groupsync dashboard`: Home Assistant discovery and flat topics, against a real broker, and its
/// projection alone (through `--replay`, which runs the same projection without a broker).
@Suite(.timeLimit(.minutes(timeLimitMinutes(2)))) struct DashboardTests {
    // MARK: - Against a broker

    @Test(.needsOwnBroker("asserts on the whole homeassistant/ and groupsync/dashboard/ trees, which every dashboard on a broker shares"))
    func discoveryAndFlatTopicsFollowASessionUntilItEnds() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = "livingroom"
            let common = ["--broker", broker.url, "--group", group]
            let flat = "groupsync/dashboard/\(group)"
            let recorder = try await Recorder.start(broker, filters: ["homeassistant/#", "groupsync/dashboard/#"])
            defer { recorder.stop() }

            let dashboard = try CLIProcess(["dashboard"] + common)
            _ = try await dashboard.waitForLine { $0.hasPrefix("synchronized:") }
            try await recorder.wait(for: "\(flat)/availability", toBe: "online")
            try await recorder.wait(for: "\(flat)/sessions", toBe: "0")
            try await recorder.wait(for: "\(flat)/session_list", toBe: "[]")
            let groupConfig = "homeassistant/sensor/groupsync_\(group)/sessions/config"
            try await recorder.waitForMessages("the group's sensor config") { $0.latest[groupConfig]?.isEmpty == false }

            // A session starts: alice opens it, bob joins.
            let alice = try CLIProcess(
                ["join", "com.example.board", "--as", "alice", "--title", "Movie night", "--state-key", "page"] + common)
            let line = try await alice.waitForLine { $0.hasPrefix("session ") }
            let id = String(line.split(separator: " ")[1])
            let session = "\(flat)/session/\(id)"
            try await recorder.wait(for: "\(flat)/sessions", toBe: "1")
            try await recorder.wait(for: "\(flat)/session_list", toBe: #"["\#(id)"]"#)
            try await recorder.wait(for: "\(session)/title", toBe: "Movie night")
            try await recorder.wait(for: "\(session)/activity", toBe: "com.example.board")
            try await recorder.wait(for: "\(session)/participants", toBe: "1")
            try await recorder.wait(for: "\(session)/participant_list", toBe: #"["alice"]"#)
            _ = try await dashboard.waitForLine { $0 == "session \(id) published" }

            let bob = try CLIProcess(["join", "com.example.board", "--as", "bob", "--session", id, "--state-key", "volume"] + common)
            _ = try await alice.waitForLine { $0 == "participants alice,bob" }
            try await recorder.wait(for: "\(session)/participants", toBe: "2")
            try await recorder.wait(for: "\(session)/participant_list", toBe: #"["alice","bob"]"#)

            // State values follow sets, as plain JSON; a state sensor keeps the kind of its first value.
            let pageConfig = "homeassistant/sensor/groupsync_\(group)/\(Self.board)_state_page/config"
            let volumeConfig = "homeassistant/sensor/groupsync_\(group)/\(Self.board)_state_volume/config"
            alice.send(#""intro""#)
            try await recorder.wait(for: "\(session)/state/page", toBe: #""intro""#)
            try await recorder.waitForMessages("page's config as text") { Self.object($0.latest[pageConfig])?["value_template"] != nil }
            #expect(Self.object(recorder.latest[pageConfig])?["state_class"] == nil)
            #expect(Self.object(recorder.latest[pageConfig])?["json_attributes_topic"] as? String == "\(session)/state/page")
            alice.send("3")
            try await recorder.wait(for: "\(session)/state/page", toBe: "3")
            bob.send("0.5")
            try await recorder.wait(for: "\(session)/state/volume", toBe: "0.5")
            try await recorder.waitForMessages("volume's config") { $0.latest[volumeConfig]?.isEmpty == false }
            #expect(Self.object(recorder.latest[volumeConfig])?["state_class"] as? String == "measurement")
            alice.send(#"{"chapter":2,"page":4}"#)
            try await recorder.wait(for: "\(session)/state/page", toBe: #"{"chapter":2,"page":4}"#)
            #expect(recorder.snapshot.count(pageConfig) == 1, "page stays text: its config is never published again")

            // Every config, field by field, against Home Assistant's schemas.
            let sessionConfigs = [
                "homeassistant/sensor/groupsync_\(group)/\(Self.board)_participants/config", pageConfig, volumeConfig,
            ]
            let connectivity = ["alice", "bob"].map { "homeassistant/binary_sensor/groupsync_\(group)/\($0)_connected/config" }
            try await recorder.waitForMessages("both connectivity entities") { seen in connectivity.allSatisfy { seen.latest[$0] != nil } }
            let configs = recorder.latest.filter { $0.key.hasPrefix("homeassistant/") && !$0.value.isEmpty }
            #expect(Set(configs.keys) == Set([groupConfig] + sessionConfigs + connectivity))
            Self.checkDiscovery(configs, values: recorder.latest)
            let participants = try #require(Self.object(configs[sessionConfigs[0]]))
            #expect(participants["name"] as? String == "Participants")
            #expect(participants["state_topic"] as? String == "\(session)/participants")
            #expect(participants["state_class"] as? String == "measurement")
            #expect(participants["unit_of_measurement"] as? String == "participants")
            let device = try #require(participants["device"] as? [String: Any])
            #expect(device["name"] as? String == "Movie night")
            #expect(device["model"] as? String == "com.example.board")
            #expect(device["via_device"] as? String == "groupsync_\(group)")
            let sessions = try #require(Self.object(configs[groupConfig]))
            #expect(sessions["state_topic"] as? String == "\(flat)/sessions")
            #expect(sessions["unit_of_measurement"] as? String == "sessions")
            let page = try #require(Self.object(configs[pageConfig]))
            #expect(page["name"] as? String == "page")
            #expect(page["state_topic"] as? String == "\(session)/state/page")
            #expect((page["value_template"] as? String)?.contains("value_json") == true)
            #expect(Self.object(configs[volumeConfig])?["state_class"] as? String == "measurement")
            try await recorder.wait(for: "\(flat)/participant/bob", toBe: "online")

            // A participant leaves: the count follows; his connectivity entity stays, off, while the session lives.
            bob.signal(SIGINT)  // leaves cleanly, as Ctrl-C would
            #expect(try await Self.exit(bob, "bob") == 0)
            try await recorder.wait(for: "\(session)/participants", toBe: "1")
            try await recorder.wait(for: "\(session)/participant_list", toBe: #"["alice"]"#)
            try await recorder.wait(for: "\(flat)/participant/bob", toBe: "offline")
            #expect(recorder.latest[connectivity[1]] == configs[connectivity[1]])
            #expect(recorder.latest["\(session)/state/volume"] == "0.5", "bob's last value stays, as in the session")

            // Home Assistant restarts: its birth message brings every config again, unchanged.
            let before = recorder.snapshot
            let observer = try await Self.connectedClient(broker)
            try await observer.publish(to: "homeassistant/status", string: "online")
            try await recorder.waitForMessages("every config published again") { now in
                configs.keys.allSatisfy { now.count($0) > before.count($0) }
            }
            for (topic, payload) in configs { #expect(recorder.latest[topic] == payload, "\(topic) republished unchanged") }
            // Anything else on the status topic is not a restart.
            let afterRestart = recorder.snapshot
            try await observer.publish(to: "homeassistant/status", string: "offline")

            // The session ends (carol, through the library): its configs and flat topics go.
            let carol = try await GroupCoordinator.connect(.init(broker: broker.url, group: group, participant: "carol"))
            let live = try #require(carol.currentSessions(activityIdentifier: "com.example.board").first { $0.id == id })
            try await live.join()
            try await recorder.wait(for: "\(session)/participants", toBe: "2")
            await live.end()
            _ = try await alice.waitForLine { $0 == "ended carol" }
            #expect(try await Self.exit(alice, "alice") == 0)
            for topic in sessionConfigs { try await recorder.wait(for: topic, toBe: "") }
            for suffix in ["title", "activity", "participants", "participant_list", "state/page", "state/volume"] {
                try await recorder.wait(for: "\(session)/\(suffix)", toBe: "")
            }
            try await recorder.wait(for: "\(flat)/sessions", toBe: "0")
            try await recorder.wait(for: "\(flat)/session_list", toBe: "[]")
            _ = try await dashboard.waitForLine { $0 == "session \(id) removed" }
            await carol.close()
            // alice and bob took part in the session only: their sensors go with it.
            for topic in connectivity { try await recorder.wait(for: topic, toBe: "") }
            #expect(
                configs.keys.allSatisfy {
                    afterRestart.count($0) == recorder.snapshot.count($0) || sessionConfigs.contains($0) || connectivity.contains($0)
                }, "`offline` on homeassistant/status republishes nothing")

            // A fresh subscriber finds nothing of the session; the group's sensor stays.
            let retained = try await Self.retained(broker, filters: ["homeassistant/#", "groupsync/dashboard/#"])
            #expect(retained.keys.filter { $0.contains(id) }.isEmpty, "left: \(retained.keys.filter { $0.contains(id) })")
            #expect(retained[groupConfig] == configs[groupConfig])
            #expect(retained["\(flat)/sessions"] == "0")
            #expect(retained["\(flat)/availability"] == "online")

            // The next session of the activity has the same entities, showing it.
            let dave = try CLIProcess(["join", "com.example.board", "--as", "dave", "--state-key", "volume"] + common)
            let next = try #require(try await dave.waitForLine { $0.hasPrefix("session ") }.split(separator: " ").dropFirst().first)
            #expect(next != id)
            try await recorder.waitForMessages("the participants sensor shows the next session") {
                Self.object($0.latest[sessionConfigs[0]])?["state_topic"] as? String == "\(flat)/session/\(next)/participants"
            }
            let again = try #require(Self.object(recorder.latest[sessionConfigs[0]]))
            #expect(again["unique_id"] as? String == participants["unique_id"] as? String)
            #expect(again["object_id"] as? String == participants["object_id"] as? String)
            dave.closeInput()
            #expect(try await Self.exit(dave, "dave") == 0)

            // Ctrl-C: a clean exit says offline.
            dashboard.signal(SIGINT)
            #expect(try await Self.exit(dashboard, "dashboard") == 0)
            try await recorder.wait(for: "\(flat)/availability", toBe: "offline")
            #expect(try await Self.retained(broker, filters: ["\(flat)/availability"]) == ["\(flat)/availability": "offline"])
            await observer.disconnect()
        }
    }

    @Test(.needsOwnBroker("asserts on the whole homeassistant/ and groupsync/dashboard/ trees, which every dashboard on a broker shares"))
    func theWillSaysOfflineAndARestartClearsLeftovers() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = "kitchen"
            let flat = "groupsync/dashboard/\(group)"
            let common = ["--broker", broker.url, "--group", group]
            let recorder = try await Recorder.start(broker, filters: ["homeassistant/#", "groupsync/dashboard/#"])
            defer { recorder.stop() }
            let first = try CLIProcess(["dashboard"] + common)
            _ = try await first.waitForLine { $0.hasPrefix("synchronized:") }
            try await recorder.wait(for: "\(flat)/availability", toBe: "online")

            // A participant crashes: its presence turns lost and the count drops.
            let alice = try CLIProcess(["join", "com.example.board", "--as", "alice"] + common)
            let line = try await alice.waitForLine { $0.hasPrefix("session ") }
            let id = String(line.split(separator: " ")[1])
            try await recorder.wait(for: "\(flat)/session/\(id)/participants", toBe: "1")
            try await recorder.wait(for: "\(flat)/participant/alice", toBe: "online")
            alice.signal(SIGKILL)
            _ = try await Self.exit(alice, "alice")
            try await recorder.wait(for: "\(flat)/session/\(id)/participants", toBe: "0")
            try await recorder.wait(for: "\(flat)/session/\(id)/participant_list", toBe: "[]")
            try await recorder.wait(for: "\(flat)/participant/alice", toBe: "offline")

            // The dashboard dies: the broker publishes its will.
            first.signal(SIGKILL)
            _ = try await Self.exit(first, "first")
            try await recorder.wait(for: "\(flat)/availability", toBe: "offline")
            #expect(try await Self.retained(broker, filters: ["\(flat)/availability"]) == ["\(flat)/availability": "offline"])

            // Leftovers in the dashboard's subtrees (a session that ended while it was down, say).
            let observer = try await Self.connectedClient(broker)
            let ghostConfig = "homeassistant/sensor/groupsync_\(group)/ghost_participants/config"
            try await observer.publish(to: ghostConfig, string: #"{"name":"Participants"}"#, retain: true)
            try await observer.publish(to: "\(flat)/session/ghost/participants", string: "7", retain: true)
            let foreign = "homeassistant/sensor/someone_else/x/config"
            try await observer.publish(to: foreign, string: "{}", retain: true)

            let second = try CLIProcess(["dashboard"] + common)
            _ = try await second.waitForLine { $0.hasPrefix("synchronized:") }
            try await recorder.wait(for: "\(flat)/availability", toBe: "online")
            try await recorder.wait(for: ghostConfig, toBe: "")
            try await recorder.wait(for: "\(flat)/session/ghost/participants", toBe: "")
            let retained = try await Self.retained(broker, filters: ["homeassistant/#", "groupsync/dashboard/#"])
            #expect(retained.keys.filter { $0.contains("ghost") }.isEmpty)
            #expect(retained[foreign] == "{}", "only its own subtrees")
            #expect(retained["\(flat)/session/\(id)/participants"] == "0", "the live session is still there")
            Self.checkDiscovery(retained.filter { $0.key.contains("/groupsync_\(group)/") }, values: retained)
            second.signal(SIGTERM)
            #expect(try await Self.exit(second, "second") == 0)
            try await recorder.wait(for: "\(flat)/availability", toBe: "offline")
            await observer.disconnect()
        }
    }

    @Test(.needsOwnBroker("restarts it")) func afterABrokerRestartEverythingIsPublishedAgain() async throws {
        // Without persistence the restarted broker has lost every retained message: the participants
        // republish theirs, the dashboard learns the group again and republishes the whole projection.
        try await MosquittoBroker.withBroker { broker in
            let group = "hall"
            let flat = "groupsync/dashboard/\(group)"
            let common = ["--broker", broker.url, "--group", group]
            let dashboard = try CLIProcess(["dashboard"] + common)
            _ = try await dashboard.waitForLine { $0.hasPrefix("synchronized:") }
            let alice = try CLIProcess(["join", "com.example.board", "--as", "alice", "--state-key", "page"] + common)
            let line = try await alice.waitForLine { $0.hasPrefix("session ") }
            let id = String(line.split(separator: " ")[1])
            alice.send("7")
            _ = try await alice.waitForLine { $0 == "state page 7" }
            _ = try await dashboard.waitForLine { $0 == "session \(id) published" }
            let expected = [
                "\(flat)/availability": "online", "\(flat)/sessions": "1", "\(flat)/session/\(id)/participants": "1",
                "\(flat)/session/\(id)/state/page": "7",
            ]
            let configs = ["sessions", "\(Self.board)_participants", "\(Self.board)_state_page"].map {
                "homeassistant/sensor/groupsync_\(group)/\($0)/config"
            }
            try await waitUntil(timeout: .seconds(10), "the projection retained") {
                let now = try await Self.retained(broker, filters: ["homeassistant/#", "groupsync/dashboard/#"])
                return expected.allSatisfy { now[$0.key] == $0.value } && configs.allSatisfy { now[$0] != nil }
            }

            // (Not checked: that the restarted broker starts empty — the dashboard may already be back.)
            try await broker.restart()
            try await waitUntil(timeout: .seconds(20), pollEvery: .milliseconds(50), "the projection retained again") {
                let now = try await Self.retained(broker, filters: ["homeassistant/#", "groupsync/dashboard/#"])
                return expected.allSatisfy { now[$0.key] == $0.value } && configs.allSatisfy { now[$0] != nil }
            }
            try await waitUntil(timeout: .seconds(5), "it synchronized again after reconnecting") {
                dashboard.output.filter { $0.hasPrefix("synchronized:") }.count >= 2
            }
            // Not EOF: the restarted mosquitto inherited the write end of alice's stdin from this process.
            alice.signal(SIGINT)
            #expect(try await Self.exit(alice, "alice") == 0)
            dashboard.signal(SIGINT)
            #expect(try await Self.exit(dashboard, "dashboard") == 0)
        }
    }

    /// The Grafana query of docs/DASHBOARDS.md, read as the MQTT data source plugin reads it: an MQTT 3.1.1
    /// subscription to the exact topic, which gets a plain number that follows the sessions.
    @Test(.needsOwnBroker("follows the documented topic of the group family, which other runs on a broker share"))
    func theDocumentedGrafanaQueryFollowsTheSessions() async throws {
        let query = try #require(Self.object(try Self.docsBlock("grafana-query")))
        #expect((query["datasource"] as? [String: Any])?["type"] as? String == "grafana-mqtt-datasource")
        let documented = try #require(query["topic"] as? String)
        #expect(documented == "groupsync/dashboard/family/sessions")
        try await MosquittoBroker.withBroker { broker in
            let common = ["--broker", broker.url, "--group", "family"]
            var configuration = try MQTTClient.Configuration(url: broker.url)
            configuration.protocolVersion = .v311
            let grafana = try MQTTClient(configuration: configuration)
            try await grafana.connect()
            let values = LockedValue<[String]>([])
            let subscription = try await grafana.subscribe(to: [TopicSubscription(documented)])
            let reader = Task { for await message in subscription { values.withLock { $0.append(message.string ?? "") } } }
            defer { reader.cancel() }
            let dashboard = try CLIProcess(["dashboard"] + common)
            try await waitUntil("0 sessions") { values.withLock { $0.last } == "0" }
            let alice = try CLIProcess(["join", "com.example.board", "--as", "alice"] + common)
            try await waitUntil("1 session") { values.withLock { $0.last } == "1" }
            let id = try #require(try await alice.waitForLine { $0.hasPrefix("session ") }.split(separator: " ").dropFirst().first)
            #expect(try await runCLI(["end", String(id)] + common).status == 0)
            try await waitUntil("0 sessions again") { values.withLock { $0.last } == "0" }
            #expect(values.withLock { $0 }.allSatisfy { Int($0) != nil }, "plain numbers: \(values.withLock { $0 })")
            #expect(try await Self.exit(alice, "alice") == 0)
            dashboard.signal(SIGTERM)
            #expect(try await Self.exit(dashboard, "dashboard") == 0)
            await grafana.disconnect()
        }
    }

    @Test(.needsOwnBroker("asserts on the whole homeassistant/ and groupsync/dashboard/ trees, which every dashboard on a broker shares"))
    func aCustomDiscoveryPrefixMovesConfigsAndTheStatusTopic() async throws {
        try await MosquittoBroker.withBroker { broker in
            let recorder = try await Recorder.start(broker, filters: ["ha/#", "homeassistant/#"])
            defer { recorder.stop() }
            let dashboard = try CLIProcess(["dashboard", "--broker", broker.url, "--group", "g", "--discovery-prefix", "ha", "--verbose"])
            _ = try await dashboard.waitForLine { $0.hasPrefix("synchronized:") }
            let config = "ha/sensor/groupsync_g/sessions/config"
            try await recorder.waitForMessages("config under ha/") { $0.latest[config]?.isEmpty == false }
            #expect(dashboard.output.contains { $0.hasPrefix("\(config) {") }, "--verbose prints each publish")
            #expect(dashboard.output.contains("groupsync/dashboard/g/availability online"))
            let observer = try await Self.connectedClient(broker)
            try await observer.publish(to: "ha/status", string: "online")
            try await recorder.waitForMessages("config again") { $0.count(config) == 2 }
            #expect(recorder.latest.keys.allSatisfy { !$0.hasPrefix("homeassistant/") })
            dashboard.signal(SIGINT)
            #expect(try await Self.exit(dashboard, "dashboard") == 0)
            await observer.disconnect()
        }
    }

    // MARK: - The projection alone (no broker)

    /// The Home Assistant object ID of the test activity `com.example.board`.
    static let board = "com-example-board-\(fnv("com.example.board"))"

    @Test func projectionOfARetainedSnapshot() async throws {
        let out = try await Self.replay([
            WireLine.presence("alice", epoch: 10), WireLine.presence("bob", epoch: 20),
            WireLine.presence("carol", epoch: 30, status: "lost"),
            WireLine.announcement("s1", title: "Movie night", createdAt: 1_000),
            WireLine.member("s1", "alice", epoch: 10), WireLine.member("s1", "bob", epoch: 20),
            WireLine.member("s1", "carol", epoch: 30),  // lost: not active
            WireLine.member("s1", "dave", epoch: 40),  // never online: not active
            WireLine.state("s1", key: "page", writer: "bob", value: "3", time: 5),
            WireLine.state("s1", key: "page", writer: "alice", value: "2", time: 4),  // older: loses
            WireLine.state("s1", key: "mood", writer: "alice", value: #""calm""#, time: 4),
            "groupsync/v2/g/s/unknown/member/alice " + #"{"v":2,"participant":"alice","epoch":10}"#,  // no announcement: ignored
        ])
        let c = "homeassistant/sensor/groupsync_g", b = "homeassistant/binary_sensor/groupsync_g"
        let f = "groupsync/dashboard/g"
        let board = Self.board
        #expect(
            out.map(\.topic) == [
                "\(f)/availability",
                // carol (lost) and dave (never seen online) take part in the session: their sensors, off
                "\(c)/sessions/config", "\(b)/alice_connected/config", "\(b)/bob_connected/config", "\(b)/carol_connected/config",
                "\(b)/dave_connected/config",
                "\(c)/\(board)_participants/config", "\(c)/\(board)_state_mood/config", "\(c)/\(board)_state_page/config",
                "\(f)/sessions", "\(f)/session_list", "\(f)/participant/alice", "\(f)/participant/bob", "\(f)/participant/carol",
                "\(f)/participant/dave",
                "\(f)/session/s1/title", "\(f)/session/s1/activity", "\(f)/session/s1/participants", "\(f)/session/s1/participant_list",
                "\(f)/session/s1/state/mood", "\(f)/session/s1/state/page",
                "\(f)/availability",
            ])
        let values = Dictionary(out.dropLast().map { ($0.topic, $0.payload) }, uniquingKeysWith: { $1 })
        #expect(values["\(f)/availability"] == "online")
        #expect(out.last?.payload == "offline", "a clean exit ends with offline")
        #expect(values["\(f)/sessions"] == "1")
        #expect(values["\(f)/session_list"] == #"["s1"]"#)
        #expect(values["\(f)/participant/alice"] == "online" && values["\(f)/participant/bob"] == "online")
        #expect(values["\(f)/session/s1/title"] == "Movie night")
        #expect(values["\(f)/session/s1/activity"] == "com.example.board")
        #expect(values["\(f)/session/s1/participants"] == "2")
        #expect(values["\(f)/session/s1/participant_list"] == #"["alice","bob"]"#)
        #expect(values["\(f)/session/s1/state/page"] == "3")
        #expect(values["\(f)/session/s1/state/mood"] == #""calm""#)
        Self.checkDiscovery(values.filter { $0.key.hasPrefix("homeassistant/") }, values: values)

        // The exact payload documented in docs/DASHBOARDS.md.
        #expect(
            values["\(c)/\(board)_participants/config"] == """
                {"availability_topic":"groupsync/dashboard/g/availability","device":{"identifiers":["groupsync_g_\(board)"],\
                "manufacturer":"GroupSync","model":"com.example.board","name":"Movie night","via_device":"groupsync_g"},\
                "icon":"mdi:account-multiple","name":"Participants","object_id":"groupsync_g_\(board)_participants",\
                "origin":{"name":"groupsync dashboard"},"payload_available":"online","payload_not_available":"offline",\
                "state_class":"measurement","state_topic":"groupsync/dashboard/g/session/s1/participants",\
                "unique_id":"groupsync_g_\(board)_participants","unit_of_measurement":"participants"}
                """)
        let mood = try #require(Self.object(values["\(c)/\(board)_state_mood/config"]))
        #expect(mood["state_class"] == nil && mood["unit_of_measurement"] == nil)
        #expect(mood["value_template"] as? String == Self.textTemplate)
        #expect(mood["json_attributes_topic"] as? String == "\(f)/session/s1/state/mood")
        #expect(mood["json_attributes_template"] as? String == Self.attributesTemplate)
        let page = try #require(Self.object(values["\(c)/\(board)_state_page/config"]))
        #expect(page["state_class"] as? String == "measurement")
        #expect(page["value_template"] as? String == Self.numberTemplate)
        let alice = try #require(Self.object(values["\(b)/alice_connected/config"]))
        #expect(alice["device_class"] as? String == "connectivity")
        #expect(alice["state_topic"] as? String == "\(f)/participant/alice")
        #expect(alice["payload_on"] as? String == "online" && alice["payload_off"] as? String == "offline")
        #expect(alice["object_id"] as? String == "groupsync_g_alice_connected")
    }

    /// A private session seen without its key: the dashboard publishes its participants and counts under
    /// the title "private session", and no state value (they are sealed).
    @Test func aPrivateSessionWithoutTheKeyShowsParticipantsNotValues() async throws {
        let sealed = "AAECAwQFBgcICQoLXB82GKQi4pfpaZ4JgFo7uAVeF4YjYZhDQxq1rHCrUjY="
        let out = try await Self.replay([
            WireLine.presence("alice", epoch: 10), WireLine.presence("bob", epoch: 20),
            #"groupsync/v2/g/session/s1/alice {"activity":{"data":"\#(sealed)","sealed":"k1","type":"com.example.board"},"createdAt":1000,"createdBy":"alice","revision":{"c":0,"p":"alice","t":1000},"session":"s1","ttl":3600,"v":2}"#,
            WireLine.member("s1", "alice", epoch: 10), WireLine.member("s1", "bob", epoch: 20),
            #"groupsync/v2/g/s/s1/state/page/bob {"clock":{"c":0,"p":"bob","t":5},"key":"page","sealed":"k1","v":2,"value":"\#(sealed)"}"#,
        ])
        let values = Dictionary(out.dropLast().map { ($0.topic, $0.payload) }, uniquingKeysWith: { $1 })
        let f = "groupsync/dashboard/g"
        #expect(values["\(f)/session/s1/title"] == "private session")
        #expect(values["\(f)/session/s1/participants"] == "2")
        #expect(values["\(f)/session/s1/participant_list"] == #"["alice","bob"]"#)
        #expect(!out.contains { $0.topic.contains("/state/") || $0.topic.contains("_state_") }, "no state value")
        #expect(!out.contains { $0.payload.contains(sealed) })
    }

    static let numberTemplate =
        "{{ value_json if value_json is defined and value_json is number and value_json is not boolean else None }}"
    static let textTemplate =
        "{{ (value_json if value_json is string else value_json | to_json)[:255] if value_json is defined else None }}"
    static let attributesTemplate = "{{ value_json | to_json if value_json is defined and value_json is mapping else '{}' }}"

    @Test func projectionFollowsLiveTraffic() async throws {
        let c = "homeassistant/sensor/groupsync_g", b = "homeassistant/binary_sensor/groupsync_g"
        let f = "groupsync/dashboard/g"
        let board = Self.board
        let out = try await Self.replay([
            WireLine.presence("alice", epoch: 10),
            "homeassistant/status online",  // before synchronizing: nothing to send again yet
            "--",
            WireLine.announcement("s1", title: "Board", createdAt: 1_000),
            WireLine.member("s1", "alice", epoch: 10),
            WireLine.presence("bob", epoch: 20), WireLine.member("s1", "bob", epoch: 20),
            WireLine.state("s1", key: "page", writer: "bob", value: "3", time: 5),
            WireLine.state("s1", key: "page", writer: "alice", value: "2", time: 4),  // older: nothing changes
            WireLine.state("s1", key: "page", writer: "alice", value: #"{"n":4}"#, time: 6),  // an object: the sensor stays a number
            "groupsync/v2/g/s/s1/member/bob (null)",  // bob leaves
            "groupsync/v2/g/presence/bob (null)",  // bob exits cleanly
            "homeassistant/status online",  // Home Assistant restarted
            "homeassistant/status offline",  // not a restart
            WireLine.presence("alice", epoch: 10, status: "lost"),  // alice's connection dies
            "groupsync/v2/g/session/s1/alice (null)",  // the session ends: its only copy is cleared
        ])
        let steps = out.map {
            "\($0.topic) \($0.payload.isEmpty ? "(null)" : $0.payload.hasPrefix("{\"availability_topic") ? "{config}" : $0.payload)"
        }
        #expect(
            steps == [
                // synchronize: the group, no sessions, alice online
                "\(f)/availability online", "\(c)/sessions/config {config}", "\(b)/alice_connected/config {config}",
                "\(f)/sessions 0", "\(f)/session_list []", "\(f)/participant/alice online",
                // announcement: the activity's entities, the session, no one in it yet
                "\(c)/\(board)_participants/config {config}", "\(f)/sessions 1", #"\#(f)/session_list ["s1"]"#,
                "\(f)/session/s1/title Board", "\(f)/session/s1/activity com.example.board",
                "\(f)/session/s1/participants 0", "\(f)/session/s1/participant_list []",
                // alice joins
                "\(f)/session/s1/participants 1", #"\#(f)/session/s1/participant_list ["alice"]"#,
                // bob comes online: his connectivity entity; he joins
                "\(b)/bob_connected/config {config}", "\(f)/participant/bob online",
                "\(f)/session/s1/participants 2", #"\#(f)/session/s1/participant_list ["alice","bob"]"#,
                // a state key appears: its sensor, then its value
                "\(c)/\(board)_state_page/config {config}", "\(f)/session/s1/state/page 3",
                // the newer object value: the sensor keeps its kind, only the value changes
                #"\#(f)/session/s1/state/page {"n":4}"#,
                // bob leaves, then exits: his entity stays, off, while the session lives
                "\(f)/session/s1/participants 1", #"\#(f)/session/s1/participant_list ["alice"]"#,
                "\(f)/participant/bob offline",
                // Home Assistant restarted: every config again
                "\(c)/sessions/config {config}", "\(b)/alice_connected/config {config}", "\(b)/bob_connected/config {config}",
                "\(c)/\(board)_participants/config {config}", "\(c)/\(board)_state_page/config {config}",
                // alice lost
                "\(f)/participant/alice offline", "\(f)/session/s1/participants 0", "\(f)/session/s1/participant_list []",
                // the session ends: its activity's configs and its participants' sensors first, then the
                // counts, then the flat topics
                "\(b)/alice_connected/config (null)", "\(b)/bob_connected/config (null)",
                "\(c)/\(board)_participants/config (null)", "\(c)/\(board)_state_page/config (null)",
                "\(f)/sessions 0", "\(f)/session_list []", "\(f)/participant/alice (null)", "\(f)/participant/bob (null)",
                "\(f)/session/s1/activity (null)", "\(f)/session/s1/participant_list (null)", "\(f)/session/s1/participants (null)",
                "\(f)/session/s1/state/page (null)", "\(f)/session/s1/title (null)",
                // exit
                "\(f)/availability offline",
            ])
    }

    /// Entities belong to the group and the activity, not to a session: a later session of the same
    /// activity has the same entity IDs, and an activity's entities show its newest live session. A state
    /// sensor keeps the kind its first value (not null) gave it, in every session.
    @Test func entitiesAreStablePerActivityAndKeepTheirKind() async throws {
        let c = "homeassistant/sensor/groupsync_g"
        let f = "groupsync/dashboard/g"
        let board = Self.board
        let out = try await Self.replay([
            WireLine.presence("alice", epoch: 10),
            "--",
            WireLine.announcement("s1", title: "One", createdAt: 1_000),
            WireLine.state("s1", key: "vol", writer: "alice", value: "null", time: 1),  // null: no sensor yet
            WireLine.state("s1", key: "vol", writer: "alice", value: #""loud""#, time: 2),  // text from now on
            WireLine.state("s1", key: "vol", writer: "alice", value: "3", time: 3),
            WireLine.state("s1", key: "n", writer: "alice", value: "1", time: 4),  // a number from now on
            WireLine.state("s1", key: "n", writer: "alice", value: "[1,2]", time: 5),
            "groupsync/v2/g/session/s1/alice (null)",  // s1 ends
            WireLine.announcement("s2", title: "Two", createdAt: 2_000),
            WireLine.state("s2", key: "n", writer: "alice", value: #""x""#, time: 6),
            WireLine.announcement("s3", title: "Three", createdAt: 3_000),  // newer: the entities show it
            WireLine.state("s3", key: "n", writer: "alice", value: "7", time: 7),
            "groupsync/v2/g/session/s3/alice (null)",  // s3 ends: back to s2
        ])
        let n = "\(c)/\(board)_state_n/config", vol = "\(c)/\(board)_state_vol/config"
        let participants = "\(c)/\(board)_participants/config"
        func configs(_ topic: String) -> [[String: Any]] { out.filter { $0.topic == topic }.map { Self.object($0.payload) ?? [:] } }
        // vol: no config while null, then text, unchanged by the number.
        #expect(configs(vol).count == 2 && configs(vol).last?.isEmpty == true, "published once, cleared when s1 ended")
        #expect(configs(vol).first?["state_class"] == nil)
        let null = try #require(out.firstIndex { $0.topic == "\(f)/session/s1/state/vol" && $0.payload == "null" })
        #expect(try #require(out.firstIndex { $0.topic == vol }) > null, "no sensor while its only value was null")
        // n: a number in every session, whatever the value.
        let nConfigs = configs(n).filter { !$0.isEmpty }
        #expect(nConfigs.allSatisfy { $0["state_class"] as? String == "measurement" }, "\(nConfigs)")
        #expect(nConfigs.compactMap { $0["state_topic"] as? String } == ["s1", "s2", "s3", "s2"].map { "\(f)/session/\($0)/state/n" })
        // The same entity IDs in every session; the device is named after the session shown.
        let shown = configs(participants).filter { !$0.isEmpty }
        #expect(Set(shown.compactMap { $0["unique_id"] as? String }) == ["groupsync_g_\(board)_participants"])
        #expect(Set(shown.compactMap { $0["object_id"] as? String }) == ["groupsync_g_\(board)_participants"])
        #expect(shown.compactMap { ($0["device"] as? [String: Any])?["name"] as? String } == ["One", "Two", "Three", "Two"])
        // What is left at the end: s2, shown.
        var latest: [String: String] = [:]
        for message in out.dropLast() { latest[message.topic] = message.payload }
        #expect(Self.object(latest[participants])?["state_topic"] as? String == "\(f)/session/s2/participants")
        #expect(latest[vol] == "", "s2 has no vol")

        // A kind found in a config left retained by an earlier run wins over the first value seen now.
        let restarted = try await Self.replay([
            WireLine.presence("alice", epoch: 10),
            WireLine.announcement("s2", title: "Two", createdAt: 2_000),
            WireLine.state("s2", key: "n", writer: "alice", value: #""x""#, time: 6),
            "\(n) " + #"{"name":"n","state_class":"measurement"}"#,
        ])
        let kept = try #require(restarted.last { $0.topic == n }.flatMap { Self.object($0.payload) })
        #expect(kept["state_class"] as? String == "measurement")
    }

    @Test func projectionKeepsWhatIsRetainedAndClearsLeftovers() async throws {
        let c = "homeassistant/sensor/groupsync_g"
        let f = "groupsync/dashboard/g"
        // What a run wrote, captured as `mosquitto_sub -v` shows it…
        let first = try await Self.replay([
            WireLine.presence("alice", epoch: 10), WireLine.announcement("s1", title: "Board", createdAt: 1),
            WireLine.member("s1", "alice", epoch: 10),
        ])
        let capture = first.dropLast().map { "\($0.topic) \($0.payload)" }
        // …found again at start-up, with the will's offline, a session that ended meanwhile, and someone else's topic.
        let out = try await Self.replay(
            [
                WireLine.presence("alice", epoch: 10), WireLine.announcement("s1", title: "Board", createdAt: 1),
                WireLine.member("s1", "alice", epoch: 10),
            ]
                + capture + [
                    "\(f)/availability offline",
                    "\(c)/s0_participants/config {}", "\(f)/session/s0/title Old", "\(f)/session/s0/state/x 1",
                    "homeassistant/sensor/other/x/config {}",
                ])
        #expect(
            out.map(\.description) == [
                "\(c)/s0_participants/config (null)",
                "\(f)/availability online",
                "\(f)/session/s0/state/x (null)", "\(f)/session/s0/title (null)",
                "\(f)/availability offline",
            ])
    }

    /// A participant's connectivity sensor stays across restarts of the dashboard while it takes part in
    /// a live session — off while it is offline — and goes when the session ends.
    @Test func connectivitySensorsOfASessionStayAcrossRestartsUntilItEnds() async throws {
        let carol = "homeassistant/binary_sensor/groupsync_g/carol_connected/config"
        let flat = "groupsync/dashboard/g/participant/carol"
        let group = [
            WireLine.presence("alice", epoch: 10), WireLine.announcement("s1", title: "Board", createdAt: 1),
            WireLine.member("s1", "alice", epoch: 10), WireLine.member("s1", "carol", epoch: 20),
        ]
        // A first run, while carol is online…
        let first = try await Self.replay(group + [WireLine.presence("carol", epoch: 20)])
        #expect(first.contains { $0.topic == carol && !$0.payload.isEmpty })
        let capture = first.dropLast().map { "\($0.topic) \($0.payload)" }
        // …and a restart after carol crashed (her will, her member record still there)…
        let restart = group + [WireLine.presence("carol", epoch: 20, status: "lost")] + capture
        let restarted = try await Self.replay(restart)
        #expect(!restarted.contains { $0.topic == carol }, "kept, unchanged: \(restarted.map(\.description))")
        #expect(restarted.last { $0.topic == flat }?.payload == "offline")
        // …until the session ends.
        let ended = try await Self.replay(restart + ["--", "groupsync/v2/g/session/s1/alice (null)"])
        #expect(ended.last { $0.topic == carol }?.payload == "", "removed when the session ends")
        #expect(ended.last { $0.topic == flat }?.payload == "", "and its flat topic cleared")
    }

    @Test func identifiersBecomeDistinctHomeAssistantIDs() async throws {
        let out = try await Self.replay(
            [
                WireLine.presence("a", epoch: 1, group: "my.group"),
                WireLine.announcement("s.1", title: "x", createdAt: 1, group: "my.group"),
                WireLine.state("s.1", key: "a_b", writer: "a", value: "1", time: 1, group: "my.group"),
                WireLine.state("s.1", key: "a-b", writer: "a", value: "2", time: 1, group: "my.group"),
                WireLine.state("s.1", key: "a:b", writer: "a", value: "3", time: 1, group: "my.group"),
            ], group: "my.group")
        let configs = out.filter { $0.topic.hasPrefix("homeassistant/") && $0.topic.hasSuffix("/config") }
        #expect(configs.count == 6, "sessions, a's connectivity, participants and three keys")
        let levels = configs.map { $0.topic.split(separator: "/").map(String.init) }
        for level in levels {
            #expect(level.count == 5)
            for part in level[2...3] {
                #expect(!part.isEmpty && part.unicodeScalars.allSatisfy(Self.homeAssistantIDCharacters.contains), "\(part)")
            }
        }
        #expect(Set(levels.map { $0[2] }).count == 1, "one node_id per group")
        #expect(Set(levels.map { $0[3] }).count == 6, "distinct object_ids: \(levels.map { $0[3] })")
        #expect(levels.contains { $0[3] == "\(Self.board)_state_a-b" }, "plain IDs stay readable")
        Self.checkDiscovery(
            Dictionary(uniqueKeysWithValues: configs.map { ($0.topic, $0.payload) }),
            values: Dictionary(out.dropLast().map { ($0.topic, $0.payload) }, uniquingKeysWith: { $1 }))
        // The flat topics keep the identifiers as they are.
        #expect(out.contains { $0.topic == "groupsync/dashboard/my.group/session/s.1/state/a:b" && $0.payload == "3" })
    }

    @Test func theDocsShowWhatIsPublished() async throws {
        func block(_ name: String) throws -> String { try Self.docsBlock(name) }

        // The dry run, as documented.
        let output = try await Self.replayText(try block("replay-input").split(separator: "\n").map(String.init), group: "family")
        #expect(output == (try block("replay-output")).split(separator: "\n").map(String.init))
        // The example config, exactly as published, and its indented form.
        let topic = "homeassistant/sensor/groupsync_family/com-example-watch-\(Self.fnv("com.example.watch"))_participants/config"
        let published = try #require(output.first { $0.hasPrefix(topic + " ") }).dropFirst(topic.count + 1)
        #expect(try block("participants-config") == String(published))
        let compact = try #require(Self.object(String(published)))
        let indented = try #require(Self.object(try block("participants-config-indented")))
        #expect(NSDictionary(dictionary: compact).isEqual(to: indented))
        // The flat topics as mosquitto_sub -v shows them.
        #expect(
            try block("flat-topics").split(separator: "\n").map(String.init)
                == output.dropLast().filter { $0.hasPrefix("groupsync/dashboard/family/") })

        // The Node-RED flow: valid JSON, mqtt in → function → debug, and a broker config node speaking 3.1.1.
        let flow = try #require(try JSONSerialization.jsonObject(with: Data(block("node-red-flow").utf8)) as? [[String: Any]])
        let ids = flow.compactMap { $0["id"] as? String }
        #expect(ids.count == flow.count && Set(ids).count == ids.count, "every node has a unique id")
        func node(_ type: String) throws -> [String: Any] {
            let matches = flow.filter { $0["type"] as? String == type }
            #expect(matches.count == 1, "one \(type) node")
            return try #require(matches.first)
        }
        let tab = try node("tab"), input = try node("mqtt in"), function = try node("function"), debug = try node("debug")
        let broker = try node("mqtt-broker")
        #expect(input["topic"] as? String == "groupsync/dashboard/family/#")
        #expect(input["broker"] as? String == broker["id"] as? String)
        #expect(input["datatype"] as? String == "utf8", "strings, parsed by the function node")
        #expect(input["wires"] as? [[String]] == [[function["id"] as? String ?? "?"]])
        #expect(function["wires"] as? [[String]] == [[debug["id"] as? String ?? "?"]])
        #expect((debug["wires"] as? [Any])?.isEmpty == true)
        for flowNode in [input, function, debug] { #expect(flowNode["z"] as? String == tab["id"] as? String) }
        #expect(broker["protocolVersion"] as? String == "4", "MQTT 3.1.1")
        #expect(broker["broker"] is String && broker["port"] != nil)
    }

    /// The ACL of docs/DASHBOARDS.md, as written, on a real mosquitto: the dashboard runs under its user,
    /// Home Assistant's user reads the discovery topics and publishes its birth message (which brings
    /// every config again), and Node-RED's reads the flat topics. With `--no-retain` the dashboard may
    /// ask to be welcomed (nobody answers here: it synchronizes after the wait, refused nothing).
    @Test(.needsOwnBroker("users and an ACL")) func theDocumentedACLLetsEachUserDoItsPart() async throws {
        let users = ["dashboard": "d-pw", "homeassistant": "h-pw", "nodered": "n-pw"]
        try await MosquittoBroker.withBroker(.init(users: users, acl: try Self.docsBlock("acl"))) { broker in
            func client(_ user: String) async throws -> MQTTClient {
                let client = try MQTTClient(
                    configuration: .init(url: broker.url.replacingOccurrences(of: "://", with: "://\(user):\(users[user]!)@")))
                try await client.connect()
                return client
            }
            let dashboard = try CLIProcess(
                [
                    "dashboard", "--group", "family", "--broker", broker.url.replacingOccurrences(of: "://", with: "://dashboard@"),
                ], environment: ["GROUPSYNC_PASSWORD": users["dashboard"]!])
            _ = try await dashboard.waitForLine { $0.hasPrefix("synchronized:") }
            let homeAssistant = try await client("homeassistant")
            let discovery = Collector(
                try await homeAssistant.subscribe(to: [TopicSubscription("homeassistant/+/groupsync_family/+/config")]))
            try await waitUntil("Home Assistant reads the configs") { !discovery.elements.isEmpty }
            let before = discovery.elements.count
            // Refused by the ACL, this would throw `notAuthorized` (MQTT 5 answers the publish).
            try await homeAssistant.publish(to: "homeassistant/status", string: "online", qos: .atLeastOnce)
            try await waitUntil("every config again") { discovery.elements.count >= 2 * before }
            let nodeRED = try await client("nodered")
            let flat = Collector(try await nodeRED.subscribe(to: [TopicSubscription("groupsync/dashboard/family/#")]))
            try await waitUntil("Node-RED reads the flat topics") {
                flat.elements.contains { $0.topic == "groupsync/dashboard/family/availability" && $0.string == "online" }
            }
            dashboard.signal(SIGINT)
            #expect(try await Self.exit(dashboard, "dashboard") == 0)
            #expect(!dashboard.errors.contains { $0.contains("not authorized") || $0.contains("failed") }, "\(dashboard.errors)")
            let welcomed = try CLIProcess(
                [
                    "dashboard", "--group", "family", "--no-retain", "--broker",
                    broker.url.replacingOccurrences(of: "://", with: "://dashboard@"),
                ], environment: ["GROUPSYNC_PASSWORD": users["dashboard"]!])
            _ = try await welcomed.waitForLine { $0.hasPrefix("synchronized:") }
            welcomed.signal(SIGINT)
            #expect(try await Self.exit(welcomed, "dashboard --no-retain") == 0)
            #expect(!welcomed.errors.contains { $0.contains("not authorized") || $0.contains("failed") }, "\(welcomed.errors)")
            await homeAssistant.disconnect()
            await nodeRED.disconnect()
        }
    }

    /// The Node-RED flow's function node, run by Node.js as Node-RED runs it, on the documented flat
    /// topics: JSON payloads parsed, the plain-text topics left strings — a title that looks like a number
    /// too, and the empty payload of a cleared topic.
    @Test func theNodeREDFlowKeepsTextAsText() throws {
        let flow = try #require(try JSONSerialization.jsonObject(with: Data(Self.docsBlock("node-red-flow").utf8)) as? [[String: Any]])
        let body = try #require(flow.first { $0["type"] as? String == "function" }?["func"] as? String)
        let session = "groupsync/dashboard/family/session/k3q8x2m1v9p4r7t5"
        var cases = try Self.docsBlock("flat-topics").split(separator: "\n").map { line in
            let space = try #require(line.firstIndex(of: " "))
            return [String(line[..<space]), String(line[line.index(after: space)...])]
        }
        cases += [["\(session)/title", "2024"], ["\(session)/participants", ""]]
        let script = """
            const run = new Function("msg", process.argv[1]);
            for (const [topic, payload] of JSON.parse(process.argv[2])) {
                const result = run({ topic, payload }).payload;
                console.log(typeof result + " " + JSON.stringify(result));
            }
            """
        let arguments = String(decoding: try JSONSerialization.data(withJSONObject: cases), as: UTF8.self)
        let node = try MosquittoBroker.locate("node", extraDirectories: ["/usr/bin", "/usr/local/bin"])
        let run = try ChildProcess.run(node, ["-e", script, body, arguments])
        let lines = String(decoding: run.output, as: UTF8.self).split(separator: "\n").map(String.init)
        #expect(run.termination == .exited(0), "\(lines)")
        let text = ["availability", "title", "activity"]
        for (index, pair) in cases.enumerated() {
            let (topic, payload) = (pair[0], pair[1])
            let isText = payload.isEmpty || text.contains { topic.hasSuffix("/" + $0) } || topic.contains("/participant/")
            let expected =
                isText
                ? "string \(String(decoding: try JSONSerialization.data(withJSONObject: payload, options: .fragmentsAllowed), as: UTF8.self))"
                : nil
            let line = index < lines.count ? lines[index] : "missing"
            if let expected {
                #expect(line == expected, "\(topic)")
            } else {
                #expect(!line.hasPrefix("string "), "\(topic) \(payload): \(line)")
            }
        }
    }

    @Test func usageErrors() async throws {
        #expect(try await runCLI(["dashboard", "--discovery-prefix", "ha/+"]).status == 2)
        #expect(try await runCLI(["dashboard", "--discovery-prefix", "ha/"]).status == 2)
        #expect(try await runCLI(["dashboard", "--json"]).status == 2)
        #expect(try await runCLI(["dashboard", "--group", "a/b", "--replay", "-"]).status == 2)
        // (Not runCLI: it may return before the output pipe is read to the end.)
        let help = try CLIProcess(["dashboard", "--help"])
        help.closeInput()
        _ = try await help.waitForLine { $0.contains("Usage: groupsync dashboard") }
        #expect(try await Self.exit(help, "help") == 0)
        let port = try FreePort.loopback()
        let unreachable = try await runCLI(["dashboard", "--broker", "mqtt://127.0.0.1:\(port)"])
        #expect(unreachable.status == 3)
    }
}

// MARK: - Helpers

extension DashboardTests {
    /// One received message.
    struct Received: Sendable, CustomStringConvertible {
        var topic: String
        var payload: String
        /// As `mosquitto_sub -v` (and `--replay` without `--json`) prints it.
        var description: String { "\(topic) \(payload.isEmpty ? "(null)" : payload)" }
    }

    /// What a raw subscriber saw, in order.
    struct Seen: Sendable {
        var messages: [Received] = []
        /// The last payload per topic ("" once cleared).
        var latest: [String: String] = [:]

        func count(_ topic: String) -> Int { messages.count(where: { $0.topic == topic }) }
    }

    /// A raw MQTT client recording everything under some filters (retained and live).
    final class Recorder: Sendable {
        private let seen = LockedValue(Seen())
        private let client: MQTTClient
        private let task = LockedValue<Task<Void, Never>?>(nil)

        private init(client: MQTTClient) { self.client = client }

        static func start(_ broker: MosquittoBroker, filters: [String]) async throws -> Recorder {
            let recorder = Recorder(client: try await DashboardTests.connectedClient(broker))
            let subscription = try await recorder.client.subscribe(to: filters.map { TopicSubscription($0) })
            let consumer = Task {
                for await message in subscription {
                    let received = Received(topic: message.topic, payload: message.string ?? "<not UTF-8>")
                    recorder.seen.withLock {
                        $0.messages.append(received)
                        $0.latest[received.topic] = received.payload
                    }
                }
            }
            recorder.task.withLock { $0 = consumer }
            return recorder
        }

        var snapshot: Seen { seen.withLock { $0 } }
        var latest: [String: String] { snapshot.latest }

        /// Waits (with ``waitUntil(timeout:pollEvery:_:_:)``) until what was received satisfies `condition`.
        func waitForMessages(
            _ what: String, timeout: Duration = .seconds(10), _ condition: @escaping @Sendable (Seen) -> Bool
        ) async throws {
            try await waitUntil(timeout: timeout, what) { condition(self.snapshot) }
        }

        func wait(for topic: String, toBe payload: String, timeout: Duration = .seconds(10)) async throws {
            try await waitForMessages("\(topic) = '\(payload)' (is '\(latest[topic] ?? "<nothing>")')", timeout: timeout) {
                $0.latest[topic] == payload
            }
        }

        func stop() {
            task.withLock { $0?.cancel() }
            let client = self.client
            Task { await client.disconnect() }
        }
    }

    static func connectedClient(_ broker: MosquittoBroker) async throws -> MQTTClient {
        let client = try MQTTClient(configuration: .init(url: broker.url))
        try await client.connect()
        return client
    }

    /// What a fresh subscriber finds retained under `filters` (a marker behind the retained messages
    /// says when they are all in).
    static func retained(_ broker: MosquittoBroker, filters: [String]) async throws -> [String: String] {
        let client = try await connectedClient(broker)
        let marker = "dashboard-tests/marker/\(client.configuration.clientID)"
        let subscription = try await client.subscribe(to: (filters + [marker]).map { TopicSubscription($0) })
        try await client.publish(to: marker, string: "end")
        let collected = LockedValue<[String: String]>([:])
        let done = Atomic<Bool>(false)
        let reader = Task {
            for await message in subscription {
                if message.topic == marker { break }
                if message.retain { collected.withLock { $0[message.topic] = message.string ?? "" } }
            }
            done.store(true, ordering: .releasing)
        }
        defer { reader.cancel() }
        try await waitUntil(timeout: .seconds(10), "the retained messages") { done.load(ordering: .acquiring) }
        subscription.unsubscribe()
        await client.disconnect()
        return collected.withLock { $0 }
    }

    /// A temporary capture file holding `lines`. (A file, not stdin: a broker that another test starts
    /// meanwhile inherits the write end of a child's stdin pipe, and the child would never see EOF.)
    static func replayFile(_ lines: [String]) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("dashboard-replay-\(UUID().uuidString).txt").path
        guard FileManager.default.createFile(atPath: path, contents: Data(lines.joined(separator: "\n").utf8)) else {
            throw CocoaError(.fileWriteUnknown)
        }
        return path
    }

    /// Runs the projection on `lines` with `--replay FILE --json` and returns what it would publish.
    static func replay(_ lines: [String], group: String = "g") async throws -> [Received] {
        let file = try replayFile(lines)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let child = try CLIProcess(["dashboard", "--group", group, "--replay", file, "--json"])
        #expect(try await Self.exit(child, "child") == 0, "\(child.errors)")
        // The last publish of a replay is always the exit's offline: then the output is complete.
        try await waitUntil(timeout: .seconds(5), "the replay's output") {
            child.output.last?.contains(#""payload":"offline""#) == true
        }
        return child.output.compactMap { line in
            guard let object = object(line), let topic = object["topic"] as? String, let payload = object["payload"] as? String else {
                return nil
            }
            return Received(topic: topic, payload: payload)
        }
    }

    /// Runs the projection on `lines` with `--replay FILE` and returns its output lines (`topic payload`).
    static func replayText(_ lines: [String], group: String) async throws -> [String] {
        let file = try replayFile(lines)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let child = try CLIProcess(["dashboard", "--group", group, "--replay", file])
        #expect(try await Self.exit(child, "child") == 0, "\(child.errors)")
        try await waitUntil(timeout: .seconds(5), "the replay's output") {
            child.output.last == "groupsync/dashboard/\(group)/availability offline"
        }
        return child.output
    }

    /// Waits for `child` to exit and returns its status; the error names it.
    static func exit(_ child: CLIProcess, _ name: String, timeout: Duration = .seconds(10)) async throws -> Int32 {
        try await waitUntil(timeout: timeout, "\(name) exits (last output: \(child.output.suffix(2)), errors: \(child.errors.suffix(2)))") {
            !child.isRunning
        }
        return try await child.wait(timeout: timeout)  // its status, and why when it is not 0
    }

    /// The code block after `<!-- checked: name -->` in docs/DASHBOARDS.md.
    static func docsBlock(_ name: String) throws -> String {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/DASHBOARDS.md").path
        let docs = try #require(FileManager.default.contents(atPath: path).map { String(decoding: $0, as: UTF8.self) }, "read \(path)")
        let lines = docs.split(separator: "\n", omittingEmptySubsequences: false)
        let anchor = try #require(lines.firstIndex(of: "<!-- checked: \(name) -->"), "anchor \(name)")
        let open = try #require(lines[anchor...].firstIndex { $0.hasPrefix("```") }, "code block after \(name)")
        let close = try #require(lines[(open + 1)...].firstIndex { $0 == "```" }, "end of the code block of \(name)")
        return lines[(open + 1)..<close].joined(separator: "\n")
    }

    static func object(_ text: String?) -> [String: Any]? {
        guard let text, !text.isEmpty else { return nil }
        return (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
    }

    static let homeAssistantIDCharacters = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-".unicodeScalars)

    static func fnv(_ text: String) -> String {
        var hash: UInt32 = 0x811c_9dc5
        for byte in text.utf8 { hash = (hash ^ UInt32(byte)) &* 0x0100_0193 }
        let hex = String(hash, radix: 16)
        return String(repeating: "0", count: 8 - hex.count) + hex
    }

    /// Checks discovery `configs` (topic → payload) against Home Assistant's MQTT sensor and binary sensor
    /// discovery schemas, and that their state and availability topics hold values in `values`.
    static func checkDiscovery(_ configs: [String: String], values: [String: String]) {
        let common: Set<String> = [
            "name", "unique_id", "object_id", "state_topic", "availability_topic", "payload_available", "payload_not_available",
            "device", "origin", "value_template", "json_attributes_topic", "json_attributes_template", "icon", "device_class",
        ]
        let known = [
            "sensor": common.union(["state_class", "unit_of_measurement"]), "binary_sensor": common.union(["payload_on", "payload_off"]),
        ]
        let deviceKeys: Set<String> = ["identifiers", "name", "manufacturer", "model", "via_device"]
        var uniqueIDs: [String] = []
        var deviceIDs: Set<String> = []
        var viaDevices: [String] = []
        #expect(!configs.isEmpty)
        for (topic, payload) in configs {
            // <prefix>/<component>/<node_id>/<object_id>/config, IDs of [a-zA-Z0-9_-].
            let levels = topic.split(separator: "/", omittingEmptySubsequences: false)
            let component = String(levels.count == 5 ? levels[1] : "")
            #expect(levels.count == 5 && known[component] != nil && levels[4] == "config", "\(topic)")
            for id in levels.dropFirst(2).dropLast() {
                #expect(!id.isEmpty && id.unicodeScalars.allSatisfy(homeAssistantIDCharacters.contains), "\(topic)")
            }
            guard let config = object(payload) else {
                Issue.record("\(topic): not a JSON object: \(payload)")
                continue
            }
            let keys = known[component] ?? []
            #expect(Set(config.keys).isSubset(of: keys), "\(topic): unknown keys \(Set(config.keys).subtracting(keys))")
            for key in [
                "name", "unique_id", "object_id", "state_topic", "availability_topic", "payload_available", "payload_not_available",
            ] {
                #expect((config[key] as? String)?.isEmpty == false, "\(topic): \(key) is a non-empty string")
            }
            #expect(config["payload_available"] as? String == "online")
            #expect(config["payload_not_available"] as? String == "offline")
            if let id = config["unique_id"] as? String { uniqueIDs.append(id) }
            // The entity ID is made from object_id: the same, so that it is stable whatever the names.
            #expect(config["object_id"] as? String == config["unique_id"] as? String, "\(topic): object_id")
            // The state and availability topics are real topics with values.
            let stateTopic = config["state_topic"] as? String ?? ""
            let availabilityTopic = config["availability_topic"] as? String ?? ""
            #expect(Topic.isValidName(stateTopic) && Topic.isValidName(availabilityTopic))
            #expect(values[availabilityTopic] == "online", "\(topic): availability \(availabilityTopic)")
            let state = values[stateTopic]
            #expect(state?.isEmpty == false, "\(topic): state topic \(stateTopic) has a value")
            // A template reads JSON: the state must be JSON then. A measurement without one must be a number.
            if let template = config["value_template"] {
                #expect((template as? String)?.contains("value_json") == true, "\(topic): value_template")
                #expect(
                    state.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8), options: .fragmentsAllowed) } != nil,
                    "\(topic): \(stateTopic) holds JSON (\(state ?? "nothing"))")
            }
            if let stateClass = config["state_class"] {
                #expect(["measurement", "total", "total_increasing"].contains(stateClass as? String ?? ""), "\(topic): state_class")
                // Without a template, the payload itself must be a number; a template turns anything else into None.
                if config["value_template"] == nil {
                    #expect(state.flatMap { Double($0) } != nil, "\(topic): a measurement is numeric (\(state ?? "nothing"))")
                }
            }
            if component == "binary_sensor" {
                #expect(config["device_class"] as? String == "connectivity", "\(topic): device_class")
                #expect([config["payload_on"] as? String, config["payload_off"] as? String].contains(state), "\(topic): on or off")
            }
            if let unit = config["unit_of_measurement"] {
                #expect(unit is String && config["state_class"] != nil, "\(topic): a unit goes with a numeric sensor")
            }
            if config["json_attributes_topic"] != nil {
                // Its payload may be any JSON value: the template makes every one an object.
                #expect(config["json_attributes_template"] as? String == attributesTemplate, "\(topic): json_attributes_template")
            }
            if let icon = config["icon"] { #expect((icon as? String)?.hasPrefix("mdi:") == true) }
            if let origin = config["origin"] { #expect(((origin as? [String: Any])?["name"] as? String)?.isEmpty == false) }
            // The device block.
            guard let device = config["device"] as? [String: Any] else {
                Issue.record("\(topic): no device block")
                continue
            }
            #expect(Set(device.keys).isSubset(of: deviceKeys), "\(topic): device keys \(device.keys)")
            let identifiers = device["identifiers"] as? [String] ?? []
            #expect(!identifiers.isEmpty && identifiers.allSatisfy { !$0.isEmpty }, "\(topic): device identifiers")
            deviceIDs.formUnion(identifiers)
            for key in ["name", "manufacturer", "model"] {
                #expect((device[key] as? String)?.isEmpty == false, "\(topic): device \(key)")
            }
            if let via = device["via_device"] { viaDevices.append(via as? String ?? "") }
        }
        #expect(Set(uniqueIDs).count == uniqueIDs.count, "unique_id is unique: \(uniqueIDs.sorted())")
        for via in viaDevices { #expect(deviceIDs.contains(via), "via_device \(via) is a device") }
    }
}

/// GroupSync protocol v2 payloads as `mosquitto_sub -v` lines, for the replays.
private enum WireLine {
    static func presence(_ participant: String, epoch: Int64, status: String = "online", group: String = "g") -> String {
        #"groupsync/v2/\#(group)/presence/\#(participant) {"epoch":\#(epoch),"participant":"\#(participant)","status":"\#(status)","v":2}"#
    }

    static func announcement(_ session: String, title: String, createdAt: Int64, group: String = "g") -> String {
        #"groupsync/v2/\#(group)/session/\#(session)/alice {"activity":{"data":{},"metadata":{"title":"\#(title)","type":"generic"},"type":"com.example.board"},"createdAt":\#(createdAt),"createdBy":"alice","revision":{"c":0,"p":"alice","t":\#(createdAt)},"session":"\#(session)","ttl":3600,"v":2}"#
    }

    static func member(_ session: String, _ participant: String, epoch: Int64, group: String = "g") -> String {
        #"groupsync/v2/\#(group)/s/\#(session)/member/\#(participant) {"epoch":\#(epoch),"participant":"\#(participant)","v":2}"#
    }

    static func state(_ session: String, key: String, writer: String, value: String, time: Int64, group: String = "g") -> String {
        #"groupsync/v2/\#(group)/s/\#(session)/state/\#(key)/\#(writer) {"clock":{"c":0,"p":"\#(writer)","t":\#(time)},"key":"\#(key)","v":2,"value":\#(value)}"#
    }
}
