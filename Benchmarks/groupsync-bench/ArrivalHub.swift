import MQTT  // LockedValue

/// Tells the bench when every one of a set of participants has seen a given value, and when the last of
/// them saw it — notified by each participant's `valueUpdates()` consumer the moment it gets the value (no
/// polling).
final class ArrivalHub: Sendable {
    struct Timeout: Error, CustomStringConvertible {
        let value: Int
        let missing: Int
        var description: String { "\(missing) participant(s) never saw value \(value)" }
    }

    private struct Expectation {
        var id: UInt64
        var value: Int
        var pending: Set<Int>
        var last: UInt64 = 0
        var waiter: CheckedContinuation<UInt64, any Error>?
        var result: Result<UInt64, any Error>?
    }

    private let state = LockedValue<(nextID: UInt64, current: Expectation?)>((0, nil))

    /// From now on, wait for `value` to reach every participant in `indices`.
    func expect(_ value: Int, from indices: Set<Int>) {
        state.withLock { state in
            state.nextID += 1
            state.current = Expectation(id: state.nextID, value: value, pending: indices)
            if indices.isEmpty { state.current?.result = .success(MonotonicClock.nanoseconds()) }
        }
    }

    /// A participant's consumer received `value` at `time`.
    func arrived(index: Int, value: Int, at time: UInt64) {
        let resume = state.withLock { state -> (CheckedContinuation<UInt64, any Error>, UInt64)? in
            guard var expectation = state.current, expectation.value == value,
                expectation.pending.remove(index) != nil
            else { return nil }
            expectation.last = max(expectation.last, time)
            var resume: (CheckedContinuation<UInt64, any Error>, UInt64)?
            if expectation.pending.isEmpty {
                expectation.result = .success(expectation.last)
                if let waiter = expectation.waiter { resume = (waiter, expectation.last) }
                expectation.waiter = nil
            }
            state.current = expectation
            return resume
        }
        resume?.0.resume(returning: resume!.1)
    }

    /// Waits until every participant of the last ``expect(_:from:)`` saw the value; returns when the last
    /// one did (``MonotonicClock`` nanoseconds).
    func wait(timeout: Duration) async throws -> UInt64 {
        guard let id = state.withLock({ $0.current?.id }) else { return MonotonicClock.nanoseconds() }
        let timer = Task { [self] in
            do { try await Task.sleep(for: timeout) } catch { return }
            fail(id)
        }
        defer { timer.cancel() }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (waiter: CheckedContinuation<UInt64, any Error>) in
                let ready = state.withLock { state -> Result<UInt64, any Error>? in
                    guard state.current?.id == id else { return .failure(CancellationError()) }
                    if let result = state.current?.result { return result }
                    state.current?.waiter = waiter
                    return nil
                }
                if let ready { waiter.resume(with: ready) }
            }
        } onCancel: {
            fail(id)
        }
    }

    private func fail(_ id: UInt64) {
        let waiter = state.withLock { state -> (CheckedContinuation<UInt64, any Error>, Timeout)? in
            guard var expectation = state.current, expectation.id == id, expectation.result == nil else { return nil }
            let error = Timeout(value: expectation.value, missing: expectation.pending.count)
            expectation.result = .failure(error)
            let waiter = expectation.waiter
            expectation.waiter = nil
            state.current = expectation
            return waiter.map { ($0, error) }
        }
        waiter?.0.resume(throwing: waiter!.1)
    }
}
