/// Base64 (RFC 4648, the standard alphabet, padded), written straight into a buffer being filled and read
/// straight from a payload's bytes: a sealed envelope's body goes out and comes in without a text or a
/// `Data` of its own.
enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    /// How many bytes at most a base64 text of `length` characters holds.
    static func decodedCapacity(_ length: Int) -> Int { max(0, length) / 4 * 3 }

    /// Appends the base64 text of `bytes` to `out`.
    static func append(_ bytes: UnsafeRawBufferPointer, to out: inout [UInt8]) {
        let length = (bytes.count + 2) / 3 * 4
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: length) { text in
            alphabet.withUnsafeBufferPointer { alphabet in
                var (index, written) = (0, 0)
                while index < bytes.count {
                    let left = bytes.count - index
                    var group = UInt32(bytes[index]) << 16
                    if left > 1 { group |= UInt32(bytes[index + 1]) << 8 }
                    if left > 2 { group |= UInt32(bytes[index + 2]) }
                    text[written] = alphabet[Int(group >> 18 & 63)]
                    text[written + 1] = alphabet[Int(group >> 12 & 63)]
                    text[written + 2] = left > 1 ? alphabet[Int(group >> 6 & 63)] : UInt8(ascii: "=")
                    text[written + 3] = left > 2 ? alphabet[Int(group & 63)] : UInt8(ascii: "=")
                    (index, written) = (index + 3, written + 4)
                }
            }
            out.append(contentsOf: UnsafeBufferPointer(text))
        }
    }

    /// Writes the bytes the base64 text `text` holds to `out` (``decodedCapacity(_:)`` bytes) and returns
    /// how many; nil when `text` is no such text: a length that is not a multiple of 4, a character outside
    /// the alphabet, padding anywhere but to end the last four characters. The bits that padding leaves over
    /// are not checked (RFC 4648 lets a decoder ignore them).
    static func decode(_ text: UnsafeRawBufferPointer, into out: UnsafeMutableRawPointer) -> Int? {
        guard text.count % 4 == 0 else { return nil }
        var (index, written) = (0, 0)
        while index < text.count {
            var padding = 0
            if index + 4 == text.count, text[index + 3] == UInt8(ascii: "=") { padding = text[index + 2] == UInt8(ascii: "=") ? 2 : 1 }
            var group: UInt32 = 0
            for offset in 0..<(4 - padding) {
                guard let value = value(of: text[index + offset]) else { return nil }
                group = group << 6 | value
            }
            group <<= 6 * UInt32(padding)
            out.storeBytes(of: UInt8(truncatingIfNeeded: group >> 16), toByteOffset: written, as: UInt8.self)
            if padding < 2 { out.storeBytes(of: UInt8(truncatingIfNeeded: group >> 8), toByteOffset: written + 1, as: UInt8.self) }
            if padding < 1 { out.storeBytes(of: UInt8(truncatingIfNeeded: group), toByteOffset: written + 2, as: UInt8.self) }
            (index, written) = (index + 4, written + 3 - padding)
        }
        return written
    }

    /// The bytes the base64 text `text` holds, or nil (see ``decode(_:into:)``).
    static func decode(_ text: String) -> [UInt8]? {
        var text = text
        return text.withUTF8 { text in
            guard !text.isEmpty else { return [] }
            var valid = false
            let bytes = [UInt8](unsafeUninitializedCapacity: decodedCapacity(text.count)) { out, count in
                guard let base = out.baseAddress, let written = decode(UnsafeRawBufferPointer(text), into: base) else { return }
                (valid, count) = (true, written)
            }
            return valid ? bytes : nil
        }
    }

    /// A character's 6 bits.
    private static func value(of character: UInt8) -> UInt32? {
        switch character {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): UInt32(character - UInt8(ascii: "A"))
        case UInt8(ascii: "a")...UInt8(ascii: "z"): UInt32(character - UInt8(ascii: "a")) + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt32(character - UInt8(ascii: "0")) + 52
        case UInt8(ascii: "+"): 62
        case UInt8(ascii: "/"): 63
        default: nil
        }
    }
}
