import Foundation
import Testing

@testable import GroupSync

/// Pure logic of one coordinator, driven without a broker: presence by epoch, announced sessions and
/// their listeners, the sharing gate and the bookkeeping of owned retained records.
@Suite struct CoordinatorStateMachineTests {
    typealias Machine = CoordinatorStateMachine

    static let t0 = ContinuousClock.now

    /// Wall-clock "now" of the tests (ms): epochs are plausible up to a day ahead of it.
    static let wall: Int64 = 1_000_000

    static func presence(
        _ participant: String, _ status: Wire.Presence.Status = .online, epoch: Int64, interval: Int64? = 2_500
    ) -> Wire.Presence {
        Wire.Presence(participant: participant, status: status, epoch: epoch, name: nil, interval: interval)
    }

    static func announcement(_ session: String, type: String = "com.example.a", revision: Int64 = 1, ended: Bool? = nil)
        -> Wire.Announcement
    {
        Wire.Announcement(
            session: session, activity: .init(type: type, metadata: .init(title: "T"), data: .null),
            createdBy: "bob", createdAt: 1, revision: HLCTimestamp(time: revision, counter: 0, participant: "bob"), ttl: 60, ended: ended)
    }

    static func listener(_ type: String = Machine.anyActivity) -> (Machine.Listener, Inbox<SessionCore>) {
        let inbox = Inbox<SessionCore>()
        return (Machine.Listener(activityType: type, inbox: inbox), inbox)
    }

    // MARK: - Presence

    @Test func presenceFollowsTheLiveConnection() {
        // Participants without heartbeats: a newer epoch takes over at once (see the forgery tests for
        // those that send heartbeats).
        var machine = Machine(me: "alice", myEpoch: 10)
        func on(_ participant: String, _ presence: Wire.Presence?, at time: Duration = .zero) -> Machine.PresenceAction {
            var presence = presence
            presence?.interval = nil
            return machine.onPresence(participant, presence, wallNow: Self.wall, now: Self.t0 + time)
        }
        #expect(machine.online == ["alice": 10])
        #expect(on("bob", Self.presence("bob", epoch: 5)) == .changed(participant: "bob", epoch: 5))
        #expect(on("bob", Self.presence("bob", epoch: 5)) == .none, "a repeat changes nothing")
        #expect(on("bob", Self.presence("bob", epoch: 6)) == .changed(participant: "bob", epoch: 6), "a newer connection")
        #expect(on("bob", Self.presence("bob", .lost, epoch: 5)) == .none, "the late will of the older connection")
        #expect(on("bob", Self.presence("bob", epoch: 5)) == .none, "an older connection while the newer one is alive")
        #expect(machine.online["bob"] == 6)
        #expect(on("bob", Self.presence("bob", .lost, epoch: 7)) == .none, "a will names its own connection only")
        #expect(on("bob", Self.presence("bob", .lost, epoch: 6)) == .changed(participant: "bob", epoch: nil))
        #expect(on("bob", Self.presence("bob", epoch: 5)) == .changed(participant: "bob", epoch: 5), "nobody newer is alive")
        #expect(on("carol", Self.presence("carol", epoch: 1)) == .changed(participant: "carol", epoch: 1))
        #expect(on("carol", nil) == .changed(participant: "carol", epoch: nil), "cleared: a clean exit")
        #expect(on("carol", nil) == .none)
        #expect(on("dave", Self.presence("mallory", epoch: 1)) == .rejected, "another participant's record")
        #expect(on("dave", Self.presence("dave", epoch: Self.wall + HLCTimestamp.maximumSkew + 1)) == .rejected, "from too far ahead")
        #expect(on("dave", Self.presence("dave", epoch: -1)) == .rejected)
        #expect(machine.online == ["alice": 10, "bob": 5])
    }

    /// The participants `expireSilent` reports gone at `time`.
    static func silent(_ machine: inout Machine, at time: Duration, ownInterval: Int64? = 2_500) -> [String] {
        machine.expireSilent(now: Self.t0 + time, ownInterval: ownInterval).changes.compactMap {
            if case let .changed(participant, nil) = $0 { return participant }
            return nil
        }
    }

    @Test func aForgedEpochNeitherEvictsNorSilencesAParticipant() {
        var machine = Machine(me: "alice", myEpoch: 10)
        #expect(machine.bobs(Self.presence("bob", epoch: 5)) == .changed(participant: "bob", epoch: 5))
        #expect(machine.bobsHeartbeat(epoch: 5, at: .zero) == .none, "bob's connection proves itself")
        #expect(machine.bobs(Self.presence("bob", .lost, epoch: 6)) == .none)
        #expect(machine.bobs(Self.presence("bob", .lost, epoch: .max)) == .rejected)
        #expect(machine.bobsHeartbeat(epoch: .max, at: .zero) == .rejected)
        // A forged online record of a newer epoch, with or without an interval, only challenges the
        // live connection: nothing changes, and it is forgotten once it stays silent.
        #expect(machine.bobs(Self.presence("bob", epoch: 6)) == .none)
        #expect(machine.bobs(Self.presence("bob", epoch: Self.wall + 4 * 3_600_000, interval: nil)) == .none)
        #expect(machine.online["bob"] == 5)
        #expect(machine.bobsHeartbeat(epoch: 5, at: .seconds(2)) == .none)
        #expect(machine.bobsHeartbeat(epoch: 5, at: .seconds(4)) == .none)
        #expect(Self.silent(&machine, at: .seconds(8)).isEmpty)
        #expect(
            machine.bobs(Self.presence("bob", .lost, epoch: 5), at: .seconds(9))
                == .changed(participant: "bob", epoch: nil), "the forged challenger was forgotten: nobody takes bob's place")
    }

    @Test func aNewProcessTakesOverWhenTheOldOneIsGoneOrItProvesItself() {
        var machine = Machine(me: "alice", myEpoch: 10)
        #expect(machine.bobs(Self.presence("bob", epoch: 5)) == .changed(participant: "bob", epoch: 5))
        #expect(machine.bobsHeartbeat(epoch: 5, at: .zero) == .none)
        #expect(machine.bobs(Self.presence("bob", epoch: 7), at: .seconds(1)) == .none, "a challenger")
        #expect(
            machine.bobs(Self.presence("bob", .lost, epoch: 5), at: .seconds(1)) == .changed(participant: "bob", epoch: 7), "the old will")
        #expect(machine.bobsHeartbeat(epoch: 7, at: .seconds(2)) == .none)
        #expect(machine.bobsHeartbeat(epoch: 9, at: .seconds(2)) == .none, "a newer challenger's first heartbeat")
        #expect(machine.bobsHeartbeat(epoch: 9, at: .seconds(4)) == .changed(participant: "bob", epoch: 9), "its second one")
        // A silent connection's challenger takes its place.
        #expect(machine.bobs(Self.presence("bob", epoch: 11), at: .seconds(5)) == .none)
        #expect(Self.silent(&machine, at: .seconds(12)).isEmpty, "9 is silent, 11 takes over")
        #expect(machine.online["bob"] == 11)
    }

    @Test func aSingleForgedHeartbeatNeverTakesAPlaceBeforeTheFirstRealOne() {
        // bob's connection has not sent a heartbeat yet: a forged older or newer one changes nothing.
        var machine = Machine(me: "alice", myEpoch: 10)
        #expect(
            machine.onPresence("bob", Self.presence("bob", epoch: 500), wallNow: Self.wall, now: Self.t0)
                == .changed(participant: "bob", epoch: 500))
        #expect(machine.onHeartbeat("bob", .init(epoch: 0, interval: 2_500), wallNow: Self.wall, now: Self.t0) == .none)
        #expect(machine.onHeartbeat("bob", .init(epoch: 900, interval: 2_500), wallNow: Self.wall, now: Self.t0) == .none)
        #expect(machine.onPresence("bob", Self.presence("bob", epoch: 901), wallNow: Self.wall, now: Self.t0) == .none)
        #expect(machine.online["bob"] == 500)
    }

    @Test func aConnectionKnownOnlyFromItsRecordGivesWayToOneThatSendsHeartbeats() {
        // A newcomer reads a forged retained record of bob with a newer epoch and no interval, which
        // would never fall silent: bob's next heartbeat takes his place back.
        var machine = Machine(me: "alice", myEpoch: 10)
        #expect(
            machine.onPresence("bob", Self.presence("bob", epoch: 900, interval: nil), wallNow: Self.wall, now: Self.t0)
                == .changed(participant: "bob", epoch: 900))
        #expect(machine.onHeartbeat("bob", .init(epoch: 5, interval: 2_500), wallNow: Self.wall, now: Self.t0 + .seconds(1)) == .none)
        #expect(
            machine.onHeartbeat("bob", .init(epoch: 5, interval: 2_500), wallNow: Self.wall, now: Self.t0 + .seconds(3))
                == .changed(participant: "bob", epoch: 5), "its second heartbeat")
        #expect(
            machine.onPresence("bob", Self.presence("bob", epoch: 900, interval: nil), wallNow: Self.wall, now: Self.t0 + .seconds(4))
                == .none, "the confirmed connection is only challenged from now on")
    }

    @Test func aForgedNewerEpochOfOurOwnIsOverwrittenUnlessItSendsHeartbeats() {
        var machine = Machine(me: "alice", myEpoch: 10)
        #expect(machine.onPresence("alice", Self.presence("alice", epoch: 20), wallNow: Self.wall, now: Self.t0) == .none)
        #expect(machine.expireSilent(now: Self.t0 + .seconds(6), ownInterval: 2_500).republishOwn == false)
        #expect(machine.expireSilent(now: Self.t0 + .seconds(8), ownInterval: 2_500).republishOwn, "no heartbeat of it in 7 s")
        #expect(machine.expireSilent(now: Self.t0 + .seconds(20), ownInterval: 2_500).republishOwn == false, "once")
        // Another process of ours that sends heartbeats is left alone.
        #expect(machine.onPresence("alice", Self.presence("alice", epoch: 30), wallNow: Self.wall, now: Self.t0 + .seconds(20)) == .none)
        #expect(machine.onHeartbeat("alice", .init(epoch: 30, interval: 2_500), wallNow: Self.wall, now: Self.t0 + .seconds(22)) == .none)
        #expect(machine.expireSilent(now: Self.t0 + .seconds(40), ownInterval: 2_500).republishOwn == false)
    }

    @Test func ourOwnPresenceIsRepublishedWhenOverwritten() {
        var machine = Machine(me: "alice", myEpoch: 10)
        func on(_ presence: Wire.Presence?) -> Machine.PresenceAction {
            machine.onPresence("alice", presence, wallNow: Self.wall, now: Self.t0)
        }
        #expect(on(Self.presence("alice", epoch: 10)) == .none, "our own echo")
        #expect(on(Self.presence("alice", .lost, epoch: 10)) == .republishOwn, "a late will of this connection")
        #expect(on(Self.presence("alice", epoch: 9)) == .republishOwn, "an older connection's record")
        #expect(on(nil) == .republishOwn, "cleared")
        #expect(on(Self.presence("alice", .lost, epoch: 11)) == .none, "a newer process of the same participant")
        #expect(machine.close().sessions.isEmpty)
        #expect(on(nil) == .none, "not after close()")
    }

    @Test func eachParticipantIsJudgedByItsOwnHeartbeatInterval() {
        var machine = Machine(me: "alice", myEpoch: 10)
        #expect(
            machine.onPresence("bob", Self.presence("bob", epoch: 1, interval: 1_000), wallNow: Self.wall, now: Self.t0)
                == .changed(participant: "bob", epoch: 1))
        #expect(
            machine.onPresence("carol", Self.presence("carol", epoch: 1, interval: 15_000), wallNow: Self.wall, now: Self.t0)
                == .changed(participant: "carol", epoch: 1))
        #expect(
            machine.onPresence("dave", Self.presence("dave", epoch: 1, interval: nil), wallNow: Self.wall, now: Self.t0)
                == .changed(participant: "dave", epoch: 1))
        #expect(Self.silent(&machine, at: .milliseconds(2_400)).isEmpty)
        #expect(Self.silent(&machine, at: .milliseconds(2_600)) == ["bob"], "three of its 1 s intervals less 0.5 s")
        #expect(Self.silent(&machine, at: .seconds(44)).isEmpty, "a 15 s interval: 44.5 s of silence")
        #expect(machine.onHeartbeat("carol", .init(epoch: 1, interval: 15_000), wallNow: Self.wall, now: Self.t0 + .seconds(40)) == .none)
        #expect(Self.silent(&machine, at: .seconds(80)).isEmpty, "heard at 40 s")
        #expect(Self.silent(&machine, at: .seconds(85)) == ["carol"])
        #expect(machine.online == ["alice": 10, "dave": 1], "without heartbeats only its will removes it")
        machine.onReconnected(now: Self.t0 + .seconds(100))
        #expect(
            machine.onHeartbeat("bob", .init(epoch: 1, interval: 1_000), wallNow: Self.wall, now: Self.t0 + .seconds(101))
                == .changed(participant: "bob", epoch: 1), "back with its next heartbeat")
        #expect(Self.silent(&machine, at: .milliseconds(103_400)).isEmpty)
    }

    // MARK: - Sessions

    @Test func aNewSessionGoesToTheListenersThatWantItOnce() {
        var machine = Machine(me: "alice", myEpoch: 10)
        let (all, allInbox) = Self.listener()
        let (a, aInbox) = Self.listener("com.example.a")
        let (b, _) = Self.listener("com.example.b")
        for listener in [all, a, b] { #expect(machine.addListener(listener)?.isEmpty == true) }
        #expect(
            machine.onPresence("bob", Self.presence("bob", epoch: 3), wallNow: Self.wall, now: Self.t0)
                == .changed(participant: "bob", epoch: 3))
        guard case let .new(listeners, presence) = machine.announce("s1", Self.announcement("s1")) else {
            Issue.record("not new")
            return
        }
        #expect(
            Set(listeners.map(ObjectIdentifier.init)) == [ObjectIdentifier(allInbox), ObjectIdentifier(aInbox)],
            "the wrong type is filtered out")
        #expect(presence == ["alice": 10, "bob": 3], "the new session starts from the group's presence")
        guard case .changed = machine.announce("s1", Self.announcement("s1", revision: 2), by: "carol") else {
            Issue.record("a known session changed; nobody gets it again")
            return
        }
    }

    @Test func aLateListenerGetsTheAnnouncedSessionsItWants() {
        var machine = Machine(me: "alice", myEpoch: 10)
        #expect(machine.announce("s2", Self.announcement("s2", type: "com.example.b")) == .new(listeners: [], presence: ["alice": 10]))
        #expect(machine.announce("s1", Self.announcement("s1")) == .new(listeners: [], presence: ["alice": 10]))
        #expect(machine.announce("s3", Self.announcement("s3")) == .new(listeners: [], presence: ["alice": 10]))
        #expect(machine.addListener(Self.listener("com.example.a").0) == ["s1", "s3"])
        #expect(machine.addListener(Self.listener().0) == ["s1", "s2", "s3"])
    }

    @Test func aSessionEndsWithAnEndedCopyOrItsLastCopyCleared() {
        var machine = Machine(me: "alice", myEpoch: 10)
        #expect(machine.announce("s1", Self.announcement("s1")) == .new(listeners: [], presence: ["alice": 10]))
        #expect(machine.announce("s1", Self.announcement("s1"), by: "carol") == .changed)
        guard case .none = machine.announce("s1", nil) else {
            Issue.record("carol's copy is left")
            return
        }
        guard case .ended(by: nil, settled: true) = machine.announce("s1", nil, by: "carol") else {
            Issue.record("every copy cleared: ended")
            return
        }
        guard case .new = machine.announce("s1", Self.announcement("s1")) else {
            Issue.record("announced again: a new session")
            return
        }
        let endedByCarol = Self.announcement("s1", revision: 5, ended: true)
        guard case .ended(by: "carol", settled: false) = machine.announce("s1", endedByCarol, by: "carol") else {
            Issue.record("an ended copy ends it; bob's copy is still there")
            return
        }
        guard case .none = machine.announce("s1", Self.announcement("s1")) else {
            Issue.record("an older copy read after the ended one does not bring it back")
            return
        }
        #expect(machine.addListener(Self.listener().0)?.isEmpty == true, "ended: forgotten")
        guard case .none = machine.announce("s1", nil, by: "carol"), case .none = machine.announce("s1", nil, by: "dave") else {
            Issue.record("bob's copy from before the end is still there")
            return
        }
        guard case .settled = machine.announce("s1", nil) else {
            Issue.record("the last copy from before the end is gone: the ended copy may go too")
            return
        }
        guard case .rejected = machine.announce("s9", Self.announcement("s1")) else {
            Issue.record("an announcement names its own session")
            return
        }
        guard case .rejected = machine.announce("s9", Self.announcement("s9", type: "bad/type")) else {
            Issue.record("an activity type is an identifier")
            return
        }
        guard case .rejected = machine.announce("s9", Self.announcement("s9", revision: 1_000 + HLCTimestamp.maximumSkew + 1)) else {
            Issue.record("a revision from too far ahead")
            return
        }
    }

    /// The other copies may be cleared before the ender's ended copy comes back, or after, and before or
    /// after the ender forgot the session: either way its ended copy goes once nothing else is left.
    @Test func anEndedCopyIsSettledWhateverTheOrder() {
        var live = Machine(me: "alice", myEpoch: 10)
        #expect(live.announce("s1", Self.announcement("s1"), by: "alice") == .new(listeners: [], presence: ["alice": 10]))
        #expect(live.announce("s1", Self.announcement("s1"), by: "zoe") == .changed)
        #expect(live.announce("s1", nil, by: "zoe") == .none)  // zoe read `$end` first; alice has not forgotten it yet
        guard case .ended(by: "alice", settled: true) = live.announce("s1", Self.announcement("s1", revision: 5, ended: true), by: "alice")
        else {
            Issue.record("the ended copy is the last one")
            return
        }
        for clearFirst in [true, false] {
            var machine = Machine(me: "alice", myEpoch: 10)
            #expect(machine.announce("s1", Self.announcement("s1"), by: "alice") == .new(listeners: [], presence: ["alice": 10]))
            #expect(machine.announce("s1", Self.announcement("s1"), by: "zoe") == .changed)
            machine.forget("s1")  // alice ended it
            let ended = Self.announcement("s1", revision: 5, ended: true)
            if clearFirst {
                guard case .none = machine.announce("s1", nil, by: "zoe") else {
                    Issue.record("alice's own copy is there until her ended copy replaces it")
                    return
                }
                guard case .settled = machine.announce("s1", ended, by: "alice") else {
                    Issue.record("the ended copy comes back after the last copy was cleared")
                    return
                }
            } else {
                guard case .none = machine.announce("s1", ended, by: "alice") else {
                    Issue.record("zoe's copy is still there")
                    return
                }
                guard case .settled = machine.announce("s1", nil, by: "zoe") else {
                    Issue.record("zoe's copy was the last one")
                    return
                }
            }
            guard case .none = machine.announce("s1", Self.announcement("s1"), by: "zoe") else {
                Issue.record("an older copy does not bring it back")
                return
            }
        }
    }

    /// A will ends a connection; one older than it heard afterwards (a forged heartbeat, here) holds off
    /// the participant's own connection — the same epoch, after a forged will, or a newer one — not a
    /// moment: its first heartbeat takes over.
    @Test(arguments: [Int64(20), 21]) func aConnectionOlderThanAWillGivesWayAtOnce(returning: Int64) {
        var machine = Machine(me: "alice", myEpoch: 10)
        #expect(machine.bobs(Self.presence("bob", epoch: 20), at: .zero) == .changed(participant: "bob", epoch: 20))
        #expect(machine.bobsHeartbeat(epoch: 20, at: .milliseconds(100)) == .none)
        #expect(machine.bobs(Self.presence("bob", .lost, epoch: 20), at: .milliseconds(200)) == .changed(participant: "bob", epoch: nil))
        #expect(machine.bobsHeartbeat(epoch: 5, at: .milliseconds(300)) == .changed(participant: "bob", epoch: 5))
        #expect(
            machine.bobsHeartbeat(epoch: returning, at: .milliseconds(400)) == .changed(participant: "bob", epoch: returning), "at once")
        #expect(machine.bobsHeartbeat(epoch: 5, at: .milliseconds(500)) == .none, "the older one does not come back")
        #expect(machine.bobsHeartbeat(epoch: 5, at: .milliseconds(600)) == .none)
        #expect(machine.connections["bob"]?.epoch == returning)
    }

    /// A connection back after its will (the same epoch: a reconnect, a thawed process) that proves itself
    /// is as safe as before: a forged record of a newer epoch only challenges it.
    @Test func aConnectionBackAfterItsWillIsNotWeaker() {
        var machine = Machine(me: "alice", myEpoch: 10)
        _ = machine.bobs(Self.presence("bob", epoch: 20), at: .zero)
        #expect(machine.bobs(Self.presence("bob", .lost, epoch: 20), at: .milliseconds(100)) == .changed(participant: "bob", epoch: nil))
        #expect(machine.bobs(Self.presence("bob", epoch: 20), at: .milliseconds(200)) == .changed(participant: "bob", epoch: 20))
        #expect(machine.bobsHeartbeat(epoch: 20, at: .milliseconds(300)) == .none)
        #expect(machine.bobs(Self.presence("bob", epoch: 21), at: .milliseconds(400)) == .none, "a record only challenges")
        #expect(machine.connections["bob"]?.epoch == 20)
    }

    @Test func theCreatorsOwnCopyDecidesTheActivityType() {
        var machine = Machine(me: "alice", myEpoch: 10)
        #expect(machine.addListener(Self.listener("com.example.a").0)?.isEmpty == true)
        guard case .new = machine.announce("s1", Self.announcement("s1", type: "com.example.forged", revision: 9), by: "mallory") else {
            Issue.record("a copy of a session not seen yet")
            return
        }
        guard case let .retyped(listeners, _) = machine.announce("s1", Self.announcement("s1")) else {
            Issue.record("bob created it: his copy says what it is")
            return
        }
        #expect(listeners.count == 1)
        guard case .rejected = machine.announce("s1", Self.announcement("s1", type: "com.example.forged", revision: 10), by: "mallory")
        else {
            Issue.record("from now on a copy of another type is rejected, its revision never merged")
            return
        }
        guard case .rejected = machine.announce("s1", Self.announcement("s1", type: "com.example.forged", ended: true), by: "mallory")
        else {
            Issue.record("a foreign copy that says the session ended does not end it")
            return
        }
        #expect(machine.addListener(Self.listener("com.example.a").0) == ["s1"])
    }

    @Test func onlyTheCreatorChoosesTheLifetime() {
        var machine = Machine(me: "alice", myEpoch: 10)
        func announcement(ttl: Int64, revision: Int64 = 2) -> Wire.Announcement {
            var copy = Self.announcement("s1", revision: revision)
            copy.ttl = ttl
            return copy
        }
        guard case .new = machine.announce("s1", announcement(ttl: 1, revision: 1), by: "mallory") else {
            Issue.record("a copy of a session not seen yet")
            return
        }
        guard case .retyped = machine.announce("s1", announcement(ttl: 60)) else {
            Issue.record("the creator's own copy says what the lifetime is")
            return
        }
        for (ttl, publisher) in [(1, "mallory"), (4_294_967_295, "carol"), (61, "bob")] {
            guard case .rejected = machine.announce("s1", announcement(ttl: Int64(ttl), revision: 3), by: publisher) else {
                Issue.record("a copy with another ttl (\(ttl) by \(publisher)) is rejected")
                return
            }
        }
        guard case .changed = machine.announce("s1", announcement(ttl: 60, revision: 3), by: "carol") else {
            Issue.record("a copy that agrees")
            return
        }
    }

    /// A closed copy (sealed with a key we lack) authenticates nothing: it lists a session not known yet
    /// and keeps its publisher's copy alive, no more. The first open copy then decides what the session
    /// is, whoever published it.
    @Test func aClosedCopyOnlyListsASessionNotKnownYet() {
        var machine = Machine(me: "alice", myEpoch: 10)
        func closed(_ type: String = "com.example.a", ended: Bool? = nil) -> Wire.Announcement {
            var copy = Self.announcement("s1", type: type, revision: 9, ended: ended)
            copy.activity.sealed = "k9"
            return copy
        }
        func announce(_ copy: Wire.Announcement, by publisher: String, expiresAt: Int64 = 60_000) -> Machine.AnnouncementAction {
            machine.announce("s1", copy, by: publisher, expiresAt: expiresAt)
        }
        #expect(announce(closed(ended: true), by: "mallory") == .none, "an ended session not known: nothing to list")
        #expect(announce(closed("com.example.forged"), by: "mallory") == .new(listeners: [], presence: ["alice": 10]))
        #expect(announce(closed(), by: "carol", expiresAt: 90_000) == .none, "no retype from a closed copy")
        #expect(announce(closed(ended: true), by: "carol") == .none, "nor an end")
        guard case .retyped = announce(Self.announcement("s1", revision: 2), by: "dave") else {
            Issue.record("the first open copy decides the type, even one not the creator's")
            return
        }
        #expect(announce(Self.announcement("s1", revision: 3), by: "carol") == .changed)
        #expect(announce(closed(ended: true), by: "mallory", expiresAt: 90_000) == .none, "a closed copy does not end an open session")
        #expect(machine.expireSessions(now: 70_000).isEmpty, "but keeps it alive: a member with a newer key published it")
        #expect(announce(Self.announcement("s1", revision: 4, ended: true), by: "bob") == .ended(by: "bob", settled: false))
    }

    @Test func aSessionExpiresWhenNobodyRefreshesAnyCopy() {
        var machine = Machine(me: "alice", myEpoch: 10)
        #expect(machine.announce("s1", Self.announcement("s1"), expiresAt: 5_000) == .new(listeners: [], presence: ["alice": 10]))
        #expect(machine.announce("s1", Self.announcement("s1"), by: "carol", expiresAt: 8_000) == .changed)
        #expect(machine.announce("s2", Self.announcement("s2"), expiresAt: 6_000) == .new(listeners: [], presence: ["alice": 10]))
        #expect(machine.expireSessions(now: 4_000).isEmpty)
        #expect(machine.expireSessions(now: 6_000) == ["s2"])
        #expect(machine.announce("s1", Self.announcement("s1"), by: "carol", expiresAt: 12_000) == .changed)  // refreshed
        #expect(machine.expireSessions(now: 9_000).isEmpty)
        #expect(machine.expireSessions(now: 12_000) == ["s1"])
        #expect(machine.addListener(Self.listener().0)?.isEmpty == true)
    }

    // MARK: - The timer

    /// Each input asks the timer for what it may have made due; a wake-up then finds the next moment from
    /// the whole state. Nothing is asked while nothing can fall due: no periodic wake-up.
    @Test func theTimerIsAskedForTheNextSilenceAndExpiryOnly() {
        var machine = Machine(me: "alice", myEpoch: 10)
        #expect(machine.takeWakeRequest() == .init(), "alone: nothing to wake for")
        #expect(machine.nextWake(ownInterval: 2_500) == .init())
        let silence = Machine.Connection.silence(interval: 2_500)
        #expect(
            machine.onPresence("bob", Self.presence("bob", epoch: 5), wallNow: Self.wall, now: Self.t0)
                == .changed(participant: "bob", epoch: 5))
        #expect(machine.takeWakeRequest() == .init(silence: Self.t0 + silence))
        #expect(machine.takeWakeRequest() == .init(), "taken once")
        // A heartbeat later asks for a later wake-up; the earliest of several inputs is kept.
        let beat = Wire.Heartbeat(epoch: 5, interval: 2_500)
        #expect(machine.onHeartbeat("bob", beat, wallNow: Self.wall, now: Self.t0 + .seconds(2)) == .none)
        #expect(machine.onHeartbeat("bob", beat, wallNow: Self.wall, now: Self.t0 + .seconds(3)) == .none)
        #expect(machine.takeWakeRequest() == .init(silence: Self.t0 + .seconds(2) + silence))
        #expect(machine.nextWake(ownInterval: 2_500) == .init(silence: Self.t0 + .seconds(3) + silence), "from the last heard")
        // A participant with a longer interval is due later; a rejected record asks nothing.
        #expect(
            machine.onPresence("carol", Self.presence("carol", epoch: 5, interval: 10_000), wallNow: Self.wall, now: Self.t0)
                == .changed(participant: "carol", epoch: 5))
        #expect(machine.takeWakeRequest().silence == Self.t0 + Machine.Connection.silence(interval: 10_000))
        #expect(machine.onPresence("dave", Self.presence("mallory", epoch: 1), wallNow: Self.wall, now: Self.t0) == .rejected)
        #expect(machine.takeWakeRequest() == .init())
        // Sessions: when the last copy expires, and an ended one when its ended copy does.
        #expect(
            machine.announce("s1", Self.announcement("s1"), expiresAt: 5_000)
                == .new(listeners: [], presence: ["alice": 10, "carol": 5, "bob": 5]))
        #expect(machine.announce("s1", Self.announcement("s1"), by: "carol", expiresAt: 8_000) == .changed)
        #expect(machine.takeWakeRequest().expiry == 5_000, "asked by the first copy")
        #expect(machine.nextWake(ownInterval: 2_500).expiry == 8_000, "the session lives as long as its last copy")
        // A copy cleared while another lives on: the session now lasts only as long as that one.
        #expect(machine.announce("s1", Self.announcement("s1"), by: "dave", expiresAt: 30_000) == .changed)
        #expect(machine.announce("s1", nil, by: "dave") == .none)
        #expect(machine.takeWakeRequest().expiry == 8_000, "asked by the clear")
        #expect(machine.announce("s2", Self.announcement("s2", ended: true), expiresAt: 7_000) == .settled)
        #expect(machine.nextWake(ownInterval: 2_500).expiry == 7_000)
        // Once silent and expired, nothing is left to wake for.
        #expect(
            machine.expireSilent(now: Self.t0 + .seconds(60), ownInterval: 2_500) == (
                [.changed(participant: "bob", epoch: nil), .changed(participant: "carol", epoch: nil)], false
            ))
        #expect(machine.expireSessions(now: 9_000) == ["s1"])
        #expect(machine.nextWake(ownInterval: 2_500) == .init())
    }

    /// A newer epoch of our own that proves itself with heartbeats is another process of ours: nothing
    /// forgets it, so nothing wakes for it (a deadline nobody acts on would wake the timer at once, again
    /// and again).
    @Test func theTimerDoesNotWakeForWhatNothingWouldDo() {
        var machine = Machine(me: "alice", myEpoch: 10)
        #expect(machine.onPresence("alice", Self.presence("alice", epoch: 20), wallNow: Self.wall, now: Self.t0) == .none)
        #expect(machine.nextWake(ownInterval: 2_500).silence != nil, "a record alone: forgotten if it stays silent")
        #expect(machine.onHeartbeat("alice", Wire.Heartbeat(epoch: 20, interval: 2_500), wallNow: Self.wall, now: Self.t0) == .none)
        #expect(machine.nextWake(ownInterval: 2_500) == .init())
        let later = Self.t0 + .seconds(60)
        #expect(machine.expireSilent(now: later, ownInterval: 2_500).changes.isEmpty)
        #expect(machine.nextWake(ownInterval: 2_500) == .init())
    }

    @Test func removedListenersGetNothingAndCloseEndsTheRest() {
        var machine = Machine(me: "alice", myEpoch: 10)
        let (first, firstInbox) = Self.listener()
        let (second, secondInbox) = Self.listener()
        #expect(machine.addListener(first) == [])
        #expect(machine.addListener(second) == [])
        machine.removeListener(ObjectIdentifier(firstInbox))
        guard case let .new(listeners, _) = machine.announce("s1", Self.announcement("s1")) else {
            Issue.record("not new")
            return
        }
        #expect(listeners.map(ObjectIdentifier.init) == [ObjectIdentifier(secondInbox)])
        let closed = machine.close()
        #expect(closed.listeners.map(ObjectIdentifier.init) == [ObjectIdentifier(secondInbox)])
        #expect(closed.sessions == ["s1"], "the sessions to leave")
        #expect(machine.isClosed && machine.online.isEmpty)
        #expect(machine.addListener(Machine.Listener(activityType: "*", inbox: firstInbox)) == nil, "ends at once")
        guard case .none = machine.announce("s2", Self.announcement("s2")) else {
            Issue.record("no sessions after close()")
            return
        }
        #expect(machine.close().listeners.isEmpty, "idempotent")
    }

    // MARK: - Sharing gate

    @Test func theSharingGateHoldsWorkWhileAnySessionIsJoined() {
        var gate = SharingGate()
        let inbox = Inbox<Bool>()
        let added = gate.addListener(inbox)
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
        gate.removeListener(ObjectIdentifier(inbox))
        #expect(gate.onJoined("s3").yield.isEmpty, "removed")
        #expect(gate.onDefer({}).run.isEmpty, "deferred while sharing")
        let lateAdded = gate.addListener(Inbox())
        #expect(lateAdded.yield.map(\.1) == [true] && lateAdded.finish.isEmpty)
        let closed = gate.close()
        #expect(closed.finish.count == 1 && closed.run.count == 1, "listeners end, waiting work runs")
        #expect(gate.addListener(Inbox()).finish.count == 1, "after close(): its value, then its end")
        #expect(gate.onDefer({}).run.count == 1, "after close(): at once")
    }

    // MARK: - Owned retained records

    @Test func ownedRecordsAreRepublishedInTheOrderANewcomerNeedsThem() {
        var owned = OwnedRetained()
        let root = "groupsync/v2/g"
        let record = OwnedRetained.Record(payload: Data("x".utf8), lifetime: .seconds(60), refreshing: true, published: Self.t0)
        for topic in ["\(root)/s/s1/state/k/alice", "\(root)/s/s1/member/alice", "\(root)/session/s1/alice", "\(root)/presence/alice"] {
            owned.own(topic, record)
        }
        #expect(
            owned.inRepublishOrder(now: Self.t0).map(\.topic) == [
                "\(root)/presence/alice", "\(root)/session/s1/alice", "\(root)/s/s1/member/alice", "\(root)/s/s1/state/k/alice",
            ])
        #expect(owned.topics(under: "\(root)/s/s1/") == ["\(root)/s/s1/member/alice", "\(root)/s/s1/state/k/alice"])
        owned.own(
            "\(root)/s/s1/member/alice", OwnedRetained.Record(payload: Data(), lifetime: .seconds(60), refreshing: true, published: Self.t0)
        )
        owned.disown("\(root)/session/s1/alice")
        #expect(
            owned.inRepublishOrder(now: Self.t0).map(\.topic) == ["\(root)/presence/alice", "\(root)/s/s1/state/k/alice"],
            "cleared and disowned records stay gone")
    }

    @Test func keptRecordsAreRefreshedAtAThirdOfTheirLifetimeAndReleasedOnesExpire() {
        var owned = OwnedRetained()
        owned.own("a", .init(payload: Data("a".utf8), lifetime: .seconds(12), refreshing: true, published: Self.t0))
        owned.own("b", .init(payload: Data("b".utf8), lifetime: .seconds(6), refreshing: true, published: Self.t0))
        #expect(owned.nextRefresh == Self.t0 + .seconds(2), "the timer wakes for b first")
        #expect(owned.due(now: Self.t0 + .seconds(1)).isEmpty)
        #expect(owned.due(now: Self.t0 + .seconds(2)).map(\.topic) == ["b"])
        #expect(owned.nextRefresh == Self.t0 + .seconds(4), "then for a and b again")
        #expect(owned.due(now: Self.t0 + .seconds(3)).isEmpty, "refreshed at 2 s")
        owned.release("b")
        #expect(owned.due(now: Self.t0 + .seconds(4)).map(\.topic) == ["a"], "b is no longer refreshed")
        let left = owned.inRepublishOrder(now: Self.t0 + .seconds(5))
        #expect(left.map(\.topic) == ["a", "b"])
        #expect(left[1].record.properties(at: Self.t0 + .seconds(5)).messageExpiry == 3, "what is left of b's lifetime")
        #expect(left[0].record.properties(at: Self.t0 + .seconds(5)).messageExpiry == 12)
        #expect(owned.inRepublishOrder(now: Self.t0 + .seconds(8)).map(\.topic) == ["a"], "b's lifetime is over")
        owned.release("a")
        #expect(owned.nextRefresh == nil, "nothing kept: no wake-up")
    }

    /// A record's publishes are counted until each acknowledgement: a presence still unacknowledged when a
    /// connection begins may reach the broker ahead of the resubscription.
    @Test func publishesAwaitingTheirAcknowledgementAreCountedPerTopic() {
        var owned = OwnedRetained()
        owned.sending("p")
        owned.sending("p")
        owned.sending("s")
        owned.acknowledged("p")
        #expect(owned.unacknowledged == ["p": 1, "s": 1])
        owned.acknowledged("p")
        owned.acknowledged("s")
        #expect(owned.unacknowledged.isEmpty, "none left once each is acknowledged (or failed)")
    }
}

extension CoordinatorStateMachine {
    /// A presence record on bob's topic, `time` after the tests' start.
    fileprivate mutating func bobs(_ record: Wire.Presence, at time: Duration = .zero) -> PresenceAction {
        onPresence("bob", record, wallNow: CoordinatorStateMachineTests.wall, now: CoordinatorStateMachineTests.t0 + time)
    }

    /// A heartbeat of bob's connection `epoch` (interval 2.5 s), `time` after the tests' start.
    fileprivate mutating func bobsHeartbeat(epoch: Int64, at time: Duration) -> PresenceAction {
        onHeartbeat(
            "bob", .init(epoch: epoch, interval: 2_500), wallNow: CoordinatorStateMachineTests.wall,
            now: CoordinatorStateMachineTests.t0 + time)
    }

    /// A copy by `publisher` of a session's announcement, as the tests read it (`nil`: cleared).
    fileprivate mutating func announce(
        _ sessionID: String, _ announcement: Wire.Announcement?, by publisher: String = "bob", expiresAt: Int64 = 60_000
    ) -> AnnouncementAction {
        onAnnouncement(sessionID, publisher: publisher, announcement, expiresAt: expiresAt, now: 1_000)
    }
}
