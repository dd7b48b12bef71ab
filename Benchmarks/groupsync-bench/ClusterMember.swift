import GroupSync

/// One participant of a ``SessionCluster``: its own coordinator (its own broker connection), its view of
/// the session, and — when the cluster shares state — its `SharedState` and the watcher of its values.
final class ClusterMember: Sendable {
    let index: Int
    let name: String
    let coordinator: GroupCoordinator
    let session: GroupSession<AnyGroupActivity>
    let state: SharedState<Int>?
    let watcher: ValueWatcher?

    init(
        index: Int, name: String, coordinator: GroupCoordinator, session: GroupSession<AnyGroupActivity>,
        state: SharedState<Int>?, watcher: ValueWatcher?
    ) {
        self.index = index
        self.name = name
        self.coordinator = coordinator
        self.session = session
        self.state = state
        self.watcher = watcher
    }
}
