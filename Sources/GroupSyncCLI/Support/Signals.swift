import Dispatch
import Foundation
import MQTT

/// Turns SIGINT (Ctrl-C), SIGTERM and SIGHUP (the terminal closed) — and standard output closed by its
/// reader (``Output/onClosed(_:)``) — into a callback, so that commands can leave sessions cleanly.
enum Signals {
    /// The sources must stay alive for the life of the process. `nonisolated(unsafe)` is sound: only
    /// `onInterrupt` touches it, and commands call that once, from their main task, before waiting.
    nonisolated(unsafe) private static var sources: [any DispatchSourceSignal] = []

    /// Calls `handler` on every SIGINT, SIGTERM or SIGHUP — not SIGHUP when the process was started
    /// ignoring it (`nohup`). With `exitAfter`, the process also exits with status 130 that long after the
    /// first signal, and at once on a second of the same kind (Ctrl-C twice): a backstop, since a
    /// command's farewell is bounded (``GroupCoordinator/Configuration/farewellTimeout``, and a second
    /// for DISCONNECT). Without, for commands that own a child process to stop first (`broker`, `demo`).
    static func onInterrupt(exitAfter grace: Duration? = .seconds(5), _ handler: @escaping @Sendable () -> Void) {
        Output.onClosed(handler)
        let received = LockedValue<[Int32]>([])
        for number in [SIGINT, SIGTERM, SIGHUP] {
            // The source sees the signal; ignoring it stops the default action (termination).
            let previous = signal(number, SIG_IGN)
            if number == SIGHUP && isIgnore(previous) { continue }  // nohup: it stays ignored
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                let before = received.withLock { received in
                    defer { received.append(number) }
                    return received
                }
                if let grace {
                    if before.contains(number) { exitNow() }
                    if before.isEmpty { DispatchQueue.global().asyncAfter(deadline: .now() + grace.seconds) { exitNow() } }
                }
                handler()
            }
            source.resume()
            sources.append(source)
        }
    }

    /// Whether a handler `signal()` returned is `SIG_IGN` (C function pointers are not `Equatable`).
    private static func isIgnore(_ handler: __sighandler_t?) -> Bool {
        handler.map { unsafeBitCast($0, to: Int.self) } == unsafeBitCast(SIG_IGN, to: Int.self)
    }

    /// Exits at once with status 130 (interrupted). No exit handler runs, so that no library is torn
    /// down under a thread still using it; ``Output`` writes unbuffered, so nothing printed is lost.
    private static func exitNow() -> Never { _exit(130) }
}
