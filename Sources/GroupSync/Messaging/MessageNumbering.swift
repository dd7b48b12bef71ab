/// How one participant numbers its messages in one session: reliable ones in their streams, through the
/// outbox that can re-send them; unreliable ones with a counter of their own. Held while a message is
/// numbered *and* handed to the connection, so that each stream's wire order is its `seq` order. Kept
/// for the life of the coordinator, across leaving and joining the session again, so that numbers never
/// restart within a connection epoch.
///
/// It also says when to state the streams' position: a receiver whose broker dropped the tail of a burst
/// (a queue overflow, with the receiver still connected) sees no later message that would show the gap,
/// so after each burst of reliable messages the sender states its position 1, 3, 9 and 27 `interval`s
/// after the last message — the later ones for a receiver stalled through the first ones, whose queue
/// dropped them too — and then nothing until the next one.
struct MessageNumbering {
    var outbox: OutboxStateMachine
    private var unreliable: Int64 = 0
    /// How long after the last reliable message the position is first stated.
    let positionInterval: Duration
    /// When the position is stated next, ascending; empty while nothing was sent since it was last stated.
    private var positionDue: [ContinuousClock.Instant] = []

    init(outbox: OutboxStateMachine.Configuration = .init(), positionInterval: Duration = .milliseconds(2_500)) {
        self.outbox = OutboxStateMachine(configuration: outbox)
        self.positionInterval = positionInterval
    }

    /// A reliable message was numbered at `now`: the position is stated after the quiet spell that follows.
    /// Returns when it is due first.
    mutating func numberedReliable(at now: ContinuousClock.Instant) -> ContinuousClock.Instant {
        positionDue = MessageNumbering.positionSchedule.map { now + positionInterval * $0 }
        return positionDue[0]
    }

    /// Whether the position is due at `now` (then it is not due again until its next time).
    mutating func isPositionDue(at now: ContinuousClock.Instant) -> Bool {
        guard let first = positionDue.first, first <= now else { return false }
        positionDue.removeAll { $0 <= now }
        return true
    }

    /// When the position is due next; nil while nothing was sent since it was last stated.
    var nextPositionDue: ContinuousClock.Instant? { positionDue.first }

    /// When the position is stated after the last reliable message, in intervals.
    static let positionSchedule = [1, 3, 9, 27]

    mutating func nextUnreliable() -> Int64 {
        unreliable += 1
        return unreliable
    }
}
