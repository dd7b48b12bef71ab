import MQTT

extension GroupCoordinator {
    /// The process-wide coordinator, and the `sessions()` sequences started before there was one.
    struct Sharing {
        var coordinator: GroupCoordinator?
        /// Each waiting sequence's inbox and the activity it lists, until a coordinator is set or the
        /// sequence ends.
        var waiting: [ObjectIdentifier: (activityType: String, inbox: Inbox<SessionCore>)] = [:]
    }

    static let sharing = LockedValue(Sharing())

    /// The coordinator used by `MyActivity.sessions()`, `activity.prepareForActivation()` and
    /// `activity.activate()`.
    public static var shared: GroupCoordinator? { sharing.withLock { $0.coordinator } }

    /// Makes `coordinator` the process-wide one; sequences from `MyActivity.sessions()` started before
    /// follow it from now on.
    public static func setShared(_ coordinator: GroupCoordinator?) {
        let waiting: [(activityType: String, inbox: Inbox<SessionCore>)] = sharing.withLock { sharing in
            sharing.coordinator = coordinator
            guard coordinator != nil else { return [] }
            defer { sharing.waiting = [:] }
            return Array(sharing.waiting.values)
        }
        for (activityType, inbox) in waiting { coordinator?.listen(for: activityType, inbox) }
    }

    /// Feeds `inbox` the sessions of `activityType` from the shared coordinator: from now if there is
    /// one, else from the ``setShared(_:)`` that sets one. An inbox that ends before is forgotten.
    static func listenToShared(for activityType: String, _ inbox: Inbox<SessionCore>) {
        let id = ObjectIdentifier(inbox)
        // Set before the inbox is listed: the coordinator's `listen` replaces it with its own.
        inbox.onTermination { sharing.withLock { _ = $0.waiting.removeValue(forKey: id) } }
        let coordinator = sharing.withLock { sharing in
            if sharing.coordinator == nil { sharing.waiting[id] = (activityType, inbox) }
            return sharing.coordinator
        }
        coordinator?.listen(for: activityType, inbox)
    }
}
