import Foundation

/// Records built from parsed payloads, by the rules of docs/PROTOCOL.md ("Decoding rules"): a record is
/// an object whose `v` is the integer 2; every field it needs is there with its type (integers as JSON
/// integers); optional fields are absent or of their type; other fields are ignored.
extension Wire {
    /// Why a payload is rejected: the codes of docs/conformance/README.md, which says what each means.
    package enum Rejection: String, Error, Sendable, Hashable, CaseIterable {
        case tooLarge = "too-large"
        case bom
        case malformed
        case invalidUTF8 = "invalid-utf8"
        case badNumber = "bad-number"
        case tooDeep = "too-deep"
        case duplicateKey = "duplicate-key"
        case badVersion = "bad-version"
        case notAnInteger = "not-an-integer"
        case outOfRange = "out-of-range"
        case wrongShape = "wrong-shape"
    }

    /// An object's members, looked up by name (records have a handful: a linear search beats hashing).
    package struct Fields: Sendable {
        let keys: [String]
        let values: [JSONValue]

        init(keys: [String], values: [JSONValue]) {
            self.keys = keys
            self.values = values
        }

        init(_ json: JSONValue) throws(Rejection) {
            guard case let .object(object) = json else { throw .wrongShape }
            self.init(keys: Array(object.keys), values: Array(object.values))
        }

        /// Checks that `v` is the integer 2 (a record's first check).
        func checkVersion() throws(Rejection) {
            guard case .int(Int64(Wire.version))? = self["v"] else { throw .badVersion }
        }

        /// The member named exactly `key` (same Unicode scalars; field names are ASCII, so a key of another
        /// length is another name, and comparing lengths first is cheap).
        subscript(key: String) -> JSONValue? {
            let length = key.utf8.count
            return keys.firstIndex { $0.utf8.count == length && $0 == key }.map { values[$0] }
        }

        func value(_ key: String) throws(Rejection) -> JSONValue {
            guard let value = self[key] else { throw .wrongShape }
            return value
        }

        /// An integer field within `bounds` (docs/PROTOCOL.md, "Ranges"): a value outside is `out-of-range`.
        func int(_ key: String, in bounds: ClosedRange<Int64>) throws(Rejection) -> Int64 { try Fields.integer(try value(key), in: bounds) }

        /// A JSON integer within `bounds`.
        static func integer(_ value: JSONValue, in bounds: ClosedRange<Int64>) throws(Rejection) -> Int64 {
            let number = try integer(value)
            guard bounds.contains(number) else { throw .outOfRange }
            return number
        }

        /// A JSON integer: a number with a fraction or an exponent is not one; anything else is another type.
        static func integer(_ value: JSONValue) throws(Rejection) -> Int64 {
            switch value {
            case let .int(value): value
            case .double: throw .notAnInteger
            default: throw .wrongShape
            }
        }

        func string(_ key: String) throws(Rejection) -> String {
            guard case let .string(value) = try value(key) else { throw .wrongShape }
            return value
        }

        func optionalString(_ key: String) throws(Rejection) -> String? { self[key] == nil ? nil : try string(key) }

        func optionalInt(_ key: String, in bounds: ClosedRange<Int64>) throws(Rejection) -> Int64? {
            self[key] == nil ? nil : try int(key, in: bounds)
        }

        func optionalBool(_ key: String) throws(Rejection) -> Bool? { self[key] == nil ? nil : try bool(key) }

        func bool(_ key: String) throws(Rejection) -> Bool {
            guard case let .bool(value) = try value(key) else { throw .wrongShape }
            return value
        }

        func strings(_ key: String) throws(Rejection) -> [String] {
            guard case let .array(elements) = try value(key) else { throw .wrongShape }
            return try elements.map { element throws(Rejection) in
                guard case let .string(string) = element else { throw .wrongShape }
                return string
            }
        }

        func array<T: Readable>(_ key: String, of type: T.Type) throws(Rejection) -> [T] {
            guard case let .array(elements) = try value(key) else { throw .wrongShape }
            var values: [T] = []
            values.reserveCapacity(elements.count)
            for element in elements { values.append(try T(json: element)) }
            return values
        }

        func `enum`<T: RawRepresentable<String>>(_ key: String, _ type: T.Type) throws(Rejection) -> T {
            guard let value = T(rawValue: try string(key)) else { throw .wrongShape }
            return value
        }
    }
}

extension Wire.Readable {
    package static func read(_ data: Data) throws(Wire.Rejection) -> Self { try Self(json: try JSONParser.parse(data)) }
}

extension Wire.Record {
    package init(json: JSONValue) throws(Wire.Rejection) { try self.init(fields: try Wire.Fields(json)) }

    package static func read(_ data: Data) throws(Wire.Rejection) -> Self { try Self(fields: try JSONParser.parseObject(data).fields) }
}

extension JSONValue: Wire.Readable {
    package init(json: JSONValue) { self = json }
}

extension HLCTimestamp: Wire.Record {
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        self.init(
            time: try fields.int("t", in: Wire.Bounds.time), counter: try fields.int("c", in: Wire.Bounds.counter),
            participant: try fields.string("p"))
    }
}

extension Wire.Presence: Wire.Record {
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        try fields.checkVersion()
        self.init(
            participant: try fields.string("participant"), status: try fields.enum("status", Status.self),
            epoch: try fields.int("epoch", in: Wire.Bounds.time), name: try fields.optionalString("name"),
            interval: try fields.optionalInt("interval", in: Wire.Bounds.interval))
    }
}

extension Wire.Heartbeat: Wire.Record {
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        try fields.checkVersion()
        self.init(epoch: try fields.int("epoch", in: Wire.Bounds.time), interval: try fields.int("interval", in: Wire.Bounds.interval))
    }
}

extension Wire.Announcement: Wire.Record {
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        try fields.checkVersion()
        let activity = try Wire.Fields(try fields.value("activity"))
        let metadata = try Wire.Fields(try activity.value("metadata"))
        self.init(
            session: try fields.string("session"),
            activity: Activity(
                type: try activity.string("type"),
                metadata: GroupActivityMetadata(
                    title: try metadata.string("title"), subtitle: try metadata.optionalString("subtitle"),
                    type: GroupActivityMetadata.ActivityType(rawValue: try metadata.string("type")) ?? .generic),
                data: try activity.value("data")),
            createdBy: try fields.string("createdBy"), createdAt: try fields.int("createdAt", in: Wire.Bounds.time),
            revision: try HLCTimestamp(json: try fields.value("revision")), ttl: try fields.int("ttl", in: Wire.Bounds.ttl),
            ended: try fields.optionalBool("ended"))
    }
}

extension Wire.Welcome: Wire.Record {
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        try fields.checkVersion()
        self.init(
            presences: try fields.array("presences", of: Wire.Presence.self),
            sessions: try fields.array("sessions", of: Wire.Announcement.self))
    }
}

extension Wire.Member: Wire.Record {
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        try fields.checkVersion()
        self.init(participant: try fields.string("participant"), epoch: try fields.int("epoch", in: Wire.Bounds.time))
    }
}

extension Wire.StateRecord: Wire.Record {
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        try fields.checkVersion()
        self.init(key: try fields.string("key"), value: try fields.value("value"), clock: try HLCTimestamp(json: try fields.value("clock")))
    }
}

extension Wire.EnvelopeHeader: Wire.Record {
    /// The header of an envelope; its `body` must be there (any JSON value).
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        try fields.checkVersion()
        _ = try fields.value("body")
        let stream = try fields.optionalString("stream")
        guard stream == nil || stream == "all" else { throw .wrongShape }
        self.init(
            type: try fields.string("type"), epoch: try fields.int("epoch", in: Wire.Bounds.time),
            seq: try fields.optionalInt("seq", in: Wire.Bounds.seq),
            reliable: try fields.bool("reliable"), stream: stream)
    }
}

extension Wire.CatchUp: Wire.Record {
    /// A `$catchup` body (not a record: no `v` of its own; each listed record has one).
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        self.init(
            states: try fields.array("states", of: Wire.StateRecord.self), members: try fields.array("members", of: Wire.Member.self),
            more: try fields.optionalBool("more"))
    }
}
