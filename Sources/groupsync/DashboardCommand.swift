/// `groupsync dashboard`: projects a group's sessions for IoT dashboards (docs/DASHBOARDS.md).
enum DashboardCommand: Command {
    static let name = "dashboard"
    static let summary = "publish Home Assistant discovery and flat topics for dashboards"
    static let help = "Usage: groupsync dashboard (being written)"

    static func run(_ arguments: [String]) async throws -> Int32 {
        throw CommandFailure("dashboard is not available yet")
    }
}
