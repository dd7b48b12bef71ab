import BrokerSupport
import Foundation
import Testing

@testable import GroupSync

struct Movie: GroupActivity {
    static let activityIdentifier = "com.example.movie"
    var title: String
}

/// Coordinated playback against a real broker: participants whose clocks disagree by minutes follow one
/// timeline and start together.
@Suite(.timeLimit(.minutes(timeLimitMinutes(2)))) struct PlaybackTests {
    /// Real time in nanoseconds, to compare what skewed participants do at the same instant.
    static func real() -> Int64 { SystemWallClock().nanoseconds() }

    @Test func skewedClocksShareOneTimelineAndStartTogether() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            defer { Task { await group.closeAll() } }
            let clocks: [String: SystemWallClock] = [
                "alice": SystemWallClock(offset: .seconds(-600), drift: 80),
                "bob": SystemWallClock(offset: .seconds(590), drift: -100),
                "carol": SystemWallClock(offset: .milliseconds(1_234), drift: 30),
            ]
            let alice = try await group.join("alice", clock: clocks["alice"]!)
            let bob = try await group.join("bob", clock: clocks["bob"]!)
            let carol = try await group.join("carol", clock: clocks["carol"]!)
            let a = try await alice.startJoined(Movie(title: "m"))
            let b = try await bob.joinSession(a.id, of: Movie.self)
            let c = try await carol.joinSession(a.id, of: Movie.self)
            let coordinators = [a, b, c].map { PlaybackCoordinator(session: $0) }
            try await waitUntil(timeout: timeBound(.seconds(5)), "one reference, every clock known") {
                coordinators.allSatisfy { $0.groupTime() != nil } && Set(coordinators.compactMap { $0.clockReference?.id }).count == 1
            }
            #expect(coordinators[0].clockReference?.id == "alice", "the initiator serves the clock")
            // Another coordinator made for a session drives the same one, with the first's configuration.
            let again = PlaybackCoordinator(session: a, configuration: .init(lead: .seconds(1)))
            #expect(again.engine === coordinators[0].engine && again.configuration.lead == nil)

            let starts = zip(["alice", "bob", "carol"], coordinators).map { name, coordinator in
                let recorded = LockedValue<[(start: PlaybackStart, real: Int64, group: GroupInstant?)]>([])
                let sequence = coordinator.starts()
                let task = Task {
                    for await start in sequence {
                        let real = Self.real()
                        let group = coordinator.groupTime(atLocal: clocks[name]!.nanoseconds(atSystemTime: real))
                        recorded.withLock { $0.append((start, real, group)) }
                    }
                }
                return (recorded, task)
            }
            defer { for (_, task) in starts { task.cancel() } }
            try await coordinators[1].play()
            try await waitUntil("everyone started") { starts.allSatisfy { !$0.0.withLock { $0 }.isEmpty } }
            // The real instant at which each participant's group clock read the start's instant: what its
            // coordinator aimed its timer at (the moment this test's task read the start, less how far that
            // participant's group time had moved past the instant by then). These agree up to the clock
            // estimates' error whatever the load; how late each timer then fires is the machine's, bounded
            // below (how close the starts come on a quiet machine is the playback bench's figure).
            let aimed = starts.map { recorded, _ in
                let (start, real, group) = recorded.withLock { $0[0] }
                return real - ((group ?? start.scheduled) - start.scheduled).nanoseconds
            }
            let spread = Duration.nanoseconds(aimed.max()! - aimed.min()!)
            #expect(spread < timeBound(.milliseconds(10)), "starts aimed at instants \(spread) apart")
            // Each start comes at its instant on its participant's own clock: never before it (the group
            // time read on receipt has reached it, give or take a refinement of the offset), and late only
            // by how long the machine takes to run the timer — a fraction of a millisecond when quiet, but
            // up to a tenth of a second with the whole suite in parallel on two cores, hence the loose
            // bound: it still catches a start tied to anything but its instant, such as a wrong offset
            // (the clocks are minutes apart).
            for (recorded, _) in starts {
                let (start, _, received) = recorded.withLock { $0[0] }
                #expect(start.rate == 1)
                #expect(start.lateness < timeBound(.milliseconds(250)), "lateness \(start.lateness)")
                let receivedAt = try #require(received)
                #expect(receivedAt + timeBound(.milliseconds(2)) >= start.scheduled, "delivered \(start.scheduled - receivedAt) early")
            }

            // At one real instant, every participant expects the same media time.
            let instant = Self.real()
            let positions = zip(["alice", "bob", "carol"], coordinators).map { name, coordinator -> Double in
                coordinator.expectedMediaTime(at: coordinator.groupTime(atLocal: clocks[name]!.nanoseconds(atSystemTime: instant)))
            }
            #expect(positions.max()! - positions.min()! < timeBound(.milliseconds(5)).seconds, "position spread \(positions)")

            try await coordinators[2].pause()
            try await waitUntil("everyone paused") { coordinators.allSatisfy { !$0.timeline.isPlaying } }
            let paused = coordinators.map(\.timeline.position)
            #expect(Set(paused).count == 1)
        }
    }

    /// Sessions of `names` (the first starts it) with a playback coordinator each, once they agree on the
    /// group clock. `skew`: each participant's clock offset, from -10 to +10 minutes.
    static func players(
        _ group: Group, _ names: [String], skewed: Bool = true
    ) async throws -> [(session: GroupSession<Movie>, playback: PlaybackCoordinator)] {
        var players: [(GroupSession<Movie>, PlaybackCoordinator)] = []
        for (index, name) in names.enumerated() {
            let skew = skewed ? Duration.seconds(-600 + 1_200 * index / max(names.count - 1, 1)) : .zero
            let coordinator = try await group.join(name, clock: SystemWallClock(offset: skew, drift: skewed ? Double(index * 40 - 50) : 0))
            let session: GroupSession<Movie>
            if let first = players.first {
                session = try await coordinator.joinSession(first.0.id, of: Movie.self)
            } else {
                session = try await coordinator.startJoined(Movie(title: "m"))
            }
            players.append((session, PlaybackCoordinator(session: session)))
        }
        let all = players.map(\.1)
        try await waitUntil(timeout: timeBound(.seconds(5)), "one group clock") {
            all.allSatisfy { $0.groupTime() != nil } && Set(all.compactMap { $0.clockReference?.id }).count == 1
        }
        return players.map { (session: $0.0, playback: $0.1) }
    }

    /// The largest difference, in seconds, between the media times the coordinators expect now.
    static func spread(_ coordinators: [PlaybackCoordinator]) -> Double {
        // Each reads its own clock: back to back, so within microseconds of the same real instant.
        let positions = coordinators.map { $0.expectedMediaTime() }
        return positions.max()! - positions.min()!
    }

    /// Waits until the coordinators expect the same media time within 2 ms (scaled under sanitizers):
    /// their clocks agree. (A participant that just synchronized gets there within its first exchanges;
    /// the bench measures how close they get.)
    static func waitForAgreement(_ coordinators: [PlaybackCoordinator]) async throws {
        let bound = timeBound(.milliseconds(2)).seconds
        try await waitUntil("media times agree within \(bound) s (spread \(spread(coordinators)))") { spread(coordinators) < bound }
    }

    @Test func crossingCommandsConverge() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            defer { Task { await group.closeAll() } }
            let players = try await Self.players(group, ["alice", "bob", "carol"]).map(\.playback)
            async let a: Void = players[0].seek(to: 10)
            async let b: Void = players[1].seek(to: 20)
            async let c: Void = players[2].play()
            _ = try await (a, b, c)
            try await waitUntil("one timeline") { Set(players.map(\.timeline)).count == 1 }
            async let d: Void = players[0].setRate(2)
            async let e: Void = players[1].pause()
            _ = try await (d, e)
            try await waitUntil("one timeline again") { Set(players.map(\.timeline)).count == 1 }
            try await Self.waitForAgreement(players)
        }
    }

    /// A command whose task is cancelled before it applies (here at once, perhaps while it waits for the
    /// group clock the lone participant is still claiming) changes nothing and throws `cancelled`; the next
    /// one applies.
    @Test func aCommandCancelledBeforeItAppliesChangesNothing() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            let a = try await group.join("alice").startJoined(Gallery(galleryID: "cancelled"))
            let player = PlaybackCoordinator(session: a)
            let seek = Task { try await player.seek(to: 42) }
            seek.cancel()
            await #expect(throws: GroupSyncError.cancelled) { try await seek.value }
            #expect(player.timeline.position == 0)
            try await player.seek(to: 7)
            #expect(player.timeline.position == 7)
            await group.closeAll()
        }
    }

    /// The participant that serves the clock crashes while the group plays: another takes over with the
    /// same clock, so the timeline goes on unchanged and commands still work.
    @Test func theClockSurvivesItsReferenceCrashing() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            defer { Task { await group.closeAll() } }
            let players = try await Self.players(group, ["alice", "bob", "carol"])
            let (bob, carol) = (players[1].playback, players[2].playback)
            #expect(bob.clockReference?.id == "alice")
            try await bob.play()
            try await waitUntil("playing") { [bob, carol].allSatisfy { $0.timeline.isPlaying } }
            let before = bob.timeline
            let alice = try #require(group.coordinators.first { $0.localParticipant.id == "alice" })
            await alice.simulateCrash()
            try await waitUntil(timeout: .seconds(10), "bob or carol serves the clock") {
                [bob, carol].allSatisfy { $0.clockReference.map { $0.id != "alice" } ?? false }
                    && Set([bob, carol].compactMap(\.clockReference)).count == 1
            }
            #expect(bob.timeline == before && carol.timeline == before, "the same timeline, on the same clock")
            try await Self.waitForAgreement([bob, carol])
            try await carol.pause()
            try await waitUntil("paused") { ![bob, carol].contains { $0.timeline.isPlaying } }
            #expect(bob.timeline.position == carol.timeline.position)
        }
    }

    /// A buffering participant makes the group wait at one position; when it is ready, everyone starts
    /// again together. One that crashes while it holds the group releases it.
    @Test func aSuspensionHoldsAndReleasesTheGroup() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            defer { Task { await group.closeAll() } }
            let players = try await Self.players(group, ["alice", "bob", "carol"]).map(\.playback)
            let starts = players.map { Collector($0.starts()) }
            defer { for collector in starts { collector.cancel() } }
            try await players[0].play()
            try await waitUntil("started") { starts.allSatisfy { $0.elements.count == 1 } }

            let buffering = players[1].beginSuspension(for: .buffering)
            try await waitUntil("everyone waits") { players.allSatisfy { !$0.timeline.isPlaying && $0.timeline.waitingIDs == ["bob"] } }
            #expect(Set(players.map(\.timeline.position)).count == 1, "at one position")
            try await players[2].play()  // only an intention while bob buffers
            #expect(players.allSatisfy { !$0.timeline.isPlaying })
            // Bob's release must not cross carol's intention: carol's clock is ten minutes ahead, so her
            // record would win and hold the group once more (crossing commands have their own test).
            try await waitUntil("everyone has carol's intention") { players.allSatisfy { $0.timeline == players[2].timeline } }
            buffering.end()
            try await waitUntil("everyone starts again") { starts.allSatisfy { $0.elements.count == 2 } }
            let restarts = starts.map { $0.elements[1] }
            #expect(Set(restarts.map(\.scheduled)).count == 1)
            // From where they waited (a start delivered late, under load, is as far ahead as it is late).
            let waited = players[0].timeline.position
            #expect(restarts.allSatisfy { abs($0.mediaTime - $0.lateness.seconds - waited) < 1e-6 }, "\(restarts)")

            // A participant that crashes while it holds the group stops holding it.
            let scrubbing = players[2].beginSuspension(for: .scrubbing)  // not a waiting reason: the group goes on
            #expect(players[0].timeline.isPlaying)
            scrubbing.end()
            _ = players[1].beginSuspension(for: .buffering)
            try await waitUntil("waiting for bob") { players[0].timeline.waitingIDs == ["bob"] }
            let bob = try #require(group.coordinators.first { $0.localParticipant.id == "bob" })
            let crashed = ContinuousClock.now
            await bob.simulateCrash()
            try await waitUntil(timeout: .seconds(20), "released") { [players[0], players[2]].allSatisfy { $0.timeline.isPlaying } }
            let bound = Self.crashDetectionBound(group)
            #expect(ContinuousClock.now - crashed < bound, "released within the crash-detection bound \(bound)")
        }
    }

    /// How long a crashed participant may stay in the others' active sets (README, PROTOCOL.md "Crash"):
    /// 1.5 × keepalive — the bound for a frozen process; one whose socket closes goes within about a
    /// second — scaled under sanitizers.
    static func crashDetectionBound(_ group: Group) -> Duration {
        timeBound(.milliseconds(group.coordinators[0].configuration.mqtt.keepAlive * 1_500))
    }

    /// What the others saw when a participant that held the group went away.
    struct Departure {
        /// From the departure until every other participant had started on the one timeline they agree on.
        var elapsed: Duration
        /// The others' last starts, in the order of the players.
        var restarts: [PlaybackStart]
        /// The timeline while the group waited.
        var waiting: PlaybackTimeline
    }

    /// The group plays; `players[holder]` buffers until everyone waits for it, then goes away through
    /// `depart` (leaving, crashing): returns what the others saw, once every one of them started again
    /// on one timeline. A participant may start twice on the way: when the clock's reference crashes and
    /// the first claim takes longer than the takeover stagger to arrive, the next in line also claims and
    /// releases, and the HLC keeps one of the two releases (PROTOCOL.md, "Waiting and release").
    static func holdThenDepart(
        _ players: [(session: GroupSession<Movie>, playback: PlaybackCoordinator)], holder: Int, depart: () async throws -> Void
    ) async throws -> Departure {
        let others = players.indices.filter { $0 != holder }.map { players[$0].playback }
        let starts = others.map { Collector($0.starts()) }
        defer { for collector in starts { collector.cancel() } }
        try await others[0].play()
        // The holder too must have the play: a hold written before the play arrives is written on the
        // paused timeline and, stamped later, wins over the play.
        try await waitUntil("started") { starts.allSatisfy { $0.count == 1 } && players.allSatisfy { $0.playback.timeline.isPlaying } }
        let name = players[holder].session.localParticipant.id
        _ = players[holder].playback.beginSuspension(for: .buffering)
        try await waitUntil("everyone waits for \(name)") {
            players.allSatisfy { !$0.playback.timeline.isPlaying && $0.playback.timeline.waitingIDs == [name] }
        }
        let waiting = others[0].timeline
        let departed = ContinuousClock.now
        try await depart()
        @Sendable func startedOnOneTimeline() -> Bool {
            let timelines = others.map(\.timeline)
            return Set(timelines).count == 1 && timelines[0].isPlaying
                && zip(starts, timelines).allSatisfy { $0.count >= 2 && $0.last?.scheduled == $1.anchor }
        }
        try await waitUntil(timeout: .seconds(20), "the others start again on one timeline") {
            startedOnOneTimeline()
        } else: {
            "the others' starts: \(starts.map(\.elements)); their timelines: \(others.map(\.timeline))"
        }
        return Departure(elapsed: ContinuousClock.now - departed, restarts: starts.compactMap(\.last), waiting: waiting)
    }

    /// The others start again together: one scheduled start, from where they waited (a start delivered
    /// late, under load, is as far ahead as it is late), on the clock they waited on.
    static func expectOneRestart(_ departure: Departure, of others: [PlaybackCoordinator]) {
        let restarts = departure.restarts
        #expect(Set(restarts.map(\.scheduled)).count == 1, "one scheduled start: \(restarts)")
        #expect(
            restarts.allSatisfy { $0.rate == 1 && abs($0.mediaTime - $0.lateness.seconds - departure.waiting.position) < 1e-6 },
            "\(restarts)")
        #expect(others.allSatisfy { $0.timeline.waitingIDs.isEmpty && $0.timeline.base == departure.waiting.base })
    }

    /// A buffering participant that leaves stops holding the group at once (its member record is
    /// cleared), far within the crash-detection bound: the others start again together.
    @Test func aSuspendedParticipantThatLeavesReleasesTheGroup() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            defer { Task { await group.closeAll() } }
            let players = try await Self.players(group, ["alice", "bob", "carol"])
            let departure = try await Self.holdThenDepart(players, holder: 1) { await players[1].session.leave() }
            let others = [players[0].playback, players[2].playback]
            // Leaving is seen one broker trip later and the restart comes a lead after that: well within
            // the crash-detection bound (7.5 s for the default keepalive).
            #expect(departure.elapsed < others[0].lead + timeBound(.seconds(1)), "released \(departure.elapsed) after bob left")
            Self.expectOneRestart(departure, of: others)
            #expect(others.allSatisfy { $0.clockReference?.id == "alice" })
        }
    }

    /// The buffering participant is the one that serves the clock, and crashes: another takes the clock
    /// over (the same one) and releases the group within the crash-detection bound; the others start
    /// again together.
    @Test func aSuspendedClockReferenceThatCrashesReleasesTheGroup() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            defer { Task { await group.closeAll() } }
            let players = try await Self.players(group, ["alice", "bob", "carol"])
            #expect(players[1].playback.clockReference?.id == "alice")
            let alice = try #require(group.coordinators.first { $0.localParticipant.id == "alice" })
            let departure = try await Self.holdThenDepart(players, holder: 0) { await alice.simulateCrash() }
            let others = [players[1].playback, players[2].playback]
            let bound = Self.crashDetectionBound(group)
            #expect(departure.elapsed < bound, "released \(departure.elapsed) after alice crashed; bound \(bound)")
            Self.expectOneRestart(departure, of: others)
            try await waitUntil(timeout: timeBound(.seconds(5)), "bob or carol serves the clock") {
                Set(others.compactMap { $0.clockReference?.id }).count == 1 && others.allSatisfy { $0.clockReference?.id != "alice" }
            }
            try await Self.waitForAgreement(others)
        }
    }

    /// A follower keeps checking its offset against the reference for as long as it follows it — a burst,
    /// then every 100 ms until it follows the drift, then, paused, every synchronization interval and
    /// less often as each check is foreseen, up to the longest interval (here 1 s), and every interval
    /// again once the media plays — and the reference answers each time, so clocks that drift apart
    /// (here 400 ppm) stay in agreement.
    @Test func aFollowerKeepsEstimatingItsOffset() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            defer { Task { await group.closeAll() } }
            let (raw, direct) = try await rawSubscriber(broker, "groupsync/v2/\(group.name)/s/+/to/+/+")
            let alice = try await group.join("alice", clock: SystemWallClock(offset: .seconds(-600)))
            let bob = try await group.join("bob", clock: SystemWallClock(offset: .seconds(600), drift: 400))
            let a = try await alice.startJoined(Movie(title: "m"))
            let b = try await bob.joinSession(a.id, of: Movie.self)
            let configuration = PlaybackCoordinator.Configuration(longestSynchronizationInterval: .seconds(1))
            let players = [a, b].map { PlaybackCoordinator(session: $0, configuration: configuration) }
            try await waitUntil(timeout: timeBound(.seconds(5)), "bob follows alice's clock") {
                players[1].clockReference?.id == "alice" && players[1].groupTime() != nil
            }

            // The `t0`s (bob's clock, ms) of the exchanges of `type` on the direct topics ending in `path`.
            @Sendable func exchanges(_ type: String, on path: String) -> [Double] {
                direct.elements.filter { $0.topic.hasSuffix(path) }.compactMap { message in
                    let envelope = try? JSONSerialization.jsonObject(with: message.payload) as? [String: Any]
                    guard envelope?["type"] as? String == type else { return nil }
                    return ((envelope?["body"] as? [String: Any])?["t0"] as? NSNumber)?.doubleValue
                }
            }
            // Into the longest interval's pace (the drift is fitted once the samples span 1 s), and on for a
            // while. Gaps are read from bob's clock, as sent.
            let longest = configuration.longestSynchronizationInterval.seconds * 1_000
            try await waitUntil(timeout: timeBound(.seconds(15)), "bob pings every \(longest) ms, 6 s after his first") {
                let pings = exchanges("$ping", on: "/to/alice/bob")
                guard pings.count > 9, let first = pings.first, let last = pings.last else { return false }
                return last - first >= 6_000 && last - pings[pings.count - 2] >= longest - 20
            }
            let pings = exchanges("$ping", on: "/to/alice/bob")
            let gaps = zip(pings.dropFirst(), pings).map { $0 - $1 }
            // After the burst of 8, and the pings an unsettled estimate asks for (at most 16 in all).
            let settled = gaps.dropFirst(ClockEstimator.patientExchanges - 1)
            #expect(settled.allSatisfy { $0 >= 80 }, "once the estimate settled, at most every 100 ms: \(gaps)")
            // A busy machine (the whole suite in parallel, a sanitizer) delays a timer by a second or more.
            #expect(gaps.max()! < longest + timeBound(.seconds(1)).seconds * 1_000, "bob fell silent: \(gaps)")

            try await players[0].play()
            let interval = configuration.synchronizationInterval.seconds * 1_000
            try await waitUntil(timeout: timeBound(.seconds(5)), "bob pings every \(interval) ms while the media plays") {
                let playing = exchanges("$ping", on: "/to/alice/bob").dropFirst(pings.count - 1)
                return playing.count > 3
                    && zip(playing.dropFirst(), playing).suffix(2).allSatisfy {
                        $0 - $1 < interval + timeBound(.milliseconds(100)).seconds * 1_000
                    }
            }
            try await waitUntil("alice answered every ping") { Set(exchanges("$pong", on: "/to/bob/alice")).isSuperset(of: pings) }
            try await Self.waitForAgreement(players)
            await raw.disconnect()
        }
    }

    /// A participant that joins while the group plays starts at once, at the position everyone is at.
    @Test func aLateJoinerStartsAtTheRightPosition() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            defer { Task { await group.closeAll() } }
            let players = try await Self.players(group, ["alice", "bob"])
            try await players[0].playback.seek(to: 42)
            try await players[0].playback.play()
            try await waitUntil("playing") { players.allSatisfy { $0.playback.timeline.isPlaying } }
            try await waitUntil("the group is well into the media") { players[0].playback.expectedMediaTime() > 42.3 }
            let carol = try await group.join("carol", clock: SystemWallClock(offset: .seconds(300), drift: 90))
            let session = try await carol.joinSession(players[0].session.id, of: Movie.self)
            let playback = PlaybackCoordinator(session: session)
            let starts = Collector(playback.starts())
            let timelines = Collector(playback.timelineUpdates())
            defer {
                starts.cancel()
                timelines.cancel()
            }
            // The late joiner's clock must settle first: slower under a sanitizer.
            try await timelines.waitForCount(1, timeout: timeBound(.seconds(5)))
            #expect(timelines.elements[0].isPlaying && timelines.elements[0].position == 42, "never shown paused first")
            try await starts.waitForCount(1, timeout: timeBound(.seconds(5)))
            let start = starts.elements[0]
            #expect(start.lateness > .milliseconds(200), "late: it jumps in")
            // At the group's position at the instant it was delivered, on carol's group clock — which
            // agrees with the others' (a start read later, under load, would be compared with a later
            // position).
            let delivered = start.scheduled + start.lateness
            #expect(abs(start.mediaTime - players[0].playback.timeline.mediaTime(at: delivered)) < 1e-6, "\(start)")
            try await Self.waitForAgreement(players.map(\.playback) + [playback])
        }
    }

    /// Timeline records that are not timelines are rejected and change nothing; so are records whose
    /// writer is forged, as for every state record.
    @Test func badOrForgedTimelineRecordsAreRejected() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = Group(broker)
            defer { Task { await group.closeAll() } }
            let players = try await Self.players(group, ["alice", "bob"], skewed: false)
            let bob = players[1]
            try await players[0].playback.seek(to: 5)
            try await waitUntil("bob has it") { bob.playback.timeline.position == 5 }
            let before = bob.playback.timeline
            let root = "groupsync/v2/\(group.name)/s/\(bob.session.id)/state/groupsync.playback"
            let (raw, _) = try await rawSubscriber(broker, "unused/#")
            let later = SystemWallClock().milliseconds() + 1_000
            func record(writer: String, clockOf: String, value: String, counter: Int = 0) -> String {
                #"{"clock":{"c":\#(counter),"p":"\#(clockOf)","t":\#(later)},"key":"groupsync.playback","v":2,"value":\#(value)}"#
            }
            // Valid but for its item, null: an optional field is absent or a string.
            let nullItem = #"{"at":1,"base":"x","intent":0,"item":null,"position":3,"rate":0,"waiting":[]}"#
            let negative = #"{"at":1,"base":"x","intent":0,"position":-3,"rate":0,"waiting":[]}"#
            let rejectedBefore = bob.session.core.rejectedCount
            try await raw.publish(to: "\(root)/alice", string: record(writer: "alice", clockOf: "alice", value: nullItem), retain: true)
            try await waitUntil("the timeline with a null item rejected") { bob.playback.rejectedRecordCount == 1 }
            #expect(bob.playback.timeline == before)
            try await raw.publish(
                to: "\(root)/alice", string: record(writer: "alice", clockOf: "alice", value: negative, counter: 1), retain: true)
            try await waitUntil("the invalid timeline rejected") { bob.playback.rejectedRecordCount == 2 }
            try await raw.publish(to: "\(root)/mallory", string: record(writer: "mallory", clockOf: "alice", value: "{}"), retain: true)
            try await waitUntil("the forged writer rejected") { bob.session.core.rejectedCount > rejectedBefore }
            #expect(bob.playback.timeline == before)
            await raw.disconnect()
        }
    }
}
