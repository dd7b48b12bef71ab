import BrokerSupport
import Foundation
import GroupSync
import MQTT

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
        /// What the screen shows now: the last value its `valueUpdates()` loop received (it may lag `value`).
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

        // A new photo: alice adds it to the session's journal (the late joiner opens it below).
        let photo = DemoPhoto.png()
        let added = try await addPhoto(photo, by: alice, seenBy: early)

        // A late joiner catches up.
        let catchUpStart = ContinuousClock.now
        try await join(late)
        let catchUp = ContinuousClock.now - catchUpStart
        timeline.note(
            late.name,
            "joined late and had \(late.value.map(String.init) ?? "nothing") after \(format(catchUp)) (the first value its screen showed)")
        let lateFirst = late.seen.withLock { $0.first }
        let (photoVerdict, photoOK) = try await openPhoto(added, expecting: photo, by: late)

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
        // The session ends: its retained records leave the broker (bob's too), not only when they expire.
        await late.session.withLock { $0! }.end()
        timeline.note(late.name, "ended the session: its records left the broker")
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
        Output.line("  shared photo:     \(photoVerdict)")
        Output.line("  crash detection:  \(format(crashDetection))")
        let ok = converged && jitterFree && lateFirst == winner && photoOK && crashDetection < .seconds(3)
        Output.line("  result:           \(ok ? "PASS" : "FAIL")")
        return ok
    }

    /// `owner` adds `photo` to the journal; returns once every one of `others` lists it.
    private func addPhoto(_ photo: Data, by owner: Participant, seenBy others: [Participant]) async throws -> JournalAttachment {
        let started = ContinuousClock.now
        let journal = GroupSessionJournal(session: owner.session.withLock { $0! })
        let attachment = try await journal.add(photo, name: DemoPhoto.name, mediaType: DemoPhoto.mediaType)
        let chunks = (photo.count + journal.configuration.chunkSize - 1) / journal.configuration.chunkSize
        let place = stage.retainedMessages ? "on the broker" : "served by whoever holds them"
        timeline.note(owner.name, "added \(attachment.name) to the journal (\(photo.count) bytes, \(chunks) chunks \(place))")
        try await waitUntil(timeout: .seconds(5), "everyone lists the photo") {
            others.allSatisfy { participant in
                GroupSessionJournal(session: participant.session.withLock { $0! }).attachments.contains { $0.id == attachment.id }
            }
        }
        timeline.note("", "every journal lists \(attachment.name) after \(format(ContinuousClock.now - started))")
        return attachment
    }

    /// `participant`, who joined after `attachment` was added, finds it in its journal and loads it; the
    /// verdict's line, and whether the bytes are those added.
    private func openPhoto(_ attachment: JournalAttachment, expecting photo: Data, by participant: Participant) async throws -> (
        String, Bool
    ) {
        let started = ContinuousClock.now
        let journal = GroupSessionJournal(session: participant.session.withLock { $0! })
        try await waitUntil(timeout: .seconds(5), "\(participant.name) lists the photo") {
            journal.attachments.contains { $0.id == attachment.id }
        }
        let listed = journal.attachments.first { $0.id == attachment.id }!
        let bytes = try await journal.load(listed)
        let opened = ContinuousClock.now - started
        let same = bytes == photo && listed.size == photo.count && listed.digest == attachment.digest
        timeline.note(
            participant.name,
            "opened \(listed.name) from the journal after \(format(opened)): \(bytes.count) bytes, every chunk verified, "
                + "SHA-256 \(SHA256.hex(bytes).prefix(12))…"
        )
        let verdict =
            "\(attachment.owner.id) added \(attachment.name) (\(photo.count) bytes); \(participant.name), joining late, opened it in \(format(opened)): "
            + (same ? "the same bytes, every chunk verified" : "DIFFERENT BYTES")
        return (verdict, same)
    }

    private func join(_ participant: Participant) async throws {
        let session = participant.session.withLock { $0! }
        try await session.join()
        let state = try SharedState(session, key: "index", initialValue: 0)
        participant.index.withLock { $0 = state }
        let first = LockedValue(true)
        let ready = AsyncStream<Void>.makeStream()
        Task {
            for await value in state.valueUpdates() {
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
