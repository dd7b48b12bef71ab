import MQTT

extension GroupCoordinator {
    private static let current = LockedValue<GroupCoordinator?>(nil)
    private static let waiters = LockedValue<[CheckedContinuation<GroupCoordinator, Never>]>([])

    /// The coordinator used by `MyActivity.sessions()`, `activity.prepareForActivation()` and
    /// `activity.activate()`.
    public static var shared: GroupCoordinator? { current.withLock { $0 } }

    /// Makes `coordinator` the process-wide one; sequences from `MyActivity.sessions()` started before
    /// follow it from now on.
    public static func setShared(_ coordinator: GroupCoordinator?) {
        current.withLock { $0 = coordinator }
        guard let coordinator else { return }
        for waiter in waiters.withLock({ waiters in
            defer { waiters = [] }
            return waiters
        }) {
            waiter.resume(returning: coordinator)
        }
    }

    static func awaitShared() async -> GroupCoordinator {
        if let coordinator = shared { return coordinator }
        return await withCheckedContinuation { waiter in
            let now = current.withLock { current -> GroupCoordinator? in
                if let current { return current }
                waiters.withLock { $0.append(waiter) }
                return nil
            }
            if let now { waiter.resume(returning: now) }
        }
    }
}
