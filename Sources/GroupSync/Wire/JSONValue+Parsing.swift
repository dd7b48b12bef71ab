import Foundation

/// A direct parser for the common shapes of JSON, used before `JSONDecoder` on every received record.
///
/// Decoding a ``JSONValue`` through `Decodable` tries each kind in turn and pays for a thrown error per
/// miss (a state record with an integer value cost ≈ 47,000 instructions to decode, most of it in those
/// errors). This parser reads the bytes once. It covers what the protocol's encoders produce — objects,
/// arrays, strings (with every escape), integers that fit in 64 bits, fractional numbers, booleans, null —
/// and gives up (returns nil) on anything else: whole numbers written with a fraction or exponent (`1.0`,
/// `1e2`: `JSONDecoder` reads them as integers), integers beyond 64 bits, `-0`, repeated keys, nesting
/// deeper than 64, invalid UTF-8, malformed input. Callers then decode with `JSONDecoder`, so a payload
/// never means something different depending on the path.
extension JSONValue {
    static func parseFast(_ data: Data) -> JSONValue? {
        data.withUnsafeBytes { bytes in
            var reader = JSONByteReader(bytes: bytes)
            guard let value = reader.parseValue(depth: 0) else { return nil }
            reader.skipWhitespace()
            return reader.isAtEnd ? value : nil
        }
    }
}

extension JSONByteReader {
    mutating func parseValue(depth: Int) -> JSONValue? {
        skipWhitespace()
        guard let byte = current else { return nil }
        switch byte {
        case UInt8(ascii: "{"):
            guard depth < 64 else { return nil }
            i += 1
            var object: [String: JSONValue] = [:]
            skipWhitespace()
            if take(UInt8(ascii: "}")) { return .object(object) }
            repeat {
                skipWhitespace()
                guard let key = parseString() else { return nil }
                skipWhitespace()
                guard take(UInt8(ascii: ":")), let value = parseValue(depth: depth + 1) else { return nil }
                guard object.updateValue(value, forKey: key) == nil else { return nil }  // repeated key
                skipWhitespace()
            } while take(UInt8(ascii: ","))
            return take(UInt8(ascii: "}")) ? .object(object) : nil
        case UInt8(ascii: "["):
            guard depth < 64 else { return nil }
            i += 1
            var array: [JSONValue] = []
            skipWhitespace()
            if take(UInt8(ascii: "]")) { return .array(array) }
            repeat {
                guard let value = parseValue(depth: depth + 1) else { return nil }
                array.append(value)
                skipWhitespace()
            } while take(UInt8(ascii: ","))
            return take(UInt8(ascii: "]")) ? .array(array) : nil
        case UInt8(ascii: "\""):
            return parseString().map(JSONValue.string)
        case UInt8(ascii: "t"):
            return matchLiteral("true") ? .bool(true) : nil
        case UInt8(ascii: "f"):
            return matchLiteral("false") ? .bool(false) : nil
        case UInt8(ascii: "n"):
            return matchLiteral("null") ? .null : nil
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            let start = i
            if let integer = readInteger() { return .int(integer) }
            i = start
            return readFraction().map(JSONValue.double)
        default:
            return nil
        }
    }

    /// A number with a fraction or an exponent whose value is not a whole number, as `JSONDecoder` reads it
    /// into a ``JSONValue`` (`.double`); nil for anything else — whole values such as `1.0` or `1e2`
    /// (`JSONDecoder` makes them `.int`), values beyond `Double`'s range, malformed numbers.
    mutating func readFraction() -> Double? {
        let start = i
        _ = take(UInt8(ascii: "-"))
        guard digits(allowLeadingZero: false) else { return nil }
        var hasFraction = false
        if take(UInt8(ascii: ".")) {
            guard digits(allowLeadingZero: true) else { return nil }
            hasFraction = true
        }
        var hasExponent = false
        if take(UInt8(ascii: "e")) || take(UInt8(ascii: "E")) {
            _ = take(UInt8(ascii: "+")) || take(UInt8(ascii: "-"))
            guard digits(allowLeadingZero: true) else { return nil }
            hasExponent = true
        }
        guard hasFraction || hasExponent,
              let value = Double(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<i]), as: UTF8.self)),
              value.isFinite, value != value.rounded(.towardZero) else { return nil }
        return value
    }

    /// One or more digits; a leading zero only alone (`0`, not `01`) unless `allowLeadingZero`.
    private mutating func digits(allowLeadingZero: Bool) -> Bool {
        let start = i
        while let byte = current, byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") { i += 1 }
        guard i > start else { return false }
        return allowLeadingZero || i - start == 1 || bytes[start] != UInt8(ascii: "0")
    }

    /// A string literal, escapes decoded; nil for invalid UTF-8, raw control characters or bad escapes.
    mutating func parseString() -> String? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        let start = i
        // Fast case: no escapes.
        while let byte = current, byte != UInt8(ascii: "\""), byte != UInt8(ascii: "\\") {
            guard byte >= 0x20 else { return nil }
            i += 1
        }
        guard let stop = current else { return nil }
        if stop == UInt8(ascii: "\"") {
            defer { i += 1 }
            return String(validating: UnsafeRawBufferPointer(rebasing: bytes[start..<i]), as: UTF8.self)
        }
        var utf8 = Array(bytes[start..<i])
        while let byte = current {
            i += 1
            switch byte {
            case UInt8(ascii: "\""):
                return String(validating: utf8, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard let escaped = current else { return nil }
                i += 1
                switch escaped {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): utf8.append(escaped)
                case UInt8(ascii: "b"): utf8.append(0x08)
                case UInt8(ascii: "f"): utf8.append(0x0C)
                case UInt8(ascii: "n"): utf8.append(0x0A)
                case UInt8(ascii: "r"): utf8.append(0x0D)
                case UInt8(ascii: "t"): utf8.append(0x09)
                case UInt8(ascii: "u"):
                    guard let scalar = parseUnicodeEscape() else { return nil }
                    utf8.append(contentsOf: String(Character(scalar)).utf8)
                default: return nil
                }
            case 0..<0x20:
                return nil
            default:
                utf8.append(byte)
            }
        }
        return nil
    }

    /// After `\u`: four hex digits, and a second `\uXXXX` for a surrogate pair.
    private mutating func parseUnicodeEscape() -> Unicode.Scalar? {
        guard let high = parseHex4() else { return nil }
        if (0xD800..<0xDC00).contains(high) {
            guard take(UInt8(ascii: "\\")), take(UInt8(ascii: "u")), let low = parseHex4(), (0xDC00..<0xE000).contains(low) else { return nil }
            return Unicode.Scalar(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
        }
        return Unicode.Scalar(high)  // nil for a lone low surrogate
    }

    private mutating func parseHex4() -> UInt32? {
        guard bytes.count - i >= 4 else { return nil }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[i]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: return nil
            }
            value = value << 4 | UInt32(digit)
            i += 1
        }
        return value
    }
}
