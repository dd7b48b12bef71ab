import BrokerSupport
import Foundation
import Synchronization
@testable import MQTT

/// Consumes an async sequence in a background task and keeps what arrives, so that tests can await a
/// condition on it with a deadline.
final class Collector<Element: Sendable>: Sendable {
    private let storage = Mutex<[Element]>([])
    private let finished = Atomic<Bool>(false)
    private let task = Mutex<Task<Void, Never>?>(nil)

    init<S: AsyncSequence & Sendable>(_ sequence: S) where S.Element == Element {
        let consumer = Task { [self] in
            do {
                for try await element in sequence { self.storage.withLock { $0.append(element) } }
            } catch {}
            self.finished.store(true, ordering: .releasing)
        }
        task.withLock { $0 = consumer }
    }

    var elements: [Element] { storage.withLock { $0 } }
    var count: Int { storage.withLock { $0.count } }
    var isFinished: Bool { finished.load(ordering: .acquiring) }
    func cancel() { task.withLock { $0?.cancel() } }

    func waitForCount(_ n: Int, timeout: Duration = .seconds(5)) async throws {
        try await waitUntil(timeout: timeout, "\(n) elements (have \(count))") { self.count >= n }
    }
}

func makeClient(
    _ broker: MosquittoBroker, id: String = MQTTClient.Configuration.randomClientID(),
    _ adjust: (inout MQTTClient.Configuration) -> Void = { _ in }
) throws -> MQTTClient {
    var configuration = try MQTTClient.Configuration(url: broker.url, clientID: id)
    configuration.reconnect = Backoff(initial: .milliseconds(20), maximum: .milliseconds(500))
    adjust(&configuration)
    return try MQTTClient(configuration: configuration)
}

func connectedClient(
    _ broker: MosquittoBroker, id: String = MQTTClient.Configuration.randomClientID(),
    _ adjust: (inout MQTTClient.Configuration) -> Void = { _ in }
) async throws -> MQTTClient {
    let client = try makeClient(broker, id: id, adjust)
    try await client.connect()
    return client
}

/// Runs a command to completion and returns its standard output.
@discardableResult
func run(_ executable: String, _ arguments: [String]) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let pipe = Pipe()
    process.standardOutput = pipe
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return String(decoding: data, as: UTF8.self)
}
