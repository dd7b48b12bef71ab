import MQTT

/// Background work owned by a coordinator and its sessions; ``cancelAll()`` (from `close()`) ends it.
/// A task leaves the list when it ends, so a long-lived coordinator holds only the work still running.
final class BackgroundTasks: Sendable {
    private struct Running {
        var tasks: [Int: Task<Void, Never>] = [:]
        var nextID = 0
    }

    private let running = LockedValue(Running())

    /// Runs `work` in a task of its own, until it ends or ``cancelAll()`` cancels it.
    func spawn(_ work: @escaping @Sendable () async -> Void) {
        running.withLock { running in
            running.nextID += 1
            let id = running.nextID
            // Made under the lock: its removal, which takes the lock, comes after its insertion.
            running.tasks[id] = Task { [weak self] in
                await work()
                self?.running.withLock { _ = $0.tasks.removeValue(forKey: id) }
            }
        }
    }

    var count: Int { running.withLock { $0.tasks.count } }

    func cancelAll() {
        let tasks = running.withLock { running in
            defer { running.tasks = [:] }
            return Array(running.tasks.values)
        }
        for task in tasks { task.cancel() }
    }
}
