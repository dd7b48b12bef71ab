/// How far a load is: verified bytes, in order, out of the whole. A load reports it once at the start,
/// then after every chunk it verified or rejected, so a consumer that shows it sees it move.
public struct JournalLoadProgress: Sendable, Hashable, CustomStringConvertible {
    /// Bytes received, verified and handed over (to memory or to the file), from the start.
    public var completedBytes: Int
    /// The attachment's size.
    public var totalBytes: Int
    /// Chunks that arrived corrupted or forged (their SHA-256 did not match the owner's record) and were
    /// fetched again.
    public var rejectedChunks: Int

    public init(completedBytes: Int, totalBytes: Int, rejectedChunks: Int = 0) {
        self.completedBytes = completedBytes
        self.totalBytes = totalBytes
        self.rejectedChunks = rejectedChunks
    }

    /// From 0 to 1 (1 for an empty attachment).
    public var fractionCompleted: Double { totalBytes == 0 ? 1 : Double(completedBytes) / Double(totalBytes) }

    public var description: String { "\(completedBytes)/\(totalBytes) bytes" }
}
