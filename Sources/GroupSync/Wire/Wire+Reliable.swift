/// The bodies of the control messages of end-to-end reliable delivery (docs/PROTOCOL.md, "Reliable
/// delivery"): `$resend`, `$skip` and `$position` are the ``Reliable`` values, read here by the decoding rules.
extension Wire {
    typealias Resend = Reliable.ResendRequest
    typealias Skip = Reliable.Skip
    typealias Position = Reliable.Position
}

extension Reliable.ResendRequest: Wire.Record {
    init(fields: Wire.Fields) throws(Wire.Rejection) {
        let stream = try fields.enum("stream", Reliable.StreamKind.self)
        self.init(
            stream: stream, from: try fields.int("from", in: Wire.Bounds.position),
            to: try fields.optionalInt("to", in: Wire.Bounds.position))
    }
}

extension Reliable.Skip: Wire.Record {
    init(fields: Wire.Fields) throws(Wire.Rejection) {
        let stream = try fields.enum("stream", Reliable.StreamKind.self)
        let through = try fields.int("through", in: Wire.Bounds.position)
        guard case let .array(ranges) = try fields.value("lost") else { throw .wrongShape }
        var lost: [ClosedRange<Int64>] = []
        for range in ranges {
            guard case let .array(bounds) = range, bounds.count == 2 else { throw .wrongShape }
            let first = try Wire.Fields.integer(bounds[0], in: Wire.Bounds.position)
            let last = try Wire.Fields.integer(bounds[1], in: Wire.Bounds.position)
            guard first >= 1, first <= last, last <= through else { throw .wrongShape }
            lost.append(first...last)
        }
        self.init(stream: stream, through: through, lost: lost)
    }
}

extension Reliable.Position: Wire.Record {
    init(fields: Wire.Fields) throws(Wire.Rejection) {
        let all = try fields.int("all", in: Wire.Bounds.position)
        guard case let .object(entries) = try fields.value("direct") else { throw .wrongShape }
        var direct: [String: Int64] = [:]
        for (recipient, value) in entries { direct[recipient] = try Wire.Fields.integer(value, in: Wire.Bounds.position) }
        self.init(all: all, direct: direct)
    }
}
