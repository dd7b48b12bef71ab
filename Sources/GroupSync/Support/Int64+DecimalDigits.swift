extension Int64 {
    /// Calls `body` with this number's decimal text (as `String(self)` writes it: `-` and digits) in a
    /// buffer on the stack: written into a payload or associated data without a `String` made first.
    func withDecimalDigits<Result>(_ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: 19 digits and a sign at most
        return withUnsafeMutableBytes(of: &digits) { buffer in
            var (rest, start) = (magnitude, buffer.count)
            repeat {
                start -= 1
                buffer[start] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
            } while rest > 0
            if self < 0 {
                start -= 1
                buffer[start] = UInt8(ascii: "-")
            }
            return body(UnsafeRawBufferPointer(rebasing: buffer[start...]))
        }
    }
}
