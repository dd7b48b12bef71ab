import Foundation

/// The one reader of protocol payloads: strict JSON (RFC 8259) into a ``JSONValue``, with the rules of
/// docs/PROTOCOL.md ("Decoding rules"). It refuses a leading byte order mark, a key repeated in any object,
/// invalid UTF-8 (raw, or a lone surrogate escape), nesting deeper than ``maximumDepth``, numbers beyond
/// `Double`'s range, and anything after the value. A number written without fraction or exponent that fits
/// in 64 bits is ``JSONValue/int(_:)``; every other number is ``JSONValue/double(_:)``, so `1.0` and
/// `1e0` are never integers.
///
/// It also reports where the value of the top-level key `body` is, so that an envelope's body is decoded
/// as the app's type straight from the payload's bytes.
struct JSONParser {
    /// Containers nest at most this deep (the limit of Foundation's `JSONDecoder`).
    static let maximumDepth = 512

    /// `data` parsed whole, and the byte range (indices of `data`) of the top-level `body` value if any.
    static func parse(_ data: Data) throws(Wire.Rejection) -> (value: JSONValue, body: Range<Int>?) {
        guard data.count <= Wire.maximumPayload else { throw .tooLarge }
        let result = data.withUnsafeBytes { bytes -> Result<(JSONValue, Range<Int>?), Wire.Rejection> in
            var parser = JSONParser(bytes: bytes)
            do throws(Wire.Rejection) {
                return .success((try parser.document(), parser.body))
            } catch {
                return .failure(error)
            }
        }
        let (value, body) = try result.get()
        return (value, body.map { (data.startIndex + $0.lowerBound)..<(data.startIndex + $0.upperBound) })
    }

    private let bytes: UnsafeRawBufferPointer
    private var i = 0
    private var body: Range<Int>?

    private init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

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
        let value = try value(depth: 0)
        skipWhitespace()
        guard i == bytes.count else { throw .malformed }
        return value
    }

    private mutating func value(depth: Int) throws(Wire.Rejection) -> JSONValue {
        skipWhitespace()
        guard let byte = current else { throw .malformed }
        switch byte {
        case UInt8(ascii: "{"):
            guard depth < Self.maximumDepth else { throw .tooDeep }
            i += 1
            var object: [String: JSONValue] = [:]
            skipWhitespace()
            if take(UInt8(ascii: "}")) { return .object(object) }
            repeat {
                skipWhitespace()
                let key = try string()
                skipWhitespace()
                try expect(UInt8(ascii: ":"))
                skipWhitespace()
                let start = i
                let member = try value(depth: depth + 1)
                if depth == 0 && key == "body" { body = start..<i }
                guard object.updateValue(member, forKey: key) == nil else { throw .duplicateKey }
                skipWhitespace()
            } while take(UInt8(ascii: ","))
            try expect(UInt8(ascii: "}"))
            return .object(object)
        case UInt8(ascii: "["):
            guard depth < Self.maximumDepth else { throw .tooDeep }
            i += 1
            var array: [JSONValue] = []
            skipWhitespace()
            if take(UInt8(ascii: "]")) { return .array(array) }
            repeat {
                array.append(try value(depth: depth + 1))
                skipWhitespace()
            } while take(UInt8(ascii: ","))
            try expect(UInt8(ascii: "]"))
            return .array(array)
        case UInt8(ascii: "\""):
            return .string(try string())
        case UInt8(ascii: "t"):
            try literal("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try literal("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try literal("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return try number()
        default:
            throw .malformed
        }
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
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<i]), as: UTF8.self)
        if integral, let integer = Int64(text) { return .int(integer) }
        guard let double = Double(text), double.isFinite else { throw .badNumber }
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
        var escaped = false
        var start = i
        while true {
            guard let byte = current else { throw .malformed }
            switch byte {
            case UInt8(ascii: "\""):
                let raw = UnsafeRawBufferPointer(rebasing: bytes[start..<i])
                i += 1
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
            case 0..<0x20:
                throw .malformed
            default:
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
        default:
            throw .malformed
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
