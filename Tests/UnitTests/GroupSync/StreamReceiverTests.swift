import Foundation
import Testing

@testable import GroupSync

/// The receiving side of reliable delivery, alone and against ``OutboxStateMachine``.
@Suite struct StreamReceiverTests {
    typealias Receiver = StreamReceiver<String>

    static let epoch: Int64 = 1_000
    static let now: Int64 = 50_000

    /// Events as text: a message as its payload (a broadcast `n` is "n", a direct one "dn"), a gap as
    /// "gap a-b" (direct: "dgap a-b").
    static func text(_ events: [Receiver.Event]) -> [String] {
        events.map { event in
            switch event {
            case let .message(message, _, _, _): message
            case let .gap(_, stream, seqs): "\(stream == .direct ? "d" : "")gap \(seqs.lowerBound)-\(seqs.upperBound)"
            }
        }
    }

    static func ask(_ sender: String = "x", _ stream: Reliable.StreamKind = .all, from: Int64, to: Int64?) -> Receiver.Request {
        .init(sender: sender, resend: .init(stream: stream, from: from, to: to))
    }

    /// Receives `x`'s message `seq` of `stream`, its payload as ``text(_:)`` shows it.
    static func receive(
        _ seq: Int64, on stream: Reliable.StreamKind = .all, from sender: String = "x", epoch: Int64 = epoch,
        now: Int64 = now, into receiver: inout Receiver
    ) -> Receiver.Action {
        receiver.receive(
            "\(stream == .direct ? "d" : "")\(seq)", from: sender, epoch: epoch, stream: stream, seq: seq, now: now)
    }

    /// Receives several, returning the events and requests of all.
    static func receive(_ seqs: [Int64], on stream: Reliable.StreamKind = .all, into receiver: inout Receiver) -> (
        events: [String], requests: [Receiver.Request]
    ) {
        var events: [String] = []
        var requests: [Receiver.Request] = []
        for seq in seqs {
            let action = receive(seq, on: stream, into: &receiver)
            events += text(action.events)
            requests += action.requests
        }
        return (events, requests)
    }

    /// Feeds `outbox`'s answer to `request` into `receiver`, as the network would deliver it in order.
    static func answer(
        _ request: Receiver.Request, by outbox: OutboxStateMachine, to receiver: inout Receiver, as me: String = "r"
    ) -> Receiver.Action {
        var result = Receiver.Action()
        switch outbox.answer(request.resend, from: me) {
        case let .resend(skip, entries):
            if let skip {
                let action = receiver.skip(skip, from: request.sender, epoch: epoch, now: now)
                result.events += action.events
                result.requests += action.requests
            }
            for entry in entries {
                let message = String(decoding: entry.payload, as: UTF8.self)
                let action = receiver.receive(
                    message, from: request.sender, epoch: epoch, stream: entry.stream.kind, seq: entry.seq, now: now)
                result.events += action.events
                result.requests += action.requests
            }
        case let .position(position):
            result = receiver.position(
                from: request.sender, epoch: epoch, all: position.all, direct: position.direct[me] ?? 0, now: now)
        }
        return result
    }

    static func outbox(sending count: Int, marking member: String? = "r", maximumCount: Int = 1_000) -> OutboxStateMachine {
        var outbox = OutboxStateMachine(configuration: .init(maximumCount: maximumCount))
        if let member { outbox.memberSeen(member) }
        for _ in 0..<count { _ = outbox.append(to: .all) { Data("\($0)".utf8) } }
        return outbox
    }

    // MARK: - Order and duplicates

    @Test func inOrderMessagesAreDeliveredAtOnce() {
        var receiver = Receiver()
        let result = Self.receive([1, 2, 3], into: &receiver)
        #expect(result.events == ["1", "2", "3"])
        #expect(result.requests.isEmpty)
        #expect(receiver.cursor(of: "x", .all) == 3)
    }

    @Test func duplicatesAreDropped() {
        var receiver = Receiver()
        #expect(Self.receive([1, 2, 2, 1, 4, 4], into: &receiver).events == ["1", "2"])
        #expect(Self.receive([3, 4, 3], into: &receiver).events == ["3", "4"])
    }

    @Test func reorderedMessagesWaitForTheGapAndComeOutInOrder() {
        var receiver = Receiver()
        let held = Self.receive([1, 3, 4], into: &receiver)
        #expect(held.events == ["1"])
        #expect(held.requests == [Self.ask(from: 2, to: 2)], "one request for the gap, not one per held message")
        #expect(receiver.heldCount(of: "x", .all) == 2)
        #expect(Self.receive([2], into: &receiver).events == ["2", "3", "4"])
        #expect(receiver.tick(now: Self.now + 60_000).requests.isEmpty, "nothing is missing any more")
    }

    @Test func streamsOfOneSenderAreIndependent() {
        var receiver = Receiver()
        #expect(Self.receive([1, 3], on: .all, into: &receiver).events == ["1"])
        #expect(Self.receive([1, 2], on: .direct, into: &receiver).events == ["d1", "d2"])
        #expect(Self.receive([2], on: .all, into: &receiver).events == ["2", "3"])
    }

    // MARK: - Recovery through the outbox

    @Test func aLostMessageIsAskedForAndDeliveredInOrder() {
        let outbox = Self.outbox(sending: 5)
        var receiver = Receiver()
        let result = Self.receive([1, 4, 5], into: &receiver)
        #expect(result.events == ["1"])
        #expect(result.requests == [Self.ask(from: 2, to: 3)])
        let answered = Self.answer(result.requests[0], by: outbox, to: &receiver)
        #expect(Self.text(answered.events) == ["2", "3", "4", "5"])
        #expect(answered.requests.isEmpty)
    }

    @Test func aMessageGoneFromTheOutboxBecomesAGapEventInItsPlace() {
        let outbox = Self.outbox(sending: 5, maximumCount: 2)
        var receiver = Receiver()
        let result = Self.receive([1, 5], into: &receiver)
        #expect(result.requests == [Self.ask(from: 2, to: 4)])
        let answered = Self.answer(result.requests[0], by: outbox, to: &receiver)
        #expect(Self.text(answered.events) == ["gap 2-3", "4", "5"])
        #expect(receiver.cursor(of: "x", .all) == 5)
    }

    @Test func aLateJoinerGetsWhatItIsOwedAndNothingBefore() {
        // The sender saw r when it was at 5; r's first message is 8 (6 and 7 were lost).
        var outbox = Self.outbox(sending: 5, marking: nil)
        outbox.memberSeen("r")
        for _ in 0..<3 { _ = outbox.append(to: .all) { Data("\($0)".utf8) } }

        var receiver = Receiver()
        let first = Self.receive(8, into: &receiver)
        #expect(first.events.isEmpty, "where the stream starts for r is not known yet")
        #expect(first.requests == [Self.ask(from: 0, to: 7)])
        let answered = Self.answer(first.requests[0], by: outbox, to: &receiver)
        #expect(Self.text(answered.events) == ["6", "7", "8"])
        #expect(answered.requests.isEmpty)
        #expect(receiver.cursor(of: "x", .all) == 8)
    }

    @Test func aLateJoinerOwedNothingEarlierStartsAtItsFirstMessage() {
        var outbox = Self.outbox(sending: 7, marking: nil)
        outbox.memberSeen("r")
        let eighth = outbox.append(to: .all) { Data("\($0)".utf8) }
        #expect(eighth.seq == 8)
        var receiver = Receiver()
        let first = Self.receive(8, into: &receiver)
        let answered = Self.answer(first.requests[0], by: outbox, to: &receiver)
        #expect(Self.text(answered.events) == ["8"])
    }

    @Test func aFirstMessageOfOneNeedsNoQuestion() {
        var receiver = Receiver()
        let result = Self.receive([2, 1], into: &receiver)
        #expect(result.events == ["1", "2"])
        #expect(result.requests == [Self.ask(from: 0, to: 1)], "asked before 1 arrived")
        #expect(receiver.tick(now: Self.now + 60_000).requests.isEmpty)
    }

    @Test func aSkipPassesOverLostRangesAroundHeldMessagesInSeqOrder() {
        var receiver = Receiver()
        #expect(
            Self.receive([1, 3, 6], into: &receiver) == (["1"], [Self.ask(from: 2, to: 2), Self.ask(from: 4, to: 5)]),
            "what is held is not asked for again")
        let action = receiver.skip(
            .init(stream: .all, through: 7, lost: [5...9, 2...2, 4...4, 3...5]), from: "x", epoch: Self.epoch, now: Self.now)
        #expect(Self.text(action.events) == ["gap 2-2", "3", "gap 4-5", "6", "gap 7-7"])
        #expect(receiver.cursor(of: "x", .all) == 7)
        #expect(receiver.heldCount(of: "x", .all) == 0)

        #expect(
            receiver.skip(.init(stream: .all, through: 6, lost: [1...6]), from: "x", epoch: Self.epoch, now: Self.now).events.isEmpty,
            "a skip behind the cursor changes nothing")
        #expect(receiver.cursor(of: "x", .all) == 7)
    }

    @Test func aSkipNotAskedForDoesNotFixAStreamsStart() {
        var receiver = Receiver()
        #expect(receiver.senderSeen("x", epoch: Self.epoch, now: Self.now) == .init())
        let skip = Reliable.Skip(stream: .all, through: 40, lost: [])
        #expect(receiver.skip(skip, from: "x", epoch: Self.epoch, now: Self.now).events.isEmpty)
        #expect(receiver.cursor(of: "x", .all) == nil)
        #expect(Self.receive([1], into: &receiver).events == ["1"])
    }

    // MARK: - Positions and reconnects

    @Test func aPositionAheadOfTheCursorAsksForTheRest() {
        var receiver = Receiver()
        #expect(Self.receive([1, 2], into: &receiver) == (["1", "2"], []))
        let behind = receiver.position(from: "x", epoch: Self.epoch, all: 5, direct: 0, now: Self.now)
        #expect(behind.requests == [Self.ask(from: 3, to: 5)])
        #expect(receiver.position(from: "x", epoch: Self.epoch, all: 5, direct: 0, now: Self.now).requests.isEmpty, "already asked")
        #expect(receiver.position(from: "x", epoch: Self.epoch, all: 6, direct: 0, now: Self.now).requests == [Self.ask(from: 6, to: 6)])

        let fresh = receiver.position(from: "y", epoch: Self.epoch, all: 0, direct: 3, now: Self.now)
        #expect(fresh.requests == [Self.ask("y", .direct, from: 0, to: 3)], "a stream never heard from asks from 0")
    }

    @Test func aReconnectAsksEverySenderForEverythingAfterItsCursors() {
        var receiver = Receiver()
        #expect(Self.receive([1, 2], into: &receiver) == (["1", "2"], []))
        #expect(Self.receive([1], on: .direct, into: &receiver) == (["d1"], []))
        #expect(receiver.senderSeen("w", epoch: Self.epoch, now: Self.now) == .init())
        #expect(receiver.senders["w"] == nil, "a member that sent nothing is not followed yet")
        #expect(
            receiver.reconnected(now: Self.now, members: ["w": Self.epoch, "x": Self.epoch]).requests == [
                Self.ask("w", .all, from: 0, to: nil), Self.ask("w", .direct, from: 0, to: nil),
                Self.ask("x", .all, from: 3, to: nil), Self.ask("x", .direct, from: 2, to: nil),
            ])
    }

    // MARK: - Epochs and senders that go

    @Test func aNewEpochEndsTheOldOnesStreamsWithTheirGaps() {
        var receiver = Receiver()
        #expect(Self.receive([1, 3], into: &receiver) == (["1"], [Self.ask(from: 2, to: 2)]))
        #expect(receiver.position(from: "x", epoch: Self.epoch, all: 5, direct: 0, now: Self.now).requests == [Self.ask(from: 4, to: 5)])
        let restarted = Self.receive(1, epoch: Self.epoch + 1, into: &receiver)
        #expect(Self.text(restarted.events) == ["gap 2-2", "3", "gap 4-5", "1"])
        #expect(receiver.senders["x"]?.epoch == Self.epoch + 1)
        #expect(Self.receive(2, epoch: Self.epoch, into: &receiver).events.isEmpty, "the old epoch is over")
        #expect(Self.text(Self.receive(2, epoch: Self.epoch + 1, into: &receiver).events) == ["2"])
    }

    @Test func aSenderThatGoesLeavesItsHeldMessagesAndGaps() {
        var receiver = Receiver()
        #expect(Self.receive([1, 3, 5], into: &receiver) == (["1"], [Self.ask(from: 2, to: 2), Self.ask(from: 4, to: 4)]))
        #expect(Self.receive([2], on: .direct, into: &receiver) == ([], [Self.ask("x", .direct, from: 0, to: 1)]))
        #expect(Self.text(receiver.senderGone("x").events) == ["gap 2-2", "3", "gap 4-4", "5", "d2"])
        #expect(receiver.senders.isEmpty)
        #expect(receiver.tick(now: Self.now + 60_000).requests.isEmpty)
    }

    // MARK: - Plausibility and bounds

    @Test func forgedNumbersNeitherMoveTheCursorNorCostMemory() {
        var receiver = Receiver()
        #expect(Self.receive([1, 2], into: &receiver) == (["1", "2"], []))
        let forged: [Receiver.Action] = [
            Self.receive(1 << 62, into: &receiver),
            Self.receive(.max, into: &receiver),
            Self.receive(-1, into: &receiver),
            Self.receive(3, epoch: .max, into: &receiver),
            Self.receive(3, epoch: Self.now + 86_400_001, into: &receiver),
            receiver.skip(.init(stream: .all, through: 1 << 62, lost: [3...(1 << 62)]), from: "x", epoch: Self.epoch, now: Self.now),
            receiver.position(from: "x", epoch: Self.epoch, all: 1 << 62, direct: .max, now: Self.now),
        ]
        #expect(forged.allSatisfy { $0.events.isEmpty && $0.requests.isEmpty })
        #expect(receiver.rejected == 8)
        #expect(receiver.cursor(of: "x", .all) == 2)
        #expect(receiver.heldCount(of: "x", .all) == 0)
        #expect(receiver.senders["x"]?.epoch == Self.epoch)
        #expect(Self.receive([3], into: &receiver).events == ["3"], "the sender is heard as before")
    }

    @Test func aForgedFirstSeqDoesNotSilenceASenderNotHeardYet() {
        // Before a stream's start is known there is no window to judge a seq by; below the absolute bound
        // it is held, and the start asked for.
        var fresh = Receiver()
        #expect(Self.receive(1 << 62, into: &fresh).requests.isEmpty && fresh.rejected == 1, "beyond any stream: rejected")
        var receiver = Receiver()
        #expect(Self.receive(1 << 61, into: &receiver).requests == [Self.ask(from: 0, to: (1 << 61) - 1)])
        #expect(Self.receive([1, 2], into: &receiver).events == ["1", "2"])
        #expect(receiver.heldCount(of: "x", .all) == 0, "beyond the window once the start is known")
        #expect(receiver.rejected == 1)
        #expect(receiver.tick(now: Self.now + 60_000).requests.isEmpty, "nor is the range below it asked for")

        // A late joiner: the sender answers the forged range with its position, and is asked within it.
        let outbox = Self.outbox(sending: 10, marking: nil)
        var late = Receiver()
        let forged = Self.receive(1 << 61, into: &late)
        #expect(Self.receive(10, into: &late) == .init())
        let position = Self.answer(forged.requests[0], by: outbox, to: &late)
        #expect(position.requests == [Self.ask(from: 0, to: 10)])
        #expect(Self.text(Self.answer(position.requests[0], by: outbox, to: &late).events) == ["10"])
        #expect(late.cursor(of: "x", .all) == 10)
        #expect(late.heldCount(of: "x", .all) == 0)
    }

    @Test func aForgedSeqFarAheadIsDroppedOnTheSendersPosition() {
        // An envelope with the sender's epoch and seq = cursor + 999,999 (forged) is held and its
        // gap asked for; the real sender answers that request with its position, below the forged seq.
        let outbox = Self.outbox(sending: 3)
        var receiver = Receiver()
        #expect(Self.receive([1, 2, 3], into: &receiver) == (["1", "2", "3"], []))
        let forged = Self.receive(3 + 999_999, into: &receiver)
        #expect(forged.requests == [Self.ask(from: 4, to: 3 + 999_998)])
        #expect(Self.answer(forged.requests[0], by: outbox, to: &receiver).events.isEmpty)
        #expect(receiver.heldCount(of: "x", .all) == 0, "the forged message is dropped")
        #expect(receiver.rejected == 1, "and counted")
        #expect(receiver.tick(now: Self.now + 60_000).requests.isEmpty, "nothing is asked for any more")
        #expect(Self.receive([4, 5], into: &receiver).events == ["4", "5"], "the sender's next messages come through")
    }

    /// A position older than one already stated (a QoS 1 copy the broker sent again after a reconnect)
    /// drops nothing: the message held beyond it was sent after it.
    @Test func aLatePositionBelowAStatedOneDropsNothing() {
        var receiver = Receiver()
        #expect(Self.receive([1, 3], into: &receiver) == (["1"], [Self.ask(from: 2, to: 2)]))
        #expect(receiver.position(from: "x", epoch: Self.epoch, all: 3, direct: 0, now: Self.now).requests.isEmpty)
        let late = receiver.position(from: "x", epoch: Self.epoch, all: 2, direct: 0, now: Self.now)
        #expect(late.requests.isEmpty && late.events.isEmpty)
        #expect(receiver.heldCount(of: "x", .all) == 1 && receiver.rejected == 0)
        #expect(Self.text(Self.receive(2, into: &receiver).events) == ["2", "3"])
    }

    @Test func aLostSenderWithAForgedSeqHeldIsNotSilencedWhenItComesBack() {
        // The sender is frozen (it cannot answer) while a forged seq is held; it is lost, so what is
        // held comes out — but the cursor stays where the sender vouched for, and its later messages
        // still come through once it thaws.
        var receiver = Receiver()
        #expect(Self.receive([1, 2], into: &receiver) == (["1", "2"], []))
        #expect(receiver.position(from: "x", epoch: Self.epoch, all: 2, direct: 0, now: Self.now) == .init())
        #expect(Self.receive([4, 2 + 500_000], into: &receiver) == ([], [Self.ask(from: 3, to: 3), Self.ask(from: 5, to: 500001)]))
        #expect(Self.text(receiver.senderLost("x").events) == ["gap 3-3", "4", "gap 5-500001", "500002"])
        #expect(receiver.cursor(of: "x", .all) == 2, "not beyond what the sender stated")
        #expect(Self.receive([3, 4, 5, 6], into: &receiver).events == ["3", "5", "6"], "4 was given out already")
        #expect(Self.receive([2 + 500_000], into: &receiver).events.isEmpty, "nor is the forged one given out twice")
    }

    @Test func tooManyHeldMessagesGiveUpTheLowestGap() {
        var receiver = Receiver(configuration: .init(maximumHeld: 3))
        #expect(Self.receive([1, 3, 4, 5], into: &receiver) == (["1"], [Self.ask(from: 2, to: 2)]))
        #expect(Self.receive([7], into: &receiver).events == ["gap 2-2", "3", "4", "5"])
        #expect(receiver.heldCount(of: "x", .all) == 1)
        #expect(receiver.cursor(of: "x", .all) == 5)

        // Before the start is known, giving up fixes it below the lowest held message, without a gap event:
        // whether what lies below was owed is unknown.
        var fresh = Receiver(configuration: .init(maximumHeld: 2))
        let result = Self.receive([5, 6, 7], into: &fresh)
        #expect(result.events == ["5", "6", "7"])
        #expect(result.requests == [Self.ask(from: 0, to: 4)])
        #expect(fresh.tick(now: Self.now + 60_000).requests.isEmpty)
    }

    @Test func requestsAreSentAgainWithBackoffUntilTheGapCloses() {
        var receiver = Receiver()
        let start = Self.now
        #expect(Self.receive(3, now: start, into: &receiver).requests == [Self.ask(from: 0, to: 2)])
        var retries: [Int64] = []
        for now in stride(from: start, through: start + 40_000, by: 100) where !receiver.tick(now: now).requests.isEmpty {
            retries.append(now - start)
        }
        #expect(retries == [1_000, 3_000, 7_000, 15_000, 23_000, 31_000, 39_000])
        #expect(receiver.tick(now: start + 47_000).requests == [Self.ask(from: 0, to: 2)])

        // A reconnect asks at once and starts the backoff again.
        #expect(
            receiver.reconnected(now: start + 50_000).requests == [Self.ask(from: 0, to: nil), Self.ask("x", .direct, from: 0, to: nil)])
        #expect(receiver.tick(now: start + 50_999).requests.isEmpty)
        #expect(receiver.tick(now: start + 51_000).requests.count == 1)

        #expect(Self.receive([1, 2], into: &receiver) == (["1", "2", "3"], []))
        #expect(receiver.tick(now: start + 100_000).requests.isEmpty)
    }

    /// What is held is never asked for again: a first request, its retries and the asks after a reconnect
    /// name only the missing runs (a sender would send the rest again, behind a long gap hundreds of
    /// messages, into the queue that already dropped some), at most ``maximumAsks`` runs at a time — and
    /// the highest seq asked for is still asked for, so that a sender whose latest is below it answers
    /// with its position (which exposes held messages it never sent).
    @Test func onlyWhatIsMissingIsAskedFor() {
        var receiver = Receiver()
        let start = Self.now
        let first = Self.receive([1] + Array(3...10) + [12], into: &receiver)
        #expect(first == (["1"], [Self.ask(from: 2, to: 2), Self.ask(from: 11, to: 11)]))
        #expect(receiver.tick(now: start + 1_000).requests == [Self.ask(from: 2, to: 2), Self.ask(from: 11, to: 11)], "a retry")
        #expect(
            receiver.reconnected(now: start + 1_500).requests == [
                Self.ask(from: 2, to: 2), Self.ask(from: 11, to: 11), Self.ask(from: 13, to: nil), Self.ask("x", .direct, from: 0, to: nil),
            ], "and everything after the highest held (the direct stream's start is not known yet)")
        var holes = Receiver()
        let every = Self.receive([1] + stride(from: 3, through: 61, by: 2).map { Int64($0) }, into: &holes)
        #expect(every.requests.count == 30, "one ask per new gap as it opens")
        let retry = holes.tick(now: start + 1_000).requests
        let lowest = stride(from: 2, through: 32, by: 2).map { Self.ask(from: Int64($0), to: Int64($0)) }
        #expect(retry == lowest + [Self.ask(from: 60, to: 60)], "the lowest 16 runs, the rest next time; and the highest asked for")
    }

    /// A request made or sent again, and every tick while one is pending, says when it is due again
    /// (`retryAt`): the session's timer wakes then, and at no other time while nothing is pending.
    @Test func requestsSayWhenTheyAreDueAgain() {
        var receiver = Receiver()
        let start = Self.now
        #expect(receiver.nextRetry == nil)
        #expect(Self.receive(1, now: start, into: &receiver).retryAt == nil, "in order: nothing to ask")
        #expect(Self.receive(3, now: start, into: &receiver).retryAt == start + 1_000)
        #expect(receiver.nextRetry == start + 1_000)
        let again = receiver.tick(now: start + 1_000)
        #expect(again.requests.count == 1 && again.retryAt == start + 3_000, "the delay doubles")
        // Not due: nothing is asked, but the tick says when it is — it may have run for another deadline,
        // earlier than the retry's, which the session's timer kept instead.
        #expect(receiver.tick(now: start + 2_000) == .init(retryAt: start + 3_000))
        #expect(receiver.nextRetry == start + 3_000)
        #expect(
            Self.receive(2, now: start, into: &receiver).events == [
                .message("2", sender: "x", stream: .all, seq: 2), .message("3", sender: "x", stream: .all, seq: 3),
            ])
        #expect(receiver.nextRetry == nil, "answered")
    }

    /// A request answered in part each round (the rest dropped on the way, as by a receiver's full queue
    /// at the broker) is sent again after the first delay, not a doubled one: the rest comes in as many
    /// rounds as it takes, a second apart.
    @Test func aRequestAnsweredInPartIsSentAgainSoon() {
        var receiver = Receiver()
        let start = Self.now
        #expect(Self.receive(1, now: start, into: &receiver).events == [.message("1", sender: "x", stream: .all, seq: 1)])
        #expect(Self.receive(30, now: start, into: &receiver).requests == [Self.ask(from: 2, to: 29)])
        #expect(receiver.tick(now: start + 1_000).requests == [Self.ask(from: 2, to: 29)])
        // Nothing came: the delay doubles.
        #expect(receiver.tick(now: start + 2_999).requests.isEmpty)
        #expect(receiver.tick(now: start + 3_000).requests == [Self.ask(from: 2, to: 29)])
        // Part came: asked again for the rest after the first delay.
        #expect(Self.receive(Array(2...11), into: &receiver).events == (2...11).map(String.init))
        #expect(receiver.tick(now: start + 6_999).requests.isEmpty)
        #expect(receiver.tick(now: start + 7_000).requests == [Self.ask(from: 12, to: 29)])
        #expect(Self.receive(Array(12...20), into: &receiver) == (["12", "13", "14", "15", "16", "17", "18", "19", "20"], []))
        #expect(receiver.tick(now: start + 8_000).requests == [Self.ask(from: 21, to: 29)])
        #expect(receiver.tick(now: start + 9_000).requests == [Self.ask(from: 21, to: 29)])
        // Nothing more: doubling again.
        #expect(receiver.tick(now: start + 10_999).requests.isEmpty)
        #expect(receiver.tick(now: start + 11_000).requests == [Self.ask(from: 21, to: 29)])
    }

    // MARK: - Loss, duplication and reordering end to end

    /// Many seeded runs of one sender and two receivers through a network that loses, duplicates and
    /// reorders every packet (envelopes, requests, skips, positions), with reconnects on both sides; then
    /// the network heals. Each receiver must end up with every seq it is owed, per stream, exactly once and
    /// in order, as a message or (only for seqs that left the outbox) a gap event.
    @Test func nothingLostDuplicatedOrReorderedUnderRandomLoss() {
        var gaps = 0
        for seed in 0..<100 as Range<UInt64> {
            var run = Simulation(seed: seed)
            run.run()
            run.check()
            gaps += run.gapCount
        }
        #expect(gaps > 0, "some runs evict from the outbox what was lost, and report it")
    }
}

/// One sender ("x") with an outbox, receivers "early" (there from the start) and "late" (subscribes
/// mid-stream, and is seen as a member a little later), and a network between them.
private struct Simulation {
    typealias Receiver = StreamReceiver<Data>

    enum Packet {
        case envelope(OutboxStateMachine.Entry, to: String)
        case skip(Reliable.Skip, to: String)
        case position(Reliable.Position, to: String)
        case request(Reliable.ResendRequest, from: String)
    }

    static let epoch: Int64 = 1
    let seed: UInt64
    /// Deterministic, so that a failing seed can be replayed.
    var random: SeededGenerator
    let messageCount: Int
    let loss: Double
    let duplication: Double
    let maximumDelay: Int64
    var lossy = true
    var now: Int64 = 0
    /// Packets on their way, the next due last; those due at the same time in sending order.
    var inFlight: [(at: Int64, packet: Packet)] = []
    var sent = 0
    var outbox: OutboxStateMachine
    var receivers: [String: Receiver] = [:]
    /// Receivers whose mark is taken: direct messages go to them only.
    var members: [String] = []
    /// The `all` seq each receiver is owed after.
    var marks: [String: Int64] = [:]
    var events: [String: [Receiver.Event]] = [:]
    let lateSubscribesAt: Int
    let lateSeenAt: Int

    init(seed: UInt64) {
        self.seed = seed
        random = SeededGenerator(state: seed)
        messageCount = Int.random(in: 40...160, using: &random)
        loss = Double.random(in: 0...0.3, using: &random)
        duplication = Double.random(in: 0...0.2, using: &random)
        maximumDelay = Int64.random(in: 0...60, using: &random)
        // Half the runs keep everything; the others evict what is lost before it is asked for.
        let keepsAll = Bool.random(using: &random)
        outbox = OutboxStateMachine(configuration: .init(maximumCount: keepsAll ? 1_000 : Int.random(in: 5...40, using: &random)))
        lateSubscribesAt = Int.random(in: 0..<messageCount, using: &random)
        lateSeenAt = lateSubscribesAt + Int.random(in: 0...10, using: &random)
        subscribe("early")
        seen("early")
    }

    var gapCount: Int {
        events.values.joined().count { if case .gap = $0 { true } else { false } }
    }

    mutating func subscribe(_ receiver: String) {
        receivers[receiver] = Receiver(configuration: .init(retryInterval: 50, maximumRetryInterval: 400))
    }

    mutating func seen(_ receiver: String) {
        outbox.memberSeen(receiver)
        marks[receiver] = outbox.latest(of: .all)
        members.append(receiver)
    }

    static func payload(_ stream: Reliable.Stream, _ seq: Int64) -> Data {
        switch stream {
        case .all: Data("all \(seq)".utf8)
        case let .direct(recipient): Data("\(recipient) \(seq)".utf8)
        }
    }

    mutating func transmit(_ packet: Packet) {
        if lossy && Double.random(in: 0..<1, using: &random) < loss { return }
        let copies = lossy && Double.random(in: 0..<1, using: &random) < duplication ? 2 : 1
        for _ in 0..<copies {
            let at = now + Int64.random(in: 0...maximumDelay, using: &random)
            var index = inFlight.count
            while index > 0, inFlight[index - 1].at <= at { index -= 1 }
            inFlight.insert((at, packet), at: index)
        }
    }

    mutating func perform(_ action: Receiver.Action, of receiver: String) {
        events[receiver, default: []] += action.events
        for request in action.requests { transmit(.request(request.resend, from: receiver)) }
    }

    mutating func deliver(_ packet: Packet) {
        switch packet {
        case let .envelope(entry, to):
            let action = receivers[to]!.receive(
                entry.payload, from: "x", epoch: Self.epoch, stream: entry.stream.kind, seq: entry.seq, now: now)
            perform(action, of: to)
        case let .skip(skip, to):
            perform(receivers[to]!.skip(skip, from: "x", epoch: Self.epoch, now: now), of: to)
        case let .position(position, to):
            let action = receivers[to]!.position(
                from: "x", epoch: Self.epoch, all: position.all, direct: position.direct[to] ?? 0, now: now)
            perform(action, of: to)
        case let .request(request, from):
            switch outbox.answer(request, from: from) {
            case let .resend(skip, entries):
                if let skip { transmit(.skip(skip, to: from)) }
                for entry in entries { transmit(.envelope(entry, to: from)) }
            case let .position(position):
                transmit(.position(position, to: from))
            }
        }
    }

    /// Delivers every packet due by `now`, earliest first.
    mutating func deliverDue() {
        while let last = inFlight.last?.at, last <= now {
            deliver(inFlight.removeLast().packet)
        }
    }

    mutating func tick() {
        for name in receivers.keys.sorted() { perform(receivers[name]!.tick(now: now), of: name) }
    }

    /// The sender's connection comes back: it broadcasts its position.
    mutating func senderReconnects() {
        for name in receivers.keys.sorted() { transmit(.position(outbox.position(for: name), to: name)) }
    }

    mutating func run() {
        var step = 0
        while sent < messageCount {
            now += Int64.random(in: 1...5, using: &random)
            if step == lateSubscribesAt { subscribe("late") }
            if step == lateSeenAt { seen("late") }
            step += 1
            if Bool.random(using: &random) {
                let stream: Reliable.Stream =
                    Int.random(in: 0..<3, using: &random) == 0 ? .direct(to: members.randomElement(using: &random)!) : .all
                let entry = outbox.append(to: stream) { Self.payload(stream, $0) }
                sent += 1
                for name in receivers.keys.sorted() where stream == .all || stream == .direct(to: name) {
                    transmit(.envelope(entry, to: name))
                }
            }
            deliverDue()
            if step % 10 == 0 { tick() }
            if Int.random(in: 0..<150, using: &random) == 0 { senderReconnects() }
            if Int.random(in: 0..<150, using: &random) == 0, let name = receivers.keys.sorted().randomElement(using: &random) {
                perform(receivers[name]!.reconnected(now: now), of: name)
            }
        }
        if lateSeenAt >= step { seen("late") }
        // The network heals; the sender's reconnect tells every receiver where the streams end.
        lossy = false
        senderReconnects()
        for _ in 0..<10_000 {
            if let next = inFlight.last?.at {
                now = max(now, next)
                deliverDue()
            } else {
                now += 1_000
                let before = inFlight.count
                tick()
                if inFlight.count == before { return }
            }
        }
        Issue.record("seed \(seed): the network never went quiet")
    }

    /// What went wrong in this run; recorded as one issue, so that checking costs little.
    func check() {
        var failures: [String] = []
        for (name, receiver) in receivers.sorted(by: { $0.key < $1.key }) {
            for stream in Reliable.StreamKind.allCases {
                let sent: Reliable.Stream = stream == .all ? .all : .direct(to: name)
                check(name, stream, owedAfter: stream == .all ? marks[name]! : 0, latest: outbox.latest(of: sent), &failures)
                if receiver.heldCount(of: "x", stream) > 0 { failures.append("\(name) \(stream): messages still held") }
            }
        }
        #expect(failures.isEmpty, "seed \(seed): \(failures.prefix(5))")
    }

    /// `receiver`'s events of one stream: strictly ascending seqs, every one after `owedAfter` through
    /// `latest` present, and gaps only for seqs the outbox no longer has.
    func check(
        _ receiver: String, _ stream: Reliable.StreamKind, owedAfter: Int64, latest: Int64, _ failures: inout [String]
    ) {
        let context = "\(receiver) \(stream)"
        let sent: Reliable.Stream = stream == .all ? .all : .direct(to: receiver)
        var next = owedAfter + 1  // the next owed seq not seen yet
        var previous: Int64 = 0
        for event in events[receiver, default: []] {
            let seqs: ClosedRange<Int64>
            switch event {
            case let .message(payload, _, eventStream, seq):
                guard eventStream == stream else { continue }
                if payload != Self.payload(sent, seq) { failures.append("\(context): wrong payload for \(seq)") }
                seqs = seq...seq
            case let .gap(_, eventStream, gap):
                guard eventStream == stream else { continue }
                if gap.lowerBound <= owedAfter { failures.append("\(context): gap \(gap) before the mark") }
                let request = Reliable.ResendRequest(stream: stream, from: gap.lowerBound, to: gap.upperBound)
                if case let .resend(_, entries) = outbox.answer(request, from: receiver), entries.isEmpty {
                } else {
                    failures.append("\(context): gap \(gap) while the outbox still has some of it")
                }
                seqs = gap
            }
            if seqs.lowerBound <= previous { failures.append("\(context): \(seqs) after \(previous): duplicated or reordered") }
            previous = seqs.upperBound
            if seqs.upperBound >= next {
                if seqs.lowerBound > next { failures.append("\(context): \(next)...\(seqs.lowerBound - 1) lost without a gap event") }
                next = seqs.upperBound + 1
            }
        }
        if next != latest + 1 { failures.append("\(context): \(next)...\(latest) never came") }
    }
}
