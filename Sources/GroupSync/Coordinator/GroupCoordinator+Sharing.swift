extension GroupCoordinator {
    /// Whether any session is joined right now.
    public var isSharing: Bool { state.withLock { $0.sharing.isSharing } }

    /// `true` while at least one session is joined: the current value first, then each change. A slow
    /// consumer skips to the latest value. Ends when the coordinator closes, when the iterating task is
    /// cancelled, or when the sequence is dropped.
    public func sharingUpdates() -> GroupUpdates<Bool> {
        let inbox = Inbox<Bool>(keepingNewest: 1)
        state.withLock { $0.sharing.addListener(inbox) }.perform()
        let id = ObjectIdentifier(inbox)
        inbox.onTermination { [weak self] in self?.state.withLock { $0.sharing.removeListener(id) } }
        return GroupUpdates(inbox)
    }

    /// Runs `work` now if no session is joined, or else as soon as none is (in the order deferred), e.g.
    /// an interstitial ad that must not cut into a shared moment. Work still waiting when the coordinator
    /// closes runs then.
    public func deferWhileSharing(_ work: @escaping @Sendable () async -> Void) {
        state.withLock { $0.sharing.onDefer(work) }.perform()
    }
}
