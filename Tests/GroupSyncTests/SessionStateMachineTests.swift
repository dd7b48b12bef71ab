import Foundation
import Testing
@testable import GroupSync

/// Pure logic of one session, without a broker.
@Suite struct SessionStateMachineTests {
    static func joined(as me: String = "alice") -> SessionStateMachine {
        let announcement = Wire.Announcement(
            session: "s1", activity: .init(type: "com.example.test", metadata: .init(title: "Test"), data: .null),
            createdBy: "alice", createdAt: 1, revision: HLCTimestamp(time: 1, counter: 0, participant: "alice"))
        var machine = SessionStateMachine(sessionID: "s1", me: me, myEpoch: 1, announcement: announcement, presence: [me: 1])
        let (_, barrier) = AsyncStream.makeStream(of: Bool.self)
        let (_, catchUp) = AsyncStream.makeStream(of: Void.self)
        _ = machine.onJoinStarted(barrier: barrier, catchUp: catchUp)
        _ = machine.onJoined()
        return machine
    }

    static func record(_ value: Int64, at time: Int64, by writer: String) -> Wire.StateRecord {
        Wire.StateRecord(key: "k", value: .int(value), clock: HLCTimestamp(time: time, counter: 0, participant: writer))
    }

    static func listen(_ machine: inout SessionStateMachine) -> UInt64 {
        machine.addValueListener(key: "k", Inbox(keepingNewest: 1)).0
    }

    @Test func recordsOfOneBurstMakeOneVisibleChange() {
        var machine = SessionStateMachineTests.joined()
        _ = SessionStateMachineTests.listen(&machine)
        for (value, time) in [(10, 100), (20, 102), (15, 101)] as [(Int64, Int64)] {
            let effects = machine.onState(SessionStateMachineTests.record(value, at: time, by: "w\(value)"), writer: "w\(value)", topic: "t\(value)", holdingValues: true)
            #expect(effects.values.isEmpty, "held until the burst ends")
        }
        let released = machine.releaseHeldValues()
        #expect(released.values.map(\.1?.value) == [.int(20)], "one change, to the newest record")
        #expect(machine.releaseHeldValues().values.isEmpty)
        #expect(machine.states["k"]?.value == .int(20))
    }

    @Test func aLocalWriteSupersedesWhatIsHeld() {
        var machine = SessionStateMachineTests.joined()
        _ = SessionStateMachineTests.listen(&machine)
        _ = machine.onState(SessionStateMachineTests.record(10, at: 100, by: "bob"), writer: "bob", topic: "t", holdingValues: true)
        let local = machine.onLocalWrite(SessionStateMachineTests.record(11, at: 105, by: "alice"), topic: "mine")
        #expect(local.values.map(\.1?.value) == [.int(11)])
        #expect(machine.releaseHeldValues().values.isEmpty, "the held older value would make the screen go back")
    }

    @Test func aRemovedListenerGetsNothingHeld() {
        var machine = SessionStateMachineTests.joined()
        let id = SessionStateMachineTests.listen(&machine)
        _ = machine.onState(SessionStateMachineTests.record(10, at: 100, by: "bob"), writer: "bob", topic: "t", holdingValues: true)
        machine.removeListener(id)
        #expect(machine.releaseHeldValues().values.isEmpty)
    }

    @Test func anOlderRecordChangesNothing() {
        var machine = SessionStateMachineTests.joined()
        _ = SessionStateMachineTests.listen(&machine)
        _ = machine.onState(SessionStateMachineTests.record(20, at: 200, by: "bob"), writer: "bob", topic: "t1")
        let older = machine.onState(SessionStateMachineTests.record(10, at: 100, by: "carol"), writer: "carol", topic: "t2", holdingValues: true)
        #expect(older.values.isEmpty)
        #expect(machine.releaseHeldValues().values.isEmpty)
        #expect(machine.states["k"]?.value == .int(20))
    }
}

extension SessionStateMachineTests {
    /// The responder rule is part of the protocol (PROTOCOL.md): every participant, in any language, must
    /// pick the same one. Reference values from an independent FNV-1a 64 implementation.
    @Test func theResponderRankIsFNV1aOfNewcomerSlashCandidate() {
        #expect(SessionStateMachine.rank("late0", "p17").0 == 11_634_758_946_544_036_672)
        #expect(SessionStateMachine.rank("alice", "bob").0 == 17_123_353_615_009_346_147)
        #expect(SessionStateMachine.rank("é", "x").0 == 17_879_697_094_914_859_862)
    }

    /// From every seat of a 50-member session, exactly the candidate with the largest rank answers —
    /// never the newcomer itself, also when the newcomer is one of the members (a rejoin).
    @Test func theResponderIsTheActiveParticipantWithTheLargestRank() {
        let present = (0..<50).map { "p\($0)" }
        for newcomer in ["late0", "late1", "zoe", "p7"] {
            let expected = present.filter { $0 != newcomer }
                .max { SessionStateMachine.rank(newcomer, $0) < SessionStateMachine.rank(newcomer, $1) }
            var answered: [String] = []
            for me in present {
                var machine = SessionStateMachineTests.joined(as: me)
                for (index, name) in present.enumerated() where name != me {
                    _ = machine.onPresence(name, epoch: Int64(index + 1))
                    _ = machine.onMember(name, Wire.Member(participant: name, epoch: Int64(index + 1)), retained: true)
                }
                if machine.isCatchUpResponder(for: newcomer) { answered.append(me) }
            }
            #expect(answered == [expected!], "exactly the largest rank answers \(newcomer)")
        }
    }
}
