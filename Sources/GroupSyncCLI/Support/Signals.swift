import Dispatch
import Foundation
import MQTT

/// Turns SIGINT (Ctrl-C), SIGTERM and SIGHUP (the terminal closed) into a callback, so that commands
/// can leave sessions cleanly.
enum Signals {
    /// The sources must stay alive for the life of the process. `nonisolated(unsafe)` is sound: only
    /// `onInterrupt` touches it, and commands call that once, from their main task, before waiting.
    nonisolated(unsafe) private static var sources: [any DispatchSourceSignal] = []

    /// Calls `handler` on every SIGINT, SIGTERM or SIGHUP. With `exitAfter`, the process also exits
    /// with status 130 that long after the first one, and at once on a second: a command's farewell is
    /// bounded (``GroupCoordinator/Configuration/farewellTimeout``), and nothing may hold its exit up
    /// past that. Without, for commands that own a child process to stop first (`broker`, `demo`).
    static func onInterrupt(exitAfter grace: Duration? = .seconds(5), _ handler: @escaping @Sendable () -> Void) {
        let count = LockedValue(0)
        for number in [SIGINT, SIGTERM, SIGHUP] {
            // The source sees the signal; ignoring it stops the default action (termination).
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                let received = count.withLock { count in
                    count += 1
                    return count
                }
                if let grace {
                    if received > 1 { exitNow() }
                    if received == 1 { DispatchQueue.global().asyncAfter(deadline: .now() + grace.seconds) { exitNow() } }
                }
                handler()
            }
            source.resume()
            sources.append(source)
        }
    }

    /// Exits at once with status 130 (interrupted). No exit handler runs, so that no library is torn
    /// down under a thread still using it; ``Output`` writes unbuffered, so nothing printed is lost.
    private static func exitNow() -> Never { _exit(130) }
}
