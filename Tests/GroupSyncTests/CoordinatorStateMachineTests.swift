import Foundation
import Testing

@testable import GroupSync

/// Pure logic of one coordinator, driven without a broker: presence by epoch, announced sessions and
/// their listeners, the sharing gate and the bookkeeping of owned retained records.
@Suite struct CoordinatorStateMachineTests {
    typealias Machine = CoordinatorStateMachine

    static let t0 = ContinuousClock.now

    static func presence(_ participant: String, _ status: Wire.Presence.Status = .online, epoch: Int64) -> Wire.Presence {
        Wire.Presence(participant: participant, status: status, epoch: epoch, name: nil)
    }

    static func announcement(_ session: String, type: String = "com.example.a", revision: Int64 = 1) -> Wire.Announcement {
        Wire.Announcement(
            session: session, activity: .init(type: type, metadata: .init(title: "T"), data: .null),
            createdBy: "bob", createdAt: 1, revision: HLCTimestamp(time: revision, counter: 0, participant: "bob"))
    }

    static func listener(_ type: String = Machine.anyActivity) -> (Machine.Listener, Inbox<SessionCore>) {
        let inbox = Inbox<SessionCore>()
        return (Machine.Listener(activityType: type, inbox: inbox), inbox)
    }

    // MARK: - Presence

    @Test func presenceFollowsTheNewestEpoch() {
        var machine = Machine(me: "alice", myEpoch: 10)
        #expect(machine.online == ["alice": 10])
        #expect(machine.onPresence("bob", Self.presence("bob", epoch: 5), now: Self.t0) == .changed(participant: "bob", epoch: 5))
        #expect(machine.onPresence("bob", Self.presence("bob", epoch: 5), now: Self.t0) == .none, "a heartbeat changes nothing")
        #expect(
            machine.onPresence("bob", Self.presence("bob", epoch: 6), now: Self.t0) == .changed(participant: "bob", epoch: 6),
            "a newer connection")
        #expect(
            machine.onPresence("bob", Self.presence("bob", .lost, epoch: 5), now: Self.t0) == .none,
            "the stale will of the older connection")
        #expect(machine.online["bob"] == 6)
        #expect(machine.onPresence("bob", Self.presence("bob", .lost, epoch: 6), now: Self.t0) == .changed(participant: "bob", epoch: nil))
        #expect(machine.onPresence("bob", Self.presence("bob", epoch: 5), now: Self.t0) == .none, "older than the lost connection")
        #expect(machine.onPresence("carol", Self.presence("carol", epoch: 1), now: Self.t0) == .changed(participant: "carol", epoch: 1))
        #expect(machine.onPresence("carol", nil, now: Self.t0) == .changed(participant: "carol", epoch: nil), "cleared: a clean exit")
        #expect(machine.onPresence("carol", nil, now: Self.t0) == .none)
        #expect(machine.onPresence("dave", Self.presence("mallory", epoch: 1), now: Self.t0) == .rejected, "another participant's record")
        #expect(machine.online == ["alice": 10])
    }

    @Test func ourOwnPresenceIsRepublishedWhenOverwritten() {
        var machine = Machine(me: "alice", myEpoch: 10)
        #expect(machine.onPresence("alice", Self.presence("alice", epoch: 10), now: Self.t0) == .none, "our own echo")
        #expect(
            machine.onPresence("alice", Self.presence("alice", .lost, epoch: 10), now: Self.t0) == .republishOwn,
            "a late will of this connection")
        #expect(
            machine.onPresence("alice", Self.presence("alice", epoch: 9), now: Self.t0) == .republishOwn, "an older connection's record")
        #expect(machine.onPresence("alice", nil, now: Self.t0) == .republishOwn, "cleared")
        #expect(
            machine.onPresence("alice", Self.presence("alice", .lost, epoch: 11), now: Self.t0) == .none,
            "a newer process of the same participant")
        _ = machine.close()
        #expect(machine.onPresence("alice", nil, now: Self.t0) == .none, "not after close()")
    }

    @Test func silentParticipantsExpireAndAReconnectGivesEveryoneAGracePeriod() {
        var machine = Machine(me: "alice", myEpoch: 10)
        _ = machine.onPresence("bob", Self.presence("bob", epoch: 1), now: Self.t0)
        _ = machine.onPresence("carol", Self.presence("carol", epoch: 1), now: Self.t0 + .seconds(4))
        #expect(machine.expireSilent(now: Self.t0 + .seconds(5), timeout: .seconds(3)) == ["bob"])
        #expect(machine.online == ["alice": 10, "carol": 1])
        machine.onReconnected(now: Self.t0 + .seconds(10))
        #expect(machine.expireSilent(now: Self.t0 + .seconds(12), timeout: .seconds(3)).isEmpty)
        #expect(machine.expireSilent(now: Self.t0 + .seconds(14), timeout: .seconds(3)) == ["carol"])
        #expect(
            machine.onPresence("carol", Self.presence("carol", epoch: 1), now: Self.t0 + .seconds(15))
                == .changed(participant: "carol", epoch: 1), "back with its next heartbeat")
    }

    // MARK: - Sessions

    @Test func aNewSessionGoesToTheListenersThatWantItOnce() {
        var machine = Machine(me: "alice", myEpoch: 10)
        let (all, allInbox) = Self.listener()
        let (a, aInbox) = Self.listener("com.example.a")
        let (b, _) = Self.listener("com.example.b")
        for listener in [all, a, b] { #expect(machine.addListener(listener).sessions.isEmpty) }
        _ = machine.onPresence("bob", Self.presence("bob", epoch: 3), now: Self.t0)
        guard case let .new(listeners, presence) = machine.onAnnouncement("s1", Self.announcement("s1"), now: 1_000) else {
            Issue.record("not new")
            return
        }
        #expect(
            Set(listeners.map(ObjectIdentifier.init)) == [ObjectIdentifier(allInbox), ObjectIdentifier(aInbox)],
            "the wrong type is filtered out")
        #expect(presence == ["alice": 10, "bob": 3], "the new session starts from the group's presence")
        guard case .changed = machine.onAnnouncement("s1", Self.announcement("s1", revision: 2), now: 1_000) else {
            Issue.record("a known session changed; nobody gets it again")
            return
        }
    }

    @Test func aLateListenerGetsTheAnnouncedSessionsItWants() {
        var machine = Machine(me: "alice", myEpoch: 10)
        _ = machine.onAnnouncement("s2", Self.announcement("s2", type: "com.example.b"), now: 1_000)
        _ = machine.onAnnouncement("s1", Self.announcement("s1"), now: 1_000)
        _ = machine.onAnnouncement("s3", Self.announcement("s3"), now: 1_000)
        #expect(machine.addListener(Self.listener("com.example.a").0).sessions == ["s1", "s3"])
        #expect(machine.addListener(Self.listener().0).sessions == ["s1", "s2", "s3"])
    }

    @Test func anEndedSessionIsForgottenAndItsIDCanComeBack() {
        var machine = Machine(me: "alice", myEpoch: 10)
        _ = machine.onAnnouncement("s1", Self.announcement("s1"), now: 1_000)
        guard case .ended = machine.onAnnouncement("s1", nil, now: 1_000) else {
            Issue.record("cleared: ended")
            return
        }
        guard case .none = machine.onAnnouncement("s1", nil, now: 1_000) else {
            Issue.record("ends once")
            return
        }
        guard case .new = machine.onAnnouncement("s1", Self.announcement("s1"), now: 1_000) else {
            Issue.record("announced again: a new session")
            return
        }
        machine.forget("s1")
        #expect(machine.addListener(Self.listener().0).sessions.isEmpty, "ended here: forgotten")
        guard case .rejected = machine.onAnnouncement("s9", Self.announcement("s1"), now: 1_000) else {
            Issue.record("an announcement names its own session")
            return
        }
        guard case .rejected = machine.onAnnouncement("s9", Self.announcement("s9", type: "bad/type"), now: 1_000) else {
            Issue.record("an activity type is an identifier")
            return
        }
        guard
            case .rejected = machine.onAnnouncement(
                "s9", Self.announcement("s9", revision: 1_000 + HLCTimestamp.maximumSkew + 1), now: 1_000)
        else {
            Issue.record("a revision from too far ahead")
            return
        }
    }

    @Test func removedListenersGetNothingAndCloseEndsTheRest() {
        var machine = Machine(me: "alice", myEpoch: 10)
        let (first, firstInbox) = Self.listener()
        let (second, secondInbox) = Self.listener()
        let id = machine.addListener(first).id!
        _ = machine.addListener(second)
        machine.removeListener(id)
        guard case let .new(listeners, _) = machine.onAnnouncement("s1", Self.announcement("s1"), now: 1_000) else {
            Issue.record("not new")
            return
        }
        #expect(listeners.map(ObjectIdentifier.init) == [ObjectIdentifier(secondInbox)])
        let closed = machine.close()
        #expect(closed.listeners.map(ObjectIdentifier.init) == [ObjectIdentifier(secondInbox)])
        #expect(closed.sessions == ["s1"], "the sessions to leave")
        #expect(machine.isClosed && machine.online.isEmpty)
        #expect(machine.addListener(Machine.Listener(activityType: "*", inbox: firstInbox)).id == nil, "ends at once")
        guard case .none = machine.onAnnouncement("s2", Self.announcement("s2"), now: 1_000) else {
            Issue.record("no sessions after close()")
            return
        }
        #expect(machine.close().listeners.isEmpty, "idempotent")
    }

    // MARK: - Sharing gate

    @Test func theSharingGateHoldsWorkWhileAnySessionIsJoined() {
        var gate = SharingGate()
        let inbox = Inbox<Bool>()
        let (id, added) = gate.addListener(inbox)
        #expect(added.yield.map(\.1) == [false], "the current value first")
        #expect(gate.onDefer({}).run.count == 1, "nothing shared: at once")
        #expect(gate.onJoined("s1").yield.map(\.1) == [true])
        #expect(gate.onJoined("s2").yield.isEmpty, "still sharing")
        #expect(gate.onDefer({}).run.isEmpty)
        #expect(gate.onDefer({}).run.isEmpty)
        #expect(gate.onLeft("s1").yield.isEmpty)
        let left = gate.onLeft("s2")
        #expect(left.yield.map(\.1) == [false])
        #expect(left.run.count == 2, "the deferred work, in order")
        #expect(gate.onLeft("s2").yield.isEmpty)
        gate.removeListener(id!)
        #expect(gate.onJoined("s3").yield.isEmpty, "removed")
        _ = gate.onDefer({})
        let (late, lateAdded) = gate.addListener(Inbox())
        #expect(lateAdded.yield.map(\.1) == [true])
        let closed = gate.close()
        #expect(closed.finish.count == 1 && closed.run.count == 1, "listeners end, waiting work runs")
        #expect(late != nil)
        #expect(gate.addListener(Inbox()).0 == nil)
        #expect(gate.onDefer({}).run.count == 1, "after close(): at once")
    }

    // MARK: - Owned retained records

    @Test func ownedRecordsAreRepublishedInTheOrderANewcomerNeedsThem() {
        var owned = OwnedRetained()
        let root = "groupsync/v1/g"
        for topic in ["\(root)/s/s1/state/k/alice", "\(root)/s/s1/member/alice", "\(root)/session/s1", "\(root)/presence/alice"] {
            owned.own(topic, Data("x".utf8))
        }
        #expect(
            owned.inRepublishOrder().map(\.topic) == [
                "\(root)/presence/alice", "\(root)/session/s1", "\(root)/s/s1/member/alice", "\(root)/s/s1/state/k/alice",
            ])
        #expect(owned.topics(under: "\(root)/s/s1/") == ["\(root)/s/s1/member/alice", "\(root)/s/s1/state/k/alice"])
        owned.own("\(root)/s/s1/member/alice", Data())
        owned.disown("\(root)/session/s1")
        #expect(
            owned.inRepublishOrder().map(\.topic) == ["\(root)/presence/alice", "\(root)/s/s1/state/k/alice"],
            "cleared and disowned records stay gone")
    }
}
