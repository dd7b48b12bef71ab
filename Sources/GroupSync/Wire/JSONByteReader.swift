import Foundation

/// A forward-only cursor over JSON bytes: the primitives shared by the fast readers of envelopes
/// (``Wire/scanEnvelope(_:)``) and of JSON values (``JSONValue/parseFast(_:)``). Every reader gives up
/// (returns nil) on anything outside its fast path and lets `JSONDecoder` decide.
struct JSONByteReader {
    let bytes: UnsafeRawBufferPointer
    var i = 0

    init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    // The primitives below are forced inline: called for nearly every byte, a call each cost more than
    // the work (≈ 1,000 instructions per received message went to their calls alone).
    @inline(__always) var isAtEnd: Bool { i == bytes.count }
    @inline(__always) var current: UInt8? { i < bytes.count ? bytes[i] : nil }

    @inline(__always)
    mutating func take(_ byte: UInt8) -> Bool {
        guard current == byte else { return false }
        i += 1
        return true
    }

    @inline(__always)
    mutating func skipWhitespace() {
        while let byte = current, byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 { i += 1 }
    }

    mutating func matchLiteral(_ literal: StaticString) -> Bool {
        let count = literal.utf8CodeUnitCount
        guard bytes.count - i >= count, memcmp(bytes.baseAddress! + i, literal.utf8Start, count) == 0 else { return false }
        i += count
        return true
    }

    mutating func readBool() -> Bool? {
        if matchLiteral("true") { return true }
        if matchLiteral("false") { return false }
        return nil
    }

    /// An integer without fraction or exponent that fits in 64 bits, without leading zeros and not `-0`
    /// (JSONDecoder's readings of those are left to it); nil otherwise.
    mutating func readInteger() -> Int64? {
        let negative = take(UInt8(ascii: "-"))
        let start = i
        var value: Int64 = 0
        while let byte = current, byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") {
            let digit = Int64(byte - UInt8(ascii: "0"))
            let (times10, overflow1) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = negative ? times10.subtractingReportingOverflow(digit) : times10.addingReportingOverflow(digit)
            guard !overflow1, !overflow2 else { return nil }
            value = sum
            i += 1
        }
        let digits = i - start
        guard digits > 0, !(digits > 1 && bytes[start] == UInt8(ascii: "0")), !(negative && value == 0) else { return nil }
        if let byte = current, byte == UInt8(ascii: ".") || byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E") { return nil }
        return value
    }
}

extension JSONByteReader {
    /// Whether a key read by ``readPlainStringBytes()`` is exactly `literal`. memcmp: `elementsEqual`
    /// walked both buffers through generic iterators (~180 instructions per key, six keys per message).
    @inline(__always)
    static func key(_ key: UnsafeRawBufferPointer, is literal: StaticString) -> Bool {
        key.count == literal.utf8CodeUnitCount && (key.isEmpty || memcmp(key.baseAddress!, literal.utf8Start, key.count) == 0)
    }

    /// One object whose keys are plain ASCII strings (no escapes): `member` reads each member's value (the
    /// reader is just after the colon) and says whether it was acceptable. Leaves the reader after the
    /// closing brace; false on anything else. The shared loop of the byte-level record readers.
    mutating func readObject(_ member: (inout JSONByteReader, UnsafeRawBufferPointer) -> Bool) -> Bool {
        skipWhitespace()
        guard take(UInt8(ascii: "{")) else { return false }
        skipWhitespace()
        if take(UInt8(ascii: "}")) { return true }
        repeat {
            skipWhitespace()
            guard let name = readPlainStringBytes() else { return false }
            skipWhitespace()
            guard take(UInt8(ascii: ":")) else { return false }
            skipWhitespace()
            guard member(&self, name) else { return false }
            skipWhitespace()
        } while take(UInt8(ascii: ","))
        return take(UInt8(ascii: "}"))
    }
}
