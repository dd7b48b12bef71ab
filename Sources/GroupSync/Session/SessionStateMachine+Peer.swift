extension SessionStateMachine {
    /// One participant as a session knows it: the connection epoch of its member record (it joined) and
    /// of its live connection (its presence). It is active when both are there and the same. A session
    /// keeps one per participant of its group: 16 bytes each.
    struct Peer: Equatable {
        /// The epoch it joined with; nil while it is not a member.
        @PackedOptional<Int64> var joined: Int64? = nil
        /// The epoch of its live connection; nil while it is offline.
        @PackedOptional<Int64> var online: Int64? = nil

        var isActive: Bool { joined != nil && joined == online }

        var isEmpty: Bool { joined == nil && online == nil }
    }
}
