extension GroupCoordinator {
    /// Whether any session is joined right now.
    public var isSharing: Bool { sharing.withLock { $0.isSharing } }

    /// `true` while at least one session is joined: the current value first, then each change. Ends when
    /// the coordinator closes or the iterating task is cancelled.
    public func sharingUpdates() -> AsyncStream<Bool> {
        let (stream, continuation) = AsyncStream.makeStream(of: Bool.self, bufferingPolicy: .bufferingNewest(1))
        let (id, effects) = sharing.withLock { $0.addListener(continuation) }
        continuation.onTermination = { [weak self] _ in self?.sharing.withLock { $0.removeListener(id) } }
        effects.perform()
        return stream
    }

    /// Runs `work` now if no session is joined, or else as soon as none is (in the order deferred), e.g.
    /// an interstitial ad that must not cut into a shared moment. Work still waiting when the coordinator
    /// closes runs then.
    public func deferWhileSharing(_ work: @escaping @Sendable () async -> Void) {
        sharing.withLock { $0.onDefer(work) }.perform()
    }
}
