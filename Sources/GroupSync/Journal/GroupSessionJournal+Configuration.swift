extension GroupSessionJournal {
    /// How a participant adds and loads attachments, and the limits it holds the session's journal to.
    public struct Configuration: Sendable {
        /// Bytes per chunk of what this participant adds. Chunks are single MQTT messages: a chunk never
        /// exceeds the broker's Maximum Packet Size (less room for the topic), whatever this says.
        /// Default: 64 KiB, which fits the 128 KB packets of the most restrictive brokers.
        public var chunkSize: Int
        /// Chunks a load asks for at once, and so at most holds in memory: memory is bounded by
        /// `window × chunkSize`, not by the attachment's size. Default: 16 (1 MiB in flight).
        public var window: Int
        /// Largest attachment this participant adds or loads. Default: 100 MiB.
        public var maximumAttachmentSize: Int
        /// Largest total size of the session's attachments (everyone's) that this participant adds to.
        /// They are retained on the broker while the session lives. Default: 512 MiB.
        public var maximumSessionSize: Int
        /// Most attachments in the session (everyone's) that this participant adds to. Default: 256.
        public var maximumAttachmentCount: Int
        /// How long a load may go without receiving a chunk before it fails with
        /// ``GroupSyncError/attachmentUnavailable(digest:chunk:)``: long enough to ride out a broker
        /// restart and a reconnect. Default: 30 s.
        public var stallTimeout: Duration

        public init(
            chunkSize: Int = 64 << 10, window: Int = 16, maximumAttachmentSize: Int = 100 << 20,
            maximumSessionSize: Int = 512 << 20, maximumAttachmentCount: Int = 256, stallTimeout: Duration = .seconds(30)
        ) {
            self.chunkSize = chunkSize
            self.window = window
            self.maximumAttachmentSize = maximumAttachmentSize
            self.maximumSessionSize = maximumSessionSize
            self.maximumAttachmentCount = maximumAttachmentCount
            self.stallTimeout = stallTimeout
        }
    }
}
