import MQTT

/// One small piece of state that every participant of a session sees the same: e.g. the index of the
/// photo the group is looking at.
///
/// - Conflicts: the write with the latest hybrid-logical-clock timestamp wins everywhere (ties broken by
///   participant ID). An update that arrives after a newer one is discarded, so crossing writes never
///   make a participant's value jump back. A participant whose wall clock is wrong neither wins forever
///   nor is ignored: clocks merge on every received write.
/// - Late joiners: `join()` returns with the current value in place (retained state per writer, plus a
///   catch-up from exactly one existing participant), so ``valueUpdates()`` starts with it.
/// - Leaving keeps this participant's last value visible to the others; `end()` removes it everywhere.
/// - Numbers: a value travels as JSON read by the protocol's rules, where an integer beyond ±2⁶³ and a
///   decimal of more digits than a `Double` keeps are `Double`s: a `UInt64` of 2⁶³ or more, or such a
///   `Decimal`, does not come back as written (it reads rounded, or as `initialValue`). Encode those as
///   strings.
public final class SharedState<Value: Codable & Sendable & Equatable>: Sendable {
    public let key: String
    public let initialValue: Value
    /// Minimum time between two publishes of this participant's writes (nil: publish every write).
    /// Writes in between are applied locally at once and the latest one is published at the end of the
    /// interval, so the last value written is always the last one delivered.
    public let minimumInterval: Duration?
    let core: SessionCore
    private let throttle = LockedValue(Throttle())

    private struct Throttle {
        var lastPublish: ContinuousClock.Instant?
        var pending: Wire.StateRecord?
        var flushScheduled = false
    }

    /// - Parameter key: an identifier (`A–Z a–z 0–9 . _ - : @ ~`), unique per state in the session. Keys
    ///   that start with `groupsync.` are the library's own (playback's records).
    public init<A: GroupActivity>(
        _ session: GroupSession<A>, key: String, initialValue: Value, minimumInterval: Duration? = nil
    ) throws(GroupSyncError) {
        try Identifier.validate(key, kind: "state key")
        guard !key.hasPrefix("groupsync.") else {
            throw .invalidIdentifier(kind: "state key", value: key, reason: "keys starting with 'groupsync.' are reserved")
        }
        self.core = session.core
        self.key = key
        self.initialValue = initialValue
        self.minimumInterval = minimumInterval
    }

    /// The current value: the winning write, or `initialValue` when nobody has written.
    public var value: Value {
        core.read { $0.states[key] }.flatMap { $0.decoded(as: Value.self) } ?? initialValue
    }

    /// Sets the value: applied locally at once, then published to everyone (retained, QoS 1). Returns
    /// when the broker acknowledged it (or at once when the write was coalesced into a later publish).
    /// Cancelling the task stops the wait, not the write: it throws ``GroupSyncError/cancelled`` and the
    /// value still goes out.
    public func set(_ newValue: Value) async throws(GroupSyncError) {
        guard core.isJoined else { throw core.isInvalidated ? .sessionInvalidated : .notJoined }
        let record = core.write(key: key, value: try Wire.jsonValue(newValue))
        guard let minimumInterval else {
            try await core.publish(record)
            return
        }
        let now = ContinuousClock.now
        let decision = throttle.withLock { throttle -> (publishNow: Bool, scheduleAfter: Duration?) in
            if let last = throttle.lastPublish, now - last < minimumInterval {
                throttle.pending = record
                if throttle.flushScheduled { return (false, nil) }
                throttle.flushScheduled = true
                return (false, minimumInterval - (now - last))
            }
            throttle.lastPublish = now
            throttle.pending = nil
            return (true, nil)
        }
        if decision.publishNow {
            try await core.publish(record)
        } else if let delay = decision.scheduleAfter {
            core.context.tasks.spawn { [self] in
                try? await Task.sleep(for: delay)
                let pending = throttle.withLock { throttle -> Wire.StateRecord? in
                    throttle.flushScheduled = false
                    throttle.lastPublish = .now
                    defer { throttle.pending = nil }
                    return throttle.pending
                }
                // Not after the session was left or ended: that would bring the record back.
                if let pending, core.isJoined { try? await core.publish(pending) }
            }
        }
    }

    /// The current value first — once the session is joined and caught up — then every change, from
    /// anyone, in the order applied; equal consecutive values are not repeated. Ends when the session is
    /// invalidated or the iterating task is cancelled. A slow consumer skips to the latest value.
    public func valueUpdates() -> SharedStateValues<Value> {
        SharedStateValues(updates: .init(core.listen(.values(key: key), keepingNewest: 1)), initialValue: initialValue)
    }
}
