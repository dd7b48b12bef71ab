import Foundation

/// A value guarded by a `pthread_mutex_t`, with the same `withLock` shape as `Synchronization.Mutex`.
///
/// Why not `Mutex`: on Linux, `Synchronization.Mutex` waits with raw futex system calls, which
/// ThreadSanitizer does not see, so every access it protects is reported as a race. CI runs the suite
/// under ThreadSanitizer, so the state that libmosquitto's network thread and Swift tasks share is
/// guarded by a lock it understands.
///
/// The value lives behind a pointer rather than in a stored `var`: an `inout` access to a class's
/// stored property is checked for exclusivity at run time on every lock, and the mutex already
/// guarantees what that check would.
///
/// `withLock` is inlinable, so that each caller gets it specialized for its value, result and error types
/// (no type metadata looked up at run time when a lock is taken); for that, `value` and `mutex` are
/// visible to this module, and nothing in it but this class touches them.
///
/// `@unchecked Sendable` is sound: `value` is only read or written inside `withLock`, between
/// `pthread_mutex_lock` and `pthread_mutex_unlock` on `mutex`; both are initialised in `init` and
/// destroyed in `deinit` when no other reference exists.
package final class LockedValue<Value>: @unchecked Sendable {
    @usableFromInline let value: UnsafeMutablePointer<Value>
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>

    package init(_ value: Value) {
        self.value = .allocate(capacity: 1)
        self.value.initialize(to: value)
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        let rc = pthread_mutex_init(mutex, nil)
        precondition(rc == 0, "pthread_mutex_init failed: \(rc)")
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
        value.deinitialize(count: 1)
        value.deallocate()
    }

    /// Runs `body` if the lock is free right now (`pthread_mutex_trylock`); returns nil otherwise. For
    /// code that must not wait, such as an `atexit` handler.
    package func withLockIfAvailable<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result? {
        guard pthread_mutex_trylock(mutex) == 0 else { return nil }
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value.pointee)
    }

    /// Runs `body` with exclusive access to the value. Never call user code or block inside.
    @inlinable package func withLock<Result, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result) throws(Failure) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value.pointee)
    }
}
