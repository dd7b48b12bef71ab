import Foundation

extension MosquittoBroker {
    /// Notes that `operation`, which needs a broker process of our own, was used on an ``external``
    /// broker, where it does nothing: ``withBroker(_:isolation:_:)`` then fails. Also says so on
    /// standard error at once, since the test may hang on the missing effect until a deadline.
    package func requireOwnProcess(_ operation: String) {
        guard external != nil else { return }
        refused.withLock { $0.append(operation) }
        try? FileHandle.standardError.write(
            contentsOf: Data("MosquittoBroker: \(operation) used on the external broker of \(ExternalBroker.environmentVariable)\n".utf8))
    }
}
