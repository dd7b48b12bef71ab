import BrokerSupport
import Foundation
import MQTT

/// The tests' broker: a mosquitto of their own, or the broker someone else started that
/// `GROUPSYNC_TEST_BROKER` names (read here, in the test support, never by what `groupsync` ships).
extension MosquittoBroker {
    /// Starts a broker, runs `body` with it and stops the broker afterwards,
    /// also when `body` throws.
    ///
    /// With `GROUPSYNC_TEST_BROKER` set (see ``ExternalBroker``) and the default `configuration`, it
    /// starts nothing: `body` runs with a value standing for that broker.
    ///
    /// - Throws: ``Failure`` when the broker cannot start; with `GROUPSYNC_TEST_BROKER` set, also when
    ///   `configuration` is not the default one, when called inside another `withBroker` body, or
    ///   when `body` used an operation that needs a process of our own (after `body` returns or
    ///   throws; the failure names the operation and `body`'s own error).
    public static func withBroker<R>(
        _ configuration: Configuration = .init(),
        isolation: isolated (any Actor)? = #isolation,
        _ body: (MosquittoBroker) async throws -> R
    ) async throws -> R {
        if let external = try ExternalBroker.fromEnvironment() {
            return try await withExternalBroker(external, configuration, body)
        }
        let broker = try await start(configuration)
        do {
            let result = try await body(broker)
            await broker.stop()
            return result
        } catch {
            await broker.stop()
            throw error
        }
    }

    /// Runs `body` with a value standing for `external`, for ``withBroker(_:isolation:_:)``.
    package static func withExternalBroker<R>(
        _ external: ExternalBroker,
        _ configuration: Configuration,
        isolation: isolated (any Actor)? = #isolation,
        _ body: (MosquittoBroker) async throws -> R
    ) async throws -> R {
        guard configuration == Configuration() else {
            throw Failure(
                "a broker with a configuration of its own was asked for while \(ExternalBroker.environmentVariable) "
                    + "names an external broker: give the test the trait that skips it there, "
                    + ".needsOwnBroker(\"what it needs of its broker\")")
        }
        guard !ExternalBroker.inUse else {
            throw Failure(
                "a second broker was asked for inside a withBroker body while \(ExternalBroker.environmentVariable) "
                    + "names one external broker: give the test the trait that skips it there, .needsOwnBroker(\"…\")")
        }
        if ["127.0.0.1", "localhost"].contains(external.host), !FreePort.acceptsConnections(on: external.port) {
            throw Failure(
                "nothing accepts connections on 127.0.0.1:\(external.port), the broker of "
                    + "\(ExternalBroker.environmentVariable)=\(MQTTClient.Configuration.redacted(external.url))")
        }
        let broker = MosquittoBroker(external: external)
        let result: R
        do {
            result = try await ExternalBroker.$inUse.withValue(true) { try await body(broker) }
        } catch {
            await broker.clearRetainedRecords()
            throw broker.refusal(besides: error) ?? error
        }
        await broker.clearRetainedRecords()
        if let refusal = broker.refusal(besides: nil) { throw refusal }
        return result
    }

    /// Clears, on an ``external`` broker that outlives the test, the retained records of the groups
    /// named by ``unique(_:)``: `groupsync/v2/NAME/#` (GroupSync's protocol root) and
    /// `groupsync/v2-chunks/NAME/#` (journal chunks) for each. Best effort
    /// within 5 s: records left behind only take room, since every later test uses names of its own.
    func clearRetainedRecords() async {
        let names = uniqueNames.withLock { $0 }
        guard let external, !names.isEmpty else { return }
        do {
            let client = try MQTTClient(configuration: .init(url: external.url))
            try await client.connect()
            let marker = "groupsync-test-cleanup/\(unique("marker"))"
            let subscription = try await client.subscribe(
                to: names.flatMap { [TopicSubscription("groupsync/v2/\($0)/#"), TopicSubscription("groupsync/v2-chunks/\($0)/#")] }
                    + [TopicSubscription(marker)])
            try await client.publish(to: marker, string: "")
            let timeout = Task {
                try await Task.sleep(for: .seconds(5))
                await client.disconnect()
            }
            var retained: [String] = []
            for await message in subscription {
                if message.topic == marker { break }
                if message.retain && !message.payload.isEmpty { retained.append(message.topic) }
            }
            for topic in retained {
                try await client.publish(to: topic, payload: Data(), retain: true)
            }
            timeout.cancel()
            await client.disconnect()
        } catch {
            FileHandle.standardError.write(Data("MosquittoBroker: clearing the test's retained records failed: \(error)\n".utf8))
        }
    }

    /// The failure for the operations refused so far, if any, with the error `body` ended with.
    private func refusal(besides error: (any Error)?) -> Failure? {
        let operations = refused.withLock { $0 }
        guard !operations.isEmpty else { return nil }
        var unique: [String] = []
        for operation in operations where !unique.contains(operation) { unique.append(operation) }
        return Failure(
            "the test used \(unique.joined(separator: ", ")) on the external broker of "
                + "\(ExternalBroker.environmentVariable), which needs a mosquitto of its own: give the test the trait "
                + "that skips it there, .needsOwnBroker(\"…\")"
                + (error.map { " (the test then failed with: \($0))" } ?? ""))
    }
}

extension ExternalBroker {
    /// Whether `GROUPSYNC_TEST_BROKER` is set (and not empty): the tests then run against that broker.
    public static var isConfigured: Bool {
        !(ProcessInfo.processInfo.environment[environmentVariable] ?? "").isEmpty
    }

    /// The broker `GROUPSYNC_TEST_BROKER` names (the first, when it names two), or nil when it is not set.
    /// - Throws: ``MosquittoBroker/Failure`` when it is not one `mqtt://` URL, or two separated by a comma.
    public static func fromEnvironment() throws -> ExternalBroker? {
        try fromEnvironment(node: 0)
    }

    /// Whether `GROUPSYNC_TEST_BROKER` names two brokers that share the group's topics (the nodes of one
    /// cluster, or bridged brokers), as `URL1,URL2`: ``MosquittoBroker/withBridgedBrokers(isolation:_:)``
    /// then hands out both, and everything else uses the first.
    public static var isPairConfigured: Bool {
        (ProcessInfo.processInfo.environment[environmentVariable] ?? "").contains(",")
    }

    /// The second broker of `GROUPSYNC_TEST_BROKER=URL1,URL2`, or nil when it names one or none.
    public static func secondFromEnvironment() throws -> ExternalBroker? {
        isPairConfigured ? try fromEnvironment(node: 1) : nil
    }

    private static func fromEnvironment(node: Int) throws -> ExternalBroker? {
        guard isConfigured, let value = ProcessInfo.processInfo.environment[environmentVariable] else { return nil }
        let urls = value.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        guard urls.count <= 2 else {
            throw MosquittoBroker.Failure("\(environmentVariable) names one broker, or two as URL1,URL2, not \(urls.count)")
        }
        return node < urls.count ? try ExternalBroker(url: urls[node]) : nil
    }

    /// Set while a `withBroker` body runs against the external broker: a second broker inside it
    /// could only be the same one, which no test asking for two brokers expects.
    @TaskLocal static var inUse = false
}
