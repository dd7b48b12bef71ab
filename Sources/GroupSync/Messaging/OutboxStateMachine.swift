import Foundation

/// The sending side of reliable delivery in one session, for the sender's connection epoch: numbers each
/// reliable message in its stream, keeps the newest envelopes in a bounded outbox, and answers `$resend`
/// from it. A value type without side effects: the session publishes what it returns.
///
/// - Numbering: each ``Reliable/Stream`` counts 1, 2, 3…; ``append(to:encoding:)`` assigns the seq and
///   keeps the envelope made with it, so numbering and outbox always agree.
/// - Bounds: beyond ``Configuration/maximumCount`` entries or ``Configuration/maximumBytes`` payload
///   bytes, the oldest entries leave first, across all the session's streams. So the entries a stream
///   still has are always its newest ones, a contiguous run of seqs up to its latest.
/// - Marks: a member is owed the broadcasts after the `all` seq this sender had reached when it first saw
///   the member (0 when it saw the member at its own join), and the direct messages after its direct
///   stream's seq at that moment (0 unless the member was here before, left and came back). What came
///   before a mark is not owed: the member was not there yet.
struct OutboxStateMachine {
    struct Configuration: Sendable, Hashable {
        /// At most this many envelopes are kept, across the session's streams. Default 1,000.
        var maximumCount: Int
        /// At most this many payload bytes are kept, across the session's streams. Default 8 MiB.
        var maximumBytes: Int

        init(maximumCount: Int = 1_000, maximumBytes: Int = 8 << 20) {
            precondition(maximumCount >= 0 && maximumBytes >= 0, "outbox bounds are not negative")
            self.maximumCount = maximumCount
            self.maximumBytes = maximumBytes
        }
    }

    /// A reliable envelope as first published; re-published unchanged when asked for. A broadcast
    /// re-sent travels on the requester's direct topic; `stream` says it is a broadcast.
    struct Entry: Hashable, Sendable {
        var stream: Reliable.Stream
        var seq: Int64
        var payload: Data
    }

    /// What to publish, on the requester's direct topic, in answer to a `$resend`.
    enum Answer: Hashable, Sendable {
        /// The skip first (if any), then the entries in order. Neither: the requester misses nothing.
        case resend(skip: Reliable.Skip?, entries: [Entry])
        /// The request does not fit this epoch's stream (a negative or empty range, or one beyond the
        /// latest seq: the requester counts in another epoch, or is forged): tell it where the streams are.
        case position(Reliable.Position)
    }

    /// Where what a member is owed starts: the seqs after these. 24 bytes: one per member.
    private struct Mark {
        var all: Int64
        var direct: Int64
        /// The member's connection epoch when marked, if known: a new process of it is marked anew.
        @PackedOptional<Int64> var epoch: Int64?
    }

    /// One stream's numbering: its latest seq, and the newest seq that has left the outbox.
    private struct Numbering {
        var latest: Int64 = 0
        var evictedThrough: Int64 = 0
    }

    let configuration: Configuration
    /// The outbox, oldest first from `oldest`; slots before it are evicted (nil) until reclaimed.
    private var entries: [Entry?] = []
    private var oldest = 0
    private(set) var byteCount = 0
    private var numbering: [Reliable.Stream: Numbering] = [:]
    /// Marks of the members seen and not left since.
    private var marks: [String: Mark] = [:]

    init(configuration: Configuration = .init()) { self.configuration = configuration }

    var count: Int { entries.count - oldest }

    /// The latest seq of `stream` (0 before its first message).
    func latest(of stream: Reliable.Stream) -> Int64 { numbering[stream]?.latest ?? 0 }

    /// The latest seq of every stream: broadcasts, and direct messages to the members (not to those who
    /// left; nor streams still at 0). To broadcast as `$position` after each reconnect.
    var position: Reliable.Position {
        var direct: [String: Int64] = [:]
        for case let (.direct(recipient), numbers) in numbering where numbers.latest > 0 && marks[recipient] != nil {
            direct[recipient] = numbers.latest
        }
        return Reliable.Position(all: latest(of: .all), direct: direct)
    }

    /// The position as one recipient needs it: broadcasts and its own direct stream.
    func position(for recipient: String) -> Reliable.Position {
        let direct = latest(of: .direct(to: recipient))
        return Reliable.Position(all: latest(of: .all), direct: direct > 0 ? [recipient: direct] : [:])
    }

    // MARK: - Inputs

    /// Numbers the next message of `stream`, keeps the envelope `encode` makes for that seq, and returns
    /// it, to publish. Evicts the oldest entries beyond the bounds (the new one too, when it alone exceeds
    /// the byte budget: it is then owed as lost). A direct message marks its recipient if it has no mark.
    mutating func append<Failure>(to stream: Reliable.Stream, encoding encode: (Int64) throws(Failure) -> Data) throws(Failure) -> Entry {
        if case let .direct(recipient) = stream { memberSeen(recipient) }
        let seq = latest(of: stream) + 1
        let entry = Entry(stream: stream, seq: seq, payload: try encode(seq))
        numbering[stream, default: Numbering()].latest = seq
        entries.append(entry)
        byteCount += entry.payload.count
        evictBeyondBounds()
        return entry
    }

    /// `participant` is a member (its live or retained member record, of connection `epoch`): marks it,
    /// on its first sighting only — or of a new epoch: a restarted process was not there before — so that
    /// it is owed what this sender sends from now on.
    mutating func memberSeen(_ participant: String, epoch: Int64? = nil) {
        if let mark = marks[participant], epoch == nil || mark.epoch == nil || mark.epoch == epoch {
            if mark.epoch == nil { marks[participant]?.epoch = epoch }  // first told of its epoch
            return
        }
        marks[participant] = Mark(all: latest(of: .all), direct: latest(of: .direct(to: participant)), epoch: epoch)
    }

    /// We join the session (again): nobody is owed what we sent before; every member is marked anew when
    /// we see it.
    mutating func forgetMembers() { marks = [:] }

    /// `participant` left the session: a rejoin gets a new mark.
    mutating func memberLeft(_ participant: String) { marks[participant] = nil }

    /// The answer to `request` from `requester` (whose direct stream is the one a `.direct` request
    /// means). Costs at most one pass over the outbox, whatever the numbers in the request.
    ///
    /// Of the range asked for, the part the requester is owed and the outbox still has is re-sent; the
    /// rest, always the range's start, is covered by one ``Reliable/Skip`` through its end, listing the
    /// owed seqs that left the outbox as lost. A requester without a mark (not seen as a member yet) is
    /// owed nothing sent so far.
    func answer(_ request: Reliable.ResendRequest, from requester: String) -> Answer {
        let stream: Reliable.Stream = request.stream == .all ? .all : .direct(to: requester)
        let numbers = numbering[stream] ?? Numbering()
        let first = max(request.from, 1)
        let last = request.to ?? numbers.latest
        guard request.from >= 0, last <= numbers.latest, first <= last || (request.to == nil && first == last + 1)
        else { return .position(position(for: requester)) }
        guard first <= last else { return .resend(skip: nil, entries: []) }

        let owedAfter = marks[requester].map { stream == .all ? $0.all : $0.direct } ?? numbers.latest
        let notResentThrough = min(last, max(owedAfter, numbers.evictedThrough))
        var skip: Reliable.Skip?
        if notResentThrough >= first {
            let lostThrough = min(notResentThrough, numbers.evictedThrough)
            skip = Reliable.Skip(
                stream: request.stream, through: notResentThrough,
                lost: owedAfter < lostThrough ? [owedAfter + 1...lostThrough] : [])
        }
        let resendAfter = max(first - 1, notResentThrough)
        guard resendAfter < last else { return .resend(skip: skip, entries: []) }
        var resent: [Entry] = []
        for case let entry? in entries[oldest...] where entry.stream == stream && entry.seq > resendAfter {
            guard entry.seq <= last else { break }
            resent.append(entry)
        }
        return .resend(skip: skip, entries: resent)
    }

    // MARK: - Eviction

    private mutating func evictBeyondBounds() {
        while count > configuration.maximumCount || (count > 0 && byteCount > configuration.maximumBytes) {
            let entry = entries[oldest].take()!
            oldest += 1
            byteCount -= entry.payload.count
            numbering[entry.stream]!.evictedThrough = entry.seq
        }
        // Reclaim the evicted slots now and then, so that eviction costs O(1) amortised.
        if oldest == entries.count {
            entries.removeAll(keepingCapacity: true)
            oldest = 0
        } else if oldest >= 64 && oldest * 2 >= entries.count {
            entries.removeFirst(oldest)
            oldest = 0
        }
    }
}
