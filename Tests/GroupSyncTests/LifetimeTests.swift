import BrokerSupport
import Foundation
import Testing

@testable import GroupSync
@testable import MQTT

/// An activity whose sessions outlive their participants by two seconds only.
struct Brief: GroupActivity {
    static let activityIdentifier = "com.example.brief"
    /// Two seconds, stretched under sanitizers (instrumented code refreshes later).
    static var sessionTimeToLive: Duration { timeBound(.seconds(2)) }
    var name: String
}

/// What the broker keeps, and for how long; what forged records can and cannot do (PROTOCOL.md,
/// "Lifetimes" and "Plausibility").
@Suite(.timeLimit(.minutes(timeLimitMinutes(2)))) struct LifetimeTests {
    static let acl = try! String(
        contentsOf: DocumentedReader.repository.appendingPathComponent("deploy/mosquitto/acl.example"), encoding: .utf8)
    static let users = ["alice": "alice-pw", "bob": "bob-pw", "mallory": "mallory-pw"]

    static func login(_ name: String, presenceTimeToLive: Duration = .seconds(3600))
        -> (inout GroupCoordinator.Configuration) -> Void
    {
        {
            $0.mqtt.username = name
            $0.mqtt.password = users[name]
            $0.presenceTimeToLive = presenceTimeToLive
        }
    }

    /// A crashed participant's session, member and state records, and its `lost` presence, leave the
    /// broker and everyone's `sessions()` by themselves — under the example ACL, where nobody else may
    /// clear them.
    /// While its broker is gone, a coordinator waits for it without spinning: its timer wakes for what
    /// comes due, not again and again for silence bounds it does not judge while disconnected.
    @Test(.needsOwnBroker("kills it")) func aCoordinatorWithoutItsBrokerDoesNotSpin() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice")
            _ = try await group.join("bob")
            try await waitUntil("alice hears bob") { alice.state.withLock { $0.machine.online["bob"] != nil } }
            broker.kill()
            try await waitUntil(timeout: timeBound(.seconds(5)), "alice notices") { !alice.client.isConnected }
            let before = alice.upkeep.wakeCount
            // Past bob's silence bound (three of his 2.5 s heartbeat intervals, less 0.5 s: 7 s): a timer
            // that takes the passed deadline wakes thousands of times.
            let spun: Void? = try? await waitUntil(timeout: .seconds(10), "alice's timer spins") { alice.upkeep.wakeCount - before > 20 }
            #expect(spun == nil, "\(alice.upkeep.wakeCount - before) wake-ups in 10 s without a broker")
            await group.closeAll()
        }
    }

    /// leave(), end() and close() return within the farewell timeout whatever the broker does — gone
    /// (killed) or frozen (SIGSTOP) — and leave the session over on this side.
    @Test(.needsOwnBroker("kills or freezes it"), arguments: [false, true]) func farewellsAreBoundedWithoutABroker(frozen: Bool)
        async throws
    {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let oneSecond = { (configuration: inout GroupCoordinator.Configuration) in configuration.farewellTimeout = .seconds(1) }
            let alice = try await group.join("alice", oneSecond)
            let bob = try await group.join("bob", oneSecond)
            let left = try await alice.startJoined(Gallery(galleryID: "left"))
            let ended = try await bob.joinSession(left.id, of: Gallery.self)
            let closing = try await bob.startJoined(Gallery(galleryID: "closed"))
            if frozen { broker.pause() } else { broker.kill() }
            // The farewell timeout, and a second for the tasks' scheduling when the whole suite loads both
            // cores (stretched like the timeout: under a sanitizer a wake-up can wait seconds for a thread).
            // What it guards against is a wait on the broker, seconds long (keepalive, TCP timeouts), which
            // the plain run's bounds catch.
            let bound = timeBound(.seconds(1)) + timeBound(.seconds(1))
            for what in ["leave()", "end()", "close()"] {
                let start = ContinuousClock.now
                switch what {
                case "leave()": await left.leave()
                case "end()": await ended.end()
                default: await bob.close()
                }
                // close() also sends DISCONNECT: up to a second more with a frozen broker.
                let allowed = what == "close()" ? bound + .seconds(1) : bound
                #expect(ContinuousClock.now - start < allowed, "\(what) took \(ContinuousClock.now - start)")
            }
            #expect(left.state == .invalidated(reason: .left) && closing.state != .joined)
            if case .invalidated(reason: .ended) = ended.state {} else { Issue.record("ended: \(ended.state)") }
            if frozen { broker.resume() }
            await alice.close()
        }
    }

    @Test(.needsOwnBroker("one case runs it with users and an ACL"), arguments: [false, true])
    func whatNobodyKeepsExpires(underTheACL: Bool) async throws {
        let config = underTheACL ? MosquittoBroker.Configuration(users: Self.users, acl: Self.acl) : .init()
        try await MosquittoBroker.withBroker(config) { broker in
            let group = Group(broker)
            let (aliceLogin, bobLogin) =
                underTheACL
                ? (Self.login("alice", presenceTimeToLive: timeBound(.seconds(2))), Self.login("bob"))
                : ({ $0.presenceTimeToLive = timeBound(.seconds(2)) }, { _ in })
            let alice = try await group.join("alice", aliceLogin)
            let bob = try await group.join("bob", bobLogin)
            let a = try await alice.startJoined(Brief(name: "crash"))
            try await SharedState(a, key: "k", initialValue: 0).set(1)
            let root = "\(GroupTopics.protocolRoot)/\(group.name)"
            let (user, password) = underTheACL ? ("bob", Self.users["bob"]) : (nil, nil)
            @Sendable func stored() async throws -> [String] {
                try await retainedTopics(broker, under: root, marker: "\(root)/alive/bob", user: user, password: password)
            }
            try await waitUntil("bob sees the session") { !bob.currentSessions(activityIdentifier: nil).isEmpty }
            // Kept alive while alice is there: observed well past its two-second lifetime.
            try await Task.sleep(for: timeBound(.seconds(3)))  // an observation window, not a wait for a condition
            #expect(try await stored().contains { $0.contains(a.id) }, "refreshed while its participant is in it")
            #expect(bob.currentSessions(activityIdentifier: nil).map(\.id) == [a.id])

            await alice.simulateCrash()
            try await waitUntil(timeout: timeBound(.seconds(5)), "the session leaves bob's sessions") {
                bob.currentSessions(activityIdentifier: nil).isEmpty
            }
            try await waitUntil(timeout: timeBound(.seconds(5)), "nothing of the session or of alice is left on the broker") {
                try await stored().allSatisfy { !$0.contains(a.id) && !$0.hasSuffix("/alice") }
            }
            await group.closeAll()
        }
    }

    /// A connect cancelled as its presence goes out, while it waits for the echo, throws `cancelled` and
    /// leaves no online presence behind (a cancel that comes once it returned is a close).
    @Test func aCancelledConnectLeavesNoPresence() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let topic = GroupTopics(group: group.name).presence("carol")
            // The connect is cancelled on the watcher's network thread, the moment the presence reaches it.
            let attempt = LockedValue<Task<GroupCoordinator, any Error>?>(nil)
            let seen = LockedValue<[Data]>([])
            let watcher = try MQTTClient(configuration: .init(url: broker.url))
            try await watcher.connect()
            let subscription = try await watcher.subscribe(
                to: [TopicSubscription(topic, retainHandling: .doNotSend)],
                handler: { message in
                    seen.withLock { $0.append(message.payload) }
                    if !message.payload.isEmpty { attempt.withLock { $0?.cancel() } }
                })
            for round in 0..<10 {
                var configuration = try GroupCoordinator.Configuration(broker: broker.url, group: group.name, participant: "carol")
                configuration.presenceHeartbeats = false
                attempt.withLock { $0 = Task { [configuration] in try await GroupCoordinator.connect(configuration) } }
                switch await attempt.withLock({ $0! }).result {
                case let .success(coordinator): await coordinator.close()
                case let .failure(error): #expect(error as? GroupSyncError == .cancelled, "round \(round)")
                }
                try await waitUntil("carol's presence is taken back (round \(round))") {
                    seen.withLock { $0.last?.isEmpty == true }
                }
            }
            subscription.unsubscribe()
            await watcher.disconnect()
        }
    }

    /// A joined session outlives everyone's leaving by its time to live, then disappears; joining again
    /// before that keeps it.
    @Test func aSessionEveryoneLeftExpiresAfterItsTimeToLive() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let (alice, bob, a, b) = try await group.pair(Brief(name: "left"))
            await a.leave()
            await b.leave()
            #expect(bob.currentSessions(activityIdentifier: nil).map(\.id) == [a.id], "still announced")
            try await waitUntil(timeout: timeBound(.seconds(5)), "gone for both") {
                alice.currentSessions(activityIdentifier: nil).isEmpty && bob.currentSessions(activityIdentifier: nil).isEmpty
            }
            let root = "\(GroupTopics.protocolRoot)/\(group.name)"
            // The broker counts expiry in whole seconds: up to a second after the participants did.
            try await waitUntil(timeout: timeBound(.seconds(3)), "gone from the broker") {
                try await !retainedTopics(broker, under: root).contains { $0.contains(a.id) }
            }
            await group.closeAll()
        }
    }

    /// Under the example ACL, a malformed copy of an announcement and a foreign one (another activity type,
    /// a newer revision, published by someone else) never stop anyone from joining the session by its ID.
    @Test(.needsOwnBroker("users and an ACL")) func forgedAnnouncementsDoNotStopANewcomerFromJoining() async throws {
        try await MosquittoBroker.withBroker(.init(users: Self.users, acl: Self.acl)) { broker in
            let group = Group(broker)
            let alice = try await group.join("alice", Self.login("alice"))
            let a = try await alice.startJoined(Gallery(galleryID: "real"))
            let root = "\(GroupTopics.protocolRoot)/\(group.name)"
            var configuration = try MQTTClient.Configuration(url: broker.url)
            configuration.username = "mallory"
            configuration.password = Self.users["mallory"]
            let mallory = try MQTTClient(configuration: configuration)
            try await mallory.connect()
            // mallory may not write alice's copy …
            await #expect(throws: MQTTError.notAuthorized(topic: "\(root)/session/\(a.id)/alice")) {
                try await mallory.publish(to: "\(root)/session/\(a.id)/alice", string: "{}", qos: .atLeastOnce, retain: true)
            }
            // … only her own: a malformed one, then a foreign one that claims a newer revision of alice's.
            try await mallory.publish(to: "\(root)/session/\(a.id)/mallory", string: "{", qos: .atLeastOnce, retain: true)
            var foreign = a.core.announcement
            foreign.activity.type = Whiteboard.activityIdentifier
            foreign.revision.time += 1
            try await mallory.publish(
                to: "\(root)/session/\(a.id)/mallory", payload: try Wire.encode(foreign), qos: .atLeastOnce, retain: true)

            let bob = try await group.join("bob", Self.login("bob"))
            let b = try await bob.joinSession(a.id, of: Gallery.self)
            #expect(b.activity.galleryID == "real")
            try await waitUntil("both active") { ids(a.activeParticipants) == ["alice", "bob"] }
            #expect(bob.rejectedMessageCount >= 1, "the malformed copy at least")
            await mallory.disconnect()
            await group.closeAll()
        }
    }

    /// Without an ACL anyone can publish anything; still, forged epochs and sequence numbers neither evict
    /// a participant for good nor silence a sender.
    @Test func forgedEpochsAndSequenceNumbersNeitherEvictNorSilence() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let (alice, _, a, b) = try await group.pair(Gallery(galleryID: "forged"))
            let root = "\(GroupTopics.protocolRoot)/\(group.name)"
            let chats = Collector(GroupSessionMessenger(session: b).messages(of: Chat.self))
            try await GroupSessionMessenger(session: a).send(Chat(text: "one"))
            try await chats.waitForCount(1)
            let (attacker, _) = try await rawSubscriber(broker, "\(root)/nothing")
            let epoch = alice.epoch
            for forged in [epoch + 1, Int64.max] {
                try await attacker.publish(
                    to: "\(root)/presence/alice", string: #"{"epoch":\#(forged),"participant":"alice","status":"lost","v":2}"#, retain: true
                )
            }
            try await attacker.publish(
                to: "\(root)/s/\(a.id)/all/alice",
                string: #"{"body":{"text":"x"},"epoch":\#(epoch),"reliable":true,"seq":\#(1 << 62),"type":"Chat","v":2}"#)
            try await attacker.publish(
                to: "\(root)/s/\(a.id)/all/alice",
                string: #"{"body":{"text":"y"},"epoch":\#(epoch + 1),"reliable":true,"seq":1,"type":"Chat","v":2}"#)
            try await GroupSessionMessenger(session: a).send(Chat(text: "two"))
            try await chats.waitForCount(2)
            #expect(chats.elements.map(\.message.text) == ["one", "two"], "neither forgery was delivered, and alice is not silenced")
            #expect(ids(b.activeParticipants) == ["alice", "bob"], "a will names its own connection only")
            // A forged online record of a newer epoch only challenges alice's connection, which sends
            // heartbeats: it changes nothing, and is forgotten once it stays silent.
            try await attacker.publish(
                to: "\(root)/presence/alice",
                string: #"{"epoch":\#(epoch + 1),"interval":2500,"participant":"alice","status":"online","v":2}"#)
            try await GroupSessionMessenger(session: a).send(Chat(text: "three"))
            try await chats.waitForCount(3)
            #expect(ids(b.activeParticipants) == ["alice", "bob"])
            #expect(b.core.read { $0.peers["alice"]?.online } == epoch)
            await attacker.disconnect()
            await group.closeAll()
        }
    }

    /// A participant with a long keepalive beside participants with the default one: judged by its own
    /// heartbeat interval, it never drops out.
    @Test func aLongKeepaliveBesideDefaultOnesDoesNotFlap() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let alice = try await group.join("alice")
            let carol = try await group.join("carol") { $0.mqtt.keepAlive = 20 }
            let a = try await alice.startJoined(Gallery(galleryID: "keepalive"))
            let c = try await carol.joinSession(a.id, of: Gallery.self)
            let seen = Collector(a.activeParticipantUpdates())
            // Carol's heartbeats come every 10 s; judged by alice's own 5 s keepalive she would be dropped
            // after 7 s of silence.
            try await Task.sleep(for: .seconds(12))  // an observation window, not a wait for a condition
            #expect(seen.elements.allSatisfy { ids($0).contains("carol") }, "\(seen.elements.map(ids))")
            #expect(ids(c.activeParticipants) == ["alice", "carol"])
            await group.closeAll()
        }
    }
}
