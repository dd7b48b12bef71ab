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
    /// Shared by one decoding's containers: every failure here is recorded (see ``decode(_:from:)``).
    let doubt: JSONBytesDecoder.Doubt
    var codingPath: [any CodingKey] = []
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    /// Throws ``Unsupported`` if anything failed on the way — also a failure the type caught itself
    /// (`try?`, a lossy loop): this decoder does not tell failures `JSONDecoder` would meet too from those
    /// it would not, so the caller's `JSONDecoder` decides either way.
    static func decode<T: Decodable>(_ type: T.Type, from json: JSONValue) throws -> T {
        let doubt = JSONBytesDecoder.Doubt()
        let value = try JSONValueDecoder(value: json, doubt: doubt).decodeValue(type)
        if doubt.raised { throw doubt.unsupported() }
        return value
    }

    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        // JSONDecoder reads these from strings or numbers itself rather than through their own Decodable.
        if type == Data.self {
            guard case let .string(text) = value, let data = Data(base64Encoded: text) else { throw doubt.unsupported() }
            return data as! T
        }
        if type == URL.self || type == Decimal.self { throw doubt.unsupported() }
        return try T(from: self)
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case let .object(object) = value else { throw doubt.unsupported() }
        return KeyedDecodingContainer(Keyed<Key>(object: object, doubt: doubt, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case let .array(array) = value else { throw doubt.unsupported() }
        return Unkeyed(array: array, doubt: doubt, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { Single(value: value, doubt: doubt, codingPath: codingPath) }

    // MARK: - Scalars

    static func bool(_ value: JSONValue, _ doubt: JSONBytesDecoder.Doubt) throws -> Bool {
        guard case let .bool(bool) = value else { throw doubt.unsupported() }
        return bool
    }

    static func string(_ value: JSONValue, _ doubt: JSONBytesDecoder.Doubt) throws -> String {
        guard case let .string(string) = value else { throw doubt.unsupported() }
        return string
    }

    static func integer<T: FixedWidthInteger>(_ value: JSONValue, _ doubt: JSONBytesDecoder.Doubt) throws -> T {
        guard case let .int(int) = value, let result = T(exactly: int) else { throw doubt.unsupported() }
        return result
    }

    static func floatingPoint<T: BinaryFloatingPoint>(_ value: JSONValue, _ doubt: JSONBytesDecoder.Doubt) throws -> T {
        switch value {
        case let .int(int):
            if let result = T(exactly: int) { return result }
        case let .double(double) where T.self == Double.self:
            return double as! T  // a double JSONDecoder read itself (a stored record): the same bits
        default:
            break
        }
        // Anything else is parsed by JSONDecoder itself (a Float from a fraction rounds differently).
        throw doubt.unsupported()
    }

    // MARK: - Containers

    struct Single: SingleValueDecodingContainer {
        let value: JSONValue
        let doubt: JSONBytesDecoder.Doubt
        let codingPath: [any CodingKey]

        func decodeNil() -> Bool { value == .null }
        func decode(_ type: Bool.Type) throws -> Bool { try JSONValueDecoder.bool(value, doubt) }
        func decode(_ type: String.Type) throws -> String { try JSONValueDecoder.string(value, doubt) }
        func decode(_ type: Double.Type) throws -> Double { try JSONValueDecoder.floatingPoint(value, doubt) }
        func decode(_ type: Float.Type) throws -> Float { try JSONValueDecoder.floatingPoint(value, doubt) }
        func decode(_ type: Int.Type) throws -> Int { try JSONValueDecoder.integer(value, doubt) }
        func decode(_ type: Int8.Type) throws -> Int8 { try JSONValueDecoder.integer(value, doubt) }
        func decode(_ type: Int16.Type) throws -> Int16 { try JSONValueDecoder.integer(value, doubt) }
        func decode(_ type: Int32.Type) throws -> Int32 { try JSONValueDecoder.integer(value, doubt) }
        func decode(_ type: Int64.Type) throws -> Int64 { try JSONValueDecoder.integer(value, doubt) }
        func decode(_ type: UInt.Type) throws -> UInt { try JSONValueDecoder.integer(value, doubt) }
        func decode(_ type: UInt8.Type) throws -> UInt8 { try JSONValueDecoder.integer(value, doubt) }
        func decode(_ type: UInt16.Type) throws -> UInt16 { try JSONValueDecoder.integer(value, doubt) }
        func decode(_ type: UInt32.Type) throws -> UInt32 { try JSONValueDecoder.integer(value, doubt) }
        func decode(_ type: UInt64.Type) throws -> UInt64 { try JSONValueDecoder.integer(value, doubt) }
        func decode<T: Decodable>(_ type: T.Type) throws -> T { try JSONValueDecoder(value: value, doubt: doubt).decodeValue(type) }
    }

    struct Keyed<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let object: [String: JSONValue]
        let doubt: JSONBytesDecoder.Doubt
        let codingPath: [any CodingKey]

        var allKeys: [Key] { object.keys.compactMap { Key(stringValue: $0) } }
        func contains(_ key: Key) -> Bool { object[key.stringValue] != nil }

        private func value(_ key: Key) throws -> JSONValue {
            guard let value = object[key.stringValue] else { throw doubt.unsupported() }
            return value
        }

        func decodeNil(forKey key: Key) throws -> Bool { try value(key) == .null }
        func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try JSONValueDecoder.bool(value(key), doubt) }
        func decode(_ type: String.Type, forKey key: Key) throws -> String { try JSONValueDecoder.string(value(key), doubt) }
        func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try JSONValueDecoder.floatingPoint(value(key), doubt) }
        func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try JSONValueDecoder.floatingPoint(value(key), doubt) }
        func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try JSONValueDecoder.integer(value(key), doubt) }
        func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try JSONValueDecoder.integer(value(key), doubt) }
        func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try JSONValueDecoder.integer(value(key), doubt) }
        func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try JSONValueDecoder.integer(value(key), doubt) }
        func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try JSONValueDecoder.integer(value(key), doubt) }
        func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try JSONValueDecoder.integer(value(key), doubt) }
        func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try JSONValueDecoder.integer(value(key), doubt) }
        func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try JSONValueDecoder.integer(value(key), doubt) }
        func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try JSONValueDecoder.integer(value(key), doubt) }
        func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try JSONValueDecoder.integer(value(key), doubt) }
        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try JSONValueDecoder(value: value(key), doubt: doubt).decodeValue(type) }

        func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
            try JSONValueDecoder(value: value(key), doubt: doubt, codingPath: codingPath + [key]).container(keyedBy: type)
        }

        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
            try JSONValueDecoder(value: value(key), doubt: doubt, codingPath: codingPath + [key]).unkeyedContainer()
        }

        func superDecoder() throws -> any Decoder { throw doubt.unsupported() }
        func superDecoder(forKey key: Key) throws -> any Decoder { throw doubt.unsupported() }
    }

    struct Unkeyed: UnkeyedDecodingContainer {
        let array: [JSONValue]
        let doubt: JSONBytesDecoder.Doubt
        let codingPath: [any CodingKey]
        var currentIndex = 0

        init(array: [JSONValue], doubt: JSONBytesDecoder.Doubt, codingPath: [any CodingKey]) {
            self.array = array
            self.doubt = doubt
            self.codingPath = codingPath
        }

        var count: Int? { array.count }
        var isAtEnd: Bool { currentIndex >= array.count }

        private mutating func next() throws -> JSONValue {
            guard currentIndex < array.count else { throw doubt.unsupported() }
            defer { currentIndex += 1 }
            return array[currentIndex]
        }

        mutating func decodeNil() throws -> Bool {
            guard currentIndex < array.count else { throw doubt.unsupported() }
            if array[currentIndex] == .null {
                currentIndex += 1
                return true
            }
            return false
        }

        mutating func decode(_ type: Bool.Type) throws -> Bool { try JSONValueDecoder.bool(next(), doubt) }
        mutating func decode(_ type: String.Type) throws -> String { try JSONValueDecoder.string(next(), doubt) }
        mutating func decode(_ type: Double.Type) throws -> Double { try JSONValueDecoder.floatingPoint(next(), doubt) }
        mutating func decode(_ type: Float.Type) throws -> Float { try JSONValueDecoder.floatingPoint(next(), doubt) }
        mutating func decode(_ type: Int.Type) throws -> Int { try JSONValueDecoder.integer(next(), doubt) }
        mutating func decode(_ type: Int8.Type) throws -> Int8 { try JSONValueDecoder.integer(next(), doubt) }
        mutating func decode(_ type: Int16.Type) throws -> Int16 { try JSONValueDecoder.integer(next(), doubt) }
        mutating func decode(_ type: Int32.Type) throws -> Int32 { try JSONValueDecoder.integer(next(), doubt) }
        mutating func decode(_ type: Int64.Type) throws -> Int64 { try JSONValueDecoder.integer(next(), doubt) }
        mutating func decode(_ type: UInt.Type) throws -> UInt { try JSONValueDecoder.integer(next(), doubt) }
        mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try JSONValueDecoder.integer(next(), doubt) }
        mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try JSONValueDecoder.integer(next(), doubt) }
        mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try JSONValueDecoder.integer(next(), doubt) }
        mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try JSONValueDecoder.integer(next(), doubt) }
        mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try JSONValueDecoder(value: next(), doubt: doubt).decodeValue(type) }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
            try JSONValueDecoder(value: next(), doubt: doubt, codingPath: codingPath).container(keyedBy: type)
        }

        mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
            try JSONValueDecoder(value: next(), doubt: doubt, codingPath: codingPath).unkeyedContainer()
        }

        mutating func superDecoder() throws -> any Decoder { throw doubt.unsupported() }
    }
}
