import GroupSync
import MQTT  // LockedValue

/// Consumes one participant's `SharedState.valueUpdates()` in a task of its own, as an app's view would, and
/// keeps what it saw: the latest value, when it arrived, and every value in order. Tells the
/// ``ArrivalHub`` about each one.
final class ValueWatcher: Sendable {
    struct Snapshot: Sendable {
        var latest: Int?
        var latestAt: UInt64 = 0
        var history: [Int] = []
    }

    let index: Int
    private let snapshot = LockedValue(Snapshot())
    private let task = LockedValue<Task<Void, Never>?>(nil)

    init(index: Int, values: SharedStateValues<Int>, hub: ArrivalHub) {
        self.index = index
        let consumer = Task { [self] in
            for await value in values {
                let now = MonotonicClock.nanoseconds()
                self.snapshot.withLock { snapshot in
                    snapshot.latest = value
                    snapshot.latestAt = now
                    snapshot.history.append(value)
                }
                hub.arrived(index: index, value: value, at: now)
            }
        }
        task.withLock { $0 = consumer }
    }

    var current: Snapshot { snapshot.withLock { $0 } }
    var latest: Int? { snapshot.withLock { $0.latest } }
    var count: Int { snapshot.withLock { $0.history.count } }

    func stop() {
        task.withLock { $0?.cancel() }
    }
}
