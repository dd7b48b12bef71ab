import Synchronization
import Testing

@testable import GroupSync
@testable import MQTT

/// The one timer of a runtime object: an earlier deadline replaces the pending one, a later one does not,
/// and nothing comes after `cancel()`.
@Suite struct WakeUpTests {
    final class Wakes: Sendable {
        let times = LockedValue<[ContinuousClock.Instant]>([])
        var count: Int { times.withLock { $0.count } }
    }

    @Test func anEarlierDeadlineReplacesThePendingOneAndALaterOneDoesNot() async throws {
        let timer = WakeUp(tolerance: .zero)
        let wakes = Wakes()
        timer.onWake { wakes.times.withLock { $0.append(.now) } }
        let start = ContinuousClock.now
        timer.schedule(at: start + .seconds(5))
        timer.schedule(at: start + .milliseconds(50))  // replaces it
        timer.schedule(at: start + .seconds(1))  // met by the pending one
        try await waitUntil(timeout: timeBound(.seconds(5)), "the early wake-up") { wakes.count == 1 }
        #expect(wakes.times.withLock { $0[0] } - start >= .milliseconds(50))
        // Nothing else was pending: the next wake-up is the one asked for after the first, not the
        // second or the first deadline.
        timer.schedule(at: start + .milliseconds(1_200))
        try await waitUntil(timeout: timeBound(.seconds(5)), "the next wake-up") { wakes.count == 2 }
        #expect(wakes.times.withLock { $0[1] } - start >= .milliseconds(1_200), "the 1 s deadline woke nothing")
        timer.cancel()  // also keeps the timer alive until here: a timer wakes only while its owner holds it
    }

    @Test func nothingComesAfterCancel() async throws {
        let timer = WakeUp(tolerance: .zero)
        let wakes = Wakes()
        timer.onWake { wakes.times.withLock { $0.append(.now) } }
        timer.schedule(after: .milliseconds(30))
        timer.cancel()
        timer.schedule(after: .milliseconds(10))
        // A second timer, due after both, shows when they would have come.
        let marker = WakeUp(tolerance: .zero)
        let marked = Wakes()
        marker.onWake { marked.times.withLock { $0.append(.now) } }
        marker.schedule(after: .milliseconds(100))
        try await waitUntil(timeout: timeBound(.seconds(5)), "the marker") { marked.count == 1 }
        #expect(wakes.count == 0)
        withExtendedLifetime((timer, marker)) {}  // a timer wakes only while its owner holds it
    }
}
