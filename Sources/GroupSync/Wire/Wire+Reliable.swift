/// The bodies of the control messages of end-to-end reliable delivery (docs/PROTOCOL.md, "Reliable
/// delivery"): `$resend`, `$skip` and `$position`, as records of the ``Reliable`` values.
extension Wire {
    /// `$resend`: re-send what I miss of your `stream` in `from...to`.
    struct Resend: Encodable, Sendable, Hashable {
        var stream: Reliable.StreamKind
        /// 0: from wherever you owe me.
        var from: Int64
        /// Absent: through your latest.
        var to: Int64?

        init(_ request: Reliable.ResendRequest) {
            stream = request.stream
            from = request.from
            to = request.to
        }

        var request: Reliable.ResendRequest { Reliable.ResendRequest(stream: stream, from: from, to: to) }
    }

    /// `$skip`: nothing of `stream` up to `through` will be re-sent to you; the `lost` ranges were owed.
    struct Skip: Encodable, Sendable, Hashable {
        var stream: Reliable.StreamKind
        var through: Int64
        /// Pairs `[first, last]`, ascending.
        var lost: [[Int64]]

        init(_ skip: Reliable.Skip) {
            stream = skip.stream
            through = skip.through
            lost = skip.lost.map { [$0.lowerBound, $0.upperBound] }
        }

        var skip: Reliable.Skip { Reliable.Skip(stream: stream, through: through, lost: lost.map { $0[0]...$0[1] }) }
    }

    /// `$position`: my latest seq per stream — broadcasts, and direct messages per recipient.
    struct Position: Encodable, Sendable, Hashable {
        var all: Int64
        var direct: [String: Int64]

        init(_ position: Reliable.Position) {
            all = position.all
            direct = position.direct
        }

        var position: Reliable.Position { Reliable.Position(all: all, direct: direct) }
    }
}

extension Wire.Resend: Wire.Record {
    init(fields: Wire.Fields) throws(Wire.Rejection) {
        stream = try fields.enum("stream", Reliable.StreamKind.self)
        from = try fields.int("from", in: Wire.Bounds.position)
        to = try fields.optionalInt("to", in: Wire.Bounds.position)
    }
}

extension Wire.Skip: Wire.Record {
    init(fields: Wire.Fields) throws(Wire.Rejection) {
        stream = try fields.enum("stream", Reliable.StreamKind.self)
        through = try fields.int("through", in: Wire.Bounds.position)
        guard case let .array(ranges) = try fields.value("lost") else { throw .wrongShape }
        var lost: [[Int64]] = []
        for range in ranges {
            guard case let .array(bounds) = range, bounds.count == 2 else { throw .wrongShape }
            var pair: [Int64] = []
            for bound in bounds { pair.append(try Wire.Fields.integer(bound, in: Wire.Bounds.position)) }
            guard pair[0] >= 1, pair[0] <= pair[1], pair[1] <= through else { throw .wrongShape }
            lost.append(pair)
        }
        self.lost = lost
    }
}

extension Wire.Position: Wire.Record {
    init(fields: Wire.Fields) throws(Wire.Rejection) {
        all = try fields.int("all", in: Wire.Bounds.position)
        guard case let .object(entries) = try fields.value("direct") else { throw .wrongShape }
        var direct: [String: Int64] = [:]
        for (recipient, value) in entries { direct[recipient] = try Wire.Fields.integer(value, in: Wire.Bounds.position) }
        self.direct = direct
    }
}
