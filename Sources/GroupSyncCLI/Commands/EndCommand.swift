import Foundation
import GroupSync

/// `groupsync end`: ends a session for everyone, from the shell.
enum EndCommand: Command {
    static let name = "end"
    static let summary = "end a session for everyone and remove its records from the broker"
    static let help = """
        Usage: groupsync end SESSION-ID [--timeout SEC] [--broker URL] [--group NAME] [--as ID] [--no-retain]

        Ends the session with SESSION-ID, as `end()` does in an app: its participants see it end, and
        its retained records leave the broker (under an ACL, each participant removes its own). Waits for
        the session to be announced, at most --timeout.

        \(CommonOptions.help)
        \(CommonOptions.participantHelp)
          --timeout SEC     how long to wait for the broker and the session (default 10)

        Exit codes: 0 ended; 1 no such session within the timeout, or another failure; 2 usage error;
        3 broker unreachable; 130 interrupted (Ctrl-C, SIGTERM or SIGHUP).
        """

    static func run(_ arguments: [String]) async throws -> Int32 {
        let args = try Arguments(
            arguments, options: CommonOptions.names.union(["timeout"]), flags: CommonOptions.participantFlags, positionals: 1)
        guard args.positionals.count == 1, let sessionID = args.positionals.first else { throw UsageError("give exactly one SESSION-ID") }
        guard Identifier.isValid(sessionID) else { throw UsageError("invalid SESSION-ID '\(sessionID)'") }
        let common = try CommonOptions(args)
        let timeout = Duration.seconds(try args.integer("timeout", default: 10, range: 1...86_400))
        let interruption = Interruption()
        Signals.onInterrupt { interruption.fire() }
        let coordinator = try await interruption.race(timeout: timeout, waitingFor: "the broker", discard: CommonOptions.close) {
            try await common.connect()
        }
        do {
            let session = try await interruption.race(timeout: timeout, waitingFor: "session \(sessionID)") {
                for await session in coordinator.sessions(activityIdentifier: nil) where session.id == sessionID { return session }
                throw CommandFailure("the connection closed before session \(sessionID) was announced")
            }
            await session.end()
            Output.line("ended \(sessionID)")
        } catch {
            await coordinator.close()
            throw error
        }
        await coordinator.close()
        return 0
    }
}
