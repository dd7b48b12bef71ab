import Foundation
import GroupSync
import MQTT

/// Line-oriented standard output and error, safe from any task; each line is written whole. Once standard
/// output cannot be written (its reader went away: a host that closed the pipe, `| head`), what follows is
/// dropped and the handler of ``onClosed(_:)`` runs, once: a command ends then as on an interrupt, leaving
/// its sessions, instead of stopping on the write.
enum Output {
    private struct State {
        var closed = false
        var onClosed: (@Sendable () -> Void)?
    }

    private static let state = LockedValue(State())

    static func line(_ text: String) {
        let closedNow = state.withLock { state -> (@Sendable () -> Void)? in
            guard !state.closed else { return nil }
            guard (try? FileHandle.standardOutput.write(contentsOf: Data((text + "\n").utf8))) == nil else { return nil }
            state.closed = true
            return state.onClosed ?? {}
        }
        closedNow?()
    }

    static func error(_ text: String) {
        state.withLock { _ in try? FileHandle.standardError.write(contentsOf: Data((text + "\n").utf8)) }
    }

    /// Runs `handler` when standard output is found closed (at once if it was already); from then on
    /// `SIGPIPE` is ignored, so that a write to a closed output fails instead of ending the process.
    static func onClosed(_ handler: @escaping @Sendable () -> Void) {
        signal(SIGPIPE, SIG_IGN)
        let closed = state.withLock { state in
            state.onClosed = handler
            return state.closed
        }
        if closed { handler() }
    }

    /// One JSON object per line, written as the wire writes it (keys sorted, slashes unescaped).
    static func json(_ object: [String: JSONValue]) {
        guard let data = try? Wire.encode(JSONValue.object(object)) else { return }
        line(String(decoding: data, as: UTF8.self))
    }
}
