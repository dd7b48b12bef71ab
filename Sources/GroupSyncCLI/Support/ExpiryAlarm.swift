import Foundation
import Synchronization

/// Wakes an observer's loop when the next copy of an announcement it knows of expires
/// (``GroupView/nextExpiry``): `fire` runs once at the wall-clock time last armed. Arming again replaces
/// the earlier time; nil, or ``cancel()``, disarms. The owner cancels it when its loop ends.
final class ExpiryAlarm: Sendable {
    private let pending = Mutex<Task<Void, Never>?>(nil)
    private let fire: @Sendable () -> Void

    init(_ fire: @escaping @Sendable () -> Void) { self.fire = fire }

    /// Fires at `deadline` (wall clock, ms since 1970), or not at all for nil.
    func arm(at deadline: Int64?) {
        let fire = self.fire
        let next = deadline.map { deadline in
            Task {
                let wait = deadline - ExpiryAlarm.now()
                if wait > 0 { try? await Task.sleep(for: .milliseconds(wait)) }
                if !Task.isCancelled { fire() }
            }
        }
        let previous = pending.withLock { current in
            defer { current = next }
            return current
        }
        previous?.cancel()
    }

    func cancel() { arm(at: nil) }

    /// The wall clock in ms, as copies' expiries are kept.
    static func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1_000) }
}
