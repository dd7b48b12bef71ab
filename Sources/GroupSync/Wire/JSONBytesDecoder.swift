import Foundation

/// Decodes a `Decodable` value straight from JSON bytes, as `JSONDecoder` (default strategies) would —
/// without building a ``JSONValue`` tree first. Every app message's body is decoded here, in the
/// receiving task.
///
/// The document is checked once, up front, for JSON syntax (see
/// ``JSONByteReader/skipFastValue(depth:)``); each value is then read where it lies, when the type asks
/// for it, by the readers that ``JSONValue/parseFast(_:)`` uses, and converted by the rules of
/// ``JSONValueDecoder``. Two kinds of failure:
/// - a **definite** one, which `JSONDecoder` meets in the same place: a value of another kind (a string
///   where a number is asked for), a missing key, reading past the end of an array. It is thrown (as
///   ``Mismatch``) to the type's `init(from:)`, which may catch it (`try?`, a lossy loop) as it would
///   `JSONDecoder`'s;
/// - a **doubtful** one, where this decoder cannot be sure to match `JSONDecoder`: numbers it does not
///   read (`1.0`, `1e2`, `-0`, beyond 64 bits, a fraction as `Float`), an object with a repeated or
///   non-ASCII key (Swift compares keys by canonical equivalence, bytes would not), `URL`, `Decimal`,
///   super decoders. It is thrown too, and recorded in the decoding's ``Doubt``; then
///   ``decode(_:from:)`` discards whatever the type made of it — even if the type caught the error —
///   and decodes the bytes with `JSONDecoder`.
/// So wherever it answers, the answer is `JSONDecoder`'s.
struct JSONBytesDecoder: Decoder {
    typealias Unsupported = JSONValueDecoder.Unsupported

    /// A failure `JSONDecoder` meets in the same place (see the type's documentation).
    struct Mismatch: Error {}

    /// Whether any part of one decoding met a doubtful failure; shared by all its containers (one
    /// decoding runs on one thread, like `JSONDecoder`'s).
    final class Doubt {
        var raised = false

        func unsupported() -> Unsupported {
            raised = true
            return Unsupported()
        }
    }

    /// The whole document; `value` indexes it from 0.
    ///
    /// An array, not the `Data` it came in: `Data` keeps its bytes in a class, and each of its
    /// `withUnsafeBytes` — a dozen per message, one per value or key read — paid the runtime's
    /// exclusivity check on that class's stored properties (`swift_beginAccess`, ≈ 1,500 instructions per
    /// message in all, callgrind). One copy of a body costs less.
    let document: [UInt8]
    /// This decoder's value, without surrounding whitespace.
    let value: Range<Int>
    let doubt: Doubt
    var codingPath: [any CodingKey] = []
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    /// Decodes `type` from `data`: here when the document is valid JSON and no doubtful failure occurred
    /// on the way, through `JSONDecoder` otherwise. nil when `JSONDecoder` fails too.
    static func decode<T: Decodable>(_ type: T.Type, from data: Data) -> T? {
        decodeInPlace(type, from: data) ?? Wire.decode(type, from: data)
    }

    /// This decoder alone, without `JSONDecoder` behind it: nil where the document is outside the fast
    /// subset or a doubtful failure occurred (the fuzz tests compare it with `JSONDecoder`).
    static func decodeInPlace<T: Decodable>(_ type: T.Type, from data: Data) -> T? {
        let document = [UInt8](data)
        guard let range = validate(document) else { return nil }
        let doubt = Doubt()
        guard let value = try? JSONBytesDecoder(document: document, value: range, doubt: doubt).decode(type), !doubt.raised else {
            return nil
        }
        return value
    }

    /// The range of the document's one value, or nil if the document is outside the fast subset.
    private static func validate(_ document: [UInt8]) -> Range<Int>? {
        document.withUnsafeBytes { bytes in
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
            guard let data = Data(base64Encoded: try scalar.string()) else { throw doubt.unsupported() }
            return data as! T
        }
        if type == URL.self || type == Decimal.self { throw doubt.unsupported() }
        return try T(from: self)
    }

    /// Up to this many members an object's keys are compared byte by byte; beyond, they are indexed (a
    /// linear look-up per key made decoding a large dictionary quadratic).
    static let linearLookUpLimit = 16

    private var scalar: Scalar { Scalar(document: document, range: value, doubt: doubt) }

    private func nested(_ range: Range<Int>, _ path: [any CodingKey]) -> JSONBytesDecoder {
        JSONBytesDecoder(document: document, value: range, doubt: doubt, codingPath: path)
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(try Keyed<Key>(decoder: self, members: try scalar.members()))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        Unkeyed(decoder: self, elements: try scalar.elements())
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { Single(decoder: self) }

    // MARK: - Values

    /// One value of the document, read on demand.
    struct Scalar {
        let document: [UInt8]
        let range: Range<Int>
        let doubt: Doubt

        /// The kinds of value the readers below take, told apart by the first byte (the document is
        /// valid JSON).
        private enum Kind {
            case string, number, bool, array

            func matches(_ first: UInt8) -> Bool {
                switch self {
                case .string: first == UInt8(ascii: "\"")
                case .number: first == UInt8(ascii: "-") || (first >= UInt8(ascii: "0") && first <= UInt8(ascii: "9"))
                case .bool: first == UInt8(ascii: "t") || first == UInt8(ascii: "f")
                case .array: first == UInt8(ascii: "[")
                }
            }
        }

        private var first: UInt8 { document.withUnsafeBytes { (all: UnsafeRawBufferPointer) in all[range.lowerBound] } }

        /// Reads the value with `body` if it is of `kind`: another kind is a ``Mismatch``; `body` giving
        /// up is a doubt.
        private func read<R>(_ kind: Kind, _ body: (inout JSONByteReader) throws -> R?) throws -> R {
            let result = try document.withUnsafeBytes { all -> R? in
                guard kind.matches(all[range.lowerBound]) else { throw Mismatch() }
                var reader = JSONByteReader(bytes: UnsafeRawBufferPointer(rebasing: all[range]))
                guard let result = try body(&reader), reader.isAtEnd else { return nil }
                return result
            }
            guard let result else { throw doubt.unsupported() }
            return result
        }

        var isNull: Bool { first == UInt8(ascii: "n") }

        func bool() throws -> Bool { try read(.bool) { $0.readBool() } }

        func string() throws -> String { try read(.string) { $0.parseString() } }

        /// An integer literal that fits `T` (``JSONValueDecoder/integer(_:)``'s rule). A number with a
        /// fraction is a mismatch (`JSONDecoder` refuses it too); `1.0`, `1e2`, `-0` and the like are doubts.
        func integer<T: FixedWidthInteger>() throws -> T {
            try read(.number) { reader in
                if let integer = reader.readInteger() { return T(exactly: integer) }
                reader.i = 0
                if reader.readFraction() != nil, reader.isAtEnd { throw Mismatch() }
                return nil
            }
        }

        /// ``JSONValueDecoder/floatingPoint(_:)``'s rule: an integer that `T` holds exactly, or a
        /// fraction `parseFast` reads as a `Double` when `T` is `Double`.
        func floatingPoint<T: BinaryFloatingPoint>() throws -> T {
            try read(.number) { reader in
                if let integer = reader.readInteger() { return T(exactly: integer) }
                guard T.self == Double.self else { return nil }
                reader.i = 0
                return reader.readFraction().map { $0 as! T }
            }
        }

        /// The members of an object: each key's bytes and its value's range. A key that is not plain ASCII
        /// (``JSONByteReader/readPlainStringBytes()`` reads no other) is a doubt; repeated keys are
        /// looked for by ``Keyed``, which compares or indexes the keys anyway.
        func members() throws -> [Member] {
            guard first == UInt8(ascii: "{") else { throw Mismatch() }
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
                return reader.isAtEnd ? members : nil
            }
            guard let members else { throw doubt.unsupported() }
            return members
        }

        /// The ranges of an array's elements.
        func elements() throws -> [Range<Int>] {
            try read(.array) { reader -> [Range<Int>]? in
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
        let decoder: JSONBytesDecoder
        let members: [Member]
        /// Member index by key, for objects of more than ``JSONBytesDecoder/linearLookUpLimit`` members.
        private let index: [String: Int]?
        var codingPath: [any CodingKey] { decoder.codingPath }

        /// Throws a doubt on a repeated key (`JSONDecoder` keeps the first; this reader would not know
        /// which one a look-up finds).
        init(decoder: JSONBytesDecoder, members: [Member]) throws {
            self.decoder = decoder
            self.members = members
            let (index, repeated) = decoder.document.withUnsafeBytes { all -> ([String: Int]?, Bool) in
                if members.count > JSONBytesDecoder.linearLookUpLimit {
                    var index: [String: Int] = [:]
                    index.reserveCapacity(members.count)
                    for (position, member) in members.enumerated() {
                        let key = String(decoding: UnsafeRawBufferPointer(rebasing: all[member.key]), as: UTF8.self)
                        guard index.updateValue(position, forKey: key) == nil else { return (nil, true) }
                    }
                    return (index, false)
                }
                for a in members.indices {
                    for b in members.indices where b > a && members[a].key.count == members[b].key.count {
                        if memcmp(all.baseAddress! + members[a].key.lowerBound, all.baseAddress! + members[b].key.lowerBound, members[a].key.count) == 0 {
                            return (nil, true)
                        }
                    }
                }
                return (nil, false)
            }
            if repeated { throw decoder.doubt.unsupported() }
            self.index = index
        }

        var allKeys: [Key] {
            decoder.document.withUnsafeBytes { all in
                members.compactMap { Key(stringValue: String(decoding: UnsafeRawBufferPointer(rebasing: all[$0.key]), as: UTF8.self)) }
            }
        }

        func contains(_ key: Key) -> Bool { position(of: key) != nil }

        /// Keys are plain ASCII (``Scalar/members()``): their bytes equal exactly when the strings do.
        private func position(of key: Key) -> Int? {
            if let index { return index[key.stringValue] }
            var name = key.stringValue
            return name.withUTF8 { name in
                decoder.document.withUnsafeBytes { all in
                    members.firstIndex { member in
                        member.key.count == name.count
                            && (name.isEmpty || memcmp(all.baseAddress! + member.key.lowerBound, name.baseAddress!, name.count) == 0)
                    }
                }
            }
        }

        private func value(_ key: Key) throws -> JSONBytesDecoder {
            guard let position = position(of: key) else { throw Mismatch() }  // JSONDecoder: keyNotFound
            return decoder.nested(members[position].value, codingPath)
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

        func superDecoder() throws -> any Decoder { throw decoder.doubt.unsupported() }
        func superDecoder(forKey key: Key) throws -> any Decoder { throw decoder.doubt.unsupported() }
    }

    /// Moves to the next element only when a decode succeeded, as `JSONDecoder` does (a lossy loop
    /// retries a failed element as another type).
    struct Unkeyed: UnkeyedDecodingContainer {
        let decoder: JSONBytesDecoder
        let elements: [Range<Int>]
        var currentIndex = 0
        var codingPath: [any CodingKey] { decoder.codingPath }

        init(decoder: JSONBytesDecoder, elements: [Range<Int>]) {
            self.decoder = decoder
            self.elements = elements
        }

        var count: Int? { elements.count }
        var isAtEnd: Bool { currentIndex >= elements.count }

        private func current() throws -> JSONBytesDecoder {
            guard currentIndex < elements.count else { throw Mismatch() }  // JSONDecoder: valueNotFound
            return decoder.nested(elements[currentIndex], codingPath)
        }

        /// Decodes the current element with `read` and moves past it if that succeeded.
        private mutating func next<T>(_ read: (JSONBytesDecoder) throws -> T) throws -> T {
            let value = try read(current())
            currentIndex += 1
            return value
        }

        mutating func decodeNil() throws -> Bool {
            if try current().scalar.isNull {
                currentIndex += 1
                return true
            }
            return false
        }

        mutating func decode(_ type: Bool.Type) throws -> Bool { try next { try $0.scalar.bool() } }
        mutating func decode(_ type: String.Type) throws -> String { try next { try $0.scalar.string() } }
        mutating func decode(_ type: Double.Type) throws -> Double { try next { try $0.scalar.floatingPoint() } }
        mutating func decode(_ type: Float.Type) throws -> Float { try next { try $0.scalar.floatingPoint() } }
        mutating func decode(_ type: Int.Type) throws -> Int { try next { try $0.scalar.integer() } }
        mutating func decode(_ type: Int8.Type) throws -> Int8 { try next { try $0.scalar.integer() } }
        mutating func decode(_ type: Int16.Type) throws -> Int16 { try next { try $0.scalar.integer() } }
        mutating func decode(_ type: Int32.Type) throws -> Int32 { try next { try $0.scalar.integer() } }
        mutating func decode(_ type: Int64.Type) throws -> Int64 { try next { try $0.scalar.integer() } }
        mutating func decode(_ type: UInt.Type) throws -> UInt { try next { try $0.scalar.integer() } }
        mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try next { try $0.scalar.integer() } }
        mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try next { try $0.scalar.integer() } }
        mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try next { try $0.scalar.integer() } }
        mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try next { try $0.scalar.integer() } }
        mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next { try $0.decode(type) } }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
            try next { try $0.container(keyedBy: type) }
        }

        mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
            try next { try $0.unkeyedContainer() }
        }

        mutating func superDecoder() throws -> any Decoder { throw decoder.doubt.unsupported() }
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
