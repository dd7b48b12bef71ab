/// Runs `work` and returns its result, or cancels it and returns nil once `timeout` has passed: for work
/// whose result is optional (a clean-exit publish to a broker that may be gone, an echo that may never
/// come).
///
/// Returns only after `work` has ended: it must honour cancellation. Cancelling the calling task
/// cancels `work`.
package func withTimeout<T: Sendable>(_ timeout: Duration, _ work: @escaping @Sendable () async -> T?) async -> T? {
    await withTaskGroup(of: Optional<T>.self) { group in
        group.addTask { await work() }
        group.addTask {
            try? await Task.sleep(for: timeout)
            return nil
        }
        let result = await group.next() ?? nil
        group.cancelAll()
        return result
    }
}

/// Runs `work`, cancelling it once `timeout` has passed; returns when `work` has ended (see
/// ``withTimeout(_:_:)``).
package func withTimeout(_ timeout: Duration, _ work: @escaping @Sendable () async -> Void) async {
    let _: Void? = await withTimeout(timeout) { () async -> Void? in await work() }
}
