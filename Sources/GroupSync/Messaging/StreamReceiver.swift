/// The receiving side of reliable delivery in one session: puts each sender's reliable messages back in
/// order per stream, drops duplicates, asks the sender for what is missing (`$resend`), and reports what
/// the sender can no longer re-send as gap events. A value type without side effects: every input returns
/// an ``Action``. Time is given, never read: `now` in milliseconds of the clock epochs are taken from.
///
/// Per sender it follows one connection epoch (the newest seen) and that epoch's streams; per stream a
/// cursor (the last seq delivered or passed over), the messages held beyond a gap, and one request for the
/// gap, re-sent with backoff until the gap closes (see ``InboundStream``).
///
/// Per sender and stream, messages come out in seq order and at most once, and a gap event comes out at
/// its place in that order. A seq is passed over without its message only
/// - when the sender's `$skip` says it was not owed (sent before the sender saw this receiver) or lost
///   (owed, but gone from the outbox: a gap event);
/// - when the sender's epoch ends or the sender is gone (a gap event for each missing range);
/// - when more than ``Configuration/maximumHeld`` messages wait behind a gap: the sender's outbox is
///   unlikely to still have what is missing, and the gap is reported (a gap event).
///
/// Plausibility: an epoch too far ahead of `now`, and a seq too far beyond the cursor, are rejected
/// (counted in ``rejected``): they neither move a cursor nor cost memory.
struct StreamReceiver<Message> {
    struct Configuration: Sendable, Hashable {
        /// Messages held per stream behind a gap; beyond that the lowest gap is given up (a gap event).
        /// Default 10,000 (ten times the default outbox).
        var maximumHeld: Int
        /// How far beyond its cursor a stream accepts a seq (in a message, `$skip` or `$position`); what
        /// lies beyond is rejected as forged. Default 1,000,000.
        var sequenceWindow: Int64
        /// How far ahead of `now` a sender's epoch may be, in ms; further is rejected as forged. Default a
        /// day, as for clocks (``HLCTimestamp/maximumSkew``).
        var maximumEpochSkew: Int64
        /// How long a request waits for its gap to close before it is sent again, in ms; the wait doubles
        /// with each retry up to ``maximumRetryInterval``. Defaults 1 s and 8 s.
        var retryInterval: Int64
        var maximumRetryInterval: Int64

        init(
            maximumHeld: Int = 10_000, sequenceWindow: Int64 = 1_000_000,
            maximumEpochSkew: Int64 = HLCTimestamp.maximumSkew, retryInterval: Int64 = 1_000,
            maximumRetryInterval: Int64 = 8_000
        ) {
            precondition(maximumHeld >= 0 && sequenceWindow > 0 && maximumEpochSkew >= 0)
            precondition(retryInterval > 0 && maximumRetryInterval >= retryInterval)
            self.maximumHeld = maximumHeld
            self.sequenceWindow = sequenceWindow
            self.maximumEpochSkew = maximumEpochSkew
            self.retryInterval = retryInterval
            self.maximumRetryInterval = maximumRetryInterval
        }
    }

    /// What the app gets, in order.
    enum Event {
        case message(Message, sender: String, stream: Reliable.StreamKind, seq: Int64)
        /// These seqs of the sender's stream will never arrive.
        case gap(sender: String, stream: Reliable.StreamKind, seqs: ClosedRange<Int64>)
    }

    /// A `$resend` to publish to `sender`.
    struct Request: Hashable, Sendable {
        var sender: String
        var resend: Reliable.ResendRequest
    }

    /// What an input asks of the session.
    struct Action {
        /// For the app, in this order.
        var events: [Event] = []
        /// To publish, in this order.
        var requests: [Request] = []
        /// When (ms) a request made or sent again now is due to be sent again, unless answered: call
        /// ``tick(now:)`` then. The earliest of the input's requests; after ``tick(now:)``, of every
        /// pending one.
        var retryAt: Int64?
    }

    struct Sender {
        let epoch: Int64
        var streams: [Reliable.StreamKind: InboundStream] = [:]
    }

    let configuration: Configuration
    private(set) var senders: [String: Sender] = [:]
    /// Inputs rejected as implausible: a future epoch, a seq, skip or position too far ahead, a seq below 1.
    private(set) var rejected = 0

    init(configuration: Configuration = .init()) { self.configuration = configuration }

    /// The cursor of one stream: nil while where it starts is unknown (or the sender is not followed).
    func cursor(of sender: String, _ stream: Reliable.StreamKind) -> Int64? { senders[sender]?.streams[stream]?.cursor }

    func heldCount(of sender: String, _ stream: Reliable.StreamKind) -> Int { senders[sender]?.streams[stream]?.held.count ?? 0 }

    // MARK: - Inputs

    /// A reliable message of `sender`'s `stream` (live, or re-sent on request).
    ///
    /// A message of an older epoch than the sender's is dropped; one of a newer epoch ends the older
    /// epoch's streams first (as ``senderGone(_:)``). In the stream: a seq already delivered or held is a
    /// duplicate; the next one is delivered with the held ones it makes contiguous; one beyond a gap is
    /// held and the gap asked for. The first message of a stream is delivered if it is seq 1; otherwise it
    /// is held and the sender asked where the stream starts for this receiver (`from: 0`).
    mutating func receive(
        _ message: Message, from sender: String, epoch: Int64, stream: Reliable.StreamKind, seq: Int64, now: Int64
    ) -> Action {
        inStream(stream, of: sender, epoch: epoch, now: now) { inbound, configuration, output in
            inbound.receive(message, seq: seq, now: now, configuration, &output)
        }
    }

    /// A `$skip` from `sender`: the stream's cursor moves to `skip.through` (never back), held messages up
    /// to there are delivered and the lost ranges beyond the cursor become gap events, in seq order.
    /// While the stream's start is unknown, only a skip within what was asked is taken.
    mutating func skip(_ skip: Reliable.Skip, from sender: String, epoch: Int64, now: Int64) -> Action {
        inStream(skip.stream, of: sender, epoch: epoch, now: now) { inbound, configuration, output in
            inbound.skip(through: skip.through, lost: skip.lost, now: now, configuration, &output)
        }
    }

    /// A `$position` of `sender`: its latest broadcast seq, and the latest of its direct stream to this
    /// receiver (0 when the position has no entry for it). A stream behind it asks for the rest.
    mutating func position(from sender: String, epoch: Int64, all: Int64, direct: Int64, now: Int64) -> Action {
        var action = Action()
        guard admit(sender, epoch: epoch, now: now, &action) else { return action }
        for (stream, latest) in [(Reliable.StreamKind.all, all), (.direct, direct)] {
            run(stream, of: sender, into: &action) { inbound, configuration, output in
                inbound.position(latest, now: now, configuration, &output)
            }
        }
        return action
    }

    /// `sender` is an active member with this epoch: a newer epoch than the one followed ends the older
    /// one's streams. A sender not followed yet is followed from its first input (or from a reconnect,
    /// which is told every member): a member that never sends costs the receiver nothing.
    mutating func senderSeen(_ sender: String, epoch: Int64, now: Int64) -> Action {
        var action = Action()
        guard senders[sender] != nil else { return action }
        _ = admit(sender, epoch: epoch, now: now, &action)
        return action
    }

    /// `sender` left, crashed or lost its presence: its held messages are delivered in order, the missing
    /// ranges among them and up to the highest seq asked for are reported as gaps, and it is forgotten.
    mutating func senderGone(_ sender: String) -> Action {
        var action = Action()
        end(sender, into: &action)
        senders[sender] = nil
        return action
    }

    /// `sender`'s connection is gone (its will, or its heartbeats stopped): nothing more will be re-sent,
    /// so what is held of its messages comes out now, with the gaps. Unlike ``senderGone(_:)`` its cursors
    /// stay: if the same connection turns out to be alive after all, nothing is delivered twice.
    mutating func senderLost(_ sender: String) -> Action {
        var action = Action()
        for stream in Reliable.StreamKind.allCases where senders[sender]?.streams[stream] != nil {
            run(stream, of: sender, into: &action) { inbound, _, output in inbound.flush(&output) }
        }
        return action
    }

    /// This receiver's connection is back: what was published meanwhile may be lost, so it asks every
    /// sender — those followed, and the `members` (participant → epoch) it has not heard from yet —, for
    /// each stream, for everything after its cursor (open-ended). Requests still waiting for their gap
    /// count as sent now.
    mutating func reconnected(now: Int64, members: [String: Int64] = [:]) -> Action {
        for (member, epoch) in members where senders[member] == nil { senders[member] = Sender(epoch: epoch) }
        return eachStream { inbound, configuration, output in inbound.reconnected(now: now, configuration, &output) }
    }

    /// Sends again the requests whose gap has stayed open for their retry interval: a request or its
    /// answer can be lost when the broker crashes. Its `retryAt` is the next request still pending, sent
    /// now or not: the timer that ran this may have been set for an earlier deadline than the retry's, and
    /// a timer keeps only the earliest one asked of it.
    mutating func tick(now: Int64) -> Action {
        var action = eachStream { inbound, configuration, output in inbound.retry(now: now, configuration, &output) }
        action.retryAt = nextRetry
        return action
    }

    // MARK: - Senders

    /// Whether an input of `sender` at `epoch` is for the epoch followed, after following it if it is
    /// newer (ending the older epoch's streams) or the sender is new. Rejects an implausible epoch.
    private mutating func admit(_ sender: String, epoch: Int64, now: Int64, _ action: inout Action) -> Bool {
        guard epoch >= 0, epoch <= now &+ configuration.maximumEpochSkew else {
            rejected += 1
            return false
        }
        if let followed = senders[sender]?.epoch {
            if epoch < followed { return false }
            if epoch == followed { return true }
            end(sender, into: &action)
        }
        senders[sender] = Sender(epoch: epoch)
        return true
    }

    /// Ends the streams of `sender`'s epoch followed: what they hold comes out, with the gaps.
    private mutating func end(_ sender: String, into action: inout Action) {
        for stream in Reliable.StreamKind.allCases where senders[sender]?.streams[stream] != nil {
            run(stream, of: sender, into: &action) { inbound, _, output in inbound.finish(&output) }
        }
    }

    private mutating func inStream(
        _ stream: Reliable.StreamKind, of sender: String, epoch: Int64, now: Int64,
        _ body: (inout InboundStream, Configuration, inout InboundStream.Output) -> Void
    ) -> Action {
        var action = Action()
        guard admit(sender, epoch: epoch, now: now, &action) else { return action }
        run(stream, of: sender, into: &action, body)
        return action
    }

    /// When the next request still unanswered is due to be sent again (ms); nil when none is pending.
    var nextRetry: Int64? { senders.values.lazy.flatMap(\.streams.values).compactMap(\.request?.due).min() }

    /// Runs `body` on both streams of every sender followed, senders in name order.
    private mutating func eachStream(
        _ body: (inout InboundStream, Configuration, inout InboundStream.Output) -> Void
    ) -> Action {
        var action = Action()
        for sender in senders.keys.sorted() {
            for stream in Reliable.StreamKind.allCases { run(stream, of: sender, into: &action, body) }
        }
        return action
    }

    /// Runs `body` on `sender`'s `stream` (a new one if it has none) and adds what it gives out to `action`.
    private mutating func run(
        _ stream: Reliable.StreamKind, of sender: String, into action: inout Action,
        _ body: (inout InboundStream, Configuration, inout InboundStream.Output) -> Void
    ) {
        var output = InboundStream.Output()
        body(&senders[sender]!.streams[stream, default: InboundStream()], configuration, &output)
        rejected += output.rejected
        for item in output.items {
            switch item {
            case let .message(seq, message): action.events.append(.message(message, sender: sender, stream: stream, seq: seq))
            case let .gap(seqs): action.events.append(.gap(sender: sender, stream: stream, seqs: seqs))
            }
        }
        for ask in output.asks {
            action.requests.append(Request(sender: sender, resend: .init(stream: stream, from: ask.from, to: ask.to)))
        }
        if !output.asks.isEmpty, let due = senders[sender]?.streams[stream]?.request?.due {
            action.retryAt = min(action.retryAt ?? due, due)
        }
    }
}

extension StreamReceiver: Sendable where Message: Sendable {}
extension StreamReceiver.Sender: Sendable where Message: Sendable {}
extension StreamReceiver.Event: Sendable where Message: Sendable {}
extension StreamReceiver.Event: Equatable where Message: Equatable {}
extension StreamReceiver.Action: Sendable where Message: Sendable {}
extension StreamReceiver.Action: Equatable where Message: Equatable {}
