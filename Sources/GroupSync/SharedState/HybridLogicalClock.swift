/// A hybrid logical clock timestamp (Kulkarni et al., 2014): wall-clock milliseconds, a logical counter
/// for events within the same millisecond or behind a faster clock, and the writer's participant ID as the
/// final tie-break. Ordered lexicographically by (`time`, `counter`, `participant`), so every participant
/// orders any two timestamps the same way. On the wire: `{"t": 1733130000000, "c": 0, "p": "alice"}`.
public struct HLCTimestamp: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    /// Milliseconds since 1970 (the largest physical time seen, not necessarily this machine's).
    public var time: Int64
    /// Logical counter within `time`.
    public var counter: Int64
    /// The participant that made the timestamp.
    public var participant: String

    public init(time: Int64, counter: Int64, participant: String) {
        self.time = time
        self.counter = counter
        self.participant = participant
    }

    enum CodingKeys: String, CodingKey {
        case time = "t", counter = "c", participant = "p"
    }

    public static func < (lhs: HLCTimestamp, rhs: HLCTimestamp) -> Bool {
        (lhs.time, lhs.counter, lhs.participant) < (rhs.time, rhs.counter, rhs.participant)
    }

    public var description: String { "\(time).\(counter)@\(participant)" }

    /// How far ahead of the local clock a received timestamp may be (a day): beyond that it is forged or
    /// broken, and adopting it would drag everyone's clock there.
    public static let maximumSkew: Int64 = 86_400_000

    /// Whether a received timestamp can be merged: non-negative, a counter below 2³², and no more than
    /// ``maximumSkew`` ahead of `now`. Receivers reject (and count) anything else before looking at it.
    public func isPlausible(now: Int64) -> Bool {
        time >= 0 && counter >= 0 && counter < 1 << 32 && time <= now &+ HLCTimestamp.maximumSkew
    }
}

/// The clock state of one participant. Value type: the owner keeps it under its own lock.
///
/// `tick` stamps a local event; `observe` merges a timestamp received from someone else, so that the
/// next local timestamp is larger than everything seen. A participant whose wall clock runs ahead
/// therefore pulls everyone's clocks forward with its writes instead of winning forever, and one whose
/// clock runs behind still produces timestamps newer than what it has seen.
package struct HybridLogicalClock: Sendable, Hashable {
    package let participant: String
    package private(set) var latest: HLCTimestamp

    package init(participant: String) {
        self.participant = participant
        self.latest = HLCTimestamp(time: 0, counter: 0, participant: participant)
    }

    /// The largest counter a timestamp may carry (PROTOCOL.md, Ranges): one more moves to the next ms.
    static let maximumCounter: Int64 = (1 << 32) - 1

    /// A timestamp for a local event at wall-clock time `now` (milliseconds).
    package mutating func tick(now: Int64) -> HLCTimestamp {
        let (time, counter) = now > latest.time ? (now, 0) : (latest.time, latest.counter &+ 1)
        set(time, counter)
        return latest
    }

    /// Merges a received timestamp (`now` is the local wall-clock time in milliseconds). Callers merge
    /// only timestamps that are ``HLCTimestamp/isPlausible(now:)``; the arithmetic wraps rather than traps.
    package mutating func observe(_ remote: HLCTimestamp, now: Int64) {
        let time = max(latest.time, remote.time, now)
        let counter: Int64 =
            switch (time == latest.time, time == remote.time) {
            case (true, true): max(latest.counter, remote.counter) &+ 1
            case (true, false): latest.counter &+ 1
            case (false, true): remote.counter &+ 1
            case (false, false): 0
            }
        set(time, counter)
    }

    /// `latest` = (`time`, `counter`), or the next ms with counter 0 when the counter would leave its range
    /// (a received counter at its maximum would otherwise make every later stamp one that readers reject).
    private mutating func set(_ time: Int64, _ counter: Int64) {
        latest =
            counter > Self.maximumCounter
            ? HLCTimestamp(time: time &+ 1, counter: 0, participant: participant)
            : HLCTimestamp(time: time, counter: counter, participant: participant)
    }
}

extension HLCTimestamp: Wire.Record {
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        self.init(
            time: try fields.int(CodingKeys.time, in: Wire.Bounds.time),
            counter: try fields.int(CodingKeys.counter, in: Wire.Bounds.counter),
            participant: try fields.string(CodingKeys.participant))
    }
}
