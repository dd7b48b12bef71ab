/// The listeners of a state machine (continuations, inboxes, waiters), each under the identity of the
/// object it yields to (its inbox), which its sequence knows to remove it when it ends.
///
/// A value type without side effects: the machine that owns it decides what each listener receives and
/// returns the listeners to resume or finish; its runtime does that outside its lock. Iteration order is
/// unspecified.
package struct ListenerRegistry<Listener> {
    /// The identity of the object the listener yields to: unique while that object lives, and it lives
    /// while it is registered.
    package typealias ID = ObjectIdentifier

    private var listeners: [ID: Listener] = [:]

    package init() {}

    /// Adds `listener` under `id`, the identity of the object it yields to.
    package mutating func add(_ listener: Listener, id: ID) {
        listeners[id] = listener
    }

    /// Removes the listener added under `id`, if it is still there.
    @discardableResult
    package mutating func remove(_ id: ID) -> Listener? {
        listeners.removeValue(forKey: id)
    }

    /// Removes every listener and returns them, e.g. to finish them all.
    package mutating func removeAll() -> [Listener] {
        defer { listeners = [:] }
        return Array(listeners.values)
    }

    package subscript(id: ID) -> Listener? {
        listeners[id]
    }

    /// Every listener, to resume them all with the same value.
    package var all: [Listener] { Array(listeners.values) }

    /// The listeners that `isIncluded` selects, e.g. those of one message type.
    package func filter(_ isIncluded: (Listener) -> Bool) -> [Listener] {
        listeners.values.filter(isIncluded)
    }

    /// Calls `body` with each listener and its ID.
    package func forEach(_ body: (_ id: ID, _ listener: Listener) throws -> Void) rethrows {
        for (id, listener) in listeners { try body(id, listener) }
    }
}
