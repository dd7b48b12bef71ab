import Foundation

/// An attachment whose bytes this participant holds where nothing is retained, to serve them: the
/// record it added or loaded it by (the layout it serves: a record of the same digest may claim
/// another) and where the bytes are. Chunks are read as they are served, and a file's are checked
/// against their digests first: the app may change or truncate a file it was given.
struct HeldAttachment: Sendable, Hashable {
    enum Bytes: Sendable, Hashable {
        /// What the app added, or loaded into memory: `record.size` bytes.
        case memory(Data)
        /// A file loaded to disk, read chunk by chunk.
        case file(URL)
    }

    let record: Wire.JournalRecord
    let bytes: Bytes

    /// Nil unless bytes in memory are as long as the record says.
    init?(record: Wire.JournalRecord, bytes: Bytes) {
        if case let .memory(data) = bytes, data.count != record.size { return nil }
        self.record = record
        self.bytes = bytes
    }

    var digest: String { record.id }

    /// Chunk `index` (within the record), verified against its digest if read from a file; nil if it
    /// cannot be read or no longer matches.
    func chunk(_ index: Int) -> Data? {
        guard record.chunks.indices.contains(index) else { return nil }
        let chunkSize = Int(record.chunkSize)
        let start = index * chunkSize
        let length = min(chunkSize, Int(record.size) - start)
        switch bytes {
        case let .memory(data):
            return data[(data.startIndex + start)..<(data.startIndex + start + length)]
        case let .file(url):
            guard let handle = try? FileHandle(forReadingFrom: url) else { return nil }
            defer { try? handle.close() }
            guard (try? handle.seek(toOffset: UInt64(start))) != nil, let data = try? handle.read(upToCount: length),
                data.count == length, SHA256.hex(data) == record.chunks[index]
            else { return nil }
            return data
        }
    }
}
