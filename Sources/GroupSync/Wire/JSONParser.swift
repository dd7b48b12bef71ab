import Foundation

/// The one reader of protocol payloads: strict JSON (RFC 8259) into a ``JSONValue``, with the rules of
/// docs/PROTOCOL.md ("Decoding rules"). It refuses a leading byte order mark, a key repeated in any object,
/// invalid UTF-8 (raw, or a lone surrogate escape), nesting deeper than ``maximumDepth``, numbers beyond
/// `Double`'s range, and anything after the value. A number written without fraction or exponent that fits
/// in 64 bits is ``JSONValue/int(_:)``; every other number is ``JSONValue/double(_:)``, so `1.0` and
/// `1e0` are never integers.
///
/// It also reports where the value of one top-level key is — an envelope's `body`, a state record's
/// `value` —, so that the app's type is decoded straight from the payload's bytes; on request, it checks
/// that value by the same rules without building it.
struct JSONParser {
    /// Containers nest at most this deep (the limit of Foundation's `JSONDecoder`).
    static let maximumDepth = 512

    static func parse(_ data: Data) throws(Wire.Rejection) -> JSONValue { try run(data, topLevelFields: false).value }

    /// ``parse(_:)``, and whether every number read is exact (see ``parseObject(_:locating:skipping:)``).
    static func parseNoting(_ data: Data) throws(Wire.Rejection) -> (value: JSONValue, exact: Bool) {
        let (value, _, _, exact) = try run(data, topLevelFields: false)
        return (value, exact)
    }

    /// Checks `data` by the same rules as ``parse(_:)`` without building its value (an opened body, which
    /// the app's type decodes).
    static func check(_ data: Data) throws(Wire.Rejection) {
        _ = try run(data, topLevelFields: false, building: false)
    }

    /// The members of the top-level object (`wrong-shape` for any other value, once the whole payload is
    /// checked), and the byte range (indices of `data`) of member `key`'s value if there is one. With
    /// `skipping`, that value is checked but stands as `null` among the fields. `exact`: every number read
    /// is written as its parsed value is written out again (see ``exact``).
    static func parseObject(_ data: Data, locating key: String = "body", skipping: Bool = false) throws(Wire.Rejection) -> (
        fields: Wire.Fields, located: Range<Int>?, exact: Bool
    ) {
        let (_, fields, located, exact) = try run(data, topLevelFields: true, locating: key, skipping: skipping)
        guard let fields else { throw .wrongShape }
        return (fields, located, exact)
    }

    private static func run(
        _ data: Data, topLevelFields: Bool, locating key: String = "", skipping: Bool = false, building: Bool = true
    ) throws(Wire.Rejection) -> (value: JSONValue, fields: Wire.Fields?, located: Range<Int>?, exact: Bool) {
        guard data.count <= Wire.maximumPayload else { throw .tooLarge }
        let result = data.withUnsafeBytes { bytes in
            Result { () throws(Wire.Rejection) in
                var parser = JSONParser(
                    bytes: bytes, topLevelFields: topLevelFields, locatedKey: key, skipping: skipping, building: building)
                return (try parser.document(), parser.fields, parser.located, parser.exact)
            }
        }
        let (value, fields, located, exact) = try result.get()
        return (value, fields, located.map { (data.startIndex + $0.lowerBound)..<(data.startIndex + $0.upperBound) }, exact)
    }

    private let bytes: UnsafeRawBufferPointer
    private var i = 0
    private let topLevelFields: Bool
    /// The top-level member whose value's bytes are located (and, with `skipping`, not built).
    private let locatedKey: String
    private let skipping: Bool
    /// Whether the top-level value is built (or only checked).
    private let building: Bool
    private var fields: Wire.Fields?
    private var located: Range<Int>?
    /// Whether every number read is written as its ``JSONValue`` is written out again (``JSONWriter``): an
    /// `Int64` (not `-0`), or a `Double` in its own shortest text. A reader decoding the text of another
    /// (an integer beyond 64 bits, a decimal of 17 digits, `0e5`) as a `UInt64`, a `Decimal` or even a
    /// `Double` may get other than the written-out copy gives.
    private var exact = true

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
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { throw .bom }
        let value = try value()
        skipWhitespace()
        guard i == bytes.count else { throw .malformed }
        return value
    }

    /// An object or array being read. Objects keep their keys in order, compared one by one while there
    /// are few (hashing a `String` costs more than comparing a handful).
    private struct Container {
        let isObject: Bool
        /// Whether its value is built (or only checked).
        let build: Bool
        var keys: [String] = []
        var values: [JSONValue] = []
        var seen = Set<String>()
        /// The key whose value is being read, and where that value starts.
        var key = ""
        var valueStart = 0

        init(isObject: Bool, build: Bool) {
            self.isObject = isObject
            self.build = build
            keys.reserveCapacity(isObject ? 8 : 0)
            values.reserveCapacity(build ? 8 : 0)
        }
    }

    /// One value, read with a stack of open containers rather than recursion: a payload may nest
    /// ``maximumDepth`` deep, and it is read on threads with small stacks.
    private mutating func value() throws(Wire.Rejection) -> JSONValue {
        var open: [Container] = []
        while true {
            // Whether the next value is built: not inside a skipped value, nor the located member's when it
            // is skipped.
            let build = open.last.map { $0.build && !(skipping && open.count == 1 && $0.isObject && $0.key == locatedKey) } ?? building
            skipWhitespace()
            guard let byte = current else { throw .malformed }
            var value: JSONValue
            switch byte {
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                guard open.count < Self.maximumDepth else { throw .tooDeep }
                i += 1
                var container = Container(isObject: byte == UInt8(ascii: "{"), build: build)
                skipWhitespace()
                if take(container.isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) {
                    value = finish(container, depth: open.count)
                } else {
                    if container.isObject { try readKey(into: &container) }
                    open.append(container)
                    continue
                }
            case UInt8(ascii: "\""):
                if build || !skipPlainString() { value = .string(try string()) } else { value = .null }
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
            // A value is complete: add it to its container, and close the containers it completes.
            while var container = open.popLast() {
                if container.isObject {
                    if open.isEmpty && container.key == locatedKey { located = container.valueStart..<i }
                    if container.keys.count < 16 {
                        guard !container.keys.contains(container.key) else { throw .duplicateKey }
                    } else {
                        if container.seen.isEmpty { container.seen = Set(container.keys) }
                        guard container.seen.insert(container.key).inserted else { throw .duplicateKey }
                    }
                    container.keys.append(container.key)
                }
                if container.build { container.values.append(value) }
                skipWhitespace()
                if take(UInt8(ascii: ",")) {
                    if container.isObject { try readKey(into: &container) }
                    open.append(container)
                    break
                }
                try expect(container.isObject ? UInt8(ascii: "}") : UInt8(ascii: "]"))
                value = finish(container, depth: open.count)
            }
            if open.isEmpty { return value }
        }
    }

    /// `"key" :` and the start of its value.
    private mutating func readKey(into container: inout Container) throws(Wire.Rejection) {
        skipWhitespace()
        container.key = try string()
        skipWhitespace()
        try expect(UInt8(ascii: ":"))
        skipWhitespace()
        container.valueStart = i
    }

    /// A closed container's value (`null` when it was only checked; the top-level object's members go to
    /// ``fields`` when asked for).
    private mutating func finish(_ container: Container, depth: Int) -> JSONValue {
        if container.isObject && depth == 0 && topLevelFields {
            fields = Wire.Fields(keys: container.keys, values: container.values)
            return .null
        }
        guard container.build else { return .null }
        return container.isObject
            ? .object(Dictionary(uniqueKeysWithValues: zip(container.keys, container.values))) : .array(container.values)
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
        if integral, let integer = Int64(integerText: bytes[start..<i]) {
            if integer == 0 && bytes[start] == UInt8(ascii: "-") { exact = false }
            return .int(integer)
        }
        guard let double = Double(String(decoding: bytes[start..<i], as: UTF8.self)), double.isFinite else { throw .badNumber }
        // Exact only when written as the parsed value is written out again: then any reader sees one text.
        if exact { exact = JSONWriter.text(of: double).utf8.elementsEqual(bytes[start..<i]) }
        return .double(double)
    }

    /// One or more decimal digits.
    private mutating func digits() throws(Wire.Rejection) {
        let start = i
        while let byte = current, byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") { i += 1 }
        guard i > start else { throw .malformed }
    }

    /// Skips a string literal that is only checked, when it is plain ASCII without escapes (such as a
    /// sealed text): true, or false with nothing read when it needs ``string()``.
    private mutating func skipPlainString() -> Bool {
        var end = i + 1
        while end < bytes.count {
            let byte = bytes[end]
            if byte == UInt8(ascii: "\"") {
                i = end + 1
                return true
            }
            if byte == UInt8(ascii: "\\") || byte < 0x20 || byte >= 0x80 { return false }
            end += 1
        }
        return false
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
