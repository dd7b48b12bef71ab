/// The values of end-to-end reliable delivery that travel on the wire: which stream a reliable message
/// belongs to, and the `$resend`, `$skip` and `$position` control messages, whose bodies they are
/// (read below by the decoding rules). ``OutboxStateMachine`` (sending side) and ``StreamReceiver``
/// (receiving side) exchange them.
///
/// A sender's reliable messages in a session form streams, one numbering per stream and connection epoch
/// of the sender: `seq` 1, 2, 3… Unreliable and control messages are in no stream.
enum Reliable {
    /// The largest seq, `through` or position taken from the wire; beyond it a number is implausible (no
    /// stream gets near it), and below it arithmetic on seqs cannot overflow.
    static let maximumSeq = Int64.max / 2

    /// The `stream` field: one of a sender's streams as a receiver sees it.
    enum StreamKind: String, Hashable, Sendable, CaseIterable, Encodable {
        /// The sender's broadcasts.
        case all
        /// The sender's direct messages to this receiver.
        case direct
    }

    /// One of a sender's streams as the sender sees it: its broadcasts, or its direct messages to one
    /// recipient (a message to several recipients is one message in each recipient's stream).
    enum Stream: Hashable, Sendable {
        case all
        case direct(to: String)

        var kind: StreamKind {
            switch self {
            case .all: .all
            case .direct: .direct
            }
        }
    }

    /// `$resend`, from a receiver to a sender: re-send what I miss of `stream` in `from...to`.
    struct ResendRequest: Hashable, Sendable, Encodable {
        var stream: StreamKind
        /// The first seq wanted; 0: from wherever the sender owes the requester.
        var from: Int64
        /// The last seq wanted; nil: through the sender's latest.
        var to: Int64?
    }

    /// `$skip`, from a sender to a receiver, in answer to a `$resend`: a fact about one of the sender's
    /// streams as owed to that receiver, true whatever the request was.
    ///
    /// No seq up to `through` will be re-sent to the receiver: the ranges in `lost` were owed to it but have
    /// left the outbox (the receiver reports them as gap events), the others were never owed (sent before
    /// the sender saw the receiver as a member). The receiver may move its cursor to `through`. How it
    /// answers a request: ``OutboxStateMachine/answer(_:from:)``.
    struct Skip: Hashable, Sendable, Encodable {
        var stream: StreamKind
        var through: Int64
        /// Ascending, disjoint, all at most `through`; on the wire each is the pair `[first, last]`.
        var lost: [ClosedRange<Int64>]
    }

    /// `$position`: a sender's latest seq per stream in its current epoch (sent after each reconnect of the
    /// sender, and in answer to a request that does not fit its streams). A stream without an entry in
    /// `direct` is at 0.
    struct Position: Hashable, Sendable, Encodable {
        var all: Int64
        /// Recipient → latest seq of the sender's direct stream to it.
        var direct: [String: Int64]
    }
}

/// The bodies of `$resend`, `$skip` and `$position` by their names on the wire (docs/PROTOCOL.md,
/// "Reliable delivery").
extension Wire {
    typealias Resend = Reliable.ResendRequest
    typealias Skip = Reliable.Skip
    typealias Position = Reliable.Position
}

extension Reliable.ResendRequest: Wire.Record {
    init(fields: Wire.Fields) throws(Wire.Rejection) {
        self.init(
            stream: try fields.enum(CodingKeys.stream, Reliable.StreamKind.self),
            from: try fields.int(CodingKeys.from, in: Wire.Bounds.position),
            to: try fields.optionalInt(CodingKeys.to, in: Wire.Bounds.position))
    }
}

extension Reliable.Skip: Wire.Record {
    init(fields: Wire.Fields) throws(Wire.Rejection) {
        let stream = try fields.enum(CodingKeys.stream, Reliable.StreamKind.self)
        let through = try fields.int(CodingKeys.through, in: Wire.Bounds.position)
        guard case let .array(ranges) = try fields.value(CodingKeys.lost) else { throw .wrongShape }
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
        let all = try fields.int(CodingKeys.all, in: Wire.Bounds.position)
        guard case let .object(entries) = try fields.value(CodingKeys.direct) else { throw .wrongShape }
        var direct: [String: Int64] = [:]
        for (recipient, value) in entries { direct[recipient] = try Wire.Fields.integer(value, in: Wire.Bounds.position) }
        self.init(all: all, direct: direct)
    }
}
