import Foundation

/// Decodes a `Decodable` value straight from JSON bytes, as `JSONDecoder` (default strategies) would —
/// without building a ``JSONValue`` tree first. Every app message's body is decoded here, in the
/// receiving task: through the tree (a dictionary per object, its keys hashed on insert and on look-up)
/// a one-field struct cost ≈ 6,500 instructions; read in place, ≈ 1,500.
///
/// The document is checked once, up front, against the subset ``JSONValue/parseFast(_:)`` accepts (see
/// ``JSONByteReader/skipFastValue(depth:)``); each value is then read where it lies, when the type asks
/// for it, by the readers that ``JSONValue/parseFast(_:)`` uses, and converted by the rules of
/// ``JSONValueDecoder``. So it answers exactly where the tree path would have, with the same value, and
/// throws ``JSONValueDecoder/Unsupported`` everywhere else — also on an object with a repeated or a
/// non-ASCII key (Swift compares keys by canonical equivalence, bytes would not) — and the caller then
/// decodes the bytes with `JSONDecoder`.
struct JSONBytesDecoder: Decoder {
    typealias Unsupported = JSONValueDecoder.Unsupported

    /// The whole document; `value` indexes the bytes `document.withUnsafeBytes` presents, from 0.
    let document: Data
    /// This decoder's value, without surrounding whitespace.
    let value: Range<Int>
    var codingPath: [any CodingKey] = []
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    /// Decodes `type` from `data`: here when the document is in the fast subset and the type's decoding
    /// stays on the fast path, through `JSONDecoder` otherwise. nil when `JSONDecoder` fails too.
    static func decode<T: Decodable>(_ type: T.Type, from data: Data) -> T? {
        if let range = validate(data), let value = try? JSONBytesDecoder(document: data, value: range).decode(type) {
            return value
        }
        return Wire.decode(type, from: data)
    }

    /// The range of the document's one value, or nil if the document is outside the fast subset.
    static func validate(_ data: Data) -> Range<Int>? {
        data.withUnsafeBytes { bytes in
            var reader = JSONByteReader(bytes: bytes)
            reader.skipWhitespace()
            let start = reader.i
            guard reader.skipFastValue(depth: 0) else { return nil }
            let end = reader.i
            reader.skipWhitespace()
            return reader.isAtEnd ? start..<end : nil
        }
    }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        // As JSONValueDecoder: JSONDecoder reads these itself rather than through their Decodable.
        if type == Data.self {
            guard let data = Data(base64Encoded: try scalar.string()) else { throw Unsupported() }
            return data as! T
        }
        if type == URL.self || type == Decimal.self { throw Unsupported() }
        return try T(from: self)
    }

    private var scalar: Scalar { Scalar(document: document, range: value) }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(Keyed<Key>(document: document, members: try scalar.members(), codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        Unkeyed(document: document, elements: try scalar.elements(), codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { Single(decoder: self) }

    // MARK: - Values

    /// One value of the document, read on demand.
    struct Scalar {
        let document: Data
        let range: Range<Int>

        private func read<R>(_ body: (inout JSONByteReader) throws -> R?) throws -> R {
            let result = try document.withUnsafeBytes { all -> R? in
                var reader = JSONByteReader(bytes: UnsafeRawBufferPointer(rebasing: all[range]))
                guard let result = try body(&reader), reader.isAtEnd else { return nil }
                return result
            }
            guard let result else { throw Unsupported() }
            return result
        }

        var isNull: Bool { range.count == 4 && (try? read { $0.matchLiteral("null") ? true : nil }) == true }

        func bool() throws -> Bool { try read { $0.readBool() } }

        func string() throws -> String {
            try read { reader in reader.current == UInt8(ascii: "\"") ? reader.parseString() : nil }
        }

        /// An integer literal that fits `T` (``JSONValueDecoder/integer(_:)``'s rule).
        func integer<T: FixedWidthInteger>() throws -> T {
            try read { reader in reader.readInteger().flatMap { T(exactly: $0) } }
        }

        /// ``JSONValueDecoder/floatingPoint(_:)``'s rule: an integer that `T` holds exactly, or a
        /// fraction `parseFast` reads as a `Double` when `T` is `Double`.
        func floatingPoint<T: BinaryFloatingPoint>() throws -> T {
            try read { reader in
                if let integer = reader.readInteger() { return T(exactly: integer) }
                guard T.self == Double.self else { return nil }
                reader.i = 0
                return reader.readFraction().map { $0 as! T }
            }
        }

        /// The members of an object: each key's bytes and its value's range. Throws on a repeated key and
        /// on a key that is not plain ASCII (``JSONByteReader/readPlainStringBytes()`` reads no other).
        func members() throws -> [Member] {
            let members = document.withUnsafeBytes { all -> [Member]? in
                var reader = JSONByteReader(bytes: UnsafeRawBufferPointer(rebasing: all[range]))
                var members: [Member] = []
                // ``JSONByteReader/readObject(_:)``'s loop, written out: through its closure the array
                // was a captured variable, checked for exclusive access on every use.
                guard reader.take(UInt8(ascii: "{")) else { return nil }
                reader.skipWhitespace()
                if !reader.take(UInt8(ascii: "}")) {
                    repeat {
                        reader.skipWhitespace()
                        guard let key = reader.readPlainStringBytes() else { return nil }
                        reader.skipWhitespace()
                        guard reader.take(UInt8(ascii: ":")) else { return nil }
                        reader.skipWhitespace()
                        let keyStart = key.baseAddress! - all.baseAddress!, valueStart = reader.i
                        guard reader.skipFastValue(depth: 0) else { return nil }
                        members.append(Member(
                            key: keyStart..<(keyStart + key.count),
                            value: (range.lowerBound + valueStart)..<(range.lowerBound + reader.i)))
                        reader.skipWhitespace()
                    } while reader.take(UInt8(ascii: ","))
                    guard reader.take(UInt8(ascii: "}")) else { return nil }
                }
                guard reader.isAtEnd, !Self.hasRepeatedKey(members, in: all) else { return nil }
                return members
            }
            guard let members else { throw Unsupported() }
            return members
        }

        private static func hasRepeatedKey(_ members: [Member], in all: UnsafeRawBufferPointer) -> Bool {
            guard members.count > 1 else { return false }
            if members.count > 16 {
                var seen = Set<String>()
                return !members.allSatisfy { seen.insert(String(decoding: UnsafeRawBufferPointer(rebasing: all[$0.key]), as: UTF8.self)).inserted }
            }
            for a in members.indices {
                for b in members.indices where b > a && members[a].key.count == members[b].key.count {
                    if memcmp(all.baseAddress! + members[a].key.lowerBound, all.baseAddress! + members[b].key.lowerBound, members[a].key.count) == 0 {
                        return true
                    }
                }
            }
            return false
        }

        /// The ranges of an array's elements.
        func elements() throws -> [Range<Int>] {
            try read { reader -> [Range<Int>]? in
                guard reader.take(UInt8(ascii: "[")) else { return nil }
                var elements: [Range<Int>] = []
                reader.skipWhitespace()
                if reader.take(UInt8(ascii: "]")) { return elements }
                repeat {
                    reader.skipWhitespace()
                    let start = reader.i
                    guard reader.skipFastValue(depth: 0) else { return nil }
                    elements.append((range.lowerBound + start)..<(range.lowerBound + reader.i))
                    reader.skipWhitespace()
                } while reader.take(UInt8(ascii: ","))
                return reader.take(UInt8(ascii: "]")) ? elements : nil
            }
        }
    }

    struct Member {
        /// The key's bytes (plain ASCII, between the quotes) and the value's, in the document.
        let key: Range<Int>
        let value: Range<Int>
    }

    // MARK: - Containers

    struct Single: SingleValueDecodingContainer {
        let decoder: JSONBytesDecoder
        var codingPath: [any CodingKey] { decoder.codingPath }
        private var scalar: Scalar { decoder.scalar }

        func decodeNil() -> Bool { scalar.isNull }
        func decode(_ type: Bool.Type) throws -> Bool { try scalar.bool() }
        func decode(_ type: String.Type) throws -> String { try scalar.string() }
        func decode(_ type: Double.Type) throws -> Double { try scalar.floatingPoint() }
        func decode(_ type: Float.Type) throws -> Float { try scalar.floatingPoint() }
        func decode(_ type: Int.Type) throws -> Int { try scalar.integer() }
        func decode(_ type: Int8.Type) throws -> Int8 { try scalar.integer() }
        func decode(_ type: Int16.Type) throws -> Int16 { try scalar.integer() }
        func decode(_ type: Int32.Type) throws -> Int32 { try scalar.integer() }
        func decode(_ type: Int64.Type) throws -> Int64 { try scalar.integer() }
        func decode(_ type: UInt.Type) throws -> UInt { try scalar.integer() }
        func decode(_ type: UInt8.Type) throws -> UInt8 { try scalar.integer() }
        func decode(_ type: UInt16.Type) throws -> UInt16 { try scalar.integer() }
        func decode(_ type: UInt32.Type) throws -> UInt32 { try scalar.integer() }
        func decode(_ type: UInt64.Type) throws -> UInt64 { try scalar.integer() }
        func decode<T: Decodable>(_ type: T.Type) throws -> T { try decoder.decode(type) }
    }

    struct Keyed<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let document: Data
        let members: [Member]
        let codingPath: [any CodingKey]

        var allKeys: [Key] {
            document.withUnsafeBytes { all in
                members.compactMap { Key(stringValue: String(decoding: UnsafeRawBufferPointer(rebasing: all[$0.key]), as: UTF8.self)) }
            }
        }

        func contains(_ key: Key) -> Bool { index(of: key) != nil }

        /// Keys are plain ASCII (``Scalar/members()``): their bytes equal exactly when the strings do.
        private func index(of key: Key) -> Int? {
            var name = key.stringValue
            return name.withUTF8 { name in
                document.withUnsafeBytes { all in
                    members.firstIndex { member in
                        member.key.count == name.count
                            && (name.isEmpty || memcmp(all.baseAddress! + member.key.lowerBound, name.baseAddress!, name.count) == 0)
                    }
                }
            }
        }

        private func value(_ key: Key) throws -> JSONBytesDecoder {
            guard let index = index(of: key) else { throw Unsupported() }
            return JSONBytesDecoder(document: document, value: members[index].value, codingPath: codingPath)
        }

        private func scalar(_ key: Key) throws -> Scalar { try value(key).scalar }

        func decodeNil(forKey key: Key) throws -> Bool { try scalar(key).isNull }
        func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try scalar(key).bool() }
        func decode(_ type: String.Type, forKey key: Key) throws -> String { try scalar(key).string() }
        func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try scalar(key).floatingPoint() }
        func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try scalar(key).floatingPoint() }
        func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try scalar(key).integer() }
        func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try scalar(key).integer() }
        func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try scalar(key).integer() }
        func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try scalar(key).integer() }
        func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try scalar(key).integer() }
        func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try scalar(key).integer() }
        func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try scalar(key).integer() }
        func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try scalar(key).integer() }
        func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try scalar(key).integer() }
        func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try scalar(key).integer() }
        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try value(key).decode(type) }

        func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
            var nested = try value(key)
            nested.codingPath = codingPath + [key]
            return try nested.container(keyedBy: type)
        }

        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
            var nested = try value(key)
            nested.codingPath = codingPath + [key]
            return try nested.unkeyedContainer()
        }

        func superDecoder() throws -> any Decoder { throw Unsupported() }
        func superDecoder(forKey key: Key) throws -> any Decoder { throw Unsupported() }
    }

    struct Unkeyed: UnkeyedDecodingContainer {
        let document: Data
        let elements: [Range<Int>]
        let codingPath: [any CodingKey]
        var currentIndex = 0

        init(document: Data, elements: [Range<Int>], codingPath: [any CodingKey]) {
            self.document = document
            self.elements = elements
            self.codingPath = codingPath
        }

        var count: Int? { elements.count }
        var isAtEnd: Bool { currentIndex >= elements.count }

        private mutating func next() throws -> JSONBytesDecoder {
            guard currentIndex < elements.count else { throw Unsupported() }
            defer { currentIndex += 1 }
            return JSONBytesDecoder(document: document, value: elements[currentIndex], codingPath: codingPath)
        }

        mutating func decodeNil() throws -> Bool {
            guard currentIndex < elements.count else { throw Unsupported() }
            if Scalar(document: document, range: elements[currentIndex]).isNull {
                currentIndex += 1
                return true
            }
            return false
        }

        mutating func decode(_ type: Bool.Type) throws -> Bool { try next().scalar.bool() }
        mutating func decode(_ type: String.Type) throws -> String { try next().scalar.string() }
        mutating func decode(_ type: Double.Type) throws -> Double { try next().scalar.floatingPoint() }
        mutating func decode(_ type: Float.Type) throws -> Float { try next().scalar.floatingPoint() }
        mutating func decode(_ type: Int.Type) throws -> Int { try next().scalar.integer() }
        mutating func decode(_ type: Int8.Type) throws -> Int8 { try next().scalar.integer() }
        mutating func decode(_ type: Int16.Type) throws -> Int16 { try next().scalar.integer() }
        mutating func decode(_ type: Int32.Type) throws -> Int32 { try next().scalar.integer() }
        mutating func decode(_ type: Int64.Type) throws -> Int64 { try next().scalar.integer() }
        mutating func decode(_ type: UInt.Type) throws -> UInt { try next().scalar.integer() }
        mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try next().scalar.integer() }
        mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try next().scalar.integer() }
        mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try next().scalar.integer() }
        mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try next().scalar.integer() }
        mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next().decode(type) }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
            try next().container(keyedBy: type)
        }

        mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
            try next().unkeyedContainer()
        }

        mutating func superDecoder() throws -> any Decoder { throw Unsupported() }
    }
}

extension JSONByteReader {
    /// Moves past one value that ``parseValue(depth:)`` accepts, building nothing; false where it is not
    /// sure `parseValue` would accept it. Numbers are checked against JSON's grammar only (their rules
    /// apply when they are read); strings with escapes or non-ASCII bytes are checked by reading them.
    /// Repeated keys are not looked for (`JSONDecoder` keeps the first; ``JSONBytesDecoder`` refuses
    /// them where it reads an object).
    mutating func skipFastValue(depth: Int) -> Bool {
        skipWhitespace()
        guard let byte = current else { return false }
        switch byte {
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            guard depth < 64 else { return false }
            let isObject = byte == UInt8(ascii: "{")
            let close = isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")
            i += 1
            skipWhitespace()
            if take(close) { return true }
            repeat {
                if isObject {
                    skipWhitespace()
                    guard skipFastString() else { return false }
                    skipWhitespace()
                    guard take(UInt8(ascii: ":")) else { return false }
                }
                guard skipFastValue(depth: depth + 1) else { return false }
                skipWhitespace()
            } while take(UInt8(ascii: ","))
            return take(close)
        case UInt8(ascii: "\""):
            return skipFastString()
        case UInt8(ascii: "t"):
            return matchLiteral("true")
        case UInt8(ascii: "f"):
            return matchLiteral("false")
        case UInt8(ascii: "n"):
            return matchLiteral("null")
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return skipNumber()
        default:
            return false
        }
    }

    /// A string literal that ``parseString()`` accepts: plain ASCII checked in place, anything else read.
    private mutating func skipFastString() -> Bool {
        let start = i
        guard take(UInt8(ascii: "\"")) else { return false }
        while let byte = current, byte >= 0x20, byte < 0x80, byte != UInt8(ascii: "\\") {
            if byte == UInt8(ascii: "\"") {
                i += 1
                return true
            }
            i += 1
        }
        i = start
        return parseString() != nil
    }

    /// A number as JSON's grammar has it: `-`? (`0` | [1-9][0-9]*) (`.` [0-9]+)? ([eE] [+-]? [0-9]+)?.
    private mutating func skipNumber() -> Bool {
        _ = take(UInt8(ascii: "-"))
        guard let first = current, first >= UInt8(ascii: "0"), first <= UInt8(ascii: "9") else { return false }
        i += 1
        if first != UInt8(ascii: "0") { skipDigits() }
        if take(UInt8(ascii: ".")) {
            guard skipDigits() else { return false }
        }
        if take(UInt8(ascii: "e")) || take(UInt8(ascii: "E")) {
            _ = take(UInt8(ascii: "+")) || take(UInt8(ascii: "-"))
            guard skipDigits() else { return false }
        }
        return true
    }

    @discardableResult
    private mutating func skipDigits() -> Bool {
        let start = i
        while let byte = current, byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") { i += 1 }
        return i > start
    }
}
