/// Base64 (RFC 4648, the standard alphabet, padded) written straight into a buffer being filled: a sealed
/// envelope's body goes out without a text of its own. Reading stays with Foundation's
/// `Data(base64Encoded:)`, which refuses anything else.
enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    /// How many bytes at most a base64 text of `length` characters holds.
    static func decodedCapacity(_ length: Int) -> Int { max(0, length) / 4 * 3 }

    /// Appends the base64 text of `bytes` to `out`.
    static func append(_ bytes: UnsafeRawBufferPointer, to out: inout [UInt8]) {
        out.reserveCapacity(out.count + (bytes.count + 2) / 3 * 4)
        var index = 0
        while index < bytes.count {
            let left = bytes.count - index
            var group = UInt32(bytes[index]) << 16
            if left > 1 { group |= UInt32(bytes[index + 1]) << 8 }
            if left > 2 { group |= UInt32(bytes[index + 2]) }
            out.append(alphabet[Int(group >> 18 & 63)])
            out.append(alphabet[Int(group >> 12 & 63)])
            out.append(left > 1 ? alphabet[Int(group >> 6 & 63)] : UInt8(ascii: "="))
            out.append(left > 2 ? alphabet[Int(group & 63)] : UInt8(ascii: "="))
            index += 3
        }
    }
}
