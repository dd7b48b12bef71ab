/// Rule 7 of docs/PROTOCOL.md's decoding rules: a record's fields that repeat a level of its topic match
/// that level (`identity-mismatch` otherwise). The coordinator's and sessions' machines apply these
/// checks to every received record; the conformance vectors run through the same ones.
extension Wire.Presence {
    func matches(participant: String) -> Bool { self.participant == participant }
}

extension Wire.Announcement {
    func matches(session: String) -> Bool { self.session == session }
}

extension Wire.Member {
    func matches(participant: String) -> Bool { self.participant == participant }
}

extension Wire.StateRecord {
    func matches(key: String, writer: String) -> Bool { self.key == key && clock.participant == writer }
}
