/// How one participant numbers its messages in one session: reliable ones in their streams, through the
/// outbox that can re-send them; unreliable ones with a counter of their own. Held while a message is
/// numbered *and* handed to the connection, so that each stream's wire order is its `seq` order. Kept
/// for the life of the coordinator, across leaving and joining the session again, so that numbers never
/// restart within a connection epoch.
struct MessageNumbering {
    var outbox: OutboxStateMachine
    private var unreliable: Int64 = 0

    init(outbox: OutboxStateMachine.Configuration = .init()) {
        self.outbox = OutboxStateMachine(configuration: outbox)
    }

    mutating func nextUnreliable() -> Int64 {
        unreliable += 1
        return unreliable
    }
}
