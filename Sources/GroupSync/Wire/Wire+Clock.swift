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
}

extension Wire.Ping: Wire.Record {
    init(fields: Wire.Fields) throws(Wire.Rejection) {
        t0 = try fields.instant("t0")
    }
}

extension Wire.Pong: Wire.Record {
    init(fields: Wire.Fields) throws(Wire.Rejection) {
        t0 = try fields.instant("t0")
        t1 = try fields.instant("t1")
        t2 = try fields.instant("t2")
        guard t2 >= t1 else { throw .wrongShape }
    }
}

extension Wire.Fields {
    /// A finite number of milliseconds since 1970 (an integer or with a fraction) within
    /// ±``GroupInstant/maximumMilliseconds`` (about 285 years: what nanoseconds in 64 bits can hold).
    func instant(_ key: String) throws(Wire.Rejection) -> Double {
        let number: Double
        switch try value(key) {
        case let .int(value): number = Double(value)
        case let .double(value): number = value
        default: throw .wrongShape
        }
        guard number.isFinite, abs(number) <= GroupInstant.maximumMilliseconds else { throw .outOfRange }
        return number
    }
}
