/// The group's records: who is online (presence, heartbeats) and, on a broker without retained messages,
/// the welcome that tells a newcomer (or an observer that asks) what retained records would have
/// (docs/PROTOCOL.md, "Presence").
extension Wire {
    /// `…/presence/<participant>`, retained. Online while the connection lives; the connection's will
    /// replaces it with `"status": "lost"` and the same epoch. An empty payload means offline (clean exit).
    package struct Presence: Encodable, Sendable, Hashable {
        package var v = Wire.version
        package var participant: String
        package var status: Status
        /// Identifies the coordinator's connection, kept across its automatic reconnects (ms since 1970
        /// when the coordinator connected, increasing per participant): a will or a retained message with
        /// an older epoch never overrides a newer one.
        package var epoch: Int64
        package var name: String?
        /// How often the participant sends a ``Heartbeat`` (ms); nil when it sends none. Receivers judge
        /// its silence by this interval, not by their own.
        package var interval: Int64?

        package enum Status: String, Encodable, Sendable { case online, lost }
    }

    /// `…/alive/<participant>`, QoS 0, never retained: "this connection is alive", every `interval` ms.
    package struct Heartbeat: Encodable, Sendable, Hashable {
        package var v = Wire.version
        package var epoch: Int64
        package var interval: Int64
    }

    /// `…/welcome/<recipient>/<sender>`, QoS 1, never retained: on a broker without retained messages,
    /// what a newcomer to the group would have read from them, sent by one participant that knows.
    package struct Welcome: Encodable, Sendable, Hashable {
        package var v = Wire.version
        /// The online presence of every participant the sender knows to be online, itself included.
        package var presences: [Presence]
        /// The current announcement of every live session the sender knows.
        package var sessions: [Announcement]
        /// True on every part but the last, when the welcome does not fit one message.
        package var more: Bool? = nil
    }

    /// `…/observe/<observer>`, QoS 1, never retained: an observer — a dashboard, a tool that lists
    /// sessions — asks to be welcomed as a newcomer would be, without appearing as a participant.
    package struct Observe: Encodable, Sendable, Hashable {
        package var v = Wire.version
        package init() {}
    }
}

extension Wire.Presence: Wire.Record {
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        try fields.checkVersion()
        self.init(
            participant: try fields.string(CodingKeys.participant), status: try fields.enum(CodingKeys.status, Status.self),
            epoch: try fields.int(CodingKeys.epoch, in: Wire.Bounds.time), name: try fields.optionalString(CodingKeys.name),
            interval: try fields.optionalInt(CodingKeys.interval, in: Wire.Bounds.interval))
    }
}

extension Wire.Heartbeat: Wire.Record {
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        try fields.checkVersion()
        self.init(
            epoch: try fields.int(CodingKeys.epoch, in: Wire.Bounds.time),
            interval: try fields.int(CodingKeys.interval, in: Wire.Bounds.interval))
    }
}

extension Wire.Welcome: Wire.Record {
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        try fields.checkVersion()
        self.init(
            presences: try fields.array(CodingKeys.presences, of: Wire.Presence.self),
            sessions: try fields.array(CodingKeys.sessions, of: Wire.Announcement.self), more: try fields.optionalBool(CodingKeys.more))
    }
}

extension Wire.Observe: Wire.Record {
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        try fields.checkVersion()
        self.init()
    }
}
