import Foundation

/// Decodes a `Decodable` value from a ``JSONValue`` tree, as `JSONDecoder` (default strategies) would
/// from the same JSON — for the common cases only: it throws on anything it does not handle exactly like
/// `JSONDecoder` (numbers that need conversion, `URL`, `Decimal`, super decoders…), and callers then
/// decode the bytes with `JSONDecoder`. With ``JSONValue/parseFast(_:)`` it replaces Foundation's
/// decoder where a value is held as a tree already (a shared value), where that decoder cost ≈ 18,000
/// instructions for a one-field struct. Bytes are decoded by ``JSONBytesDecoder``, by the same rules.
struct JSONValueDecoder: Decoder {
    struct Unsupported: Error {}

    let value: JSONValue
    var codingPath: [any CodingKey] = []
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    static func decode<T: Decodable>(_ type: T.Type, from json: JSONValue) throws -> T {
        // JSONDecoder reads these from strings or numbers itself rather than through their own Decodable.
        if type == Data.self {
            guard case let .string(text) = json, let data = Data(base64Encoded: text) else { throw Unsupported() }
            return data as! T
        }
        if type == URL.self || type == Decimal.self { throw Unsupported() }
        return try T(from: JSONValueDecoder(value: json))
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case let .object(object) = value else { throw Unsupported() }
        return KeyedDecodingContainer(Keyed<Key>(object: object, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case let .array(array) = value else { throw Unsupported() }
        return Unkeyed(array: array, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { Single(value: value, codingPath: codingPath) }

    // MARK: - Scalars

    static func bool(_ value: JSONValue) throws -> Bool {
        guard case let .bool(bool) = value else { throw Unsupported() }
        return bool
    }

    static func string(_ value: JSONValue) throws -> String {
        guard case let .string(string) = value else { throw Unsupported() }
        return string
    }

    static func integer<T: FixedWidthInteger>(_ value: JSONValue) throws -> T {
        guard case let .int(int) = value, let result = T(exactly: int) else { throw Unsupported() }
        return result
    }

    static func floatingPoint<T: BinaryFloatingPoint>(_ value: JSONValue) throws -> T {
        switch value {
        case let .int(int):
            if let result = T(exactly: int) { return result }
        case let .double(double) where T.self == Double.self:
            return double as! T  // a double JSONDecoder read itself (a stored record): the same bits
        default:
            break
        }
        // Anything else is parsed by JSONDecoder itself (a Float from a fraction rounds differently).
        throw Unsupported()
    }

    // MARK: - Containers

    struct Single: SingleValueDecodingContainer {
        let value: JSONValue
        let codingPath: [any CodingKey]

        func decodeNil() -> Bool { value == .null }
        func decode(_ type: Bool.Type) throws -> Bool { try JSONValueDecoder.bool(value) }
        func decode(_ type: String.Type) throws -> String { try JSONValueDecoder.string(value) }
        func decode(_ type: Double.Type) throws -> Double { try JSONValueDecoder.floatingPoint(value) }
        func decode(_ type: Float.Type) throws -> Float { try JSONValueDecoder.floatingPoint(value) }
        func decode(_ type: Int.Type) throws -> Int { try JSONValueDecoder.integer(value) }
        func decode(_ type: Int8.Type) throws -> Int8 { try JSONValueDecoder.integer(value) }
        func decode(_ type: Int16.Type) throws -> Int16 { try JSONValueDecoder.integer(value) }
        func decode(_ type: Int32.Type) throws -> Int32 { try JSONValueDecoder.integer(value) }
        func decode(_ type: Int64.Type) throws -> Int64 { try JSONValueDecoder.integer(value) }
        func decode(_ type: UInt.Type) throws -> UInt { try JSONValueDecoder.integer(value) }
        func decode(_ type: UInt8.Type) throws -> UInt8 { try JSONValueDecoder.integer(value) }
        func decode(_ type: UInt16.Type) throws -> UInt16 { try JSONValueDecoder.integer(value) }
        func decode(_ type: UInt32.Type) throws -> UInt32 { try JSONValueDecoder.integer(value) }
        func decode(_ type: UInt64.Type) throws -> UInt64 { try JSONValueDecoder.integer(value) }
        func decode<T: Decodable>(_ type: T.Type) throws -> T { try JSONValueDecoder.decode(type, from: value) }
    }

    struct Keyed<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let object: [String: JSONValue]
        let codingPath: [any CodingKey]

        var allKeys: [Key] { object.keys.compactMap { Key(stringValue: $0) } }
        func contains(_ key: Key) -> Bool { object[key.stringValue] != nil }

        private func value(_ key: Key) throws -> JSONValue {
            guard let value = object[key.stringValue] else { throw Unsupported() }
            return value
        }

        func decodeNil(forKey key: Key) throws -> Bool { try value(key) == .null }
        func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try JSONValueDecoder.bool(value(key)) }
        func decode(_ type: String.Type, forKey key: Key) throws -> String { try JSONValueDecoder.string(value(key)) }
        func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try JSONValueDecoder.floatingPoint(value(key)) }
        func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try JSONValueDecoder.floatingPoint(value(key)) }
        func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try JSONValueDecoder.integer(value(key)) }
        func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try JSONValueDecoder.integer(value(key)) }
        func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try JSONValueDecoder.integer(value(key)) }
        func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try JSONValueDecoder.integer(value(key)) }
        func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try JSONValueDecoder.integer(value(key)) }
        func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try JSONValueDecoder.integer(value(key)) }
        func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try JSONValueDecoder.integer(value(key)) }
        func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try JSONValueDecoder.integer(value(key)) }
        func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try JSONValueDecoder.integer(value(key)) }
        func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try JSONValueDecoder.integer(value(key)) }
        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try JSONValueDecoder.decode(type, from: value(key)) }

        func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
            try JSONValueDecoder(value: value(key), codingPath: codingPath + [key]).container(keyedBy: type)
        }

        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
            try JSONValueDecoder(value: value(key), codingPath: codingPath + [key]).unkeyedContainer()
        }

        func superDecoder() throws -> any Decoder { throw Unsupported() }
        func superDecoder(forKey key: Key) throws -> any Decoder { throw Unsupported() }
    }

    struct Unkeyed: UnkeyedDecodingContainer {
        let array: [JSONValue]
        let codingPath: [any CodingKey]
        var currentIndex = 0

        init(array: [JSONValue], codingPath: [any CodingKey]) {
            self.array = array
            self.codingPath = codingPath
        }

        var count: Int? { array.count }
        var isAtEnd: Bool { currentIndex >= array.count }

        private mutating func next() throws -> JSONValue {
            guard currentIndex < array.count else { throw Unsupported() }
            defer { currentIndex += 1 }
            return array[currentIndex]
        }

        mutating func decodeNil() throws -> Bool {
            guard currentIndex < array.count else { throw Unsupported() }
            if array[currentIndex] == .null {
                currentIndex += 1
                return true
            }
            return false
        }

        mutating func decode(_ type: Bool.Type) throws -> Bool { try JSONValueDecoder.bool(next()) }
        mutating func decode(_ type: String.Type) throws -> String { try JSONValueDecoder.string(next()) }
        mutating func decode(_ type: Double.Type) throws -> Double { try JSONValueDecoder.floatingPoint(next()) }
        mutating func decode(_ type: Float.Type) throws -> Float { try JSONValueDecoder.floatingPoint(next()) }
        mutating func decode(_ type: Int.Type) throws -> Int { try JSONValueDecoder.integer(next()) }
        mutating func decode(_ type: Int8.Type) throws -> Int8 { try JSONValueDecoder.integer(next()) }
        mutating func decode(_ type: Int16.Type) throws -> Int16 { try JSONValueDecoder.integer(next()) }
        mutating func decode(_ type: Int32.Type) throws -> Int32 { try JSONValueDecoder.integer(next()) }
        mutating func decode(_ type: Int64.Type) throws -> Int64 { try JSONValueDecoder.integer(next()) }
        mutating func decode(_ type: UInt.Type) throws -> UInt { try JSONValueDecoder.integer(next()) }
        mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try JSONValueDecoder.integer(next()) }
        mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try JSONValueDecoder.integer(next()) }
        mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try JSONValueDecoder.integer(next()) }
        mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try JSONValueDecoder.integer(next()) }
        mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try JSONValueDecoder.decode(type, from: next()) }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
            try JSONValueDecoder(value: next(), codingPath: codingPath).container(keyedBy: type)
        }

        mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
            try JSONValueDecoder(value: next(), codingPath: codingPath).unkeyedContainer()
        }

        mutating func superDecoder() throws -> any Decoder { throw Unsupported() }
    }
}
