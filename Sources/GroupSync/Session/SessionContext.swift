import MQTT

/// What a session needs from the coordinator that found it: the connection, the group's topics, who we
/// are, the clocks, the participant's retained records and background tasks, and where to report its
/// lifecycle. Sessions never see the coordinator itself.
struct SessionContext: Sendable {
    /// What a session reports to its coordinator.
    enum Event: Sendable {
        /// The session was joined: it counts as shared.
        case joined
        /// The session is over for us (left, ended or closed). `wasJoined`: it no longer counts as
        /// shared.
        case invalidated(wasJoined: Bool)
        /// The local participant left a session that is still announced; its member record is cleared.
        case left
        /// The session ended (here or elsewhere): forget it.
        case ended
    }

    let client: MQTTClient
    let topics: GroupTopics
    let me: Participant
    /// The connection's epoch, in every member record and message envelope.
    let epoch: Int64
    let clock: any WallClock
    /// The participant's hybrid logical clock, shared by all its sessions.
    let hlc: LockedValue<HybridLogicalClock>
    let outbox: OutboxStateMachine.Configuration
    let catchUpTimeout: Duration
    /// How long leaving or ending waits for the broker (``GroupCoordinator/Configuration/farewellTimeout``).
    let farewellTimeout: Duration
    /// How long after our last reliable message we state our streams' position (the heartbeat interval).
    let positionInterval: Duration
    let onRejected: (@Sendable (_ topic: String, _ payloadSize: Int) -> Void)?
    /// The group's keys, when it is private (``GroupCoordinator/Configuration/keyring``).
    let keyring: GroupKeyring?
    let retained: RetainedRecords
    /// Who has a copy of a session's announcement on the broker, by the coordinator's table of copies
    /// (which a session does not keep a second time: it has one entry per participant).
    let announcers: @Sendable (_ session: String) -> [String]
    let tasks: BackgroundTasks
    let report: @Sendable (SessionCore, Event) -> Void
}
