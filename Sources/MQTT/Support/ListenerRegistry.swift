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

    package mutating func add(_ listener: Listener, id: ID) {
        listeners[id] = listener
    }

    @discardableResult
    package mutating func remove(_ id: ID) -> Listener? {
        listeners.removeValue(forKey: id)
    }

    package mutating func removeAll() -> [Listener] {
        defer { listeners = [:] }
        return Array(listeners.values)
    }

    package subscript(id: ID) -> Listener? {
        listeners[id]
    }

    package var all: [Listener] { Array(listeners.values) }

    package func filter(_ isIncluded: (Listener) -> Bool) -> [Listener] {
        listeners.values.filter(isIncluded)
    }

    package func forEach(_ body: (_ id: ID, _ listener: Listener) throws -> Void) rethrows {
        for (id, listener) in listeners { try body(id, listener) }
    }
}
