import Dispatch
import Foundation

/// Turns SIGINT and SIGTERM into a callback, so that commands can leave sessions cleanly.
enum Signals {
    /// The sources must stay alive for the life of the process. `nonisolated(unsafe)` is sound: only
    /// `onInterrupt` touches it, and commands call that once, from their main task, before waiting.
    nonisolated(unsafe) private static var sources: [any DispatchSourceSignal] = []

    static func onInterrupt(_ handler: @escaping @Sendable () -> Void) {
        for number in [SIGINT, SIGTERM] {
            // The source sees the signal; ignoring it stops the default action (termination).
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler(handler: handler)
            source.resume()
            sources.append(source)
        }
    }
}
