import Foundation
import MQTT

extension MosquittoBroker {
    /// Runs `body` with a value standing for `external`, for ``withBroker(_:isolation:_:)``.
    static func withExternalBroker<R>(
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
    /// named by ``unique(_:)``: `groupsync/v2/NAME/#` (GroupSync's protocol root) for each. Best effort
    /// within 5 s: records left behind only take room, since every later test uses names of its own.
    func clearRetainedRecords() async {
        let names = uniqueNames.withLock { $0 }
        guard let external, !names.isEmpty else { return }
        do {
            let client = try MQTTClient(configuration: .init(url: external.url))
            try await client.connect()
            let marker = "groupsync-test-cleanup/\(unique("marker"))"
            let subscription = try await client.subscribe(
                to: names.map { TopicSubscription("groupsync/v2/\($0)/#") } + [TopicSubscription(marker)])
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

    /// Notes that `operation`, which needs a broker process of our own, was used on an ``external``
    /// broker, where it does nothing: ``withBroker(_:isolation:_:)`` then fails. Also says so on
    /// standard error at once, since the test may hang on the missing effect until a deadline.
    package func requireOwnProcess(_ operation: String) {
        guard external != nil else { return }
        refused.withLock { $0.append(operation) }
        FileHandle.standardError.write(
            Data("MosquittoBroker: \(operation) used on the external broker of \(ExternalBroker.environmentVariable)\n".utf8))
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
