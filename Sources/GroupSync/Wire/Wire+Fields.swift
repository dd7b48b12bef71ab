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

    /// An object's members, looked up by name: a whole payload's in the order they came (records have a
    /// handful: a linear search beats hashing), a nested record's as the parsed object holds them.
    package struct Fields: Sendable {
        private enum Members: Sendable {
            case listed(keys: [String], values: [JSONValue])
            case object([String: JSONValue])
        }

        private let members: Members

        init(keys: [String], values: [JSONValue]) { members = .listed(keys: keys, values: values) }

        init(_ object: [String: JSONValue]) { members = .object(object) }

        /// Checks that `v` is the integer 2 (a record's first check).
        func checkVersion() throws(Rejection) {
            guard case .int(Int64(Wire.version))? = member("v") else { throw .badVersion }
        }

        /// The member named by `key`: a record's reader names its fields by the `CodingKeys` its writer
        /// (`Encodable`) uses, so each field's name is written once.
        subscript(key: some CodingKey) -> JSONValue? { member(key.stringValue) }

        /// The member named exactly `name` (same Unicode scalars; field names are ASCII, so a name of
        /// another length is another name, and comparing lengths first is cheap).
        private func member(_ name: String) -> JSONValue? {
            let length = name.utf8.count
            func isName(_ key: String) -> Bool { key.utf8.count == length && key == name }
            switch members {
            case let .listed(keys, values): return keys.firstIndex(where: isName).map { values[$0] }
            // Not `object[name]`: a key only canonically equivalent to `name` (a Kelvin sign for a `K`) is another.
            case let .object(object): return object.first { isName($0.key) }?.value
            }
        }

        func value(_ key: some CodingKey) throws(Rejection) -> JSONValue {
            guard let value = self[key] else { throw .wrongShape }
            return value
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

        func optionalString(_ key: some CodingKey) throws(Rejection) -> String? { self[key] == nil ? nil : try string(key) }

        func optionalInt(_ key: some CodingKey, in bounds: ClosedRange<Int64>) throws(Rejection) -> Int64? {
            self[key] == nil ? nil : try int(key, in: bounds)
        }

        func optionalBool(_ key: some CodingKey) throws(Rejection) -> Bool? { self[key] == nil ? nil : try bool(key) }

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

        func array<T: Readable>(_ key: some CodingKey, of type: T.Type) throws(Rejection) -> [T] {
            guard case let .array(elements) = try value(key) else { throw .wrongShape }
            var values: [T] = []
            values.reserveCapacity(elements.count)
            for element in elements { values.append(try T(json: element)) }
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

    package static func read(_ data: Data) throws(Wire.Rejection) -> Self { try Self(fields: try JSONParser.parseObject(data).fields) }
}

extension JSONValue: Wire.Readable {
    package init(json: JSONValue) { self = json }
}
