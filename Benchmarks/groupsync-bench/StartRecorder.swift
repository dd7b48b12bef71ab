import GroupSync
import MQTT  // LockedValue

/// Consumes one participant's `starts()` in a task of its own, as a player would, and keeps each start
/// with the `CLOCK_MONOTONIC` time it was delivered.
final class StartRecorder: Sendable {
    struct Delivery: Sendable {
        var start: PlaybackStart
        var at: UInt64
    }

    private let deliveries = LockedValue<[Delivery]>([])
    private let task = LockedValue<Task<Void, Never>?>(nil)

    init(_ starts: GroupUpdates<PlaybackStart>) {
        let consumer = Task { [deliveries] in
            for await start in starts {
                let now = MonotonicClock.nanoseconds()
                deliveries.withLock { $0.append(Delivery(start: start, at: now)) }
            }
        }
        task.withLock { $0 = consumer }
    }

    var count: Int { deliveries.withLock { $0.count } }

    func delivery(_ index: Int) -> Delivery { deliveries.withLock { $0[index] } }

    func stop() {
        task.withLock { $0?.cancel() }
    }
}
