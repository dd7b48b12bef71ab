import GroupSync
import MQTT

/// Wakes an observer's loop when the next copy of an announcement it knows of expires
/// (``GroupView/nextExpiry``): `fire` runs once at the wall-clock time last armed. Arming again replaces
/// the earlier time; nil, or ``cancel()``, disarms. The owner cancels it when its loop ends.
final class ExpiryAlarm: Sendable {
    private let pending = LockedValue<(deadline: Int64?, task: Task<Void, Never>?)>((nil, nil))
    private let fire: @Sendable () -> Void

    init(_ fire: @escaping @Sendable () -> Void) { self.fire = fire }

    /// Fires at `deadline` (wall clock, ms since 1970), or not at all for nil.
    func arm(at deadline: Int64?) {
        let fire = self.fire
        let previous = pending.withLock { pending -> Task<Void, Never>? in
            guard pending.deadline != deadline else { return nil }  // armed for that time already
            let previous = pending.task
            pending = (
                deadline,
                deadline.map { deadline in
                    Task { [self] in
                        let wait = deadline - SystemWallClock().milliseconds()
                        if wait > 0 { try? await Task.sleep(for: .milliseconds(wait)) }
                        guard !Task.isCancelled else { return }
                        // Fired: arming for the same time again (a copy that had not quite run out) is new.
                        self.pending.withLock { if $0.deadline == deadline { $0.deadline = nil } }
                        fire()
                    }
                }
            )
            return previous
        }
        previous?.cancel()
    }

    func cancel() { arm(at: nil) }
}
