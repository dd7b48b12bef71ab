import Foundation
import MQTT

/// Runs blocking code (semaphore waits of the raw libmosquitto baseline) on a thread of its own, never on
/// one of Swift concurrency's few cooperative threads.
enum BlockingThread {
    static func run<T: Sendable>(_ name: String, _ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            let thread = Thread {
                ThreadName.setCurrent(name)
                continuation.resume(returning: body())
            }
            thread.start()
        }
    }
}
