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
            throw broker.refusal(besides: error) ?? error
        }
        if let refusal = broker.refusal(besides: nil) { throw refusal }
        return result
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
