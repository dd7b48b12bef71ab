import Foundation
import Testing

@testable import GroupSync

/// The sending side of reliable delivery: numbering, bounds, marks and answers to `$resend`.
@Suite struct OutboxStateMachineTests {
    typealias Outbox = OutboxStateMachine

    static func payload(_ stream: Reliable.Stream, _ seq: Int64, size: Int = 0) -> Data {
        Data("\(stream):\(seq)".utf8) + Data(count: size)
    }

    /// Appends `count` messages to `stream`, each `size` bytes beyond its label.
    static func send(_ count: Int, to stream: Reliable.Stream, size: Int = 0, in outbox: inout Outbox) {
        for _ in 0..<count {
            let entry = outbox.append(to: stream) { payload(stream, $0, size: size) }
            #expect(entry.payload == payload(stream, entry.seq, size: size))
        }
    }

    static func resend(
        _ stream: Reliable.StreamKind = .all, from: Int64, to: Int64? = nil, by requester: String = "r", _ outbox: Outbox
    ) -> (skip: Reliable.Skip?, seqs: [Int64]) {
        guard case let .resend(skip, entries) = outbox.answer(.init(stream: stream, from: from, to: to), from: requester) else {
            Issue.record("expected a resend answer")
            return (nil, [])
        }
        return (skip, entries.map(\.seq))
    }

    @Test func eachStreamCountsFromOneAndKeepsTheEnvelopeMadeForItsSeq() throws {
        var outbox = Outbox()
        let first = outbox.append(to: .all) { Self.payload(.all, $0) }
        let direct = outbox.append(to: .direct(to: "r")) { Self.payload(.direct(to: "r"), $0) }
        let second = outbox.append(to: .all) { Self.payload(.all, $0) }
        #expect([first.seq, direct.seq, second.seq] == [1, 1, 2])
        #expect(second.payload == Self.payload(.all, 2))
        #expect(outbox.latest(of: .all) == 2 && outbox.latest(of: .direct(to: "r")) == 1)
        #expect(outbox.latest(of: .direct(to: "other")) == 0)
        #expect(outbox.count == 3)

        struct Unencodable: Error {}
        #expect(throws: Unencodable.self) { try outbox.append(to: .all) { _ in throw Unencodable() } }
        #expect(outbox.latest(of: .all) == 2, "a message that could not be encoded takes no seq")
    }

    @Test func theOldestLeaveFirstBeyondTheCountAcrossStreams() {
        var outbox = Outbox(configuration: .init(maximumCount: 3))
        outbox.memberSeen("r")
        Self.send(2, to: .all, in: &outbox)
        Self.send(2, to: .direct(to: "r"), in: &outbox)
        #expect(outbox.count == 3)
        // all 1 left; all 2 and direct 1, 2 are kept.
        let all = Self.resend(from: 1, outbox)
        #expect(all.skip == .init(stream: .all, through: 1, lost: [1...1]))
        #expect(all.seqs == [2])
        #expect(Self.resend(.direct, from: 1, outbox).seqs == [1, 2])

        Self.send(200, to: .all, in: &outbox)
        #expect(outbox.count == 3)
        #expect(Self.resend(from: 0, outbox).seqs == [200, 201, 202])
    }

    @Test func theOldestLeaveFirstBeyondTheByteBudget() {
        var outbox = Outbox(configuration: .init(maximumBytes: 1_000))
        outbox.memberSeen("r")
        Self.send(3, to: .all, size: 400, in: &outbox)
        #expect(outbox.count == 2 && outbox.byteCount <= 1_000)
        #expect(Self.resend(from: 1, outbox).skip?.lost == [1...1])

        // One envelope over the whole budget leaves at once, with everything before it: owed as lost.
        Self.send(1, to: .all, size: 2_000, in: &outbox)
        #expect(outbox.count == 0 && outbox.byteCount == 0)
        let answer = Self.resend(from: 1, outbox)
        #expect(answer.skip == .init(stream: .all, through: 4, lost: [1...4]))
        #expect(answer.seqs.isEmpty)
    }

    @Test func theMarkOfAMemberIsWhereTheSenderWasWhenItFirstSawIt() {
        var outbox = Outbox()
        Self.send(5, to: .all, in: &outbox)
        outbox.memberSeen("late")
        Self.send(3, to: .all, in: &outbox)
        outbox.memberSeen("late")  // a second sighting keeps the first mark

        // Asked from 0 (join race: its first message was 8), it is owed 6 and 7; 1…5 were before it.
        let answer = Self.resend(from: 0, to: 7, by: "late", outbox)
        #expect(answer.skip == .init(stream: .all, through: 5, lost: []))
        #expect(answer.seqs == [6, 7])

        // After it left, a rejoin gets a new mark.
        outbox.memberLeft("late")
        outbox.memberSeen("late")
        #expect(Self.resend(from: 0, by: "late", outbox).skip == .init(stream: .all, through: 8, lost: []))
        Self.send(1, to: .all, in: &outbox)
        #expect(Self.resend(from: 0, by: "late", outbox).seqs == [9])

        // A restarted process of a member (a new epoch) is marked anew; the same epoch keeps its mark.
        outbox.memberSeen("late", epoch: 1)
        Self.send(1, to: .all, in: &outbox)
        outbox.memberSeen("late", epoch: 1)
        #expect(Self.resend(from: 0, by: "late", outbox).seqs == [9, 10])
        outbox.memberSeen("late", epoch: 2)
        #expect(Self.resend(from: 0, by: "late", outbox).skip == .init(stream: .all, through: 10, lost: []))
    }

    @Test func aMemberSeenAtTheSendersJoinIsOwedEveryBroadcast() {
        var outbox = Outbox()
        outbox.memberSeen("early")
        Self.send(3, to: .all, in: &outbox)
        let answer = Self.resend(from: 0, by: "early", outbox)
        #expect(answer.skip == nil)
        #expect(answer.seqs == [1, 2, 3])
    }

    @Test func directMessagesAreOwedFromTheFirstUnlessFromAnEarlierMembership() {
        var outbox = Outbox()
        Self.send(3, to: .all, in: &outbox)
        // A direct message marks its recipient: it is owed from 1.
        Self.send(2, to: .direct(to: "r"), in: &outbox)
        #expect(Self.resend(.direct, from: 0, by: "r", outbox).seqs == [1, 2])
        #expect(Self.resend(.direct, from: 0, by: "other", outbox) == (nil, []), "someone else's direct stream is not read")

        outbox.memberLeft("r")
        outbox.memberSeen("r")
        Self.send(1, to: .direct(to: "r"), in: &outbox)
        let again = Self.resend(.direct, from: 0, by: "r", outbox)
        #expect(again.skip == .init(stream: .direct, through: 2, lost: []), "the earlier membership's messages are not owed")
        #expect(again.seqs == [3])
    }

    @Test func anOpenEndedRequestIsAnsweredThroughTheLatest() {
        var outbox = Outbox(configuration: .init(maximumCount: 2))
        outbox.memberSeen("r")
        Self.send(5, to: .all, in: &outbox)
        let answer = Self.resend(from: 2, outbox)
        #expect(answer.skip == .init(stream: .all, through: 3, lost: [1...3]), "lost is the whole owed part that left")
        #expect(answer.seqs == [4, 5])

        // Nothing beyond the latest: nothing to send.
        #expect(Self.resend(from: 6, outbox) == (nil, []))
        // Everything gone: the skip goes through the latest.
        Self.send(2, to: .direct(to: "x"), in: &outbox)
        #expect(Self.resend(from: 4, outbox) == (.init(stream: .all, through: 5, lost: [1...5]), []))
    }

    @Test func aRequesterNotSeenAsAMemberIsOwedNothingSentSoFar() {
        var outbox = Outbox()
        Self.send(4, to: .all, in: &outbox)
        #expect(Self.resend(from: 0, to: 3, by: "stranger", outbox) == (.init(stream: .all, through: 3, lost: []), []))
    }

    @Test func implausibleRequestsAreAnsweredWithThePosition() {
        var outbox = Outbox()
        outbox.memberSeen("r")
        Self.send(3, to: .all, in: &outbox)
        Self.send(1, to: .direct(to: "r"), in: &outbox)
        Self.send(1, to: .direct(to: "other"), in: &outbox)
        let position = Reliable.Position(all: 3, direct: ["r": 1])
        for request in [
            Reliable.ResendRequest(stream: .all, from: -1, to: nil),
            .init(stream: .all, from: 3, to: 2),
            .init(stream: .all, from: 1, to: -5),
            .init(stream: .all, from: 2, to: 4),
            .init(stream: .all, from: 5, to: nil),
            .init(stream: .all, from: 1 << 62, to: .max),
            .init(stream: .all, from: .min, to: .max),
            .init(stream: .direct, from: 0, to: 2),
        ] {
            #expect(outbox.answer(request, from: "r") == .position(position), "\(request)")
        }
        #expect(outbox.position == .init(all: 3, direct: ["r": 1, "other": 1]))
        outbox.memberLeft("other")
        #expect(outbox.position == .init(all: 3, direct: ["r": 1]), "only members' direct streams")
    }
}
