/// Playback's records (docs/PROTOCOL.md, "Playback"): the group clock's control messages, and the values
/// of two state records (objects without `v`), refused outside the ranges "Playback" states.
extension Wire {
    /// `$ping` (QoS 0, to the participant that serves the group clock): `t0` is when it was sent, on the
    /// sender's clock, in milliseconds since 1970 with a fraction.
    struct Ping: Encodable, Sendable, Hashable {
        var t0: Double
    }

    /// `$pong` (QoS 0, back to the pinger): its `t0`, and the group time when the ping arrived (`t1`) and
    /// when this answer left (`t2`), in milliseconds since 1970 with a fraction.
    struct Pong: Encodable, Sendable, Hashable {
        var t0: Double
        var t1: Double
        var t2: Double
    }

    /// The value of the `groupsync.clock` state record: who serves the group clock (a participant claims
    /// it only for itself: ``matches(writer:)``), and which clock it is (`base`).
    struct Clock: Encodable, Equatable, Sendable {
        var reference: String
        var base: String

        func matches(writer: String) -> Bool { reference == writer }
    }

    /// The value of the `groupsync.playback` state record: the shared timeline (``PlaybackTimeline``).
    struct Timeline: Encodable, Equatable, Sendable {
        var item: String?
        var position: Double
        var rate: Double
        /// Group time of the anchor: milliseconds since 1970, with a fraction.
        var at: Double
        var intent: Double
        var waiting: [String]
        var base: String
    }
}

extension Wire.Ping: Wire.Record {
    init(fields: Wire.Fields) throws(Wire.Rejection) { t0 = try fields.instant(CodingKeys.t0) }
}

extension Wire.Pong: Wire.Record {
    init(fields: Wire.Fields) throws(Wire.Rejection) {
        t0 = try fields.instant(CodingKeys.t0)
        t1 = try fields.instant(CodingKeys.t1)
        t2 = try fields.instant(CodingKeys.t2)
        guard t2 >= t1 else { throw .wrongShape }
    }
}

extension Wire.Clock: Wire.Record {
    /// `reference` an identifier, `base` 1 to 256 bytes.
    init(fields: Wire.Fields) throws(Wire.Rejection) {
        self.init(reference: try fields.string(CodingKeys.reference), base: try fields.string(CodingKeys.base))
        guard Identifier.isValid(reference), Wire.Clock.isBase(base) else { throw .wrongShape }
    }

    static func isBase(_ base: String) -> Bool { !base.isEmpty && base.utf8.count <= 256 }
}

extension Wire.Timeline: Wire.Record {
    /// As "The timeline record" says: `item` absent or at most 1,024 bytes, `position` ≥ 0, rates within
    /// ±64, `at` an instant, at most 1,000 identifiers waiting (only at `rate` 0), a clock's `base`.
    init(fields: Wire.Fields) throws(Wire.Rejection) {
        let rates = -PlaybackTimeline.maximumRate...PlaybackTimeline.maximumRate
        self.init(
            item: try fields.optionalString(CodingKeys.item),
            position: try fields.number(CodingKeys.position, in: 0...Double.greatestFiniteMagnitude),
            rate: try fields.number(CodingKeys.rate, in: rates), at: try fields.instant(CodingKeys.at),
            intent: try fields.number(CodingKeys.intent, in: rates),
            waiting: try fields.strings(CodingKeys.waiting), base: try fields.string(CodingKeys.base))
        guard (item?.utf8.count ?? 0) <= PlaybackTimeline.maximumItemLength, waiting.count <= PlaybackTimeline.maximumWaiting,
            waiting.allSatisfy({ Identifier.isValid($0) }), waiting.isEmpty || rate == 0, Wire.Clock.isBase(base)
        else { throw .wrongShape }
    }
}

extension Wire.Fields {
    /// A number (an integer or with a fraction) within `bounds`.
    func number(_ key: some CodingKey, in bounds: ClosedRange<Double>) throws(Wire.Rejection) -> Double {
        switch try value(key) {
        case let .int(value) where bounds.contains(Double(value)): return Double(value)
        case let .double(value) where bounds.contains(value): return value
        case .int, .double: throw .outOfRange
        default: throw .wrongShape
        }
    }

    /// A finite number of milliseconds since 1970 (an integer or with a fraction) within
    /// ±``GroupInstant/maximumMilliseconds`` (about 285 years: what nanoseconds in 64 bits can hold).
    func instant(_ key: some CodingKey) throws(Wire.Rejection) -> Double {
        try number(key, in: -GroupInstant.maximumMilliseconds...GroupInstant.maximumMilliseconds)
    }
}
