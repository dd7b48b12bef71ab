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
        Machine(me: me, myEpoch: 1, announcement: announcement, presence: [me: 1])
    }

    static func joined(as me: String = "alice") -> Machine {
        var machine = waiting(as: me)
        #expect(machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox()) == .proceed)
        #expect(machine.onJoined(acceptingCatchUpsUntil: 0).isNothing, "nobody listens")
        return machine
    }

    static func record(_ value: Int64, at time: Int64, by writer: String) -> Wire.StateRecord {
        Wire.StateRecord(key: "k", value: .int(value), clock: HLCTimestamp(time: time, counter: 0, participant: writer))
    }

    /// Adds a listener of `kind`; returns its ID (its inbox's identity) and what it got at once.
    static func listen(
        _ machine: inout Machine, _ kind: Machine.Listener.Kind = .values(key: "k"), inbox: Inbox<Machine.Update> = Inbox()
    ) -> (id: ObjectIdentifier, first: [Machine.Update]) {
        let action = machine.addListener(.init(kind: kind, inbox: inbox))
        #expect(action.finished == 0, "a listener of a session that is not over is added, not ended")
        return (ObjectIdentifier(inbox), action.updates)
    }

    /// `name` joined with epoch `epoch` and is online with it.
    static func present(_ name: String, epoch: Int64 = 7, in machine: inout Machine) {
        #expect(machine.onPresence(name, epoch: epoch, now: 1_000).rejected == 0)
        let member = machine.onMember(name, Wire.Member(participant: name, epoch: epoch), retained: true, retainAvailable: true, now: 1_000)
        #expect(member.rejected == 0 && member.sends.isEmpty, "a replayed record: no catch-up")
    }

    static func envelope(type: String = "Chat", epoch: Int64 = 7, seq: Int64, reliable: Bool = true) -> (Wire.ScannedEnvelope, Data) {
        let payload = Data(#"{"body":{},"epoch":\#(epoch),"reliable":\#(reliable),"seq":\#(seq),"type":"\#(type)","v":2}"#.utf8)
        return (Wire.decodeEnvelope(payload)!, payload)
    }

    // MARK: - Shared state

    @Test func recordsOfOneBurstMakeOneVisibleChange() {
        var machine = Self.joined()
        #expect(Self.listen(&machine).first == [.value(nil)], "the current value at once")
        for (value, time) in [(10, 100), (20, 102), (15, 101)] as [(Int64, Int64)] {
            let action = machine.onState(
                Self.record(value, at: time, by: "w\(value)"), key: "k", writer: "w\(value)", topic: "t\(value)", now: 1_000,
                holdingValues: true)
            #expect(action.updates.isEmpty, "held until the burst ends")
            #expect(action.clocks.map(\.time) == [time], "merged into our clock before anything later is handed over")
        }
        #expect(machine.releaseHeldValues().values == [.int(20)], "one change, to the newest record")
        #expect(machine.releaseHeldValues().values.isEmpty)
        #expect(machine.states["k"]?.value == .int(20))
    }

    @Test func aLocalWriteSupersedesWhatIsHeld() {
        var machine = Self.joined()
        #expect(Self.listen(&machine).first == [.value(nil)])
        let held = machine.onState(
            Self.record(10, at: 100, by: "bob"), key: "k", writer: "bob", topic: "t", now: 1_000, holdingValues: true)
        #expect(held.updates.isEmpty && held.rejected == 0)
        #expect(machine.onLocalWrite(Self.record(11, at: 105, by: "alice"), topic: "mine").values == [.int(11)])
        #expect(machine.releaseHeldValues().values.isEmpty, "the held older value would make the screen go back")
    }

    @Test func aRemovedListenerGetsNothingHeld() {
        var machine = Self.joined()
        let (id, first) = Self.listen(&machine)
        #expect(first == [.value(nil)])
        let held = machine.onState(
            Self.record(10, at: 100, by: "bob"), key: "k", writer: "bob", topic: "t", now: 1_000, holdingValues: true)
        #expect(held.updates.isEmpty && held.rejected == 0)
        machine.removeListener(id)
        #expect(machine.releaseHeldValues().values.isEmpty)
    }

    @Test func anOlderRecordChangesNothing() {
        var machine = Self.joined()
        #expect(Self.listen(&machine).first == [.value(nil)])
        #expect(machine.onState(Self.record(20, at: 200, by: "bob"), key: "k", writer: "bob", topic: "t1", now: 1_000).values == [.int(20)])
        #expect(
            machine.onState(Self.record(10, at: 100, by: "carol"), key: "k", writer: "carol", topic: "t2", now: 1_000, holdingValues: true)
                .values.isEmpty)
        #expect(machine.releaseHeldValues().values.isEmpty)
        #expect(machine.states["k"]?.value == .int(20))
    }

    @Test func aRecordWithSomeoneElsesClockIsForged() {
        var machine = Self.joined()
        #expect(Self.listen(&machine).first == [.value(nil)])
        let forged = machine.onState(Self.record(5, at: 100, by: "alice"), key: "k", writer: "mallory", topic: "t", now: 1_000)
        #expect(forged.handovers.isEmpty && forged.rejected == 1, "changes nothing, and is reported")
        #expect(machine.rejected == 1)
        #expect(machine.states["k"] == nil)
    }

    @Test func aRecordMustBeWhatItsTopicSaysWithAPlausibleClock() {
        var machine = Self.joined()
        let record = Self.record(5, at: 100, by: "bob")
        #expect(machine.onState(record, key: "other", writer: "bob", topic: "t", now: 1_000).isRejected)
        #expect(machine.onState(record, key: "k", writer: "bob", topic: "t", now: 100 - HLCTimestamp.maximumSkew - 1).isRejected)
        #expect(machine.rejected == 2)
        #expect(machine.stateTopics.isEmpty && machine.states.isEmpty)
        #expect(machine.onState(record, key: "k", writer: "bob", topic: "t", now: 1_000).clocks == [record.clock], "merged into our clock")
        #expect(machine.stateTopics == ["t"], "remembered, to clear it when the session ends")
    }

    @Test func aCatchUpLeavesOutImplausibleRecords() {
        var machine = Self.waiting()
        Self.present("bob", in: &machine)
        #expect(machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox()) == .proceed)
        let future = Wire.StateRecord(key: "f", value: .int(1), clock: HLCTimestamp(time: .max, counter: 0, participant: "bob"))
        let action = machine.onCatchUp(
            .init(states: [future, Self.record(2, at: 50, by: "bob")], members: []), from: "bob", retainAvailable: true, now: 1_000)
        #expect(action.clocks.map(\.time) == [50])
        #expect(machine.states.keys.sorted() == ["k"], "the other state applies")
        #expect(action.rejected == 1 && machine.rejected == 1, "the implausible one is counted and reported")
    }

    @Test func valueListenersStartWithTheCaughtUpValueWhenJoined() {
        var machine = Self.waiting()
        let inbox = Inbox<Machine.Update>(keepingNewest: 1)
        #expect(Self.listen(&machine, inbox: inbox).first.isEmpty, "nothing before the join")
        #expect(machine.onState(Self.record(3, at: 100, by: "bob"), key: "k", writer: "bob", topic: "t", now: 1_000).values.isEmpty)
        #expect(machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox()) == .proceed)
        let joined = machine.onJoined(acceptingCatchUpsUntil: 0)
        #expect(joined.values == [.int(3)])
        let late = Self.listen(&machine, .values(key: "other"))
        #expect(late.first == [.value(nil)], "a listener added once joined gets the current value (none here) at once")
    }

    // MARK: - Joining

    @Test func theBarrierSaysWhetherToAwaitACatchUp() {
        var alone = Self.waiting()
        let barrier = Inbox<Machine.Update>()
        #expect(alone.onJoinStarted(barrier: barrier, caughtUp: Inbox()) == .proceed)
        #expect(alone.onJoinStarted(barrier: Inbox(), caughtUp: Inbox()) == .refused, "one join at a time")
        #expect(alone.onBarrierPassed(retainAvailable: true).barrier == false, "nobody else is there")
        #expect(alone.onBarrierPassed(retainAvailable: true).isNothing, "the barrier passes once")

        var withBob = Self.waiting()
        Self.present("bob", in: &withBob)
        #expect(withBob.onJoinStarted(barrier: Inbox(), caughtUp: Inbox()) == .proceed)
        #expect(withBob.onBarrierPassed(retainAvailable: true).barrier == true)

        var withoutRetain = Self.waiting()
        #expect(withoutRetain.onJoinStarted(barrier: Inbox(), caughtUp: Inbox()) == .proceed)
        #expect(withoutRetain.onBarrierPassed(retainAvailable: false).barrier == true, "who is there cannot be known")
    }

    @Test func anAbandonedJoinLeavesTheSessionWaiting() async {
        var machine = Self.waiting()
        let (barrier, caughtUp) = (Inbox<Machine.Update>(), Inbox<Machine.Update>())
        #expect(machine.onJoinStarted(barrier: barrier, caughtUp: caughtUp) == .proceed)
        let abandoned = machine.onJoinAbandoned()
        #expect(abandoned.finished == 2 && abandoned.updates.isEmpty && abandoned.invalidatedFrom == nil)
        abandoned.handOver()
        #expect(machine.state == .waiting)
        #expect(await barrier.next() == nil, "the join's waits end")
        #expect(await caughtUp.next() == nil)
        #expect(machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox()) == .proceed, "it can be joined again")
    }

    @Test func aCatchUpIsAcceptedOnlyWhileJoiningAndFromAMember() {
        let catchUp = Wire.CatchUp(states: [Self.record(9, at: 50, by: "bob")], members: [])
        var machine = Self.waiting()
        Self.present("bob", in: &machine)
        #expect(machine.onCatchUp(catchUp, from: "bob", retainAvailable: true, now: 1_000).isRejected, "not joining")
        #expect(machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox()) == .proceed)
        #expect(machine.onCatchUp(catchUp, from: "mallory", retainAvailable: true, now: 1_000).isRejected, "not a member")
        let accepted = machine.onCatchUp(catchUp, from: "bob", retainAvailable: true, now: 1_000)
        #expect(accepted.caughtUp)
        #expect(accepted.clocks == catchUp.states.map(\.clock), "merged into our clock")
        #expect(machine.states["k"]?.value == .int(9))
        #expect(machine.onJoined(acceptingCatchUpsUntil: 0).isNothing, "nobody listens")
        #expect(machine.onCatchUp(catchUp, from: "bob", retainAvailable: true, now: 1_000).isRejected, "too late")
        #expect(machine.rejected == 3)
    }

    /// A responder that was joining itself answers once joined, possibly after our join stopped waiting:
    /// a catch-up from a member is still applied until the time the join names, once; a second
    /// responder's answer in that time is ignored (not an error), and anything later is rejected. Members
    /// it lists that we know of keep what their own records said.
    @Test func aCatchUpFromAMemberIsTakenUntilTheJoinSays() {
        var machine = Self.waiting()
        Self.present("bob", in: &machine)
        #expect(machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox()) == .proceed)
        #expect(machine.onJoined(acceptingCatchUpsUntil: 2_000).isNothing, "nobody listens")
        #expect(machine.onMember("carol", nil, retained: false, retainAvailable: true, now: 1_000).isNothing, "carol is no member")
        let first = Wire.CatchUp(states: [Self.record(9, at: 50, by: "bob")], members: [], more: true)
        let last = Wire.CatchUp(
            states: [Self.record(10, at: 60, by: "dave")],
            members: [Wire.Member(participant: "bob", epoch: 99), Wire.Member(participant: "dave", epoch: 5)])
        #expect(machine.onCatchUp(first, from: "mallory", retainAvailable: false, now: 1_500).isRejected, "members only")
        let parts = [
            machine.onCatchUp(first, from: "bob", retainAvailable: true, now: 1_500),
            machine.onCatchUp(last, from: "bob", retainAvailable: true, now: 1_500),
        ]
        #expect(parts.allSatisfy { !$0.isRejected && !$0.caughtUp }, "applied; no join waits")
        #expect(machine.states["k"]?.value == .int(10))
        #expect(machine.members["bob"] == 7 && machine.members["dave"] == 5, "bob's own record stands; dave is new")
        let again = Wire.CatchUp(states: [Self.record(11, at: 70, by: "bob")], members: [])
        let second = machine.onCatchUp(again, from: "bob", retainAvailable: true, now: 1_999)
        #expect(second.isNothing && !second.isRejected && machine.states["k"]?.value == .int(10), "a second answer is ignored")
        #expect(machine.onCatchUp(again, from: "bob", retainAvailable: true, now: 2_001).isRejected, "too late")
    }

    /// A participant still joining that ranks first for a newcomer (everyone else counts it as active
    /// already) owes the newcomer its catch-up, and sends it once joined, if the newcomer is still there.
    @Test func aJoiningResponderAnswersOnceJoined() {
        var machine = Self.waiting()
        #expect(machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox()) == .proceed)
        let owed = machine.onMember("bob", Wire.Member(participant: "bob", epoch: 2), retained: false, retainAvailable: true, now: 1_000)
        #expect(owed.sends.isEmpty, "not joined: nothing to tell yet")
        #expect(machine.onPresence("bob", epoch: 2, now: 1_000).isNothing)
        #expect(machine.onJoined(acceptingCatchUpsUntil: 0).sends == [.catchUp(to: "bob")])
    }

    @Test func withoutRetainedMessagesTheCatchUpListsTheMembers() {
        var machine = Self.waiting()
        #expect(machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox()) == .proceed)
        let catchUp = Wire.CatchUp(
            states: [], members: [Wire.Member(participant: "bob", epoch: 4), Wire.Member(participant: "alice", epoch: 9)])
        #expect(machine.onCatchUp(catchUp, from: "bob", retainAvailable: false, now: 1_000).caughtUp)
        #expect(machine.members == ["bob": 4], "our own entry is ours to make")
        #expect(ids(machine.active) == ["bob"])
        #expect(machine.onJoined(acceptingCatchUpsUntil: 0).isNothing, "nobody listens")
        #expect(ids(machine.active) == ["alice", "bob"])
        #expect(machine.catchUp(listingMembers: true).flatMap(\.members).map(\.participant) == ["alice", "bob"])
        #expect(machine.catchUp(listingMembers: false).flatMap(\.members).isEmpty)
    }

    @Test func aMemberRecordFromTooFarAheadIsRejected() {
        var machine = Self.joined()
        let forged = machine.onMember(
            "eve", Wire.Member(participant: "eve", epoch: .max), retained: false, retainAvailable: true, now: 1_000)
        #expect(forged.isRejected && machine.members["eve"] == nil)
        #expect(machine.rejected == 1)
    }

    @Test func aCatchUpLargerThanOneMessageComesInPartsAndTheJoinWaitsForTheLast() {
        var sender = Self.joined(as: "bob")
        let big = JSONValue.string(String(repeating: "x", count: 1_000))
        for key in ["a", "b", "c", "d", "e"] {
            let written = sender.onLocalWrite(
                Wire.StateRecord(key: key, value: big, clock: .init(time: 5, counter: 0, participant: "bob")), topic: key)
            #expect(written.isNothing, "nobody listens")
        }
        let parts = sender.catchUp(listingMembers: false, budget: 2_500)
        #expect(parts.map { $0.states.map(\.key) } == [["a", "b"], ["c", "d"], ["e"]])
        #expect(parts.map(\.more) == [true, true, nil])
        #expect(sender.catchUp(listingMembers: false).count == 1, "no limit: one message")

        var newcomer = Self.waiting()
        Self.present("bob", in: &newcomer)
        #expect(newcomer.onJoinStarted(barrier: Inbox(), caughtUp: Inbox()) == .proceed)
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
        #expect(
            machine.onMember("bob", Wire.Member(participant: "bob", epoch: 8), retained: true, retainAvailable: true, now: 1_000).isNothing,
            "held back")
        #expect(Set(machine.active.map(\.id)) == ["alice", "bob"] && machine.members["bob"] == 7)
        let (chat, payload) = Self.envelope(epoch: 7, seq: 1)
        #expect(Self.listen(&machine, .messages(type: "Chat")).first.isEmpty, "messages have no current value")
        #expect(machine.onMessage(chat, payload: payload, sender: "bob", direct: false, now: 1_000).messages == ["bob"], "not silenced")
        // We broadcast 1, owed to bob's process of epoch 7.
        #expect(machine.numbering.outbox.append(to: .all) { _ in Data("1".utf8) }.seq == 1)
        // A real restart: the new connection's presence comes, and the record held back for it counts.
        #expect(machine.onPresence("bob", epoch: 8, now: 1_000).isNothing, "bob stays active")
        #expect(Set(machine.active.map(\.id)) == ["alice", "bob"] && machine.members["bob"] == 8)
        // bob's new process is owed what we send from its adoption on: 2, not 1.
        let entry = machine.numbering.outbox.append(to: .all) { _ in Data("2".utf8) }
        #expect(
            machine.onResend(.init(stream: .all, from: 1, to: 2), from: "bob").sends == [
                .skip(.init(stream: .all, through: 1, lost: []), to: "bob"), .resent(entry, to: "bob"),
            ])
    }

    @Test func activeMeansJoinedWithTheLiveConnection() {
        var machine = Self.joined()
        let inbox = Inbox<Machine.Update>()
        #expect(Self.listen(&machine, .participants, inbox: inbox).first == [.participants([Participant(id: "alice")])])
        #expect(
            machine.onMember("bob", Wire.Member(participant: "bob", epoch: 2), retained: true, retainAvailable: true, now: 1_000)
                .participants.isEmpty,
            "no presence yet")
        #expect(machine.onPresence("bob", epoch: 2, now: 1_000).participants == [["alice", "bob"]])
        #expect(machine.onPresence("bob", epoch: 3, now: 1_000).participants == [["alice"]], "a newer connection did not join")
        #expect(
            machine.onMember("bob", Wire.Member(participant: "bob", epoch: 3), retained: false, retainAvailable: true, now: 1_000)
                .participants == [
                    ["alice", "bob"]
                ])
        #expect(machine.onMember("bob", nil, retained: false, retainAvailable: true, now: 1_000).participants == [["alice"]], "left")
        #expect(machine.onPresence("alice", epoch: nil, now: 1_000).participants.isEmpty, "our own presence is ours to know")
    }

    @Test func aLiveJoinProvesTheConnectionAndAsksTheResponderForACatchUp() {
        var machine = Self.joined()
        let live = machine.onMember("bob", Wire.Member(participant: "bob", epoch: 2), retained: false, retainAvailable: true, now: 1_000)
        #expect(live.sends == [.catchUp(to: "bob")], "we are the only one who can answer")
        #expect(ids(machine.active) == ["alice", "bob"], "a live join counts without retained presence")
        var other = Self.joined()
        #expect(
            other.onMember("carol", Wire.Member(participant: "carol", epoch: 2), retained: true, retainAvailable: true, now: 1_000).sends
                .isEmpty,
            "a replayed record is no join")
    }

    /// Without retained messages a newcomer may have subscribed after our member record went out, and
    /// the catch-up lists us only if its responder knows us: whoever is joining or joined sends it
    /// `$member` for each live join (a new epoch), never for a replay, a record it had, an answer, or
    /// while not in the session. With retained messages the newcomer read ours from the broker.
    @Test func withoutRetainedMessagesALiveJoinIsAnsweredWithMember() {
        func join(_ machine: inout Machine, _ name: String, retained: Bool = false, retainAvailable: Bool = false) -> [Machine.Send] {
            machine.onMember(
                name, Wire.Member(participant: name, epoch: 2), retained: retained, retainAvailable: retainAvailable, now: 1_000
            ).sends
        }
        var joining = Self.waiting()
        #expect(joining.onJoinStarted(barrier: Inbox(), caughtUp: Inbox()) == .proceed)
        #expect(join(&joining, "bob") == [.memberAnswer(to: "bob")])
        #expect(join(&joining, "bob").isEmpty, "had it")
        #expect(join(&joining, "carol", retained: true).isEmpty, "a replay is no join")
        var joined = Self.joined()
        Self.present("zed", in: &joined)  // a member, who answers bob
        #expect(join(&joined, "bob") == [.memberAnswer(to: "bob")], "we tell bob we are here")
        var retaining = Self.joined()
        #expect(join(&retaining, "bob", retainAvailable: true) == [.catchUp(to: "bob")])
        var waiting = Self.waiting()
        #expect(join(&waiting, "bob").isEmpty, "not in the session")
        let again = Wire.Member(participant: "dave", epoch: 2, again: true)
        #expect(joined.onMember("dave", again, retained: false, retainAvailable: false, now: 1_000).sends.isEmpty, "an answer is no join")
        #expect(ids(joined.active).contains("dave"), "but it is a member, live")
    }

    // MARK: - Messages

    @Test func messagesReachTheirTypeOnceFromMembersOnly() {
        var machine = Self.waiting()
        let chats = Inbox<Machine.Update>()
        let other = Inbox<Machine.Update>()
        #expect(Self.listen(&machine, .messages(type: "Chat"), inbox: chats).first.isEmpty)
        #expect(Self.listen(&machine, .messages(type: "Other"), inbox: other).first.isEmpty)
        Self.present("bob", in: &machine)
        let (first, payload) = Self.envelope(seq: 1)
        #expect(machine.onMessage(first, payload: payload, sender: "bob", direct: false, now: 1_000).isNothing, "not joined yet")
        #expect(machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox()) == .proceed)
        #expect(machine.onJoined(acceptingCatchUpsUntil: 0).isNothing, "no state, value or participants listener")
        #expect(machine.onMessage(first, payload: payload, sender: "bob", direct: false, now: 1_000).messages == ["bob"])
        #expect(machine.onMessage(first, payload: payload, sender: "bob", direct: false, now: 1_000).messages.isEmpty, "a redelivery")
        let (unreliable, unreliablePayload) = Self.envelope(seq: 1, reliable: false)
        #expect(
            machine.onMessage(unreliable, payload: unreliablePayload, sender: "bob", direct: false, now: 1_000).messages == ["bob"],
            "not deduplicated")
        #expect(machine.onMessage(first, payload: payload, sender: "mallory", direct: false, now: 1_000).isRejected)
        #expect(machine.rejected == 1, "only members may message the session")
        for epoch: Int64 in [6, 8, Wire.Bounds.time.upperBound] {
            let (other, otherPayload) = Self.envelope(epoch: epoch, seq: 9)
            #expect(
                machine.onMessage(other, payload: otherPayload, sender: "bob", direct: false, now: 1_000).isRejected,
                "not the epoch bob joined with")
        }
        let (absurd, absurdPayload) = Self.envelope(seq: 1 + 1_000_001)
        #expect(
            machine.onMessage(absurd, payload: absurdPayload, sender: "bob", direct: false, now: 1_000).isRejected, "a forged jump")
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
        #expect(Self.listen(&machine, .messages(type: "Chat"), inbox: chats).first.isEmpty)
        #expect(Self.listen(&machine, .gaps, inbox: gaps).first.isEmpty)
        Self.present("bob", in: &machine)
        #expect(machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox()) == .proceed)
        #expect(machine.onJoined(acceptingCatchUpsUntil: 0).isNothing, "no state, value or participants listener")
        func receive(_ seq: Int64, direct: Bool = false) -> Machine.Action {
            let (envelope, payload) = Self.envelope(seq: seq)
            return machine.onMessage(envelope, payload: payload, sender: "bob", direct: direct, now: 1_000)
        }
        #expect(receive(1).messages == ["bob"])
        let early = receive(4)
        #expect(early.messages.isEmpty, "held until 2 and 3 arrive or are given up")
        #expect(early.sends == [.resend(.init(sender: "bob", resend: .init(stream: .all, from: 2, to: 3)))])
        #expect(early.timer == .wake(atWallClock: 2_000), "to ask again if 2 and 3 do not come")
        #expect(receive(2).messages == ["bob"])
        // bob no longer has 3: a gap, in its place, then 4.
        let skipped = machine.onSkip(.init(stream: .all, through: 3, lost: [3...3]), from: "bob", epoch: 7, now: 1_000)
        #expect(skipped.updates.map(\.isGap) == [true, false])
        #expect(skipped.messages == ["bob"])
        #expect(machine.onSkip(.init(stream: .all, through: 9, lost: []), from: "bob", epoch: 6, now: 1_000).isRejected)
        #expect(machine.rejected == 1, "a skip of another epoch of bob's")
        // A direct stream is numbered apart; after our reconnect, bob is asked for what follows each.
        #expect(receive(1, direct: true).messages == ["bob"])
        let asked = machine.onReconnected(now: 2_000).sends
        #expect(
            Set(asked) == [
                .resend(.init(sender: "bob", resend: .init(stream: .all, from: 5, to: nil))),
                .resend(.init(sender: "bob", resend: .init(stream: .direct, from: 2, to: nil))),
            ], "nothing sent by us: no position first")
        // bob leaves while 6 waits for 5: 6 comes out after a gap.
        let waiting = receive(6)
        #expect(waiting.messages.isEmpty, "held until 5 arrives or is given up")
        let left = machine.onMember("bob", nil, retained: false, retainAvailable: true, now: 3_000)
        #expect(left.updates.map(\.isGap) == [true, false])
    }

    // MARK: - Control messages and the timer

    @Test func onlyMembersArePingedResentOrEndTheSession() {
        var machine = Self.joined()
        Self.present("bob", in: &machine)
        let ping = Wire.Ping(t0: 5)
        #expect(machine.onPing(ping, from: "mallory", arrival: 9).isRejected)
        #expect(machine.onPing(ping, from: "bob", arrival: 9).sends == [.pong(ping, to: "bob", arrival: 9)])
        #expect(machine.onResend(.init(stream: .all, from: 1, to: 1), from: "mallory").isRejected)
        #expect(
            machine.onResend(.init(stream: .all, from: 1, to: 1), from: "bob").sends == [.position(.init(all: 0, direct: [:]), to: "bob")],
            "beyond what we sent: where our streams are")
        #expect(machine.onEnd(from: "mallory").isRejected)
        #expect(machine.state == .joined && machine.rejected == 3)
        let ended = machine.onEnd(from: "bob")
        #expect(ended.invalidatedFrom == .joined && ended.timer == .cancel)
        #expect(machine.state == .invalidated(reason: .ended(by: Participant(id: "bob"))))
    }

    @Test func aMalformedJournalRecordIsRejectedAndChangesNothing() {
        var machine = Self.joined()
        #expect(machine.onJournal { $0.onMalformedRecord() }.isRejected)
        #expect(machine.rejected == 1 && machine.journal.attachments.isEmpty)
    }

    @Test func theTimerStatesOurPositionAfterAQuietSpellAndWaitsWhileDisconnected() {
        var machine = Self.joined()
        Self.present("bob", in: &machine)
        let start = ContinuousClock.now
        #expect(machine.numbering.outbox.append(to: .all) { _ in Data("1".utf8) }.seq == 1)
        let interval = machine.numbering.positionInterval
        #expect(machine.numbering.numberedReliable(at: start) == start + interval)
        let early = machine.onTick(now: 10_000, at: start + interval / 2, connected: true)
        #expect(early.sends.isEmpty, "not quiet long enough")
        #expect(early.timer == .wake(atWallClock: 10_000 + Int64(interval / .milliseconds(1)) / 2), "woken when it is due")
        let due = machine.onTick(now: 20_000, at: start + interval, connected: true)
        #expect(due.sends == [.position(.init(all: 1, direct: [:]), to: nil)])
        #expect(due.timer == .wake(atWallClock: 20_000 + 2 * Int64(interval / .milliseconds(1))), "then again at 3 intervals")
        // While the connection is down, a statement still due is looked at again soon (a reconnect may
        // come before it): nothing is sent, nothing forgotten.
        var waiting = machine.onTick(now: 30_000, at: start + interval * 3, connected: false)
        #expect(waiting.timer == .wake(atWallClock: 30_000 + Machine.inactiveRecheck))
        waiting.timer = .unchanged
        #expect(waiting.isNothing, "nothing sent")
        // An open request too.
        let (envelope, payload) = Self.envelope(seq: 2)
        #expect(!machine.onMessage(envelope, payload: payload, sender: "bob", direct: false, now: 30_000).sends.isEmpty)
        var recheck = machine.onTick(now: 30_001, at: start + interval * 3, connected: false)
        #expect(recheck.timer == .wake(atWallClock: 30_001 + Machine.inactiveRecheck))
        recheck.timer = .unchanged
        #expect(recheck.isNothing, "nothing sent")
    }

    // MARK: - Activity and invalidation

    @Test func aNewerActivityOfTheSameTypeReachesActivityListeners() {
        var machine = Self.joined()
        let inbox = Inbox<Machine.Update>()
        #expect(Self.listen(&machine, .activity, inbox: inbox).first == [.activity(.int(1))])
        var newer = Self.announcement
        newer.revision.time = 2
        newer.activity.data = .int(2)
        #expect(machine.onAnnouncement(newer, from: "bob").activities == [.int(2)])
        #expect(machine.onAnnouncement(Self.announcement, from: "bob").isNothing, "older")
        var foreign = newer
        foreign.revision.time = 3
        foreign.activity.type = "com.example.other"
        #expect(machine.onAnnouncement(foreign, from: "bob").isRejected)
        #expect(machine.rejected == 1, "a session's kind of activity never changes")
        #expect(machine.announcement.activity.data == .int(2))
    }

    /// A session listed from a closed copy (sealed with a key we lack) takes the first open copy, whatever
    /// its revision: the closed one's is not authenticated.
    @Test func theFirstOpenCopyReplacesAClosedAnnouncement() {
        var closed = Self.announcement
        closed.revision.time = 1 << 40
        closed.activity = .init(type: closed.activity.type, metadata: nil, data: .string("c2VhbGVk"), sealed: "k9")
        var machine = Machine(me: "alice", myEpoch: 1, announcement: closed, presence: ["alice": 1])
        let inbox = Inbox<Machine.Update>()
        #expect(Self.listen(&machine, .activity, inbox: inbox).first == [.activity(.string("c2VhbGVk"))])
        #expect(machine.onAnnouncement(Self.announcement, from: "carol").activities == [.int(1)])
        #expect(machine.announcement == Self.announcement)
    }

    @Test func invalidationEndsEverySequenceAfterTheNewState() async {
        var machine = Self.waiting()
        let states = Inbox<Machine.Update>()
        let values = Inbox<Machine.Update>(keepingNewest: 1)
        let first = Self.listen(&machine, .state, inbox: states).first
        #expect(first == [.state(.waiting)])
        for update in first { states.yield(update) }  // as the runtime hands it over
        #expect(Self.listen(&machine, inbox: values).first.isEmpty, "no value before the join")
        let (barrier, caughtUp) = (Inbox<Machine.Update>(), Inbox<Machine.Update>())
        #expect(machine.onJoinStarted(barrier: barrier, caughtUp: caughtUp) == .proceed)
        let action = machine.invalidate(.left)
        #expect(action.states == [.invalidated(reason: .left)])
        #expect(action.finished == 4, "both sequences and the join's two waits")
        #expect(action.timer == .cancel && action.invalidatedFrom == .waiting)
        action.handOver()
        #expect(await states.next() == .state(.waiting))
        #expect(await states.next() == .state(.invalidated(reason: .left)))
        #expect(await states.next() == nil)
        #expect(await values.next() == nil)
        #expect(await barrier.next() == nil, "a join in progress gives up")
        #expect(machine.invalidate(.coordinatorClosed).isNothing, "once")
        let late = machine.addListener(.init(kind: .participants, inbox: Inbox()))
        #expect(late.participants.count == 1 && late.finished == 1, "the current value, then the end: not added")
        #expect(machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox()) == .refused)
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

extension SessionStateMachineTests {
    /// An observer that asks is answered once: by the joined member that ranks first for it, with a
    /// catch-up that lists the members. A participant still joining answers no observer, and an ID that
    /// is a member's is no observer.
    @Test func anObserverIsCaughtUpByTheMemberThatRanksFirst() {
        let members = ["alice", "bob", "carol"]
        for observer in ["gs-k2x8qv0m4t7c1n5p9r3w", "dash", "zoe"] {
            let expected = members.max { Machine.rank(observer, $0) < Machine.rank(observer, $1) }!
            for me in members {
                var machine = Self.joined(as: me)
                for (index, name) in members.enumerated() where name != me { Self.present(name, epoch: Int64(index + 1), in: &machine) }
                #expect(
                    machine.onObserver(observer).sends == (me == expected ? [.observerCatchUp(to: observer)] : []), "\(me), \(observer)")
                #expect(machine.catchUp(listingMembers: true).first?.members.map(\.participant) == members)
                #expect(machine.onObserver("bob").sends.isEmpty, "a member is no observer")
            }
        }
        var joining = Self.waiting()
        #expect(joining.onJoinStarted(barrier: Inbox(), caughtUp: Inbox()) == .proceed)
        #expect(joining.onObserver("dash").sends.isEmpty)
    }
}

extension SessionStateMachineTests {
    /// Where nothing is retained a catch-up carries the journal and who holds it, and applying one lists
    /// both; a member asks a holder for chunks within the attachment, anyone else is refused.
    @Test func theJournalTravelsInCatchUpsAndIsServedOnRequest() throws {
        let content = Data("journal bytes, three chunks".utf8)
        let record = JournalStateMachineTests.record(content, owner: "alice", chunkSize: 10)
        var alice = Self.joined()
        Self.present("bob", in: &alice)
        let held = try #require(HeldAttachment(record: record, bytes: .memory(content)))
        let listed = alice.onJournal { journal in
            journal.hold(held)
            return journal.onRecord(record, digest: record.id, owner: "alice")
        }
        guard case let .journal(.publish(list, _)) = try #require(listed.handovers.first) else {
            Issue.record("the record is handed over to the journal's sequences")
            return
        }
        #expect(list.map(\.record) == [record])
        #expect(alice.onHave(Wire.Have(id: record.id), from: "bob").rejected == 0)
        #expect(alice.onHave(Wire.Have(id: record.id), from: "mallory").rejected == 1, "no member")
        let parts = alice.catchUp(listingMembers: true, listingJournal: true)
        #expect(parts.count == 2 && parts[0].more == true && parts[1].more == nil, "no states: no empty part for them")
        #expect(parts[0].journal == [record] && parts[0].members.map(\.participant) == ["alice", "bob"])
        #expect(parts[1].holders == [Wire.Holders(id: record.id, participants: ["alice", "bob"])])
        #expect(alice.catchUp(listingMembers: true).allSatisfy { $0.journal == nil && $0.holders == nil }, "an observer's, retained")

        var carol = Self.waiting(as: "carol")
        #expect(carol.onJoinStarted(barrier: Inbox(), caughtUp: Inbox()) == .proceed)
        for part in parts { #expect(carol.onCatchUp(part, from: "alice", retainAvailable: false, now: 1_000).rejected == 0) }
        #expect(carol.journal.attachments.map(\.digest) == [record.id])
        #expect(carol.journal.servers(of: record.id, active: ["alice", "bob", "carol"], me: "carol") == ["alice", "bob"])

        let request = Wire.ChunkRequest(id: record.id, from: 1, count: 2)
        #expect(alice.onChunkRequest(request, from: "bob").sends == [.serveChunks(held)])
        #expect(alice.onChunkRequest(Wire.ChunkRequest(id: record.id, from: 0, count: 2), from: "bob").sends.isEmpty, "its task serves it")
        #expect(alice.nextChunkToServe(record.id) == 0)
        #expect(alice.onChunkRequest(Wire.ChunkRequest(id: record.id, from: 0, count: 1), from: "bob").sends.isEmpty, "0 again: queued")
        #expect([alice.nextChunkToServe(record.id), alice.nextChunkToServe(record.id), alice.nextChunkToServe(record.id)] == [0, 1, 2])
        #expect(alice.nextChunkToServe(record.id) == nil, "done: the task ends")
        #expect(alice.onChunkRequest(request, from: "bob").sends == [.serveChunks(held)], "a new task")
        #expect(alice.nextChunkToServe(record.id) == 1)
        #expect(alice.onChunkRequest(Wire.ChunkRequest(id: record.id, from: 2, count: 2), from: "bob").rejected == 1, "past the end")
        #expect(alice.onChunkRequest(request, from: "mallory").rejected == 1, "no member")
        let unknown = Wire.ChunkRequest(id: String(repeating: "0", count: 64), from: 0, count: 1)
        let ignored = alice.onChunkRequest(unknown, from: "bob")
        #expect(ignored.sends.isEmpty && ignored.rejected == 0, "not held (removed meanwhile): nothing to say")
    }
}

/// What an action hands to each kind of sequence, for the expectations above.
extension SessionStateMachine.Action {
    var updates: [SessionStateMachine.Update] {
        handovers.compactMap { if case let .yield(_, update) = $0 { update } else { nil } }
    }

    /// How many sequences it ends.
    var finished: Int {
        handovers.filter { if case .finish = $0 { true } else { false } }.count
    }

    /// The received clocks it merges into ours.
    var clocks: [HLCTimestamp] { observed }

    /// Nothing at all to do.
    var isNothing: Bool {
        observed.isEmpty && handovers.isEmpty && sends.isEmpty && timer == .unchanged && invalidatedFrom == nil && rejected == 0
    }

    /// One received value rejected, and nothing else.
    var isRejected: Bool {
        var rest = self
        rest.rejected = 0
        return rejected == 1 && rest.isNothing
    }

    /// Performs the hand-overs, as the session's runtime does.
    func handOver() {
        for handover in handovers {
            switch handover {
            case let .yield(inbox, update): inbox.yield(update)
            case let .finish(inbox): inbox.finish()
            case let .journal(action): action.perform()
            }
        }
    }

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
