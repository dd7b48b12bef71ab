import Foundation

/// What records are read from, by the rules of docs/PROTOCOL.md ("Decoding rules"): a record is an object
/// whose `v` is the integer 2; every field it needs is there with its type (integers as JSON integers);
/// optional fields are absent or of their type; other fields are ignored. Each record's reader is beside
/// its declaration.
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

    /// An object's members, looked up by name (records have a handful: a linear search beats hashing):
    /// a payload's, each value read from its bytes when the record asks for it, or those of an object
    /// already built (a record inside a value that is free JSON).
    package struct Fields: Sendable {
        /// A member of a payload's top-level container: its key (empty in an array), the range of its
        /// value in the payload, and the value itself if it is a scalar (a container is read when asked
        /// for).
        struct Member: Sendable {
            let key: String
            var value: Range<Int>
            let scalar: JSONValue?
        }

        private enum Members: Sendable {
            case payload(Data, [Member])
            case object([String: JSONValue])
        }

        private let members: Members

        init(payload: Data, members: [Member]) { self.members = .payload(payload, members) }
        init(_ object: [String: JSONValue]) { members = .object(object) }

        /// Checks that `v` is the integer 2 (a record's first check).
        func checkVersion() throws(Rejection) {
            guard case .int(Int64(Wire.version))? = try member("v", as: JSONValue.self) else { throw .badVersion }
        }

        /// Whether the member named by `key` is there: a record's reader names its fields by the
        /// `CodingKeys` its writer (`Encodable`) uses, so each field's name is written once.
        func contains(_ key: some CodingKey) -> Bool {
            switch members {
            case let .payload(_, members): return Fields.find(key.stringValue, in: members) != nil
            case let .object(object): return object[key.stringValue] != nil
            }
        }

        /// Where the value of the member named by `key` is in the payload (nil when there is none, or when
        /// the members are an object's already built).
        func range(of key: some CodingKey) -> Range<Int>? {
            guard case let .payload(_, members) = members else { return nil }
            return Fields.find(key.stringValue, in: members)?.value
        }

        /// The member named by `key` read as a `T` (a record's nested record, e.g. a clock, is read from
        /// its bytes, not from a tree); `wrong-shape` when there is none.
        func read<T: Readable>(_ key: some CodingKey, as type: T.Type) throws(Rejection) -> T {
            guard let value = try member(key.stringValue, as: type) else { throw .wrongShape }
            return value
        }

        /// The member named by `key` as JSON; `wrong-shape` when there is none.
        func value(_ key: some CodingKey) throws(Rejection) -> JSONValue { try read(key, as: JSONValue.self) }

        /// The member named by `key` as JSON, or nil when there is none.
        func optionalValue(_ key: some CodingKey) throws(Rejection) -> JSONValue? { try member(key.stringValue, as: JSONValue.self) }

        /// The member named exactly `name` read as a `T`, or nil when there is none.
        private func member<T: Readable>(_ name: String, as type: T.Type) throws(Rejection) -> T? {
            switch members {
            case let .payload(payload, members):
                guard let member = Fields.find(name, in: members) else { return nil }
                return try Fields.read(member, in: payload, as: type)
            case let .object(object):
                guard let json = object[name] else { return nil }
                return try T(json: json)
            }
        }

        /// A member of `payload` as a `T`: a scalar as it was built, a container from its bytes.
        private static func read<T: Readable>(_ member: Member, in payload: Data, as type: T.Type) throws(Rejection) -> T {
            if let scalar = member.scalar { return try T(json: scalar) }
            return try T.read(payload[member.value])
        }

        /// The member named exactly `name` (same Unicode scalars; field names are ASCII, so a name of
        /// another length is another name, and comparing lengths first is cheap).
        private static func find(_ name: String, in members: [Member]) -> Member? {
            let length = name.utf8.count
            return members.first { $0.key.utf8.count == length && $0.key == name }
        }

        /// An integer field within `bounds` (docs/PROTOCOL.md, "Ranges"): a value outside is `out-of-range`.
        func int(_ key: some CodingKey, in bounds: ClosedRange<Int64>) throws(Rejection) -> Int64 {
            try Fields.integer(try value(key), in: bounds)
        }

        /// A JSON integer within `bounds`: a number with a fraction or an exponent is not an integer; anything
        /// else is another type.
        static func integer(_ value: JSONValue, in bounds: ClosedRange<Int64>) throws(Rejection) -> Int64 {
            switch value {
            case let .int(number) where bounds.contains(number): return number
            case .int: throw .outOfRange
            case .double: throw .notAnInteger
            default: throw .wrongShape
            }
        }

        func string(_ key: some CodingKey) throws(Rejection) -> String {
            guard case let .string(value) = try value(key) else { throw .wrongShape }
            return value
        }

        func optionalString(_ key: some CodingKey) throws(Rejection) -> String? { contains(key) ? try string(key) : nil }

        func optionalInt(_ key: some CodingKey, in bounds: ClosedRange<Int64>) throws(Rejection) -> Int64? {
            contains(key) ? try int(key, in: bounds) : nil
        }

        func optionalBool(_ key: some CodingKey) throws(Rejection) -> Bool? { contains(key) ? try bool(key) : nil }

        func bool(_ key: some CodingKey) throws(Rejection) -> Bool {
            guard case let .bool(value) = try value(key) else { throw .wrongShape }
            return value
        }

        func strings(_ key: some CodingKey) throws(Rejection) -> [String] {
            guard case let .array(elements) = try value(key) else { throw .wrongShape }
            return try elements.map { element throws(Rejection) in
                guard case let .string(string) = element else { throw .wrongShape }
                return string
            }
        }

        /// An array of `T`s, each read from its bytes in a payload.
        func array<T: Readable>(_ key: some CodingKey, of type: T.Type) throws(Rejection) -> [T] {
            var values: [T] = []
            switch members {
            case let .payload(payload, members):
                guard let member = Fields.find(key.stringValue, in: members) else { throw .wrongShape }
                let elements = try JSONParser.parseArray(payload[member.value])
                values.reserveCapacity(elements.count)
                for element in elements { values.append(try Fields.read(element, in: payload, as: type)) }
            case .object:
                guard case let .array(elements) = try value(key) else { throw .wrongShape }
                values.reserveCapacity(elements.count)
                for element in elements { values.append(try T(json: element)) }
            }
            return values
        }

        func `enum`<T: RawRepresentable<String>>(_ key: some CodingKey, _ type: T.Type) throws(Rejection) -> T {
            guard let value = T(rawValue: try string(key)) else { throw .wrongShape }
            return value
        }
    }
}

extension Wire.Readable {
    package static func read(_ data: Data) throws(Wire.Rejection) -> Self { try Self(json: try JSONParser.parse(data)) }
}

extension Wire.Record {
    package init(json: JSONValue) throws(Wire.Rejection) {
        guard case let .object(object) = json else { throw .wrongShape }
        try self.init(fields: Wire.Fields(object))
    }

    package static func read(_ data: Data) throws(Wire.Rejection) -> Self { try Self(fields: try JSONParser.parseObject(data)) }
}

extension JSONValue: Wire.Readable {
    package init(json: JSONValue) { self = json }
}
