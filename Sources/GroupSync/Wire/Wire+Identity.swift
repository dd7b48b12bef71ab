/// Rule 7 of docs/PROTOCOL.md's decoding rules: a record's fields that repeat a level of its topic match
/// that level (`identity-mismatch` otherwise). The coordinator's and sessions' machines apply these
/// checks to every received record; the conformance vectors run through the same ones.
extension Wire.Presence {
    /// Whether this record may stand on `participant`'s presence topic.
    func matches(participant: String) -> Bool { self.participant == participant }
}

extension Wire.Announcement {
    /// Whether this record may stand on `session`'s announcement topic.
    func matches(session: String) -> Bool { self.session == session }
}

extension Wire.Member {
    /// Whether this record may stand on `participant`'s member topic.
    func matches(participant: String) -> Bool { self.participant == participant }
}

extension Wire.StateRecord {
    /// Whether this record may stand on the state topic of `key` written by `writer`.
    func matches(key: String, writer: String) -> Bool { self.key == key && clock.participant == writer }
}
