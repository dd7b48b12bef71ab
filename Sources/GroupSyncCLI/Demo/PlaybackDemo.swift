import Foundation
import GroupSync
import MQTT

/// `groupsync demo --playback`: watching together with clocks that disagree by minutes and drift — play,
/// seek, a rate change, a buffering suspension and its release, a late joiner — with the measured
/// spreads and a verdict. Each participant's "player" is its ``PlaybackCoordinator``: a start is
/// measured when its `starts()` consumer receives it, a position is its `expectedMediaTime()`.
final class PlaybackDemo: DemoScript {
    /// The verdict's bounds on loopback (measured runs stay far below them).
    static let startSpreadBound: Duration = .milliseconds(10)
    static let positionSpreadBound = 0.005

    let stage: DemoStage

    init(stage: DemoStage) { self.stage = stage }

    final class Viewer: Sendable {
        let name: String
        let clock: SystemWallClock
        let coordinator: GroupCoordinator
        let session = LockedValue<GroupSession<MovieActivity>?>(nil)
        let playback = LockedValue<PlaybackCoordinator?>(nil)
        /// Every start this participant's player received, with the real (monotonic) instant it did.
        let starts = LockedValue<[(start: PlaybackStart, at: ContinuousClock.Instant)]>([])

        init(name: String, clock: SystemWallClock, coordinator: GroupCoordinator) {
            self.name = name
            self.clock = clock
            self.coordinator = coordinator
        }

        var player: PlaybackCoordinator { playback.withLock { $0! } }

        /// When this participant received the start scheduled for `anchor`, if it did.
        func started(_ anchor: GroupInstant) -> ContinuousClock.Instant? {
            starts.withLock { $0.first { $0.start.scheduled == anchor }?.at }
        }
    }

    /// Skewed by up to ±10 minutes and drifting by up to ±100 ppm, differently for each participant.
    static func clock(_ index: Int) -> SystemWallClock {
        let sign: Int64 = index % 2 == 0 ? -1 : 1
        let offset = Duration.milliseconds(sign * (600_000 - Int64(index) * 47_311 % 590_000))
        return SystemWallClock(offset: offset, drift: Double(sign) * (100 - Double(index * 17 % 60)))
    }

    func run() async throws -> Bool {
        var connecting: [Viewer] = []
        for (index, name) in DemoNames.all.prefix(stage.count).enumerated() {
            let clock = PlaybackDemo.clock(index)
            let viewer = Viewer(name: name, clock: clock, coordinator: try await stage.connect(name, clock: clock))
            connecting.append(viewer)
            timeline.note(
                name, String(format: "connected; its clock is off by %+.3f s and drifts %+.0f ppm", clock.offset.seconds, clock.drift))
        }
        let viewers = connecting
        let alice = viewers[0], bob = viewers[1]
        let late = viewers[viewers.count - 1]
        let early = Array(viewers.dropLast())

        let sessions = try await stage.share(MovieActivity(movie: "big-buck-bunny"), among: viewers.map { ($0.name, $0.coordinator) })
        for (viewer, session) in zip(viewers, sessions) { viewer.session.withLock { $0 = session } }
        for viewer in early { try await join(viewer) }
        try await waitUntil(timeout: .seconds(5), "everyone knows the group clock") { early.allSatisfy { $0.player.groupTime() != nil } }
        timeline.note("", "group clock: served by \(alice.player.clockReference?.id ?? "-"); \(clockErrors(early))")

        var startSpreads: [(what: String, spread: Duration)] = []
        var positionSpreads: [Double] = []
        func started(_ what: String, by viewer: Viewer, _ command: @Sendable () async throws -> Void) async throws {
            let issued = ContinuousClock.now
            try await command()
            let (spread, anchor) = try await commonStart(early, what)
            let lead = viewer.player.lead
            let all = early.compactMap { $0.started(anchor) }.max()! - issued
            startSpreads.append((what, spread))
            let position = early[0].starts.withLock { $0.last!.start.mediaTime }
            timeline.note(
                viewer.name,
                "\(what): everyone started at \(String(format: "%.3f", position)) s; start spread \(format(spread)), lead \(format(lead)), command to all started \(format(all))"
            )
            positionSpreads += try await samplePositions(early)
        }

        try await alice.player.setItem("big-buck-bunny")
        try await waitUntil(timeout: .seconds(5), "everyone has the item") {
            early.allSatisfy { $0.player.timeline.item == "big-buck-bunny" }
        }
        timeline.note(alice.name, "set the item big-buck-bunny (paused at 0)")
        try await started("play", by: alice) { try await alice.player.play() }
        try await started("seek to 600 s", by: bob) { try await bob.player.seek(to: 600) }
        try await started("rate 2", by: alice) { try await alice.player.setRate(2) }

        // bob buffers: everyone pauses at one position until he is ready again.
        let suspended = ContinuousClock.now
        let suspension = bob.player.beginSuspension(for: .buffering)
        try await waitUntil(timeout: .seconds(5), pollEvery: .microseconds(200), "everyone waits for bob") {
            early.allSatisfy { $0.player.timeline.waitingFor.contains(Participant(id: bob.name)) && !$0.player.timeline.isPlaying }
        }
        let holding = ContinuousClock.now - suspended
        let pausedSpread = spread(early.map { $0.player.expectedMediaTime() })
        positionSpreads.append(pausedSpread)
        timeline.note(
            bob.name,
            "buffering: everyone paused after \(format(holding)) at \(String(format: "%.3f", early[0].player.expectedMediaTime())) s (spread \(format(seconds: pausedSpread)))"
        )
        try await Task.sleep(for: .milliseconds(300))
        try await started("buffering over", by: bob) { suspension.end() }

        // A late joiner starts at the current expected position, as part of join()'s catch-up.
        let joinStarted = ContinuousClock.now
        try await join(late)
        try await waitUntil(timeout: .seconds(5), "\(late.name) starts") { !late.starts.withLock { $0.isEmpty } }
        let lateStart = late.starts.withLock { $0[0] }
        let lateSpread = try await samplePositions(viewers)
        positionSpreads += lateSpread
        timeline.note(
            late.name,
            "joined late; started \(format(lateStart.at - joinStarted)) after join() at \(String(format: "%.3f", lateStart.start.mediaTime)) s (jumping \(format(lateStart.start.lateness)) past the start it missed); position spread with everyone \(format(seconds: lateSpread.max() ?? 0))"
        )

        try await alice.player.pause()
        try await waitUntil(timeout: .seconds(5), "everyone paused") { viewers.allSatisfy { !$0.player.timeline.isPlaying } }
        let finalSpread = spread(viewers.map { $0.player.expectedMediaTime() })
        positionSpreads.append(finalSpread)
        timeline.note(
            alice.name,
            "paused: everyone at \(String(format: "%.3f", alice.player.expectedMediaTime())) s (spread \(format(seconds: finalSpread)))")
        await alice.session.withLock { $0! }.end()
        timeline.note(alice.name, "ended the session: its records left the broker")
        for viewer in viewers { await viewer.coordinator.close() }

        let worstStart = startSpreads.map(\.spread).max() ?? .zero
        let sorted = positionSpreads.sorted()
        let p50 = sorted[sorted.count / 2], worstPosition = sorted.last ?? 0
        let lateOK = lateSpread.allSatisfy { $0 < PlaybackDemo.positionSpreadBound }
        Output.line("")
        Output.line("Verdict")
        Output.line("  start spread:     \(startSpreads.map { "\($0.what) \(format($0.spread))" }.joined(separator: ", "))")
        Output.line(
            "                    max \(format(worstStart)) (bound \(format(PlaybackDemo.startSpreadBound)), real time across participants)")
        Output.line(
            "  position spread:  p50 \(format(seconds: p50)), max \(format(seconds: worstPosition)) over \(sorted.count) samples at one real instant (bound \(format(seconds: PlaybackDemo.positionSpreadBound)))"
        )
        Output.line("  suspension:       everyone paused \(format(holding)) after bob's buffering began")
        Output.line("  late joiner:      \(lateOK ? "started at the group's position" : "OFF THE GROUP'S POSITION")")
        let ok = worstStart < PlaybackDemo.startSpreadBound && worstPosition < PlaybackDemo.positionSpreadBound && lateOK
        Output.line("  result:           \(ok ? "PASS" : "FAIL")")
        return ok
    }

    /// Joins with a player: the coordinator made before `join()`, its starts recorded as they come.
    private func join(_ viewer: Viewer) async throws {
        let session = viewer.session.withLock { $0! }
        let player = PlaybackCoordinator(session: session)
        viewer.playback.withLock { $0 = player }
        let starts = player.starts()
        Task {
            for await start in starts {
                let now = ContinuousClock.now
                viewer.starts.withLock { $0.append((start, now)) }
            }
        }
        try await session.join()
        timeline.note(viewer.name, "joined; active: \(session.activeParticipants.map(\.id).sorted().joined(separator: ", "))")
    }

    /// Waits until `viewers` follow one playing timeline and each received its start; the real-time
    /// spread of those starts, and the timeline's anchor.
    private func commonStart(_ viewers: [Viewer], _ what: String) async throws -> (Duration, GroupInstant) {
        try await waitUntil(timeout: .seconds(5), pollEvery: .milliseconds(1), "everyone starts after \(what)") {
            let timelines = Set(viewers.map { $0.player.timeline })
            guard timelines.count == 1, let shared = timelines.first, shared.isPlaying else { return false }
            return viewers.allSatisfy { $0.started(shared.anchor) != nil }
        }
        let anchor = viewers[0].player.timeline.anchor
        let instants = viewers.compactMap { $0.started(anchor) }
        return (instants.max()! - instants.min()!, anchor)
    }

    /// Position spreads (seconds) at ten instants 20 ms apart: every participant's expected media time at
    /// its own clock's reading for one real instant (the bench's measure, exact however the reads are
    /// scheduled).
    private func samplePositions(_ viewers: [Viewer]) async throws -> [Double] {
        var spreads: [Double] = []
        for _ in 0..<10 {
            try await Task.sleep(for: .milliseconds(20))
            let now = SystemWallClock().nanoseconds()
            spreads.append(
                spread(
                    viewers.map { viewer in
                        let player = viewer.player
                        return player.expectedMediaTime(at: player.groupTime(atLocal: viewer.clock.nanoseconds(atSystemTime: now)))
                    }))
        }
        return spreads
    }

    /// How far each participant's estimate of the group time is from the reference's clock, at one real
    /// instant.
    private func clockErrors(_ viewers: [Viewer]) -> String {
        guard let reference = viewers.first(where: { $0.name == viewers[0].player.clockReference?.id }) else { return "" }
        let now = SystemWallClock().nanoseconds()
        let errors = viewers.filter { $0 !== reference }.map { viewer in
            let estimate = viewer.player.groupTime(atLocal: viewer.clock.nanoseconds(atSystemTime: now))!.nanoseconds
            let actual = reference.clock.nanoseconds(atSystemTime: now)
            return "\(viewer.name) \(format(.nanoseconds(abs(estimate - actual))))"
        }
        return "estimate error " + errors.joined(separator: ", ")
    }

    private func spread(_ values: [Double]) -> Double { (values.max() ?? 0) - (values.min() ?? 0) }

    private func format(seconds: Double) -> String { format(.nanoseconds(Int64((seconds * 1e9).rounded()))) }

    private func format(_ duration: Duration) -> String { DemoStage.format(duration, decimals: 3) }
}
