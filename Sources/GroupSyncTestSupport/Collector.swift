import MQTT
import Synchronization

/// Consumes an async sequence in a background task and keeps what arrives, so that a test can await a
/// condition on it with a deadline (``waitUntil(timeout:pollEvery:_:_:)``) instead of sleeping.
public final class Collector<Element: Sendable>: Sendable {
    private let storage = LockedValue<[Element]>([])
    private let finished = Atomic<Bool>(false)
    private let task = LockedValue<Task<Void, Never>?>(nil)

    /// Starts consuming `sequence` at once; an error thrown by it ends the collection like its end does.
    public init<S: AsyncSequence & Sendable>(_ sequence: S) where S.Element == Element {
        let consumer = Task { [self] in
            do {
                for try await element in sequence { self.storage.withLock { $0.append(element) } }
            } catch {}
            self.finished.store(true, ordering: .releasing)
        }
        task.withLock { $0 = consumer }
    }

    /// Everything received so far, in order.
    public var elements: [Element] { storage.withLock { $0 } }
    public var count: Int { storage.withLock { $0.count } }
    public var last: Element? { storage.withLock { $0.last } }
    /// Whether the sequence ended.
    public var isFinished: Bool { finished.load(ordering: .acquiring) }

    /// Cancels the consuming task (which ends a cancellation-aware sequence).
    public func cancel() { task.withLock { $0?.cancel() } }

    /// Waits until at least `n` elements arrived.
    public func waitForCount(_ n: Int, timeout: Duration = .seconds(5)) async throws {
        try await waitUntil(timeout: timeout, "\(n) elements (have \(count))") { self.count >= n }
    }
}
