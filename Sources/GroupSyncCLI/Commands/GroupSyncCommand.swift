import Foundation
import GroupSync

/// A subcommand of `groupsync`.
protocol Command: Sendable {
    static var name: String { get }
    static var summary: String { get }
    /// Full help: usage line, options, exit codes.
    static var help: String { get }
    /// Runs with the arguments after the subcommand name; returns the exit code.
    static func run(_ arguments: [String]) async throws -> Int32
}

@main
enum GroupSyncCommand {
    static let commands: [any Command.Type] = [
        DemoCommand.self, BrokerCommand.self, SessionsCommand.self, JoinCommand.self, EndCommand.self, WatchCommand.self,
        BridgeCommand.self, DashboardCommand.self,
    ]

    static var usage: String {
        let list = commands.map { "  \($0.name.padding(toLength: 10, withPad: " ", startingAt: 0)) \($0.summary)" }.joined(separator: "\n")
        return """
            groupsync — SharePlay-style group sessions over MQTT

            Usage: groupsync <command> [options]   (groupsync help <command> for details; groupsync --version)

            Commands:
            \(list)

            Exit codes: 0 success, 1 failure, 2 usage error, 3 broker unreachable or refused, 4 mosquitto not installed,
            130 interrupted (Ctrl-C, SIGTERM or SIGHUP) while waiting.

            Environment: GROUPSYNC_BROKER (the default --broker), GROUPSYNC_LOG_REJECTED=1 (log every message
            rejected as malformed, forged or stale to standard error), GROUPSYNC_MQTT_DEBUG=1 (log libmosquitto).
            """
    }

    /// This build's version, and the wire protocol it speaks.
    static let version = "groupsync 0.2.0 (protocol \(GroupTopics.protocolRoot), \"v\": \(Wire.version))"

    static func main() async {
        var arguments = Array(CommandLine.arguments.dropFirst())
        if let first = arguments.first, ["--version", "version"].contains(first) {
            if arguments.count > 1 { usageError("unexpected argument '\(arguments[1])'") }
            Output.line(version)
            exit(0)
        }
        if arguments.first == "help", arguments.count == 2 {
            guard let command = commands.first(where: { $0.name == arguments[1] }) else { usageError("unknown command '\(arguments[1])'") }
            Output.line(command.help)
            exit(0)
        }
        guard let name = arguments.first, !["-h", "--help", "help"].contains(name) else {
            // `help`, `--help`, `-h` alone; with more than `help COMMAND`, a usage error, as anywhere else.
            if arguments.count > 1 { usageError("unexpected argument '\(arguments[arguments.first == "help" ? 2 : 1])'") }
            Output.line(usage)
            exit(arguments.isEmpty ? 2 : 0)
        }
        arguments.removeFirst()
        guard let command = commands.first(where: { $0.name == name }) else { usageError("unknown command '\(name)'") }
        if arguments.contains("--help") || arguments.contains("-h") {
            Output.line(command.help)
            exit(0)
        }
        do {
            exit(try await command.run(arguments))
        } catch let error as UsageError {
            usageError("\(error)", command: name)
        } catch let failure as CommandFailure {
            Output.error("groupsync \(name): \(failure)")
            exit(failure.exitCode)
        } catch {
            Output.error("groupsync \(name): \(error)")
            exit(1)
        }
    }

    /// A usage error: what is wrong on one line, where to read more on the next; exit status 2.
    static func usageError(_ message: String, command: String? = nil) -> Never {
        Output.error("groupsync\(command.map { " \($0)" } ?? ""): \(message)\nsee 'groupsync help\(command.map { " \($0)" } ?? "")'")
        exit(2)
    }
}
