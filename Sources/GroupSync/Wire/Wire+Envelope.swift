import Foundation

/// Envelopes without encoding or parsing them twice.
///
/// An app message used to cost three full JSON passes: one to encode the envelope, one to read its
/// header for routing (on the receiving connection) and one to decode it again as the app's type. The
/// body is now encoded alone and the header written around it, and a receiver reads the header with a
/// small scanner that skips the body and remembers where it is, so the app's task decodes only the body.
/// Both produce and accept exactly what ``Wire/Envelope`` does: the bytes on the wire do not change.
extension Wire {
    /// Encodes `Envelope(type:epoch:seq:reliable:body:)` byte for byte as ``encode(_:)`` would (sorted
    /// keys, slashes unescaped).
    static func encodeEnvelope<Body: Encodable>(
        type: String, epoch: Int64, seq: Int64, reliable: Bool, body: Body
    ) throws(GroupSyncError) -> Data {
        Data(try EnvelopeBytes(body: body).finished(type: type, epoch: epoch, seq: seq, reliable: reliable))
    }

    /// An envelope written in two steps: the body first (encoded in the sender's task), then the
    /// header's fields, which follow it in sorted key order (numbered under the sender's lock). The
    /// bytes go from the encoder to libmosquitto with no `Data` in between: the copies into and out of
    /// two `Data` values cost ≈ 2,000 instructions per message sent.
    struct EnvelopeBytes: Sendable {
        private var bytes: [UInt8]

        /// Encodes `body` (``JSONBytesEncoder/encode(_:appendingTo:)``).
        init(body: some Encodable) throws(GroupSyncError) {
            bytes = []
            bytes.reserveCapacity(160)
            bytes.append(contentsOf: #"{"body":"#.utf8)
            try JSONBytesEncoder.encode(body, appendingTo: &bytes)
        }

        /// Around a body already encoded as ``encode(_:)`` would.
        init(encodedBody: Data) {
            bytes = []
            bytes.reserveCapacity(encodedBody.count + 96)
            bytes.append(contentsOf: #"{"body":"#.utf8)
            bytes.append(contentsOf: encodedBody)
        }

        /// The whole envelope, byte for byte what ``encode(_:)`` writes for
        /// `Envelope(type:epoch:seq:reliable:body:)`.
        func finished(type: String, epoch: Int64, seq: Int64, reliable: Bool) -> [UInt8] {
            var out = bytes
            out.append(contentsOf: #","epoch":"#.utf8)
            appendInteger(epoch, to: &out)
            out.append(contentsOf: reliable ? #","reliable":true,"seq":"#.utf8 : #","reliable":false,"seq":"#.utf8)
            appendInteger(seq, to: &out)
            out.append(contentsOf: #","type":"#.utf8)
            appendJSONString(type, to: &out)
            out.append(contentsOf: envelopeEnd)
            return out
        }
    }

    private static let envelopeEnd = Array(#","v":\#(version)}"#.utf8)

    static func appendInteger(_ value: Int64, to out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var count = 0
        withUnsafeMutableBytes(of: &digits) { buffer in
            repeat {
                buffer[19 - count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            } while magnitude > 0
            out.append(contentsOf: buffer[(20 - count)...])
        }
    }

    /// Appends `string` as a JSON string literal, escaped as `JSONEncoder` escapes it.
    static func appendJSONString(_ string: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: #"\""#.utf8)
            case UInt8(ascii: "\\"): out.append(contentsOf: #"\\"#.utf8)
            case 0x08: out.append(contentsOf: #"\b"#.utf8)
            case 0x0C: out.append(contentsOf: #"\f"#.utf8)
            case 0x0A: out.append(contentsOf: #"\n"#.utf8)
            case 0x0D: out.append(contentsOf: #"\r"#.utf8)
            case 0x09: out.append(contentsOf: #"\t"#.utf8)
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out.append(contentsOf: #"\u00"#.utf8)
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0xF)])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// An envelope's header, and where its body's JSON value is in the payload (`nil`: not located, decode
    /// the whole envelope).
    struct ScannedEnvelope: Sendable, Equatable {
        var header: EnvelopeHeader
        var body: Range<Int>?
    }

    /// Reads an envelope's header. Canonical payloads (what ``EnvelopeBytes`` and ``encodeEnvelope(type:epoch:seq:reliable:body:)``
    /// writes, with any whitespace and key order) take a fast path that does not parse the body; anything
    /// else — escapes in keys or type, non-integer numbers, repeated keys, malformed input — is decoded
    /// with `JSONDecoder`, so what is accepted, and as what, never depends on the path. Returns nil for
    /// what is not a version 1 envelope.
    static func scanEnvelope(_ payload: Data) -> ScannedEnvelope? {
        guard payload.count <= maximumPayload else { return nil }
        let scanned = payload.withUnsafeBytes { bytes -> (EnvelopeHeader, Range<Int>)? in
            var reader = JSONByteReader(bytes: bytes)
            if let canonical = reader.scanCanonicalEnvelope() { return canonical }
            reader.i = 0
            return reader.scanEnvelope()
        }
        if let (header, body) = scanned {
            guard header.v == version else { return nil }
            return ScannedEnvelope(header: header, body: (payload.startIndex + body.lowerBound)..<(payload.startIndex + body.upperBound))
        }
        return decodeVersioned(EnvelopeHeader.self, from: payload).map { ScannedEnvelope(header: $0, body: nil) }
    }
}

/// Reading one JSON object's top-level keys (see ``Wire/scanEnvelope(_:)``).
extension JSONByteReader {
    /// The header and the body's byte range; nil when the payload is outside the fast path (which
    /// includes everything malformed): then `JSONDecoder` decides.
    mutating func scanEnvelope() -> (Wire.EnvelopeHeader, body: Range<Int>)? {
        var v: Int64?, epoch: Int64?, seq: Int64?, reliable: Bool?, type: String?, body: Range<Int>?
        let parsed = readObject { reader, key in
            switch EnvelopeKey(key) {
            case .v:
                guard v == nil, let value = reader.readInteger() else { return false }
                v = value
            case .epoch:
                guard epoch == nil, let value = reader.readInteger() else { return false }
                epoch = value
            case .seq:
                guard seq == nil, let value = reader.readInteger() else { return false }
                seq = value
            case .reliable:
                guard reliable == nil, let value = reader.readBool() else { return false }
                reliable = value
            case .type:
                guard type == nil, let value = reader.readPlainStringBytes() else { return false }
                type = String(decoding: value, as: UTF8.self)
            case .body:
                guard body == nil else { return false }
                let start = reader.i
                guard reader.skipValue() else { return false }
                body = start..<reader.i
            case .other:
                return reader.skipValue()
            }
            return true
        }
        skipWhitespace()
        guard parsed, i == bytes.count else { return nil }
        guard let v, let epoch, let seq, let reliable, let type, let body, let version = Int(exactly: v) else { return nil }
        return (Wire.EnvelopeHeader(v: version, type: type, epoch: epoch, seq: seq, reliable: reliable), body)
    }

    /// The envelope exactly as ``Wire/EnvelopeBytes`` writes it — compact, keys in sorted order — read by
    /// comparing its fixed parts and reading only the values, with the same readers as
    /// ``scanEnvelope()``, which it agrees with on everything it accepts; nil for anything else (the
    /// position is then undefined). Every envelope a GroupSync participant sends takes this path; the
    /// general reader's key-by-key loop cost ≈ 2,900 instructions per message.
    mutating func scanCanonicalEnvelope() -> (Wire.EnvelopeHeader, body: Range<Int>)? {
        guard matchLiteral(#"{"body":"#) else { return nil }
        skipWhitespace()  // (none in the canonical form; the range must still be the general reader's)
        let start = i
        guard skipValue() else { return nil }
        let body = start..<i
        guard matchLiteral(#","epoch":"#), let epoch = readInteger(),
              matchLiteral(#","reliable":"#), let reliable = readBool(),
              matchLiteral(#","seq":"#), let seq = readInteger(),
              matchLiteral(#","type":"#), let type = readPlainStringBytes(),
              matchLiteral(#","v":"#), let v = readInteger(), let version = Int(exactly: v),
              take(UInt8(ascii: "}")), isAtEnd else { return nil }
        let header = Wire.EnvelopeHeader(v: version, type: String(decoding: type, as: UTF8.self), epoch: epoch, seq: seq, reliable: reliable)
        return (header, body)
    }

    /// The bytes of an ASCII string without escapes; nil (leaving the position undefined) for anything else.
    mutating func readPlainStringBytes() -> UnsafeRawBufferPointer? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        let start = i
        while let byte = current {
            if byte == UInt8(ascii: "\"") {
                defer { i += 1 }
                return UnsafeRawBufferPointer(rebasing: bytes[start..<i])
            }
            if byte == UInt8(ascii: "\\") || byte < 0x20 || byte >= 0x80 { return nil }
            i += 1
        }
        return nil
    }

    /// The envelope's keys, recognised from their bytes (no `String` per key).
    private enum EnvelopeKey {
        case v, epoch, seq, reliable, type, body, other

        init(_ key: UnsafeRawBufferPointer) {
            func `is`(_ literal: StaticString) -> Bool { JSONByteReader.key(key, is: literal) }
            switch key.count {
            case 1 where `is`("v"): self = .v
            case 3 where `is`("seq"): self = .seq
            case 4 where `is`("type"): self = .type
            case 4 where `is`("body"): self = .body
            case 5 where `is`("epoch"): self = .epoch
            case 8 where `is`("reliable"): self = .reliable
            default: self = .other
            }
        }
    }

    /// Skips one JSON value, checking its structure (brackets, keys, strings, escapes, literals) but
    /// numbers only loosely: a body is validated when the app's type is decoded from it. Gives up (false)
    /// below 64 levels of nesting — JSONDecoder refuses deep nesting, and the caller's fallback is
    /// JSONDecoder — and on a `\u` escape without four hex digits, which JSONDecoder refuses too.
    mutating func skipValue() -> Bool {
        // The open containers as a stack of bits, innermost lowest, 1 for an object (at most 64: no
        // array to allocate, which cost ≈ 250 instructions for every body holding an object).
        var kinds: UInt64 = 0, depth = 0
        while true {
            skipWhitespace()
            guard let byte = current else { return false }
            switch byte {
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                guard depth < 64 else { return false }
                i += 1
                skipWhitespace()
                let isObject = byte == UInt8(ascii: "{")
                if take(isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) { break }  // empty: a whole value
                kinds = kinds << 1 | (isObject ? 1 : 0)
                depth += 1
                if isObject { guard skipKey() else { return false } }
                continue  // its first element
            case UInt8(ascii: "\""):
                guard skipString() else { return false }
            case UInt8(ascii: "t"): guard matchLiteral("true") else { return false }
            case UInt8(ascii: "f"): guard matchLiteral("false") else { return false }
            case UInt8(ascii: "n"): guard matchLiteral("null") else { return false }
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                i += 1
                while let next = current, (next >= UInt8(ascii: "0") && next <= UInt8(ascii: "9"))
                    || next == UInt8(ascii: ".") || next == UInt8(ascii: "e") || next == UInt8(ascii: "E")
                    || next == UInt8(ascii: "+") || next == UInt8(ascii: "-") { i += 1 }
            default:
                return false
            }
            // A value is complete: close the containers it completes, or go on to the next element.
            while depth > 0 {
                let isObject = kinds & 1 == 1
                skipWhitespace()
                if take(isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) {
                    kinds >>= 1
                    depth -= 1
                    continue
                }
                guard take(UInt8(ascii: ",")) else { return false }
                if isObject { guard skipKey() else { return false } }
                break
            }
            if depth == 0 { return true }
        }
    }

    /// `"key" :` inside an object.
    private mutating func skipKey() -> Bool {
        skipWhitespace()
        guard skipString() else { return false }
        skipWhitespace()
        return take(UInt8(ascii: ":"))
    }

    private mutating func skipString() -> Bool {
        guard take(UInt8(ascii: "\"")) else { return false }
        while let byte = current {
            i += 1
            if byte == UInt8(ascii: "\"") { return true }
            if byte == UInt8(ascii: "\\") {
                guard let escaped = current else { return false }
                i += 1
                if escaped == UInt8(ascii: "u") {
                    for _ in 0..<4 {
                        guard let hex = current, (hex >= UInt8(ascii: "0") && hex <= UInt8(ascii: "9"))
                            || (hex | 0x20 >= UInt8(ascii: "a") && hex | 0x20 <= UInt8(ascii: "f")) else { return false }
                        i += 1
                    }
                }
            } else if byte < 0x20 {
                return false
            }
        }
        return false
    }
}
