/// The one writer of our own: JSON text for a ``JSONValue`` and for the envelope header's strings.
/// Strings are escaped as `JSONEncoder` escapes them (slashes unescaped, as ``Wire/encode(_:)`` sets it),
/// an integral `Double` loses its `.0` as there, and object members follow their keys' `String` order.
///
/// `Wire.value(_:from:)` hands a stored value to `JSONDecoder` through it, so that reading a shared
/// state or an activity costs one Foundation pass, not an encode and a decode.
enum JSONWriter {
    static func append(_ value: JSONValue, to out: inout [UInt8]) {
        switch value {
        case .null: out.append(contentsOf: "null".utf8)
        case let .bool(flag): out.append(contentsOf: (flag ? "true" : "false").utf8)
        case let .int(number): append(number, to: &out)
        case let .double(number): out.append(contentsOf: text(of: number).utf8)
        case let .string(string): append(string: string, to: &out)
        case let .array(elements):
            out.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                append(element, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case let .object(members):
            out.append(UInt8(ascii: "{"))
            for (index, key) in members.keys.sorted().enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                append(string: key, to: &out)
                out.append(UInt8(ascii: ":"))
                append(members[key]!, to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// Appends `text` as it is (JSON punctuation and keys written by us).
    static func append(raw text: StaticString, to out: inout [UInt8]) {
        text.withUTF8Buffer { out.append(contentsOf: $0) }  // (a one-scalar literal has no pointer of its own)
    }

    /// Appends `number`'s decimal text.
    static func append(_ number: Int64, to out: inout [UInt8]) {
        number.withDecimalDigits { out.append(contentsOf: $0) }
    }

    /// Appends `string` as a JSON string literal, escaped as `JSONEncoder` escapes it.
    static func append(string: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), byte])
            case 0x08: out.append(contentsOf: #"\b"#.utf8)
            case 0x0C: out.append(contentsOf: #"\f"#.utf8)
            case 0x0A: out.append(contentsOf: #"\n"#.utf8)
            case 0x0D: out.append(contentsOf: #"\r"#.utf8)
            case 0x09: out.append(contentsOf: #"\t"#.utf8)
            case 0..<0x20: out.append(contentsOf: "\\u00\(byte < 0x10 ? "0" : "")\(String(byte, radix: 16))".utf8)
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// `JSONEncoder`'s text for a finite `Double`: its description, without a trailing `.0`.
    static func text(of number: Double) -> String {
        let description = number.description
        return description.hasSuffix(".0") ? String(description.dropLast(2)) : description
    }
}
