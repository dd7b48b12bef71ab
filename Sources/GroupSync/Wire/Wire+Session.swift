import Foundation

/// A session's records: the announcement copies, members, shared state, and the `$catchup` body that
/// carries them to a newcomer (docs/PROTOCOL.md, "Sessions").
extension Wire {
    /// `…/session/<session>/<publisher>`, retained: one participant's copy of the announcement. The copy
    /// with the largest revision is the session's; one with `ended` says the session ended.
    package struct Announcement: Encodable, Sendable, Hashable {
        package var v = Wire.version
        package var session: String
        package var activity: Activity
        package var createdBy: String
        /// ms since 1970.
        package var createdAt: Int64
        /// Increases with every activity change; the highest wins.
        package var revision: HLCTimestamp
        /// Seconds every retained record of the session lives on the broker unless its owner refreshes it.
        package var ttl: Int64
        /// Present (true) on the copy of the participant that ended the session.
        package var ended: Bool?

        /// How long the session's retained records live after their last refresh.
        var lifetime: Duration { .seconds(max(ttl, 1)) }

        package struct Activity: Encodable, Sendable, Hashable {
            /// The activity's `activityIdentifier`.
            package var type: String
            /// nil only while sealed.
            package var metadata: GroupActivityMetadata?
            /// The activity value itself, as the app encoded it; while sealed, the sealed text of
            /// `{"data": …, "metadata": …}`.
            package var data: JSONValue
            /// In a private session, the ID of the group key that sealed `data` and `metadata`.
            package var sealed: String? = nil
        }
    }

    /// `…/s/<session>/member/<participant>`, retained: this participant joined with the connection
    /// `epoch`. An empty payload means it left.
    package struct Member: Encodable, Sendable, Hashable {
        package var v = Wire.version
        package var participant: String
        package var epoch: Int64
        /// True on a record published again to answer another's join (brokers without retained
        /// messages): it is no join itself.
        package var again: Bool? = nil
    }

    /// `…/s/<session>/state/<key>/<writer>`, retained: the writer's latest value for `key`. Readers keep,
    /// per key, the record with the largest clock.
    package struct StateRecord: Encodable, Sendable, Hashable {
        package var v = Wire.version
        package var key: String
        package var value: JSONValue
        package var clock: HLCTimestamp
        /// In a private session, the ID of the group key that sealed `value` (a base64 string then).
        package var sealed: String? = nil
        /// `value`'s JSON text as it came (from the payload, or opened), which the app's type is decoded
        /// from without writing `value` out again; nil where it was not read as text (a catch-up's). Not
        /// part of the record: neither written nor compared.
        package var text: Data? = nil

        enum CodingKeys: String, CodingKey { case v, key, value, clock, sealed }

        package static func == (lhs: StateRecord, rhs: StateRecord) -> Bool {
            (lhs.v, lhs.key, lhs.clock, lhs.sealed) == (rhs.v, rhs.key, rhs.clock, rhs.sealed) && lhs.value == rhs.value
        }

        package func hash(into hasher: inout Hasher) {
            hasher.combine(key)
            hasher.combine(value)
            hasher.combine(clock)
            hasher.combine(sealed)
        }

        /// The value as the app's type (`JSONDecoder`), from its text when there is one.
        func decoded<T: Decodable>(as type: T.Type) -> T? { text.map { Wire.decodeBody(type, from: $0) } ?? Wire.value(type, from: value) }
    }

    /// Body of `$catchup`: what a newcomer needs, sent by one existing participant to the newcomer only.
    package struct CatchUp: Encodable, Sendable, Hashable {
        /// The winning record of every key.
        package var states: [StateRecord]
        /// The sender's view of who is active, with their connection epochs.
        package var members: [Member]
        /// True on every part but the last, when the catch-up does not fit one message.
        package var more: Bool?
        /// Where nothing is retained: the journal records the sender knows, and who holds their bytes
        /// besides their owners.
        package var journal: [JournalRecord]? = nil
        package var holders: [Holders]? = nil
    }
}

extension Wire.Announcement: Wire.Record {
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        try fields.checkVersion()
        self.init(
            session: try fields.string(CodingKeys.session), activity: try Activity(json: try fields.value(CodingKeys.activity)),
            createdBy: try fields.string(CodingKeys.createdBy), createdAt: try fields.int(CodingKeys.createdAt, in: Wire.Bounds.time),
            revision: try HLCTimestamp(json: try fields.value(CodingKeys.revision)),
            ttl: try fields.int(CodingKeys.ttl, in: Wire.Bounds.ttl),
            ended: try fields.optionalBool(CodingKeys.ended))
    }
}

extension Wire.Announcement.Activity: Wire.Record {
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        let sealed = try fields.optionalString(CodingKeys.sealed)
        let data = try fields.value(CodingKeys.data)
        if sealed != nil {
            // Sealed: the data is the sealed text, and the metadata is in it.
            guard case .string = data, fields[CodingKeys.metadata] == nil else { throw .wrongShape }
            self.init(type: try fields.string(CodingKeys.type), metadata: nil, data: data, sealed: sealed)
        } else {
            self.init(
                type: try fields.string(CodingKeys.type), metadata: try GroupActivityMetadata(json: try fields.value(CodingKeys.metadata)),
                data: data)
        }
    }
}

extension Wire.Member: Wire.Record {
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        try fields.checkVersion()
        self.init(
            participant: try fields.string(CodingKeys.participant), epoch: try fields.int(CodingKeys.epoch, in: Wire.Bounds.time),
            again: try fields.optionalBool(CodingKeys.again))
    }
}

extension Wire.StateRecord: Wire.Record {
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        try fields.checkVersion()
        self.init(
            key: try fields.string(CodingKeys.key), value: try fields.value(CodingKeys.value),
            clock: try HLCTimestamp(json: try fields.value(CodingKeys.clock)), sealed: try fields.optionalString(CodingKeys.sealed))
        if sealed != nil { guard case .string = value else { throw .wrongShape } }
    }

    /// Reads a whole payload, keeping the value's text — unless it is sealed (the sealed string is no app
    /// value), or holds a number its parsed value does not state exactly: every reader, a late joiner's
    /// catch-up included, then decodes the parsed value.
    package static func read(_ data: Data) throws(Wire.Rejection) -> Self {
        let (fields, value, exact) = try JSONParser.parseObject(data, locating: CodingKeys.value.stringValue)
        var record = try Self(fields: fields)
        if record.sealed == nil, exact { record.text = value.map { data[$0] } }
        return record
    }
}

extension Wire.CatchUp: Wire.Record {
    /// A `$catchup` body (not a record: no `v` of its own; each listed record has one).
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        self.init(
            states: try fields.array(CodingKeys.states, of: Wire.StateRecord.self),
            members: try fields.array(CodingKeys.members, of: Wire.Member.self), more: try fields.optionalBool(CodingKeys.more),
            journal: fields[CodingKeys.journal] == nil ? nil : try fields.array(CodingKeys.journal, of: Wire.JournalRecord.self),
            holders: fields[CodingKeys.holders] == nil ? nil : try fields.array(CodingKeys.holders, of: Wire.Holders.self))
    }
}
