import BrokerSupport
import Foundation
import GroupSync
import MQTT

/// The activity of the demo: a photo gallery the group flips through together.
struct GalleryActivity: GroupActivity {
    static let activityIdentifier = "com.example.gallery"
    var galleryID: String
    var metadata: GroupActivityMetadata { .init(title: "Gallery \(galleryID)", type: .exploreTogether) }
}

/// `groupsync demo`: the article's gallery, scripted — swipes, a simultaneous swipe conflict, a late
/// joiner and a participant killed without leaving — with a timeline and a verdict; with `--playback`,
/// watching together on skewed clocks instead (``PlaybackDemo``).
enum DemoCommand: Command {
    static let name = "demo"
    static let summary = "run the gallery demo on a private broker and print a verdict"
    static let help = """
        Usage: groupsync demo [--playback] [--participants N] [--timeout SEC] [--broker URL] [--group NAME]

        N participants (default 3) share one gallery index. Scripted: swipes, a simultaneous swipe by two
        participants, a late joiner, and one participant killed without leaving. Prints a timeline (who
        did what, what each saw, latencies) and a verdict.

        --playback: N participants watch together instead, with clocks off by up to ±10 minutes and
        drifting up to ±100 ppm: play, seek, a rate change, a buffering suspension and its release, a late
        joiner. The verdict prints the start spread (real time across participants, for each start) and
        the position spread (at one real instant); PASS when under 10 ms and 5 ms.

          --participants N  3 to 20 (default 3)
          --timeout SEC     give up when the whole script takes longer (default 60)
          --broker URL      use this broker instead of starting a private mosquitto
          --group NAME      group name (default: demo-<random>)

        Ctrl-C or SIGTERM stops the demo at any point: its participants leave and the private mosquitto
        stops.

        Exit codes: 0 everything converged and the crash was detected (--playback: within the bounds); 1 otherwise (a timeout included);
        2 usage error; 3 broker unreachable; 4 mosquitto not installed (sudo apt-get install mosquitto);
        130 interrupted.
        """

    static func run(_ arguments: [String]) async throws -> Int32 {
        let args = try Arguments(arguments, options: ["participants", "broker", "group", "timeout"], flags: ["playback"])
        let count = try args.integer("participants", default: 3, range: 3...20)
        let timeout = Duration.seconds(try args.integer("timeout", default: 60, range: 1...3_600))
        let group = args.value("group") ?? "demo-\(String(UInt32.random(in: 0...UInt32.max), radix: 36))"
        let interruption = Interruption()
        Signals.onInterrupt { interruption.fire() }
        var broker: MosquittoBroker?
        let url: String
        if let given = args.value("broker") {
            url = given
        } else {
            // Not raced: the start is bounded (10 s), and a broker once started is this command's to stop.
            do {
                broker = try await MosquittoBroker.start()
            } catch {
                throw CommandFailure("could not start mosquitto: \(error)", exitCode: 4)
            }
            url = broker!.url
        }
        let timeline = Timeline()
        timeline.note("broker", broker.map { "private mosquitto on \($0.url) (set_tcp_nodelay true)" } ?? "using \(url)")
        let stage = DemoStage(url: url, group: group, count: count, timeline: timeline)
        let scenario: any DemoScript = args.has("playback") ? PlaybackDemo(stage: stage) : Scenario(stage: stage)
        let outcome: Result<Bool, any Error>
        do {
            outcome = .success(
                try await interruption.race(timeout: timeout, waitingFor: "the demo to finish") { try await scenario.run() })
        } catch {
            outcome = .failure(error)
        }
        // Interrupted or timed out, the script is left where it was: its participants leave now.
        await stage.closeAll()
        await broker?.stop()
        switch outcome {
        case let .success(verdict):
            return verdict ? 0 : 1
        case let .failure(failure as CommandFailure):
            throw failure
        case let .failure(error):
            throw CommandFailure("demo failed: \(error)")
        }
    }
}

/// Prints what happens, with milliseconds since the start.
final class Timeline: Sendable {
    private let start = ContinuousClock.now

    func note(_ who: String, _ what: String) {
        let elapsed = ContinuousClock.now - start
        let ms = Double(elapsed.components.seconds) * 1_000 + Double(elapsed.components.attoseconds) / 1e15
        Output.line(String(format: "%8.1f ms  %-8@ %@", ms, who as NSString, what as NSString))
    }
}

/// A script `groupsync demo` runs: true when its verdict passes.
protocol DemoScript: Sendable {
    var stage: DemoStage { get }
    func run() async throws -> Bool
}

extension DemoScript {
    var timeline: Timeline { stage.timeline }
}

/// What every demo script plays on: the broker, the group, how many participants, the printed
/// timeline, and the participants' connections (all closed by ``closeAll()``, however the script ends).
final class DemoStage: Sendable {
    let url: String
    let group: String
    let count: Int
    let timeline: Timeline
    private let connected = LockedValue<[GroupCoordinator]>([])

    init(url: String, group: String, count: Int, timeline: Timeline) {
        self.url = url
        self.group = group
        self.count = count
        self.timeline = timeline
    }

    /// Connects participant `name` on `clock`; an unreachable broker is the command's failure.
    func connect(_ name: String, clock: any WallClock = SystemWallClock()) async throws -> GroupCoordinator {
        let configuration = try GroupCoordinator.Configuration(broker: url, group: group, participant: name, clock: clock)
        let coordinator: GroupCoordinator
        do {
            coordinator = try await GroupCoordinator.connect(configuration)
        } catch {
            throw CommonOptions.failure(error, broker: url)
        }
        connected.withLock { $0.append(coordinator) }
        return coordinator
    }

    /// The first of `participants` activates `activity` while every one of them listens for sessions (the
    /// one who activates included); returns the session each received, in order.
    func share<Activity: GroupActivity>(
        _ activity: Activity, among participants: [(name: String, coordinator: GroupCoordinator)]
    ) async throws -> [GroupSession<Activity>] {
        let listeners = participants.map { participant in
            Task { () -> GroupSession<Activity>? in
                for await session in participant.coordinator.sessions(of: Activity.self) { return session }
                return nil
            }
        }
        let sessionID = try await participants[0].coordinator.activate(activity)
        timeline.note(participants[0].name, "activated session \(sessionID) (\(activity.metadata.title))")
        var sessions: [GroupSession<Activity>] = []
        for (participant, listener) in zip(participants, listeners) {
            guard let session = await listener.value else { throw CommandFailure("\(participant.name) got no session") }
            sessions.append(session)
            timeline.note(participant.name, "received the session through sessions()")
        }
        return sessions
    }

    /// Closes every participant the script connected (those it closed already stay closed).
    func closeAll() async {
        for coordinator in connected.withLock({ $0 }) { await coordinator.close() }
    }

    /// Milliseconds, with `decimals` below 10 ms.
    static func format(_ duration: Duration, decimals: Int = 2) -> String {
        let ms = Double(duration.components.seconds) * 1_000 + Double(duration.components.attoseconds) / 1e15
        return ms < 10 ? String(format: "%.\(decimals)f ms", ms) : String(format: "%.0f ms", ms)
    }
}

/// The participants' names, in order of appearance.
enum DemoNames {
    static let all = [
        "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
        "mallory", "niaj", "olivia", "peggy", "rupert", "sybil", "trent", "victor", "walter", "zoe",
    ]
}

/// One run of the gallery demo's script.
final class Scenario: DemoScript {
    let stage: DemoStage

    init(stage: DemoStage) { self.stage = stage }

    final class Participant: Sendable {
        let name: String
        let coordinator: GroupCoordinator
        let session: LockedValue<GroupSession<GalleryActivity>?> = LockedValue(nil)
        let index: LockedValue<SharedState<Int>?> = LockedValue(nil)
        /// Every value this participant's screen showed, in order.
        let seen = LockedValue<[Int]>([])

        init(name: String, coordinator: GroupCoordinator) {
            self.name = name
            self.coordinator = coordinator
        }

        var value: Int? { index.withLock { $0?.value } }
        /// What the screen shows now: the last value its `values()` loop received (it may lag `value`).
        var shown: Int? { seen.withLock { $0.last } }
    }

    func run() async throws -> Bool {
        var participants: [Participant] = []
        for name in DemoNames.all.prefix(stage.count) {
            let participant = Participant(name: name, coordinator: try await stage.connect(name))
            participants.append(participant)
            timeline.note(name, "connected (presence online, will registered)")
        }
        let alice = participants[0], bob = participants[1]
        let late = participants[participants.count - 1]
        let early = Array(participants.dropLast())

        let sessions = try await stage.share(GalleryActivity(galleryID: "paris"), among: participants.map { ($0.name, $0.coordinator) })
        for (participant, session) in zip(participants, sessions) { participant.session.withLock { $0 = session } }
        for participant in early { try await join(participant) }

        // Swipes: one writer, everyone follows; latency until the last one shows it.
        var latencies: [Duration] = []
        for value in 1...3 {
            let started = ContinuousClock.now
            try await alice.index.withLock { $0! }.set(value)
            try await waitUntil(timeout: .seconds(5), pollEvery: .microseconds(200), "everyone at \(value)") {
                early.allSatisfy { $0.shown == value }
            }
            latencies.append(ContinuousClock.now - started)
            timeline.note(alice.name, "swiped to \(value); all \(early.count) screens showed it after \(format(latencies.last!))")
        }

        // A simultaneous swipe: alice and bob write different values at once.
        timeline.note("", "alice swipes to 10 and bob to 20 at the same instant")
        let before = early.map { $0.seen.withLock { $0.count } }
        async let aliceWrite: Void = alice.index.withLock { $0! }.set(10)
        async let bobWrite: Void = bob.index.withLock { $0! }.set(20)
        _ = try await (aliceWrite, bobWrite)
        try await waitUntil(timeout: .seconds(5), "conflict converges") {
            let values = Set(early.map(\.shown))
            return values.count == 1 && (values.first == 10 || values.first == 20)
        }
        let winner = early[0].value!
        for (participant, start) in zip(early, before) {
            let after = participant.seen.withLock { Array($0[start...]) }
            timeline.note(participant.name, "saw \(after.map(String.init).joined(separator: " → ")) (settled on \(participant.value!))")
        }
        let jitterFree = zip(early, before).allSatisfy { participant, start in
            participant.seen.withLock { $0.count - start } <= 2
        }

        // A late joiner catches up.
        let catchUpStart = ContinuousClock.now
        try await join(late)
        let catchUp = ContinuousClock.now - catchUpStart
        timeline.note(
            late.name,
            "joined late and had \(late.value.map(String.init) ?? "nothing") after \(format(catchUp)) (the first value its screen showed)")
        let lateFirst = late.seen.withLock { $0.first }

        // bob is killed without leaving.
        let others = participants.filter { $0 !== bob }
        let crashStart = ContinuousClock.now
        await bob.coordinator.simulateCrash()
        timeline.note(bob.name, "killed without leaving (connection dropped, no DISCONNECT)")
        try await waitUntil(timeout: .seconds(10), pollEvery: .microseconds(200), "bob disappears") {
            others.allSatisfy { participant in
                participant.session.withLock { $0! }.activeParticipants.contains { $0.id == bob.name } == false
            }
        }
        let crashDetection = ContinuousClock.now - crashStart
        timeline.note("", "everyone dropped bob after \(format(crashDetection)) (his MQTT will)")

        // Life goes on.
        try await late.index.withLock { $0! }.set(42)
        try await waitUntil(timeout: .seconds(5), "everyone at 42") { others.allSatisfy { $0.shown == 42 } }
        timeline.note(late.name, "swiped to 42; every remaining screen shows 42")

        let finals = others.map { "\($0.name)=\($0.value.map(String.init) ?? "-")" }.joined(separator: " ")
        let converged = Set(others.map(\.value)).count == 1
        for participant in others { await participant.coordinator.close() }

        let p50 = latencies.sorted()[latencies.count / 2]
        Output.line("")
        Output.line("Verdict")
        Output.line("  converged:        \(converged ? "yes" : "NO") (\(finals))")
        Output.line(
            "  conflict:         alice 10 vs bob 20 → everyone settled on \(winner), \(jitterFree ? "no screen jumped back" : "SOME SCREEN JUMPED BACK")"
        )
        Output.line("  swipe latency:    p50 \(format(p50)) until every screen showed it")
        Output.line(
            "  late joiner:      caught up in \(format(catchUp)), first value shown \(lateFirst.map(String.init) ?? "-") (expected \(winner))"
        )
        Output.line("  crash detection:  \(format(crashDetection))")
        let ok = converged && jitterFree && lateFirst == winner && crashDetection < .seconds(3)
        Output.line("  result:           \(ok ? "PASS" : "FAIL")")
        return ok
    }

    private func join(_ participant: Participant) async throws {
        let session = participant.session.withLock { $0! }
        try await session.join()
        let state = try SharedState(session, key: "index", initialValue: 0)
        participant.index.withLock { $0 = state }
        let first = LockedValue(true)
        let ready = AsyncStream<Void>.makeStream()
        Task {
            for await value in state.values() {
                participant.seen.withLock { $0.append(value) }
                let isFirst = first.withLock { isFirst in
                    defer { isFirst = false }
                    return isFirst
                }
                if isFirst { ready.continuation.yield() }
            }
        }
        for await _ in ready.stream { break }
        timeline.note(participant.name, "joined; active: \(session.activeParticipants.map(\.id).sorted().joined(separator: ", "))")
    }

    private func format(_ duration: Duration) -> String { DemoStage.format(duration) }
}
