import BrokerSupport
import Foundation
import MQTT

/// Faults for the tests and the bench: freeze a broker, restart it gracefully or after a crash
/// (``MosquittoBroker/kill()`` crashes it for good). Not part of what `groupsync`
/// ships: `groupsync broker` and `demo` only start and stop one.
extension MosquittoBroker {
    /// Whether the broker is frozen by ``pause()``.
    public var isPaused: Bool {
        state.withLock { $0.child?.paused ?? false }
    }

    /// How ``restart(after:)`` ends the running broker.
    public enum Shutdown: Sendable, Hashable {
        /// SIGTERM (``stop()``): mosquitto disconnects its clients and saves
        /// its persistence database.
        case graceful
        /// SIGKILL (``kill()``), like a crash: connections drop without a
        /// DISCONNECT and whatever was not autosaved is lost
        /// (``Configuration/autosave``).
        case crash
    }

    /// Ends the broker as `shutdown` says and starts it again on the same
    /// port with the same configuration file and persistence directory.
    /// Returns once it accepts connections; relaunches while the port is not
    /// free yet, for up to 10 s.
    public func restart(after shutdown: Shutdown = .graceful) async throws {
        switch shutdown {
        case .graceful: await stop()
        case .crash: kill()
        }
        let deadline = Deadline.after(.seconds(10))
        while true {
            switch try await launchAndWait(until: deadline) {
            case .ready:
                return
            case .exited(let how):
                if deadline.hasPassed {
                    throw Failure("mosquitto could not restart on port \(port) (\(how))", log: logTail())
                }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    /// Freezes the broker with SIGSTOP and returns once it is stopped: it
    /// still completes TCP handshakes from its listen backlog but handles no
    /// traffic, like a hung server. Does nothing if not running or already paused.
    public func pause() {
        requireOwnProcess("pause()")
        state.withLock { state in
            guard let child = state.child, !child.paused else { return }
            sendSignal(child.pid, SIGSTOP)
            var status: Int32 = 0
            var result: pid_t
            repeat {
                result = waitpid(child.pid, &status, WUNTRACED)
            } while result == -1 && errno == EINTR
            if result == child.pid && status & 0xFF == 0x7F {
                state.child?.paused = true
            } else {
                Self.record(&state, child: child, status: result == child.pid ? status : nil)
            }
        }
    }

    /// Lets a broker frozen by ``pause()`` run again (SIGCONT).
    public func resume() {
        requireOwnProcess("resume()")
        state.withLock { state in
            guard let child = state.child, child.paused else { return }
            sendSignal(child.pid, SIGCONT)
            state.child?.paused = false
        }
    }
}
