import Foundation
import GroupSync
import MQTT

/// `groupsync dashboard`: projects a group's sessions for IoT dashboards (docs/DASHBOARDS.md). What to
/// publish is decided by ``DashboardProjection`` (pure); this command only moves messages in and out.
enum DashboardCommand: Command {
    static let name = "dashboard"
    static let summary = "publish Home Assistant discovery and flat topics for dashboards"
    static let help = """
        Usage: groupsync dashboard [--discovery-prefix PREFIX] [--verbose] [--timeout SEC] [--broker URL] [--group NAME]
                                   [--no-retain]
               groupsync dashboard --replay FILE [--json] [--discovery-prefix PREFIX] [--group NAME]

        Projects one group for IoT dashboards as an observer (it never appears as a participant), until
        Ctrl-C. Everything it publishes is retained (QoS 1):
          * Home Assistant MQTT discovery, <prefix>/<component>/groupsync_<group>/<object_id>/config: a
            "Sessions" sensor and a connectivity binary_sensor per participant for the group; per activity
            with a live session a "Participants" sensor and one sensor per shared-state key, showing its
            newest session, with the same entity IDs in every session. Sent again when <prefix>/status
            receives "online" (Home Assistant started); removed (empty payload) when no session of the
            activity is left.
          * Flat topics with plain payloads, for Node-RED, Grafana's MQTT data source (MQTT 3.1.1) and
            mosquitto_sub -v:
              groupsync/dashboard/<group>/availability                   online | offline
              groupsync/dashboard/<group>/sessions                       1
              groupsync/dashboard/<group>/session_list                   ["k3q…"]
              groupsync/dashboard/<group>/participant/<id>               online | offline
              groupsync/dashboard/<group>/session/<id>/title             Movie night
              groupsync/dashboard/<group>/session/<id>/activity          com.example.board
              groupsync/dashboard/<group>/session/<id>/participants      2
              groupsync/dashboard/<group>/session/<id>/participant_list  ["alice","bob"]
              groupsync/dashboard/<group>/session/<id>/state/<key>       {"page":3}
            A session's topics are cleared when it ends.
        availability is "offline" after Ctrl-C, and (MQTT will) when the dashboard dies. It owns both
        subtrees: leftovers of an earlier run are cleared at start-up. Run one dashboard per group.

        \(CommonOptions.help)
        \(CommonOptions.observerHelp)
          --discovery-prefix P  Home Assistant's discovery prefix (default homeassistant)
          --verbose             print every publish as `topic payload`
          --timeout SEC         how long to wait for the broker (default 10)
          --replay FILE         no broker: read messages as `mosquitto_sub -v` prints them ("topic payload",
                                "(null)" for an empty payload) from FILE, or stdin for -, and print what the
                                dashboard would publish, the same way. Lines before a line "--" are the
                                retained messages found at start-up, lines after it arrive live (without
                                "--", all are retained). Lines starting with # are comments.
          --json                with --replay: one JSON object per publish, {"topic","payload"}

        Exit codes: 0 stopped with Ctrl-C (or replay done); 1 failure (a timeout included); 2 usage error;
        3 broker unreachable; 130 interrupted while connecting.
        """

    static func run(_ arguments: [String]) async throws -> Int32 {
        let args = try Arguments(
            arguments, options: CommonOptions.names.union(["discovery-prefix", "replay", "timeout"]),
            flags: ["verbose", "json", "no-retain"])
        let common = try CommonOptions(args)
        let prefix = args.value("discovery-prefix") ?? DashboardTopics.defaultDiscoveryPrefix
        guard DashboardTopics.isValidDiscoveryPrefix(prefix) else {
            throw UsageError("invalid --discovery-prefix '\(prefix)': a topic without wildcards or empty levels")
        }
        let projection = DashboardProjection(group: common.group, discoveryPrefix: prefix, keyring: common.keyring)
        if let file = args.value("replay") {
            return try replay(file, projection, json: args.has("json"))
        }
        if args.has("json") { throw UsageError("--json only goes with --replay") }
        let timeout = Duration.seconds(try args.integer("timeout", default: 10, range: 1...86_400))
        return try await serve(projection, common: common, timeout: timeout, verbose: args.has("verbose"))
    }

    // MARK: - Live

    private enum Input: Sendable {
        /// A message of the subscription made for connection `generation`.
        case message(generation: Int, MQTTMessage)
        case reconnected
        /// A session's last copy may have expired (``GroupView/nextExpiry``).
        case expiry
    }

    private static func serve(_ initial: DashboardProjection, common: CommonOptions, timeout: Duration, verbose: Bool) async throws -> Int32
    {
        let topics = initial.topics
        // Signals first: one that arrives while connecting or synchronizing waits here, and a test (or
        // a script) that stops the dashboard as soon as it printed something is never lost.
        let (interrupts, interrupt) = AsyncStream.makeStream(of: Void.self)
        let interruption = Interruption()
        Signals.onInterrupt {
            interruption.fire()
            interrupt.yield()
        }
        // An observer (not a participant) whose will marks the dashboard offline.
        let client = try await interruption.race(timeout: timeout, waitingFor: "the broker", discard: CommonOptions.disconnect) {
            try await common.connectObserver(
                will: MQTTClient.Will(topic: initial.will.topic, payload: Array(initial.will.payload.utf8), qos: .atLeastOnce, retain: true)
            )
        }
        var welcomed = initial
        if ObserverWelcome.isNeeded(common, client) { welcomed.observe(as: ObserverWelcome.id(of: client)) }
        let start = welcomed
        let marker = "groupsync-observer/\(client.configuration.clientID)"
        let (inputs, feed) = AsyncStream.makeStream(of: Input.self)
        let events = client.events()
        let reconnects = Task {
            for await event in events {
                if case .connected = event { feed.yield(.reconnected) }
            }
        }
        Output.line(
            "dashboard for group \(common.group) on \(CommonOptions.redacted(common.broker)): Home Assistant discovery under "
                + "\(topics.discoveryPrefix)/sensor/\(topics.nodeID)/, flat topics under \(topics.root)/ — Ctrl-C to stop")

        // Subscribes for one connection; its marker coming back means the retained messages are all in.
        // At most 8 filters per SUBSCRIBE (PROTOCOL.md, Conventions): the welcome's filters go apart.
        @Sendable func subscribe(_ generation: Int) async throws(MQTTError) -> [MQTTSubscription] {
            var subscriptions: [MQTTSubscription] = []
            for filters in [start.filters + [marker], start.welcomeFilters] where !filters.isEmpty {
                let subscription = try await client.subscribe(to: filters.map { TopicSubscription($0, qos: .atLeastOnce) })
                Task {
                    for await message in subscription { feed.yield(.message(generation: generation, message)) }
                }
                subscriptions.append(subscription)
            }
            try await client.publish(to: marker, string: "sync-\(generation)")
            return subscriptions
        }

        let alarm = ExpiryAlarm { feed.yield(.expiry) }
        let worker = Task {
            var projection = start
            defer { alarm.cancel() }
            var generation = 0
            var subscription = try await subscribe(generation)
            for await input in inputs {
                switch input {
                case .reconnected:
                    // The will may have said offline, and anything may have changed meanwhile: learn the
                    // group again from the retained messages, then reconcile.
                    generation += 1
                    projection.restart()
                    do {
                        let previous = subscription
                        subscription = try await subscribe(generation)
                        for old in previous { old.unsubscribe() }
                    } catch {
                        Output.error("groupsync dashboard: resubscribing failed (\(error)); retrying on the next reconnect")
                    }
                case let .message(from, message):
                    guard from == generation else { continue }
                    if message.topic == marker {
                        guard message.payload == Data("sync-\(generation)".utf8) else { continue }
                        if projection.welcome != nil {
                            // Nothing is retained: synchronized once the welcome it asks for is in.
                            do {
                                try projection.askWelcome(client, now: SystemWallClock().milliseconds())
                                alarm.arm(at: projection.nextAlarm)
                                continue
                            } catch {
                                Output.error("groupsync dashboard: asking to be welcomed failed (\(error)); going on with what it has")
                            }
                        }
                        await synchronize(&projection, client: client, verbose: verbose)
                        continue
                    }
                    let (before, wasSynchronized) = (Set(projection.view.sessions.keys), projection.isSynchronized)
                    let publications = projection.apply(message, now: SystemWallClock().milliseconds())
                    await publish(publications, client: client, verbose: verbose)
                    alarm.arm(at: projection.nextAlarm)
                    if !wasSynchronized && projection.isSynchronized { reportSynchronized(projection) }
                    guard wasSynchronized else { continue }
                    let after = Set(projection.view.sessions.keys)
                    for id in after.subtracting(before).sorted() { Output.line("session \(id) published") }
                    for id in before.subtracting(after).sorted() { Output.line("session \(id) removed") }
                case .expiry:
                    let (before, wasSynchronized) = (Set(projection.view.sessions.keys), projection.isSynchronized)
                    await publish(projection.expire(now: SystemWallClock().milliseconds()), client: client, verbose: verbose)
                    alarm.arm(at: projection.nextAlarm)
                    if !wasSynchronized && projection.isSynchronized { reportSynchronized(projection) }
                    for id in before.subtracting(projection.view.sessions.keys).sorted() { Output.line("session \(id) expired") }
                }
            }
            for old in subscription { old.unsubscribe() }
        }
        let stopper = Task {
            for await _ in interrupts {
                worker.cancel()
                break
            }
        }
        let result = await worker.result
        stopper.cancel()
        reconnects.cancel()
        // Clean exit: say offline (bounded, the broker may be gone), then DISCONNECT (no will).
        let offline = start.will
        await withTimeout(.seconds(2)) {
            _ = try? await client.publish(to: offline.topic, string: offline.payload, qos: .atLeastOnce, retain: true)
        }
        await client.disconnect()
        feed.finish()
        switch result {
        case .success: return 0
        case let .failure(error):
            // A signal while it was still subscribing stops it as cleanly as one later.
            if let error = error as? MQTTError, error == .cancelled { return 0 }
            throw CommandFailure("subscribing to \(topics.root) and \(topics.discoveryFilter) failed: \(error)")
        }
    }

    private static func synchronize(_ projection: inout DashboardProjection, client: MQTTClient, verbose: Bool) async {
        await publish(projection.synchronize(), client: client, verbose: verbose)
        reportSynchronized(projection)
    }

    private static func reportSynchronized(_ projection: DashboardProjection) {
        Output.line("synchronized: \(projection.view.sessions.count) live sessions, \(projection.retained.count) retained topics")
    }

    private static func publish(_ publications: [DashboardProjection.Publication], client: MQTTClient, verbose: Bool) async {
        for publication in publications {
            if verbose { Output.line(publication.description) }
            do {
                try await client.publish(to: publication.topic, string: publication.payload, qos: .atLeastOnce, retain: true)
            } catch .cancelled {
                return
            } catch {
                Output.error("groupsync dashboard: publishing to \(publication.topic) failed: \(error)")
            }
        }
    }

    // MARK: - Replay

    /// Feeds recorded messages to the projection and prints what it publishes: the dashboard without a
    /// broker (a dry run on a `mosquitto_sub -v` capture, and how the tests check the projection).
    private static func replay(_ file: String, _ start: DashboardProjection, json: Bool) throws -> Int32 {
        var projection = start
        let data: Data
        if file == "-" {
            data = FileHandle.standardInput.readDataToEndOfFile()
        } else {
            guard let contents = FileManager.default.contents(atPath: file) else { throw CommandFailure("cannot read \(file)") }
            data = contents
        }
        let lines = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: true)
            .map { $0.hasSuffix("\r") ? $0.dropLast() : $0 }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
        let separator = lines.firstIndex(of: "--") ?? lines.endIndex
        func emit(_ publications: [DashboardProjection.Publication]) {
            for publication in publications {
                if json {
                    Output.json(["topic": .string(publication.topic), "payload": .string(publication.payload)])
                } else {
                    Output.line(publication.description)
                }
            }
        }
        let now = SystemWallClock().milliseconds()
        for line in lines[..<separator] { emit(projection.apply(try message(line), now: now)) }
        emit(projection.synchronize())
        for line in lines[separator...].dropFirst() { emit(projection.apply(try message(line), now: now)) }
        emit(projection.stop())
        return 0
    }

    /// A `mosquitto_sub -v` line: the topic, a space, the payload (`(null)` or nothing: empty).
    private static func message(_ line: Substring) throws(CommandFailure) -> MQTTMessage {
        let topic: Substring
        var payload: Substring = ""
        if let space = line.firstIndex(of: " ") {
            topic = line[..<space]
            payload = line[line.index(after: space)...]
        } else {
            topic = line
        }
        guard Topic.isValidName(String(topic)) else { throw CommandFailure("not a `topic payload` line: \(line)") }
        return MQTTMessage(topic: String(topic), payload: payload == "(null)" ? Data() : Data(payload.utf8), retain: true)
    }
}
