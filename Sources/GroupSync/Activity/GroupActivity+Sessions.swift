extension GroupActivity {
    /// Every session of this activity in the shared coordinator's group — the same sequence for the
    /// participant that activated a session and for everyone else. Start it at launch and keep it for
    /// the app's lifetime: it waits for ``GroupCoordinator/setShared(_:)`` if needed, survives
    /// reconnects, and delivers sessions announced before it started, once each. Ends as
    /// ``GroupCoordinator/sessions(of:)`` does.
    public static func sessions() -> GroupSessions<Self> {
        let inbox = Inbox<SessionCore>()
        GroupCoordinator.listenToShared(for: activityIdentifier, inbox)
        return GroupUpdates(inbox) { GroupSession<Self>(core: $0) }
    }

    /// `.activationPreferred` when the shared coordinator is connected, else `.activationDisabled`.
    public func prepareForActivation() async -> GroupActivityActivationResult {
        guard let coordinator = GroupCoordinator.shared else { return .activationDisabled }
        return await coordinator.prepareForActivation(self)
    }

    /// Announces a session of this activity to the shared coordinator's group and returns its ID once the
    /// announcement is on the broker; the session then arrives through ``sessions()``, to this participant
    /// too. Throws ``GroupSyncError/noCoordinator`` before ``GroupCoordinator/setShared(_:)``, and what
    /// ``GroupCoordinator/activate(_:)`` throws.
    @discardableResult
    public func activate() async throws(GroupSyncError) -> String {
        guard let coordinator = GroupCoordinator.shared else { throw .noCoordinator }
        return try await coordinator.activate(self)
    }
}
