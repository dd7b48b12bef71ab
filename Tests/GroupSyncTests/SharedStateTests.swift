import BrokerSupport
import Foundation
import Synchronization
import Testing

@testable import GroupSync
@testable import MQTT

/// Shared state convergence, late joiners and clean-up on a real mosquitto.
@Suite(.timeLimit(.minutes(timeLimitMinutes(2)))) struct SharedStateTests {
    @Test func crossingUpdatesConvergeWithoutJumpingBack() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let (_, _, a, b) = try await group.pair(Gallery(galleryID: "x"))
            let sa = try SharedState(a, key: "index", initialValue: 0)
            let sb = try SharedState(b, key: "index", initialValue: 0)
            let seenA = Collector(sa.valueUpdates())
            let seenB = Collector(sb.valueUpdates())
            try await seenA.waitForCount(1)
            try await seenB.waitForCount(1)
            for burst in 1...100 {
                // Both write at once: alice an odd value, bob an even one.
                async let x: Void = sa.set(burst * 2 + 1)
                async let y: Void = sb.set(burst * 2)
                _ = try await (x, y)
                try await waitUntil("burst \(burst) converges") { sa.value == sb.value && [burst * 2, burst * 2 + 1].contains(sa.value) }
            }
            try await waitUntil("streams caught up") { seenA.last == sa.value && seenB.last == sb.value }
            // Nobody ever returns to a value they already left.
            for seen in [seenA.elements, seenB.elements] {
                var left = Set<Int>()
                for (previous, next) in zip(seen, seen.dropFirst()) {
                    #expect(!left.contains(next), "returned to \(next)")
                    left.insert(previous)
                }
                // At most two distinct values per burst: its own write, then possibly the winner.
                #expect(seen.count <= 1 + 2 * 100)
            }
            await group.closeAll()
        }
    }

    @Test(arguments: [Duration.seconds(600), .seconds(-600)])
    func aSkewedClockNeitherWinsForeverNorIsIgnored(skew: Duration) async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let skewed = try await group.join("skewed", clock: SystemWallClock(offset: skew))
            let normal = try await group.join("normal")
            let s = try await skewed.startJoined(Gallery(galleryID: "clock"))
            let n = try await normal.joinSession(s.id, of: Gallery.self)
            let ss = try SharedState(s, key: "index", initialValue: 0)
            let ns = try SharedState(n, key: "index", initialValue: 0)
            try await ss.set(1)
            try await waitUntil("normal sees the skewed write") { ns.value == 1 }
            try await ns.set(2)
            try await waitUntil("the skewed participant is overwritten") { ss.value == 2 && ns.value == 2 }
            try await ss.set(3)
            try await waitUntil("and can write again") { ss.value == 3 && ns.value == 3 }
            await group.closeAll()
        }
    }

    /// With a broker that takes packets of at most 128 KB and keeps no retained messages, a newcomer still
    /// gets 200 KB of shared state: the catch-up comes in parts. A message above the broker's limit is a
    /// typed error.
    @Test(.needsOwnBroker("sets a packet size limit")) func aCatchUpBeyondTheBrokersPacketLimitComesInParts() async throws {
        var config = MosquittoBroker.Configuration(extraLines: ["max_packet_size 131072"])
        config.retainAvailable = false
        try await MosquittoBroker.withBroker(config) { broker in
            let group = Group(broker)
            let (alice, _, a, _) = try await group.pair(Gallery(galleryID: "large"))
            #expect(alice.client.maximumPacketSize == 131_072)
            let page = String(repeating: "p", count: 10_000)
            let keys = (0..<20).map { "page\($0)" }
            for key in keys { try await SharedState(a, key: key, initialValue: "").set(page) }
            let late = try await group.join("late")
            let l = try await late.joinSession(a.id, of: Gallery.self)
            for key in keys { #expect(try SharedState(l, key: key, initialValue: "").value == page, "\(key)") }
            await #expect(throws: GroupSyncError.self) {
                try await GroupSessionMessenger(session: a).send(Chat(text: String(repeating: "x", count: 140_000)))
            }
            await group.closeAll()
        }
    }

    /// A late connector finds the session, joins it and starts with the current value, on a broker with
    /// retained messages and on one without (`retain_available false`).
    @Test(.needsOwnBroker("one case turns retained messages off"), arguments: [true, false])
    func aLateJoinerStartsWithTheCurrentValue(retainAvailable: Bool) async throws {
        var config = MosquittoBroker.Configuration()
        config.retainAvailable = retainAvailable
        try await MosquittoBroker.withBroker(config) { broker in
            let group = Group(broker)
            let (_, _, a, b) = try await group.pair(Gallery(galleryID: "late"))
            try await SharedState(a, key: "index", initialValue: 0).set(5)
            // Bob's update follows alice's causally only once he has seen it: two updates in the same
            // millisecond are concurrent, and either may win.
            try await waitUntil("bob has 5") { try SharedState(b, key: "index", initialValue: 0).value == 5 }
            try await SharedState(b, key: "index", initialValue: 0).set(9)
            try await waitUntil("converged") { try SharedState(a, key: "index", initialValue: 0).value == 9 }
            let late = try await group.join("late")
            // With or without retained messages, a participant that connects late knows the session when
            // connect() returns: from the broker's replay, or from the one participant that welcomes it.
            #expect(late.currentSessions(activityIdentifier: nil).map(\.id) == [a.id])
            #expect(Set(late.state.withLock { $0.machine.online.keys }) == ["alice", "bob", "late"])
            let l = try await late.joinSession(a.id, of: Gallery.self)
            #expect(l.activity.galleryID == "late")
            let state = try SharedState(l, key: "index", initialValue: 0)
            let first = Collector(state.valueUpdates())
            try await first.waitForCount(1)
            #expect(first.elements[0] == 9, "the first element is the current value")
            #expect(ids(l.activeParticipants) == ["alice", "bob", "late"])
            await group.closeAll()
        }
    }

    @Test func catchUpCostsOneMessageNotOnePerParticipant() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let count = 20
            var coordinators: [GroupCoordinator] = []
            for i in 0..<count { coordinators.append(try await group.join("p\(i)")) }
            let first = try await coordinators[0].startJoined(Gallery(galleryID: "many"))
            var joined = [first]
            for coordinator in coordinators.dropFirst() { joined.append(try await coordinator.joinSession(first.id, of: Gallery.self)) }
            let sessions = joined
            try await SharedState(first, key: "index", initialValue: 0).set(42)
            try await waitUntil("everyone has it") {
                try sessions.allSatisfy { try SharedState($0, key: "index", initialValue: 0).value == 42 }
            }
            let (raw, wire) = try await rawSubscriber(broker, "\(GroupTopics.protocolRoot)/\(group.name)/s/\(first.id)/#")
            let newcomer = try await group.join("newcomer")
            let n = try await newcomer.joinSession(first.id, of: Gallery.self)
            #expect(try SharedState(n, key: "index", initialValue: 0).value == 42)
            // Give every participant time to see the join and (wrongly) answer, then count answers.
            try await waitUntil("everyone saw the newcomer") { sessions.allSatisfy { ids($0.activeParticipants).contains("newcomer") } }
            _ = try await raw.publish(to: "\(GroupTopics.protocolRoot)/\(group.name)/s/\(first.id)/all/marker", string: "{}")
            try await waitUntil("marker seen") { wire.elements.contains { $0.topic.hasSuffix("/marker") } }
            let catchUps = wire.elements.filter { $0.topic.contains("/to/newcomer/") }
            #expect(catchUps.count == 1, "exactly one participant answers the newcomer")
            await raw.disconnect()
            await group.closeAll()
        }
    }

    /// A record whose clock counter is at its maximum (plausible: 2³² − 1) does not make every later write
    /// one that readers reject: the clocks that see it move to the next millisecond.
    @Test func aClockCounterAtItsMaximumStopsNoWrite() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let (alice, bob, a, b) = try await group.pair(Gallery(galleryID: "counter"))
            let (sa, sb) = (try SharedState(a, key: "index", initialValue: 0), try SharedState(b, key: "index", initialValue: 0))
            let forger = try MQTTClient(configuration: .init(url: broker.url))
            try await forger.connect()
            let at = SystemWallClock().milliseconds() + 60_000
            let record = #"{"clock":{"c":4294967295,"p":"bob","t":\#(at)},"key":"other","v":2,"value":1}"#
            try await forger.publish(to: alice.topics.state(a.id, key: "other", writer: "bob"), payload: Data(record.utf8), retain: true)
            try await waitUntil("alice saw it") { alice.hlc.withLock { $0.latest.time } >= at }
            try await sa.set(5)
            try await waitUntil("bob reads alice's write") { sb.value == 5 }
            try await sb.set(6)
            try await waitUntil("alice reads bob's") { sa.value == 6 }
            #expect([alice, bob].allSatisfy { $0.rejectedMessageCount == 0 })
            try await forger.publish(to: alice.topics.state(a.id, key: "other", writer: "bob"), payload: Data(), retain: true)
            await forger.disconnect()
            await group.closeAll()
        }
    }

    @Test func catchUpGoesOnlyToTheNewcomer() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let (_, _, a, b) = try await group.pair(Gallery(galleryID: "x"))
            let sa = try SharedState(a, key: "index", initialValue: 0)
            try await sa.set(1)
            let sb = try SharedState(b, key: "index", initialValue: 0)
            try await waitUntil("bob has 1") { sb.value == 1 }
            let seenB = Collector(sb.valueUpdates())
            try await waitUntil("bob at 1") { seenB.last == 1 }
            try await sa.set(2)
            try await waitUntil("bob at 2") { seenB.last == 2 }
            _ = try await group.join("carol").joinSession(a.id, of: Gallery.self)
            try await sa.set(3)
            try await waitUntil("bob at 3") { seenB.last == 3 }
            #expect(seenB.elements == [1, 2, 3], "an existing participant never jumps back when someone joins")
            await group.closeAll()
        }
    }

    @Test func leavingKeepsTheLastValueVisible() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let (_, _, a, b) = try await group.pair(Gallery(galleryID: "x"))
            try await SharedState(b, key: "index", initialValue: 0).set(8)
            await b.leave()
            let carol = try await group.join("carol")
            let c = try await carol.joinSession(a.id, of: Gallery.self)
            #expect(try SharedState(c, key: "index", initialValue: 0).value == 8)
            await group.closeAll()
        }
    }

    /// A live reader decodes a value from the text its writer sent, a late joiner caught up by another
    /// participant from that participant's copy: both read the same values, also for numbers a `Double`
    /// does not hold (an integer beyond `Int64`, a decimal of 36 digits), where the text is not used.
    @Test func liveReadersAndCaughtUpLateJoinersReadTheSameValues() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let a = try await group.join("alice", retainedMessages: false).startJoined(Gallery(galleryID: "same"))
            let (writer, _) = try await rawSubscriber(broker, "\(GroupTopics.protocolRoot)/\(group.name)/unused")
            let topics = GroupTopics(group: group.name)
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let values = [
                ("total", "18446744073709551615"), ("pi", "3.14159265358979323846264338327950288"), ("price", "12.50"),
                ("count", "1e2"),
            ]
            for (key, text) in values {
                let record = #"{"clock":{"c":0,"p":"zed","t":\#(now)},"key":"\#(key)","v":2,"value":\#(text)}"#
                _ = try await writer.publish(to: topics.state(a.id, key: key, writer: "zed"), string: record)
            }
            @Sendable func read(_ session: GroupSession<Gallery>) throws -> [String] {
                [
                    "\(try SharedState(session, key: "total", initialValue: UInt64(0)).value)",
                    "\(try SharedState(session, key: "pi", initialValue: Decimal(0)).value)",
                    "\(try SharedState(session, key: "price", initialValue: Decimal(0)).value)",
                    "\(try SharedState(session, key: "count", initialValue: 0).value)",
                ]
            }
            try await waitUntil("alice has the values") { try read(a)[3] == "100" }
            let c = try await group.join("carol", retainedMessages: false).joinSession(a.id, of: Gallery.self)
            #expect(try read(c) == read(a))
            #expect(try read(a)[2...] == ["12.5", "100"])
            await writer.disconnect()
            await group.closeAll()
        }
    }

    @Test func coalescedWritesDeliverTheLatestValueLast() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let (_, _, a, b) = try await group.pair(Gallery(galleryID: "drag"))
            let (raw, wire) = try await rawSubscriber(broker, "\(GroupTopics.protocolRoot)/\(group.name)/s/\(a.id)/state/#")
            let dragging = try SharedState(a, key: "x", initialValue: 0, minimumInterval: .milliseconds(50))
            let started = ContinuousClock.now
            for x in 1...200 { try await dragging.set(x) }
            #expect(dragging.value == 200, "local writes apply at once")
            let seen = try SharedState(b, key: "x", initialValue: 0)
            try await waitUntil("the last value arrives") { seen.value == 200 }
            // At most one publish per interval while the writes went on (however long they took: several
            // times longer under a sanitizer), plus the first and the last.
            let intervals = Int((ContinuousClock.now - started) / .milliseconds(50))
            #expect(
                wire.count < 200 && wire.count <= intervals + 2,
                "200 writes were coalesced into \(wire.count) publishes over \(intervals) intervals")
            await raw.disconnect()
            await group.closeAll()
        }
    }

    @Test func sharingGateDefersWorkUntilNoSessionIsJoined() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice")
            let updates = Collector(alice.sharingUpdates())
            try await updates.waitForCount(1)
            #expect(updates.elements == [false])
            let ran = LockedValue<[String]>([])
            alice.deferWhileSharing { ran.withLock { $0.append("before") } }
            try await waitUntil("runs at once when nothing is shared") { ran.withLock { $0 } == ["before"] }
            let a = try await alice.startJoined(Gallery(galleryID: "ads"))
            #expect(alice.isSharing)
            alice.deferWhileSharing { ran.withLock { $0.append("ad 1") } }
            alice.deferWhileSharing { ran.withLock { $0.append("ad 2") } }
            try await waitUntil("sharing reported") { updates.elements == [false, true] }
            #expect(ran.withLock { $0 } == ["before"], "held back while a session is joined")
            await a.leave()
            try await waitUntil("deferred work runs in order after the session") { ran.withLock { $0 } == ["before", "ad 1", "ad 2"] }
            #expect(updates.elements == [false, true, false])
            await group.closeAll()
        }
    }

    /// Participants told not to use retained messages (for a cluster whose nodes keep separate retained
    /// stores) work as on a broker without them — a late joiner finds the session and its state through
    /// welcomes and catch-ups — and leave nothing retained on a broker that has them.
    @Test func participantsWithoutRetainedMessagesNeedAndLeaveNone() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice", retainedMessages: false)
            let a = try await alice.startJoined(Gallery(galleryID: "no-retain"))
            try await SharedState(a, key: "index", initialValue: 0).set(7)
            let root = "\(GroupTopics.protocolRoot)/\(group.name)"
            let retained = try await retainedTopics(broker, under: root)
            #expect(retained.isEmpty, "\(retained)")
            let late = try await group.join("late", retainedMessages: false)
            #expect(late.currentSessions(activityIdentifier: nil).map(\.id) == [a.id], "welcomed")
            let l = try await late.joinSession(a.id, of: Gallery.self)
            #expect(try SharedState(l, key: "index", initialValue: 0).value == 7, "caught up")
            #expect(ids(l.activeParticipants) == ["alice", "late"])
            await late.simulateCrash()
            try await waitUntil(timeout: timeBound(.seconds(5)), "the will, not retained, still tells") {
                ids(a.activeParticipants) == ["alice"]
            } else: {
                "active \(ids(a.activeParticipants)); alice's coordinator has online \(alice.state.withLock { $0.machine.online })"
            }
            await group.closeAll()
            #expect(try await retainedTopics(broker, under: root).isEmpty)
        }
    }
}
