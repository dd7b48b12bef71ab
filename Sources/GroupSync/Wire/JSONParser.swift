import Foundation

/// The one reader of protocol payloads: strict JSON (RFC 8259) into a ``JSONValue``, with the rules of
/// docs/PROTOCOL.md ("Decoding rules"). It refuses a leading byte order mark, a key repeated in any object,
/// invalid UTF-8 (raw, or a lone surrogate escape), nesting deeper than ``maximumDepth``, numbers beyond
/// `Double`'s range, and anything after the value. A number written without fraction or exponent that fits
/// in 64 bits is ``JSONValue/int(_:)``; every other number is ``JSONValue/double(_:)``, so `1.0` and
/// `1e0` are never integers.
///
/// A record is not built as a tree: ``parseObject(_:)`` checks the whole payload and says where each
/// top-level member's value is, and the record's reader (``Wire/Fields``) reads the values it needs from
/// there, so that an envelope's body is decoded as the app's type straight from the payload's bytes.
struct JSONParser {
    /// Containers nest at most this deep (the limit of Foundation's `JSONDecoder`).
    static let maximumDepth = 512

    static func parse(_ data: Data) throws(Wire.Rejection) -> JSONValue { try run(data, .build).value }

    /// Checks `data` by the same rules as ``parse(_:)`` without building its value (an opened body, which
    /// the app's type decodes).
    static func check(_ data: Data) throws(Wire.Rejection) { _ = try run(data, .check) }

    /// The members of the top-level object, each with the byte range (indices of `data`) of its value:
    /// everything checked, only scalar members built. `wrong-shape` for any other value, once the whole
    /// payload is checked.
    static func parseObject(_ data: Data) throws(Wire.Rejection) -> Wire.Fields {
        let (_, members, container) = try run(data, .members)
        guard container == UInt8(ascii: "{") else { throw .wrongShape }
        return Wire.Fields(payload: data, members: members)
    }

    /// The top-level array's elements as members with empty keys (ranges are indices of `data`), checked,
    /// only scalars built; `wrong-shape` for any other value.
    static func parseArray(_ data: Data) throws(Wire.Rejection) -> [Wire.Fields.Member] {
        let (_, members, container) = try run(data, .members)
        guard container == UInt8(ascii: "[") else { throw .wrongShape }
        return members
    }

    /// What a run gives back.
    private enum Mode {
        /// The value, built.
        case build
        /// Nothing: the value is only checked.
        case check
        /// The top-level container's members (an array's with empty keys), checked; only scalar members
        /// are built.
        case members
    }

    private static func run(_ data: Data, _ mode: Mode) throws(Wire.Rejection) -> (
        value: JSONValue, members: [Wire.Fields.Member], container: UInt8?
    ) {
        guard data.count <= Wire.maximumPayload else { throw .tooLarge }
        let result = data.withUnsafeBytes { bytes in
            Result { () throws(Wire.Rejection) in
                var parser = JSONParser(bytes: bytes, mode: mode)
                return (try parser.document(), parser.members, parser.container)
            }
        }
        var (value, members, container) = try result.get()
        if data.startIndex != 0 {
            for index in members.indices { members[index].value = members[index].value.shifted(by: data.startIndex) }
        }
        return (value, members, container)
    }

    private let bytes: UnsafeRawBufferPointer
    private var i = 0
    private let mode: Mode
    /// In ``Mode/members``: the top-level container's members (ranges of `bytes`), scalars built.
    private var members: [Wire.Fields.Member] = []
    /// The top-level value's opening byte if it is a container.
    private var container: UInt8?

    private init(bytes: UnsafeRawBufferPointer, mode: Mode) {
        self.bytes = bytes
        self.mode = mode
    }

    private var current: UInt8? { i < bytes.count ? bytes[i] : nil }

    private mutating func take(_ byte: UInt8) -> Bool {
        guard current == byte else { return false }
        i += 1
        return true
    }

    private mutating func expect(_ byte: UInt8) throws(Wire.Rejection) {
        guard take(byte) else { throw .malformed }
    }

    private mutating func skipWhitespace() {
        while let byte = current, byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 { i += 1 }
    }

    private mutating func document() throws(Wire.Rejection) -> JSONValue {
        if bytes.count >= 3 && bytes[0] == 0xEF && bytes[1] == 0xBB && bytes[2] == 0xBF { throw .bom }
        let value = try value()
        skipWhitespace()
        guard i == bytes.count else { throw .malformed }
        return value
    }

    /// An object or array being read. Its members sit at the top of the parser's ``keys`` and ``values``
    /// stacks, from `firstKey` and `firstValue` on, so that reading one allocates nothing per container.
    /// Keys are compared one by one while there are few (hashing a `String` costs more than comparing a
    /// handful).
    private struct Container {
        let isObject: Bool
        /// Whether its value is built (or only checked).
        let build: Bool
        let firstKey: Int
        let firstValue: Int
        /// An object's keys, once it has ``Container/manyKeys`` of them.
        var seen: Set<String>? = nil
        /// The key whose value is being read, and where that value starts (kept for the top level).
        var key = ""
        var valueStart = 0

        static let manyKeys = 16
    }

    /// The members of the open containers, innermost last: every object's keys (checked for repeats even
    /// when not built), and the values of those being built.
    private var keys: [String] = []
    private var values: [JSONValue] = []

    /// One value, read with a stack of open containers rather than recursion: a payload may nest
    /// ``maximumDepth`` deep, and it is read on threads with small stacks.
    private mutating func value() throws(Wire.Rejection) -> JSONValue {
        var open: [Container] = []
        while true {
            // Whether the next value is built: the top level's unless only checked or listed, and then
            // inside a built container only.
            let build = open.last?.build ?? (mode == .build)
            skipWhitespace()
            guard let byte = current else { throw .malformed }
            if open.count == 1 { open[0].valueStart = i }
            var value: JSONValue
            var isScalar = true
            switch byte {
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                guard open.count < Self.maximumDepth else { throw .tooDeep }
                if open.isEmpty {
                    container = byte
                    open.reserveCapacity(4)
                    keys.reserveCapacity(8)
                    if build { values.reserveCapacity(8) }
                    if mode == .members { members.reserveCapacity(8) }
                }
                i += 1
                var container = Container(
                    isObject: byte == UInt8(ascii: "{"), build: build, firstKey: keys.count, firstValue: values.count)
                skipWhitespace()
                guard !take(container.isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) else {
                    value = finish(container)
                    isScalar = false
                    break
                }
                if container.isObject { try readKey(into: &container) }
                open.append(container)
                continue
            case UInt8(ascii: "\""): value = .string(try string())
            case UInt8(ascii: "t"):
                try literal("true")
                value = .bool(true)
            case UInt8(ascii: "f"):
                try literal("false")
                value = .bool(false)
            case UInt8(ascii: "n"):
                try literal("null")
                value = .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): value = try number()
            default: throw .malformed
            }
            // A value is complete: add it to its container (changed where it is on the stack), and close
            // the containers it completes.
            while let top = open.indices.last {
                if top == 0 && mode == .members {
                    members.append(.init(key: open[0].key, value: open[0].valueStart..<i, scalar: isScalar ? value : nil))
                }
                if open[top].isObject { try addKey(of: &open[top]) }
                if open[top].build { values.append(value) }
                skipWhitespace()
                if take(UInt8(ascii: ",")) {
                    if open[top].isObject { try readKey(into: &open[top]) }
                    break
                }
                try expect(open[top].isObject ? UInt8(ascii: "}") : UInt8(ascii: "]"))
                value = finish(open.removeLast())
                isScalar = false
            }
            if open.isEmpty { return value }
        }
    }

    /// Notes the key of the member just read; `duplicate-key` if the object has it already.
    private mutating func addKey(of container: inout Container) throws(Wire.Rejection) {
        if keys.count - container.firstKey < Container.manyKeys {
            guard !keys[container.firstKey...].contains(container.key) else { throw .duplicateKey }
        } else {
            if container.seen == nil { container.seen = Set(keys[container.firstKey...]) }
            guard container.seen!.insert(container.key).inserted else { throw .duplicateKey }
        }
        keys.append(container.key)
    }

    /// `"key" :` and the start of its value.
    private mutating func readKey(into container: inout Container) throws(Wire.Rejection) {
        skipWhitespace()
        container.key = try string()
        skipWhitespace()
        try expect(UInt8(ascii: ":"))
    }

    /// A closed container's value (`null` when it was only checked), its members taken off the stacks.
    private mutating func finish(_ container: Container) -> JSONValue {
        defer {
            if keys.count > container.firstKey { keys.removeSubrange(container.firstKey...) }
            if values.count > container.firstValue { values.removeSubrange(container.firstValue...) }
        }
        guard container.build else { return .null }
        return container.isObject
            ? .object(Dictionary(uniqueKeysWithValues: zip(keys[container.firstKey...], values[container.firstValue...])))
            : .array(Array(values[container.firstValue...]))
    }

    private mutating func literal(_ text: StaticString) throws(Wire.Rejection) {
        let count = text.utf8CodeUnitCount
        guard bytes.count - i >= count, memcmp(bytes.baseAddress! + i, text.utf8Start, count) == 0 else { throw .malformed }
        i += count
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    private mutating func number() throws(Wire.Rejection) -> JSONValue {
        let start = i
        _ = take(UInt8(ascii: "-"))
        if !take(UInt8(ascii: "0")) { try digits() }
        var integral = true
        if take(UInt8(ascii: ".")) {
            try digits()
            integral = false
        }
        if take(UInt8(ascii: "e")) || take(UInt8(ascii: "E")) {
            _ = take(UInt8(ascii: "+")) || take(UInt8(ascii: "-"))
            try digits()
            integral = false
        }
        if integral, let integer = Int64(integerText: bytes[start..<i]) { return .int(integer) }
        guard let double = Double(String(decoding: bytes[start..<i], as: UTF8.self)), double.isFinite else { throw .badNumber }
        return .double(double)
    }

    /// One or more decimal digits.
    private mutating func digits() throws(Wire.Rejection) {
        let start = i
        while let byte = current, byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") { i += 1 }
        guard i > start else { throw .malformed }
    }

    /// A string literal with its escapes decoded.
    private mutating func string() throws(Wire.Rejection) -> String {
        try expect(UInt8(ascii: "\""))
        var utf8: [UInt8] = []  // the decoded bytes, once there is an escape
        var escaped = false, ascii = true
        var start = i
        while true {
            guard let byte = current else { throw .malformed }
            switch byte {
            case UInt8(ascii: "\""):
                let raw = UnsafeBufferPointer(rebasing: bytes.assumingMemoryBound(to: UInt8.self)[start..<i])
                i += 1
                if ascii && !escaped { return String(decoding: raw, as: UTF8.self) }  // valid by construction
                if escaped { utf8.append(contentsOf: raw) }
                guard let string = escaped ? String(validating: utf8, as: UTF8.self) : String(validating: raw, as: UTF8.self) else {
                    throw .invalidUTF8
                }
                return string
            case UInt8(ascii: "\\"):
                utf8.append(contentsOf: bytes[start..<i])
                i += 1
                try escape(into: &utf8)
                escaped = true
                start = i
            case 0..<0x20: throw .malformed
            default:
                ascii = ascii && byte < 0x80
                i += 1
            }
        }
    }

    /// After a backslash: one escape, appended as UTF-8.
    private mutating func escape(into utf8: inout [UInt8]) throws(Wire.Rejection) {
        guard let escaped = current else { throw .malformed }
        i += 1
        switch escaped {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): utf8.append(escaped)
        case UInt8(ascii: "b"): utf8.append(0x08)
        case UInt8(ascii: "f"): utf8.append(0x0C)
        case UInt8(ascii: "n"): utf8.append(0x0A)
        case UInt8(ascii: "r"): utf8.append(0x0D)
        case UInt8(ascii: "t"): utf8.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = try hex4()
            if (0xD800..<0xDC00).contains(scalar) {
                guard take(UInt8(ascii: "\\")), take(UInt8(ascii: "u")) else { throw .invalidUTF8 }
                let low = try hex4()
                guard (0xDC00..<0xE000).contains(low) else { throw .invalidUTF8 }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            }
            guard let unicode = Unicode.Scalar(scalar) else { throw .invalidUTF8 }  // a lone low surrogate
            utf8.append(contentsOf: String(Character(unicode)).utf8)
        default: throw .malformed
        }
    }

    private mutating func hex4() throws(Wire.Rejection) -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let byte = current, let digit = Character(Unicode.Scalar(byte)).hexDigitValue else { throw .malformed }
            value = value << 4 | UInt32(digit)
            i += 1
        }
        return value
    }
}

extension Range<Int> {
    fileprivate func shifted(by offset: Int) -> Range<Int> { (lowerBound + offset)..<(upperBound + offset) }
}

extension Int64 {
    /// `-?[0-9]+` (already checked) that fits in 64 bits.
    fileprivate init?(integerText text: Slice<UnsafeRawBufferPointer>) {
        let negative = text.first == UInt8(ascii: "-")
        var value: Int64 = 0
        for byte in text.dropFirst(negative ? 1 : 0) {
            let digit = Int64(byte - UInt8(ascii: "0"))
            let (times10, overflow) = value.multipliedReportingOverflow(by: 10)
            let (next, overflow2) = negative ? times10.subtractingReportingOverflow(digit) : times10.addingReportingOverflow(digit)
            guard !overflow, !overflow2 else { return nil }
            value = next
        }
        self = value
    }
}
