import Foundation

/// Reads newline-terminated lines from a file descriptor on a thread of its own (blocking reads never
/// occupy the concurrency pool). A line longer than the limit is reported by its length and dropped as
/// it streams in: it is never held in memory.
enum BridgeLineReader {
    enum Line: Sendable {
        /// A line, without its newline.
        case line(Data)
        /// A line of this many bytes (without its newline) that exceeded the limit.
        case tooLong(Int)
    }

    /// The lines of `descriptor` until end of file (or a read error, treated as end of file).
    static func lines(of descriptor: Int32 = STDIN_FILENO, limit: Int) -> AsyncStream<Line> {
        let (stream, continuation) = AsyncStream.makeStream(of: Line.self)
        let thread = Thread {
            pump(descriptor, limit: limit, into: continuation)
            continuation.finish()
        }
        thread.name = "groupsync-bridge-stdin"
        thread.start()
        return stream
    }

    private static func pump(_ descriptor: Int32, limit: Int, into continuation: AsyncStream<Line>.Continuation) {
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        var pending: [UInt8] = []
        // The length so far of an overlong line being skipped.
        var skipping: Int?
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            var start = 0
            while start < count {
                let end = chunk[start..<count].firstIndex(of: UInt8(ascii: "\n"))
                let segment = chunk[start..<(end ?? count)]
                if let skipped = skipping {
                    skipping = skipped + segment.count
                } else {
                    pending.append(contentsOf: segment)
                    if pending.count > limit {
                        skipping = pending.count
                        pending = []
                    }
                }
                guard let end else { break }
                if let skipped = skipping {
                    continuation.yield(.tooLong(skipped))
                    skipping = nil
                } else {
                    continuation.yield(.line(Data(pending)))
                    pending.removeAll(keepingCapacity: true)
                }
                start = end + 1
            }
        }
        // A last line without a newline still counts.
        if let skipped = skipping {
            continuation.yield(.tooLong(skipped))
        } else if !pending.isEmpty {
            continuation.yield(.line(Data(pending)))
        }
    }
}
