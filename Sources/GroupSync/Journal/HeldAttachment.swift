import Foundation

/// An attachment whose bytes this participant holds where nothing is retained, to serve them: the
/// record it added or loaded it by (the layout it serves: a record of the same digest may claim
/// another) and where the bytes are. Chunks are read as they are served and checked against their
/// digests first: the app may change a file it was given, or one it added (mapped into memory). In a
/// private session the bytes held are the content; each chunk is sealed as it goes out, and the check
/// keeps changed bytes from ever being sealed under a chunk's nonce.
struct HeldAttachment: Sendable, Hashable {
    enum Bytes: Sendable, Hashable {
        /// What the app added, or loaded into memory: `record.size` bytes.
        case memory(Data)
        /// A file loaded to disk, read chunk by chunk.
        case file(URL)
    }

    let record: Wire.JournalRecord
    let bytes: Bytes
    /// Seals the chunks of a private attachment (nil: they go as they are).
    let cipher: ChunkCipher?

    /// Nil unless bytes in memory are as long as the record says.
    init?(record: Wire.JournalRecord, bytes: Bytes, cipher: ChunkCipher? = nil) {
        if case let .memory(data) = bytes, data.count != record.size { return nil }
        self.record = record
        self.bytes = bytes
        self.cipher = cipher
    }

    var digest: String { record.id }

    /// Chunk `index` (within the record) as it goes on the wire — sealed in a private session —, verified
    /// against its digest; nil if it cannot be read or no longer matches.
    func wireChunk(_ index: Int) -> Data? { read(index)?.wire }

    /// Chunk `index`'s content, for a load of what we hold; checked as ``wireChunk(_:)``.
    func contentChunk(_ index: Int) -> Data? { read(index)?.content }

    private func read(_ index: Int) -> (content: Data, wire: Data)? {
        guard record.chunks.indices.contains(index) else { return nil }
        let chunkSize = Int(record.chunkSize)
        let start = index * chunkSize
        let length = min(chunkSize, Int(record.size) - start)
        let content: Data
        switch bytes {
        case let .memory(data):
            content = data[(data.startIndex + start)..<(data.startIndex + start + length)]
        case let .file(url):
            guard let handle = try? FileHandle(forReadingFrom: url) else { return nil }
            defer { try? handle.close() }
            guard (try? handle.seek(toOffset: UInt64(start))) != nil, let read = try? handle.read(upToCount: length), read.count == length
            else { return nil }
            content = read
        }
        let wire = cipher.map { $0.seal(content, index: index) } ?? content
        return SHA256.hex(wire) == record.chunks[index] ? (content, wire) : nil
    }
}
