import MQTT

/// Background work owned by a coordinator and its sessions; ``cancelAll()`` (from `close()`) ends it.
final class BackgroundTasks: Sendable {
    private let tasks = LockedValue<[Task<Void, Never>]>([])

    /// Runs `work` in a task of its own.
    func spawn(_ work: @escaping @Sendable () async -> Void) {
        add(Task { await work() })
    }

    func add(_ task: Task<Void, Never>) {
        tasks.withLock { tasks in
            tasks.removeAll { $0.isCancelled }
            tasks.append(task)
        }
    }

    func cancelAll() {
        let running = tasks.withLock { tasks in
            defer { tasks = [] }
            return tasks
        }
        for task in running { task.cancel() }
    }
}
