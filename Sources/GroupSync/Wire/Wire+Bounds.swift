/// The range of every integer field of the protocol (docs/PROTOCOL.md, "Ranges"). Readers check each
/// number against its range where they read it (`out-of-range` otherwise), so that no arithmetic on a
/// received number can overflow: the largest, a time plus a day or a `ttl` in milliseconds, stays far
/// below 2⁶³.
extension Wire {
    enum Bounds {
        /// Milliseconds since 1970 — epochs, `createdAt`, a clock's `t`: up to 9×10¹² (the year 2255).
        static let time: ClosedRange<Int64> = 0...9_000_000_000_000
        /// A clock's logical counter: below 2³².
        static let counter: ClosedRange<Int64> = 0...4_294_967_295
        /// A session's `ttl` in seconds: what an MQTT 5 Message Expiry Interval can carry.
        static let ttl: ClosedRange<Int64> = 1...4_294_967_295
        /// A heartbeat `interval` in ms: up to half of MQTT's longest keepalive (65,535 s).
        static let interval: ClosedRange<Int64> = 1...32_767_500
        /// A message's `seq`: 1 up to 2⁶² − 1.
        static let seq: ClosedRange<Int64> = 1...Reliable.maximumSeq
        /// A position in a stream — `$resend`'s `from` and `to`, `$skip`'s `through` and `lost`,
        /// `$position`'s counts: 0 up to 2⁶² − 1.
        static let position: ClosedRange<Int64> = 0...Reliable.maximumSeq
        /// An attachment's `size` in bytes: up to 2⁵³.
        static let size: ClosedRange<Int64> = 0...(1 << 53)
        /// An attachment's `chunkSize` in bytes: a chunk fits one MQTT packet (at most 268,435,455 bytes).
        static let chunkSize: ClosedRange<Int64> = 1...268_435_455
        /// How many chunks one `$chunks` asks for: at most a load's window, and never above 65,536.
        static let chunkRequest: ClosedRange<Int64> = 1...65_536
    }
}
