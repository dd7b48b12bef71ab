import Testing

@testable import GroupSync
@testable import MQTT

/// A coordinator's background work: what ended leaves the list, and `cancelAll()` ends the rest.
@Suite struct BackgroundTasksTests {
    @Test func finishedWorkLeavesTheListAndCancelAllEndsTheRest() async throws {
        let tasks = BackgroundTasks()
        for _ in 0..<1_000 { tasks.spawn {} }
        try await waitUntil(timeout: timeBound(.seconds(5)), "a thousand finished tasks gone") { tasks.count == 0 }
        let ended = LockedValue(false)
        tasks.spawn {
            try? await Task.sleep(for: .seconds(3_600))
            ended.withLock { $0 = true }
        }
        #expect(tasks.count == 1)
        tasks.cancelAll()
        try await waitUntil(timeout: timeBound(.seconds(5)), "the long one cancelled") { ended.withLock { $0 } }
        #expect(tasks.count == 0)
    }
}
