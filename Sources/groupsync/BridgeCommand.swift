/// `groupsync bridge`: a session for a host program, over JSON lines on stdin/stdout (docs/BRIDGE.md).
enum BridgeCommand: Command {
    static let name = "bridge"
    static let summary = "bridge a session to a host program over JSON lines (stdin/stdout)"
    static let help = "Usage: groupsync bridge (being written)"

    static func run(_ arguments: [String]) async throws -> Int32 {
        throw CommandFailure("bridge is not available yet")
    }
}
