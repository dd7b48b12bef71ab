extension StreamReceiver {
    /// One stream of one sender epoch, as received.
    ///
    /// Before the stream's start is known (`cursor` nil) it holds what arrives and asks the sender, from 0,
    /// through the seq below what it holds: the answer (a `$skip` and re-sent envelopes, or seq 1) fixes the
    /// cursor. From then on, messages beyond `cursor + 1` are held (within the sequence window) and
    /// `request` asks for every missing seq below the highest held one, until the cursor reaches it.
    struct InboundStream {
        /// What the stream gives out, in order.
        enum Item {
            case message(Int64, Message)
            case gap(ClosedRange<Int64>)
        }

        struct Output {
            var items: [Item] = []
            /// `$resend` ranges to ask the sender for, in order.
            var asks: [(from: Int64, to: Int64?)] = []
            var rejected = 0
        }

        /// The request for the missing seqs: `(cursor, through]`, or `(0, through]` while the start is unknown.
        struct Pending: Hashable, Sendable {
            /// The highest seq asked for: with a cursor, every missing seq below the highest held one is
            /// at most this.
            var through: Int64
            var sentAt: Int64
            /// How long after `sentAt` it is sent again.
            var retryDelay: Int64
            /// The cursor when it was last sent: an answer that moved it (part of what was asked came, the
            /// rest was dropped on the way, as by a broker's full queue) makes the next retry come after
            /// the first delay again instead of a doubled one.
            var cursorWhenSent: Int64?

            /// When it is sent again unless answered (ms).
            var due: Int64 { sentAt &+ retryDelay }
        }

        /// The last seq delivered or passed over; nil until the first message, skip or overflow fixes where
        /// the stream starts for this receiver.
        private(set) var cursor: Int64?
        /// Messages beyond `cursor + 1`, by seq; with a cursor, none beyond the sequence window.
        private(set) var held: [Int64: Message] = [:]
        /// Nil when nothing known is missing.
        private(set) var request: Pending?
        /// The sender's latest seq as it stated it (`$position`): what it vouches for. Held messages
        /// beyond a stated position are forged; a flush never moves the cursor beyond it.
        private(set) var stated: Int64 = 0
        /// Seqs beyond the cursor already given out by a ``flush(_:)`` (the sender was lost and the
        /// sender had not vouched for them): a copy of one is a duplicate, and the cursor passes over
        /// them. At most ``Configuration/maximumHeld``.
        private(set) var deliveredAhead: Set<Int64> = []

        mutating func receive(_ message: Message, seq: Int64, now: Int64, _ configuration: Configuration, _ output: inout Output) {
            guard seq >= 1, seq <= Reliable.maximumSeq else {
                output.rejected += 1
                return
            }
            guard held[seq] == nil, !deliveredAhead.contains(seq) else { return }
            guard let cursor else {
                if seq == 1 {
                    output.items.append(.message(seq, message))
                    start(at: seq, now: now, configuration, &output)
                } else {
                    held[seq] = message
                    limitHeld(now: now, configuration, &output)
                    // One request finds the start; the gaps above it are asked for once it is known.
                    if self.cursor == nil, request == nil { askForStart(through: seq - 1, now: now, configuration, &output) }
                }
                return
            }
            guard seq > cursor else { return }
            guard seq - cursor <= configuration.sequenceWindow else {
                output.rejected += 1
                return
            }
            if seq == cursor + 1 {
                output.items.append(.message(seq, message))
                self.cursor = seq
                deliverContiguous(&output)
            } else {
                held[seq] = message
                limitHeld(now: now, configuration, &output)
                if held[seq] != nil, held[seq - 1] == nil, seq - 1 > self.cursor! {
                    ask(through: seq - 1, now: now, configuration, &output)
                }
            }
        }

        /// The sender says nothing up to `through` will be re-sent, and which of it was owed (`lost`).
        mutating func skip(
            through: Int64, lost: [ClosedRange<Int64>], now: Int64, _ configuration: Configuration, _ output: inout Output
        ) {
            if let cursor {
                guard through > cursor else { return }
                guard through - cursor <= configuration.sequenceWindow else {
                    output.rejected += 1
                    return
                }
            } else {
                // Without a cursor, no window to judge `through` by: only an answer to what was asked.
                guard let request, through >= 0, through <= request.through else { return }
            }
            pass(through: through, lost: lost, &output)
            if self.cursor == nil {
                start(at: through, now: now, configuration, &output)
            } else {
                self.cursor = through
                deliverContiguous(&output)
            }
        }

        /// The sender's latest seq in this stream is `latest`: held messages beyond it are forged (dropped
        /// and counted), and what is missing up to it is asked for. A position below one stated before
        /// changes nothing.
        mutating func position(_ latest: Int64, now: Int64, _ configuration: Configuration, _ output: inout Output) {
            guard latest >= 0, latest <= Reliable.maximumSeq, cursor.map({ latest - $0 <= configuration.sequenceWindow }) ?? true else {
                output.rejected += 1
                return
            }
            // Below a position already stated it is an old one come late (a QoS 1 copy sent again after
            // a reconnect): the messages held beyond it may have been sent after it.
            guard latest >= stated else { return }
            stated = latest
            let forged = held.keys.filter { $0 > latest }
            for seq in forged { held[seq] = nil }
            output.rejected += forged.count
            // A request beyond the sender's latest (for a forged seq) goes again, within it.
            if let through = request?.through, through > latest { request = nil }
            guard let cursor else {
                guard latest >= 1 else { return }
                if let request, request.through < latest {
                    output.asks.append((request.through + 1, latest))
                    self.request?.through = latest
                } else if request?.through != latest {
                    // None yet; or one beyond the sender's latest, which it answers with this position:
                    // ask again within it.
                    askForStart(through: latest, now: now, configuration, &output)
                }
                return
            }
            // Up to the sender's latest, or below it when it is held: what is missing there is asked for.
            let through = held[latest] != nil || deliveredAhead.contains(latest) ? latest - 1 : latest
            guard through > cursor else { return }
            ask(through: through, now: now, configuration, &output)
        }

        /// Asks for what is missing below the highest seq held and for everything after it (after the
        /// cursor when nothing is held); the pending request counts as sent now.
        mutating func reconnected(now: Int64, _ configuration: Configuration, _ output: inout Output) {
            if let cursor {
                let top = max(held.keys.max() ?? cursor, deliveredAhead.max() ?? cursor)
                output.asks += missing(from: cursor + 1, through: top, reachingThrough: false)
                output.asks.append((top + 1, nil))  // beyond the sender's latest, answered with its position
            } else {
                output.asks.append((0, nil))
            }
            request?.sentAt = now
            request?.retryDelay = configuration.retryInterval
            request?.cursorWhenSent = cursor
        }

        /// Sends the pending request again once its retry delay has passed. The delay doubles while nothing
        /// asked for comes, and starts over while each round brings part of it.
        mutating func retry(now: Int64, _ configuration: Configuration, _ output: inout Output) {
            guard var pending = request, now >= pending.due else { return }
            if let cursor {
                output.asks += missing(from: cursor + 1, through: pending.through)
            } else {
                output.asks.append((0, pending.through))
            }
            let progressed = cursor != pending.cursorWhenSent
            pending.sentAt = now
            pending.cursorWhenSent = cursor
            pending.retryDelay =
                progressed
                ? configuration.retryInterval
                : pending.retryDelay > configuration.maximumRetryInterval / 2
                    ? configuration.maximumRetryInterval : pending.retryDelay * 2
            request = pending
        }

        /// The stream ends: held messages in order, with gaps for what is missing among them and, with a
        /// cursor, up to the highest seq asked for. Before the start is known, nothing below the lowest held
        /// message is reported: whether it was owed is unknown.
        func finish(_ output: inout Output) {
            var next = cursor.map { $0 + 1 }
            for seq in held.keys.sorted() {
                if let next, seq > next { output.items.append(.gap(next...seq - 1)) }
                output.items.append(.message(seq, held[seq]!))
                next = seq + 1
            }
            if let next, cursor != nil, let request, request.through >= next {
                output.items.append(.gap(next...request.through))
            }
        }

        /// Gives up on what is missing (the sender is lost): ``finish(_:)``. The cursor moves after what
        /// was given out only as far as the sender vouched for (its stated position); what was given out
        /// beyond is remembered, so that a copy of it is a duplicate while the sender's later messages —
        /// should it turn out alive — still come through: a forged seq far ahead never silences it.
        mutating func flush(_ output: inout Output) {
            finish(&output)
            let highest = max(held.keys.max() ?? 0, request?.through ?? 0)
            let settled = min(highest, max(cursor ?? 0, stated))
            if cursor != nil || settled > 0 { cursor = max(cursor ?? 0, settled) }
            for seq in held.keys where seq > (cursor ?? 0) { deliveredAhead.insert(seq) }
            held = [:]
            request = nil
        }

        // MARK: - Moving the cursor

        /// Gives out, in seq order, the held messages up to `through` and the gaps of `lost` beyond the
        /// cursor (minus what is held), and drops those messages from `held`.
        private mutating func pass(through: Int64, lost: [ClosedRange<Int64>], _ output: inout Output) {
            let first = (cursor ?? 0) + 1
            var passed = held.keys.filter { $0 <= through }.sorted()[...]
            let gaps = lost.compactMap { range -> ClosedRange<Int64>? in
                let lower = max(range.lowerBound, first)
                let upper = min(range.upperBound, through)
                return lower <= upper ? lower...upper : nil
            }
            var next = first  // every seq below it has been given out or reported
            for gap in gaps.sorted(by: { $0.lowerBound < $1.lowerBound }) {
                var lower = max(gap.lowerBound, next)
                while lower <= gap.upperBound {
                    while let seq = passed.first, seq < lower {
                        output.items.append(.message(seq, held.removeValue(forKey: seq)!))
                        passed.removeFirst()
                    }
                    if let seq = passed.first, seq <= gap.upperBound {
                        if seq > lower { output.items.append(.gap(lower...seq - 1)) }
                        output.items.append(.message(seq, held.removeValue(forKey: seq)!))
                        passed.removeFirst()
                        lower = seq + 1
                    } else {
                        output.items.append(.gap(lower...gap.upperBound))
                        lower = gap.upperBound + 1
                    }
                }
                next = max(next, lower)
            }
            for seq in passed { output.items.append(.message(seq, held.removeValue(forKey: seq)!)) }
        }

        /// The start is known: the cursor is `cursor`. Held messages beyond the window now are rejected as
        /// forged, and so is the request for the range below them; the contiguous ones are delivered; the
        /// gaps below the others are asked for.
        private mutating func start(at cursor: Int64, now: Int64, _ configuration: Configuration, _ output: inout Output) {
            self.cursor = cursor
            let forged = held.keys.filter { $0 - cursor > configuration.sequenceWindow }
            for seq in forged { held[seq] = nil }
            output.rejected += forged.count
            if let request, request.through <= cursor || request.through - cursor > configuration.sequenceWindow {
                self.request = nil
            }
            deliverContiguous(&output)
            // What is still held lies beyond a gap.
            if let highest = held.keys.max() { ask(through: highest - 1, now: now, configuration, &output) }
        }

        /// Delivers the held messages that follow the cursor; drops the request once nothing it asked for
        /// is missing.
        private mutating func deliverContiguous(_ output: inout Output) {
            guard var cursor else { return }
            while true {
                if let message = held.removeValue(forKey: cursor + 1) {
                    output.items.append(.message(cursor + 1, message))
                } else if deliveredAhead.remove(cursor + 1) == nil {
                    break
                }
                cursor += 1
            }
            if !deliveredAhead.isEmpty { deliveredAhead = deliveredAhead.filter { $0 > cursor } }
            self.cursor = cursor
            if let request, request.through <= cursor { self.request = nil }
        }

        /// Beyond ``Configuration/maximumHeld`` held messages, gives up the lowest gap: a gap event (none
        /// while the start is unknown: whether it was owed is unknown), then the messages after it.
        private mutating func limitHeld(now: Int64, _ configuration: Configuration, _ output: inout Output) {
            guard held.count > configuration.maximumHeld, let lowest = held.keys.min() else { return }
            if let cursor {
                output.items.append(.gap(cursor + 1...lowest - 1))
                self.cursor = lowest - 1
                deliverContiguous(&output)
            } else {
                start(at: lowest - 1, now: now, configuration, &output)
            }
        }

        // MARK: - Requests

        /// Asks for the missing seqs up to `through`, beyond what the pending request asked for.
        private mutating func ask(through: Int64, now: Int64, _ configuration: Configuration, _ output: inout Output) {
            guard let cursor else { return }
            if let request {
                guard through > request.through else { return }
                output.asks += missing(from: request.through + 1, through: through)
                self.request?.through = through
            } else {
                output.asks += missing(from: cursor + 1, through: through)
                request = Pending(through: through, sentAt: now, retryDelay: configuration.retryInterval, cursorWhenSent: cursor)
            }
        }

        /// The runs of `from...through` neither held nor given out, lowest first, as `$resend` ranges: at
        /// most ``maximumAsks`` of them, the rest asked for at the next retry. A range asked for with held
        /// messages in it would have the sender send those again: behind a long gap in a busy stream,
        /// hundreds, into the queue that already dropped some. Unless told otherwise, the last ask reaches
        /// `through` (alone, if it is held): asked beyond its latest seq, a sender answers with its
        /// position, which is what exposes held messages it never sent.
        private func missing(from: Int64, through: Int64, reachingThrough: Bool = true) -> [(from: Int64, to: Int64?)] {
            guard from <= through else { return [] }
            // Whichever is shorter is walked: the range (a new gap, on the receiving path: usually a few
            // seqs) or what is held (at most ``Configuration/maximumHeld``, however wide the range).
            let have =
                through - from < Int64(held.count + deliveredAhead.count)
                ? (from...through).filter { held[$0] != nil || deliveredAhead.contains($0) }
                : (held.keys.filter { $0 >= from && $0 <= through } + deliveredAhead.filter { $0 >= from && $0 <= through }).sorted()
            var asks: [(from: Int64, to: Int64?)] = []
            var next = from
            for seq in have where asks.count < Self.maximumAsks {
                if seq > next { asks.append((next, seq - 1)) }
                next = max(next, seq + 1)
            }
            if next <= through, asks.count < Self.maximumAsks { asks.append((next, through)) }
            if reachingThrough, asks.last?.to != through { asks.append((through, through)) }
            return asks
        }

        static var maximumAsks: Int { 16 }

        /// Asks where the stream starts, from 0 (wherever the sender owes this receiver) through `through`.
        private mutating func askForStart(through: Int64, now: Int64, _ configuration: Configuration, _ output: inout Output) {
            output.asks.append((0, through))
            request = Pending(through: through, sentAt: now, retryDelay: configuration.retryInterval, cursorWhenSent: cursor)
        }
    }
}

extension StreamReceiver.InboundStream: Sendable where Message: Sendable {}
extension StreamReceiver.InboundStream.Item: Sendable where Message: Sendable {}
