import Foundation
import Testing

@testable import GroupSync

/// Pure logic of one session, driven without a broker.
@Suite struct SessionStateMachineTests {
    typealias Machine = SessionStateMachine

    static let announcement = Wire.Announcement(
        session: "s1", activity: .init(type: "com.example.test", metadata: .init(title: "Test"), data: .int(1)),
        createdBy: "alice", createdAt: 1, revision: HLCTimestamp(time: 1, counter: 0, participant: "alice"), ttl: 60)

    static func waiting(as me: String = "alice") -> Machine {
        Machine(me: me, myEpoch: 1, announcement: announcement, announcer: "alice", presence: [me: 1])
    }

    static func joined(as me: String = "alice") -> Machine {
        var machine = waiting(as: me)
        let started = machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox())
        #expect(started)
        _ = machine.onJoined(now: 1_000)
        return machine
    }

    static func record(_ value: Int64, at time: Int64, by writer: String) -> Wire.StateRecord {
        Wire.StateRecord(key: "k", value: .int(value), clock: HLCTimestamp(time: time, counter: 0, participant: writer))
    }

    @discardableResult
    static func listen(_ machine: inout Machine) -> UInt64 {
        let inbox = Inbox<Machine.Update>(keepingNewest: 1)
        return machine.addListener(.init(kind: .values(key: "k"), inbox: inbox)).0!
    }

    /// `name` joined with epoch `epoch` and is online with it.
    static func present(_ name: String, epoch: Int64 = 7, in machine: inout Machine) {
        _ = machine.onPresence(name, epoch: epoch, now: 1_000)
        _ = machine.onMember(name, Wire.Member(participant: name, epoch: epoch), retained: true, now: 1_000)
    }

    static func envelope(type: String = "Chat", epoch: Int64 = 7, seq: Int64, reliable: Bool = true) -> (Wire.ScannedEnvelope, Data) {
        let payload = Data(#"{"body":{},"epoch":\#(epoch),"reliable":\#(reliable),"seq":\#(seq),"type":"\#(type)","v":2}"#.utf8)
        return (Wire.decodeEnvelope(payload)!, payload)
    }

    // MARK: - Shared state

    @Test func recordsOfOneBurstMakeOneVisibleChange() {
        var machine = Self.joined()
        Self.listen(&machine)
        for (value, time) in [(10, 100), (20, 102), (15, 101)] as [(Int64, Int64)] {
            let action = machine.onState(
                Self.record(value, at: time, by: "w\(value)"), key: "k", writer: "w\(value)", topic: "t\(value)", now: 1_000,
                holdingValues: true)
            #expect(action.values.isEmpty, "held until the burst ends")
        }
        #expect(machine.releaseHeldValues().values == [.int(20)], "one change, to the newest record")
        #expect(machine.releaseHeldValues().values.isEmpty)
        #expect(machine.states["k"]?.value == .int(20))
    }

    @Test func aLocalWriteSupersedesWhatIsHeld() {
        var machine = Self.joined()
        Self.listen(&machine)
        _ = machine.onState(Self.record(10, at: 100, by: "bob"), key: "k", writer: "bob", topic: "t", now: 1_000, holdingValues: true)
        #expect(machine.onLocalWrite(Self.record(11, at: 105, by: "alice"), topic: "mine").values == [.int(11)])
        #expect(machine.releaseHeldValues().values.isEmpty, "the held older value would make the screen go back")
    }

    @Test func aRemovedListenerGetsNothingHeld() {
        var machine = Self.joined()
        let id = Self.listen(&machine)
        _ = machine.onState(Self.record(10, at: 100, by: "bob"), key: "k", writer: "bob", topic: "t", now: 1_000, holdingValues: true)
        machine.removeListener(id)
        #expect(machine.releaseHeldValues().values.isEmpty)
    }

    @Test func anOlderRecordChangesNothing() {
        var machine = Self.joined()
        Self.listen(&machine)
        _ = machine.onState(Self.record(20, at: 200, by: "bob"), key: "k", writer: "bob", topic: "t1", now: 1_000)
        #expect(
            machine.onState(Self.record(10, at: 100, by: "carol"), key: "k", writer: "carol", topic: "t2", now: 1_000, holdingValues: true)
                .values.isEmpty)
        #expect(machine.releaseHeldValues().values.isEmpty)
        #expect(machine.states["k"]?.value == .int(20))
    }

    @Test func aRecordWithSomeoneElsesClockIsForged() {
        var machine = Self.joined()
        Self.listen(&machine)
        #expect(machine.onState(Self.record(5, at: 100, by: "alice"), key: "k", writer: "mallory", topic: "t", now: 1_000).values.isEmpty)
        #expect(machine.rejected == 1)
        #expect(machine.states["k"] == nil)
    }

    @Test func aRecordMustBeWhatItsTopicSaysWithAPlausibleClock() {
        var machine = Self.joined()
        let record = Self.record(5, at: 100, by: "bob")
        #expect(machine.onState(record, key: "other", writer: "bob", topic: "t", now: 1_000).clocks.isEmpty)
        #expect(machine.onState(record, key: "k", writer: "bob", topic: "t", now: 100 - HLCTimestamp.maximumSkew - 1).clocks.isEmpty)
        #expect(machine.rejected == 2)
        #expect(machine.stateTopics.isEmpty && machine.states.isEmpty)
        #expect(machine.onState(record, key: "k", writer: "bob", topic: "t", now: 1_000).clocks == [record.clock], "merged into our clock")
        #expect(machine.stateTopics == ["t"], "remembered, to clear it when the session ends")
    }

    @Test func aCatchUpLeavesOutImplausibleRecords() {
        var machine = Self.waiting()
        Self.present("bob", in: &machine)
        _ = machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox())
        let future = Wire.StateRecord(key: "f", value: .int(1), clock: HLCTimestamp(time: .max, counter: 0, participant: "bob"))
        let action = machine.onCatchUp(
            .init(states: [future, Self.record(2, at: 50, by: "bob")], members: []), from: "bob", retainAvailable: true, now: 1_000)
        #expect(action.clocks.map(\.time) == [50])
        #expect(machine.states.keys.sorted() == ["k"])
    }

    @Test func valueListenersStartWithTheCaughtUpValueWhenJoined() {
        var machine = Self.waiting()
        let inbox = Inbox<Machine.Update>(keepingNewest: 1)
        #expect(machine.addListener(.init(kind: .values(key: "k"), inbox: inbox)).1.deliveries.isEmpty, "nothing before the join")
        _ = machine.onState(Self.record(3, at: 100, by: "bob"), key: "k", writer: "bob", topic: "t", now: 1_000)
        let started = machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox())
        #expect(started)
        let joined = machine.onJoined(now: 1_000)
        #expect(joined.values == [.int(3)])
        let late = machine.addListener(.init(kind: .values(key: "other"), inbox: Inbox()))
        #expect(late.1.deliveries.count == 1, "a listener added once joined gets the current value (none here) at once")
    }

    // MARK: - Joining

    @Test func theBarrierSaysWhetherToAwaitACatchUp() {
        var alone = Self.waiting()
        let barrier = Inbox<Machine.Update>()
        let started = alone.onJoinStarted(barrier: barrier, caughtUp: Inbox())
        #expect(started)
        let again = alone.onJoinStarted(barrier: Inbox(), caughtUp: Inbox())
        #expect(!again, "one join at a time")
        #expect(alone.onBarrierPassed(retainAvailable: true).barrier == false, "nobody else is there")
        #expect(alone.onBarrierPassed(retainAvailable: true).deliveries.isEmpty, "the barrier passes once")

        var withBob = Self.waiting()
        Self.present("bob", in: &withBob)
        _ = withBob.onJoinStarted(barrier: Inbox(), caughtUp: Inbox())
        #expect(withBob.onBarrierPassed(retainAvailable: true).barrier == true)

        var withoutRetain = Self.waiting()
        _ = withoutRetain.onJoinStarted(barrier: Inbox(), caughtUp: Inbox())
        #expect(withoutRetain.onBarrierPassed(retainAvailable: false).barrier == true, "who is there cannot be known")
    }

    @Test func anAbandonedJoinLeavesTheSessionWaiting() async {
        var machine = Self.waiting()
        let (barrier, caughtUp) = (Inbox<Machine.Update>(), Inbox<Machine.Update>())
        _ = machine.onJoinStarted(barrier: barrier, caughtUp: caughtUp)
        machine.onJoinAbandoned().finishAll()
        #expect(machine.state == .waiting)
        #expect(await barrier.next() == nil, "the join's waits end")
        #expect(await caughtUp.next() == nil)
        let started = machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox())
        #expect(started, "it can be joined again")
    }

    @Test func aCatchUpIsAcceptedOnlyWhileJoiningAndFromAMember() {
        let catchUp = Wire.CatchUp(states: [Self.record(9, at: 50, by: "bob")], members: [])
        var machine = Self.waiting()
        Self.present("bob", in: &machine)
        #expect(machine.onCatchUp(catchUp, from: "bob", retainAvailable: true, now: 1_000).caughtUp == false, "not joining")
        _ = machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox())
        #expect(machine.onCatchUp(catchUp, from: "mallory", retainAvailable: true, now: 1_000).caughtUp == false, "not a member")
        let accepted = machine.onCatchUp(catchUp, from: "bob", retainAvailable: true, now: 1_000)
        #expect(accepted.caughtUp)
        #expect(accepted.clocks == catchUp.states.map(\.clock), "merged into our clock")
        #expect(machine.states["k"]?.value == .int(9))
        _ = machine.onJoined(now: 1_000)
        #expect(machine.onCatchUp(catchUp, from: "bob", retainAvailable: true, now: 1_000).caughtUp == false, "too late")
        #expect(machine.rejected == 3)
    }

    @Test func withoutRetainedMessagesTheCatchUpListsTheMembers() {
        var machine = Self.waiting()
        _ = machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox())
        let catchUp = Wire.CatchUp(
            states: [], members: [Wire.Member(participant: "bob", epoch: 4), Wire.Member(participant: "alice", epoch: 9)])
        #expect(machine.onCatchUp(catchUp, from: "bob", retainAvailable: false, now: 1_000).caughtUp)
        #expect(machine.members == ["bob": 4], "our own entry is ours to make")
        #expect(ids(machine.active) == ["bob"])
        _ = machine.onJoined(now: 1_000)
        #expect(ids(machine.active) == ["alice", "bob"])
        #expect(machine.catchUp(listingMembers: true).flatMap(\.members).map(\.participant) == ["alice", "bob"])
        #expect(machine.catchUp(listingMembers: false).flatMap(\.members).isEmpty)
    }

    @Test func aMemberRecordFromTooFarAheadIsRejected() {
        var machine = Self.joined()
        let forged = machine.onMember("eve", Wire.Member(participant: "eve", epoch: .max), retained: false, now: 1_000)
        #expect(forged.participants.isEmpty && !machine.isMember("eve"))
        #expect(machine.rejected == 1)
    }

    @Test func aCatchUpLargerThanOneMessageComesInPartsAndTheJoinWaitsForTheLast() {
        var sender = Self.joined(as: "bob")
        let big = JSONValue.string(String(repeating: "x", count: 1_000))
        for key in ["a", "b", "c", "d", "e"] {
            _ = sender.onLocalWrite(
                Wire.StateRecord(key: key, value: big, clock: .init(time: 5, counter: 0, participant: "bob")), topic: key)
        }
        let parts = sender.catchUp(listingMembers: false, budget: 2_500)
        #expect(parts.map { $0.states.map(\.key) } == [["a", "b"], ["c", "d"], ["e"]])
        #expect(parts.map(\.more) == [true, true, nil])
        #expect(sender.catchUp(listingMembers: false).count == 1, "no limit: one message")

        var newcomer = Self.waiting()
        Self.present("bob", in: &newcomer)
        _ = newcomer.onJoinStarted(barrier: Inbox(), caughtUp: Inbox())
        let caughtUp = parts.map { newcomer.onCatchUp($0, from: "bob", retainAvailable: true, now: 1_000).caughtUp }
        #expect(caughtUp == [false, false, true])
        #expect(newcomer.states.keys.sorted() == ["a", "b", "c", "d", "e"])
    }

    // MARK: - Participants

    @Test func aMemberRecordOfAnotherEpochDoesNotEvictAnActiveMember() {
        // Without the ACL, bob's member record with his epoch + 1 would make him
        // inactive and reject his messages. It is held back until bob's connection has that epoch.
        var machine = Self.joined()
        Self.present("bob", epoch: 7, in: &machine)
        #expect(Set(machine.active.map(\.id)) == ["alice", "bob"])
        #expect(!machine.admitsMember("bob", epoch: 8, now: 1_000))
        #expect(machine.onMember("bob", Wire.Member(participant: "bob", epoch: 8), retained: true, now: 1_000).participants.isEmpty)
        #expect(Set(machine.active.map(\.id)) == ["alice", "bob"] && machine.members["bob"] == 7)
        let (chat, payload) = Self.envelope(epoch: 7, seq: 1)
        _ = machine.addListener(.init(kind: .messages(type: "Chat"), inbox: Inbox()))
        #expect(machine.onMessage(chat, payload: payload, sender: "bob", direct: false, now: 1_000).messages == ["bob"], "not silenced")
        // A real restart: the new connection's presence comes, and the record held back for it counts.
        let restarted = machine.onPresence("bob", epoch: 8, now: 1_000)
        #expect(restarted.memberAdopted?.epoch == 8)
        #expect(Set(machine.active.map(\.id)) == ["alice", "bob"] && machine.members["bob"] == 8)
    }

    @Test func activeMeansJoinedWithTheLiveConnection() {
        var machine = Self.joined()
        let inbox = Inbox<Machine.Update>()
        #expect(machine.addListener(.init(kind: .participants, inbox: inbox)).1.participants == [["alice"]])
        #expect(
            machine.onMember("bob", Wire.Member(participant: "bob", epoch: 2), retained: true, now: 1_000).participants.isEmpty,
            "no presence yet")
        #expect(machine.onPresence("bob", epoch: 2, now: 1_000).participants == [["alice", "bob"]])
        #expect(machine.onPresence("bob", epoch: 3, now: 1_000).participants == [["alice"]], "a newer connection did not join")
        #expect(
            machine.onMember("bob", Wire.Member(participant: "bob", epoch: 3), retained: false, now: 1_000).participants == [
                ["alice", "bob"]
            ])
        #expect(machine.onMember("bob", nil, retained: false, now: 1_000).participants == [["alice"]], "left")
        #expect(machine.onPresence("alice", epoch: nil, now: 1_000).participants.isEmpty, "our own presence is ours to know")
    }

    @Test func aLiveJoinProvesTheConnectionAndAsksTheResponderForACatchUp() {
        var machine = Self.joined()
        let live = machine.onMember("bob", Wire.Member(participant: "bob", epoch: 2), retained: false, now: 1_000)
        #expect(live.catchUpTo == "bob", "we are the only one who can answer")
        #expect(ids(machine.active) == ["alice", "bob"], "a live join counts without retained presence")
        var other = Self.joined()
        #expect(
            other.onMember("carol", Wire.Member(participant: "carol", epoch: 2), retained: true, now: 1_000).catchUpTo == nil,
            "a replayed record is no join")
    }

    // MARK: - Messages

    @Test func messagesReachTheirTypeOnceFromMembersOnly() {
        var machine = Self.waiting()
        let chats = Inbox<Machine.Update>()
        let other = Inbox<Machine.Update>()
        _ = machine.addListener(.init(kind: .messages(type: "Chat"), inbox: chats))
        _ = machine.addListener(.init(kind: .messages(type: "Other"), inbox: other))
        Self.present("bob", in: &machine)
        let (first, payload) = Self.envelope(seq: 1)
        #expect(machine.onMessage(first, payload: payload, sender: "bob", direct: false, now: 1_000).messages.isEmpty, "not joined yet")
        _ = machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox())
        _ = machine.onJoined(now: 1_000)
        #expect(machine.onMessage(first, payload: payload, sender: "bob", direct: false, now: 1_000).messages == ["bob"])
        #expect(machine.onMessage(first, payload: payload, sender: "bob", direct: false, now: 1_000).messages.isEmpty, "a redelivery")
        let (unreliable, unreliablePayload) = Self.envelope(seq: 1, reliable: false)
        #expect(
            machine.onMessage(unreliable, payload: unreliablePayload, sender: "bob", direct: false, now: 1_000).messages == ["bob"],
            "not deduplicated")
        #expect(machine.onMessage(first, payload: payload, sender: "mallory", direct: false, now: 1_000).messages.isEmpty)
        #expect(machine.rejected == 1, "only members may message the session")
        for epoch: Int64 in [6, 8, Wire.Bounds.time.upperBound] {
            let (other, otherPayload) = Self.envelope(epoch: epoch, seq: 9)
            #expect(
                machine.onMessage(other, payload: otherPayload, sender: "bob", direct: false, now: 1_000).messages.isEmpty,
                "not the epoch bob joined with")
        }
        let (absurd, absurdPayload) = Self.envelope(seq: 1 + 1_000_001)
        #expect(
            machine.onMessage(absurd, payload: absurdPayload, sender: "bob", direct: false, now: 1_000).messages.isEmpty, "a forged jump")
        #expect(machine.rejected == 5)
        let (second, secondPayload) = Self.envelope(seq: 2)
        #expect(
            machine.onMessage(second, payload: secondPayload, sender: "bob", direct: false, now: 1_000).messages == ["bob"],
            "bob is not silenced")
    }

    @Test func aMissingReliableMessageIsAskedForAndReportedWhenItCannotCome() {
        var machine = Self.waiting()
        let chats = Inbox<Machine.Update>()
        let gaps = Inbox<Machine.Update>()
        _ = machine.addListener(.init(kind: .messages(type: "Chat"), inbox: chats))
        _ = machine.addListener(.init(kind: .gaps, inbox: gaps))
        Self.present("bob", in: &machine)
        _ = machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox())
        _ = machine.onJoined(now: 1_000)
        func receive(_ seq: Int64, direct: Bool = false) -> Machine.Action {
            let (envelope, payload) = Self.envelope(seq: seq)
            return machine.onMessage(envelope, payload: payload, sender: "bob", direct: direct, now: 1_000)
        }
        #expect(receive(1).messages == ["bob"])
        let early = receive(4)
        #expect(early.messages.isEmpty, "held until 2 and 3 arrive or are given up")
        #expect(early.resend.map(\.resend) == [.init(stream: .all, from: 2, to: 3)])
        #expect(early.resend.map(\.sender) == ["bob"])
        #expect(receive(2).messages == ["bob"])
        // bob no longer has 3: a gap, in its place, then 4.
        let skipped = machine.onSkip(.init(stream: .all, through: 3, lost: [3...3]), from: "bob", epoch: 7, now: 1_000)
        #expect(skipped.deliveries.map { $0.update.isGap } == [true, false])
        #expect(skipped.messages == ["bob"])
        #expect(machine.onSkip(.init(stream: .all, through: 9, lost: []), from: "bob", epoch: 6, now: 1_000).deliveries.isEmpty)
        #expect(machine.rejected == 1, "a skip of another epoch of bob's")
        // A direct stream is numbered apart; after our reconnect, bob is asked for what follows each.
        #expect(receive(1, direct: true).messages == ["bob"])
        let asked = machine.onReconnected(now: 2_000).resend.map(\.resend)
        #expect(asked.contains(.init(stream: .all, from: 5, to: nil)) && asked.contains(.init(stream: .direct, from: 2, to: nil)))
        // bob leaves while 6 waits for 5: 6 comes out after a gap.
        _ = receive(6)
        let left = machine.onMember("bob", nil, retained: false, now: 3_000)
        #expect(left.deliveries.map { $0.update.isGap } == [true, false])
    }

    // MARK: - Activity and invalidation

    @Test func aNewerActivityOfTheSameTypeReachesActivityListeners() {
        var machine = Self.joined()
        let inbox = Inbox<Machine.Update>()
        #expect(machine.addListener(.init(kind: .activity, inbox: inbox)).1.activities == [.int(1)])
        var newer = Self.announcement
        newer.revision.time = 2
        newer.activity.data = .int(2)
        #expect(machine.onAnnouncement(newer, from: "bob").activities == [.int(2)])
        #expect(machine.onAnnouncement(Self.announcement, from: "bob").activities.isEmpty, "older")
        var foreign = newer
        foreign.revision.time = 3
        foreign.activity.type = "com.example.other"
        #expect(machine.onAnnouncement(foreign, from: "bob").activities.isEmpty)
        #expect(machine.rejected == 1, "a session's kind of activity never changes")
        #expect(machine.announcement.activity.data == .int(2))
    }

    @Test func invalidationEndsEverySequenceAfterTheNewState() async {
        var machine = Self.waiting()
        let states = Inbox<Machine.Update>()
        let values = Inbox<Machine.Update>(keepingNewest: 1)
        machine.addListener(.init(kind: .state, inbox: states)).1.deliver()
        _ = machine.addListener(.init(kind: .values(key: "k"), inbox: values))
        let (barrier, caughtUp) = (Inbox<Machine.Update>(), Inbox<Machine.Update>())
        _ = machine.onJoinStarted(barrier: barrier, caughtUp: caughtUp)
        let action = machine.invalidate(.left)
        #expect(action.states == [.invalidated(reason: .left)])
        #expect(action.finish.count == 4, "both sequences and the join's two waits")
        action.deliver()
        action.finishAll()
        #expect(await states.next() == .state(.waiting))
        #expect(await states.next() == .state(.invalidated(reason: .left)))
        #expect(await states.next() == nil)
        #expect(await values.next() == nil)
        #expect(await barrier.next() == nil, "a join in progress gives up")
        #expect(machine.invalidate(.coordinatorClosed).deliveries.isEmpty, "once")
        let (id, late) = machine.addListener(.init(kind: .participants, inbox: Inbox()))
        #expect(id == nil && late.participants.count == 1 && late.finish.count == 1, "the current value, then the end")
        let started = machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox())
        #expect(!started)
    }
}

extension SessionStateMachineTests {
    /// The responder rule is part of the protocol (PROTOCOL.md): every participant, in any language, must
    /// pick the same one. Reference values from an independent FNV-1a 64 implementation.
    @Test func theResponderRankIsFNV1aOfNewcomerSlashCandidate() {
        #expect(Machine.rank("late0", "p17").0 == 11_634_758_946_544_036_672)
        #expect(Machine.rank("alice", "bob").0 == 17_123_353_615_009_346_147)
        #expect(Machine.rank("é", "x").0 == 17_879_697_094_914_859_862)
    }

    /// From every seat of a 50-member session, exactly the candidate with the largest rank answers —
    /// never the newcomer itself, also when the newcomer is one of the members (a rejoin).
    @Test func theResponderIsTheActiveParticipantWithTheLargestRank() {
        let present = (0..<50).map { "p\($0)" }
        for newcomer in ["late0", "late1", "zoe", "p7"] {
            let expected = present.filter { $0 != newcomer }.max { Machine.rank(newcomer, $0) < Machine.rank(newcomer, $1) }
            var answered: [String] = []
            for me in present {
                var machine = Self.joined(as: me)
                for (index, name) in present.enumerated() where name != me {
                    Self.present(name, epoch: Int64(index + 1), in: &machine)
                }
                if machine.isCatchUpResponder(for: newcomer) { answered.append(me) }
            }
            #expect(answered == [expected!], "exactly the largest rank answers \(newcomer)")
        }
    }
}

/// What an action hands to each kind of sequence, for the expectations above.
extension SessionStateMachine.Action {
    var updates: [SessionStateMachine.Update] { deliveries.map(\.update) }

    var states: [GroupSessionState] {
        updates.compactMap { if case let .state(value) = $0 { value } else { nil } }
    }

    var participants: [Set<String>] {
        updates.compactMap { if case let .participants(value) = $0 { Set(value.map(\.id)) } else { nil } }
    }

    var values: [JSONValue?] {
        updates.compactMap { if case let .value(record) = $0 { .some(record?.value) } else { nil } }
    }

    var activities: [JSONValue] {
        updates.compactMap { if case let .activity(value) = $0 { value } else { nil } }
    }

    /// The sender of each message delivered.
    var messages: [String] {
        updates.compactMap { if case let .message(message) = $0 { message.sender.id } else { nil } }
    }

    var barrier: Bool? {
        updates.lazy.compactMap { if case let .barrier(value) = $0 { value } else { nil } }.first
    }

    var caughtUp: Bool { updates.contains(.caughtUp) }
}

extension SessionStateMachine.Update {
    var isGap: Bool {
        if case .gap = self { true } else { false }
    }
}
