import Foundation
import GroupSync
import MQTT

/// The bridge's media player ops (docs/BRIDGE.md, "Playback"): the host plays the media, the session's
/// ``PlaybackCoordinator`` says when. Made at a `start`/`join` with `"playback": true`, or at the first
/// playback op; from then on `timeline` and `start` events follow it.
extension Bridge {
    /// How long a join or the first playback op waits for the session's timeline and group clock.
    static let timelinePatience: Duration = .seconds(2)

    /// What a join or the first playback op waits for before answering.
    struct Priming: Sendable {
        let coordinator: PlaybackCoordinator
        /// Ends when the first timeline is known (after the join's catch-up) and reported.
        let timeline: AsyncStream<Void>
    }

    /// Makes the joined session's coordinator and the tasks that turn its sequences into events; nil
    /// when the session is already followed.
    func followPlayback() -> Priming? {
        guard let joined = current, joined.playback == nil else { return nil }
        let session = joined.session
        let coordinator = PlaybackCoordinator(session: session)
        let (primed, known) = AsyncStream<Void>.makeStream()
        let (timelines, starts) = (coordinator.timelineUpdates(), coordinator.starts())
        let events = self.events
        current?.playback = coordinator
        current?.tasks.append(
            Task.detached {
                for await _ in timelines {
                    events.timeline(of: coordinator, in: session)
                    known.finish()
                }
                known.finish()
            })
        current?.tasks.append(
            Task.detached {
                for await start in starts { events.start(start, of: coordinator, in: session) }
            })
        return Priming(coordinator: coordinator, timeline: primed)
    }

    /// Waits (at most ``timelinePatience``) until the timeline is known and reported, and the group
    /// clock too: a start scheduled from then on comes on time, not late.
    func timelineKnown(_ priming: Priming) async {
        await withTimeout(Bridge.timelinePatience) {
            for await _ in priming.timeline {}
            while priming.coordinator.groupTime() == nil && !Task.isCancelled { try? await Task.sleep(for: .milliseconds(2)) }
        }
    }

    /// The joined session and its coordinator, made (and its timeline awaited) at first use.
    private func requirePlayback() async throws(Failure) -> (Joined, PlaybackCoordinator) {
        var joined = try requireSession()
        if joined.playback == nil, let priming = followPlayback() {
            await timelineKnown(priming)
            joined = try requireSession()
        }
        guard let coordinator = joined.playback else { throw Failure("session \(joined.session.id) has no playback") }
        return (joined, coordinator)
    }

    func playback(_ action: BridgeRequest.PlaybackAction) async throws(Failure) -> [String: JSONValue] {
        let (joined, coordinator) = try await requirePlayback()
        do {
            switch action {
            case .play: try await coordinator.play()
            case .pause: try await coordinator.pause()
            case let .seek(position): try await coordinator.seek(to: position)
            case let .rate(rate): try await coordinator.setRate(rate)
            case let .item(item, position): try await coordinator.setItem(item, position: position)
            }
        } catch {
            throw Failure("could not change the timeline: \(error)")
        }
        // Answers come after the effect: the new timeline is reported first.
        events.timeline(of: coordinator, in: joined.session)
        return ["session": .string(joined.session.id)]
    }

    func suspend(_ reason: String) async throws(Failure) -> [String: JSONValue] {
        let (joined, coordinator) = try await requirePlayback()
        let suspension = coordinator.beginSuspension(for: PlaybackSuspension.Reason(reason))
        let number = joined.suspensionCount + 1
        let id = "s\(number)"
        current?.suspensionCount = number
        current?.suspensions[id] = suspension
        events.timeline(of: coordinator, in: joined.session)
        let waits = coordinator.configuration.suspensionReasonsThatTriggerWaiting.contains(suspension.reason)
        return ["session": .string(joined.session.id), "suspension": .string(id), "reason": .string(reason), "waits": .bool(waits)]
    }

    func resume(_ id: String?) async throws(Failure) -> [String: JSONValue] {
        let (joined, coordinator) = try await requirePlayback()
        let ended: [String]
        if let id {
            guard joined.suspensions[id] != nil else { throw Failure("no suspension \(id) under way") }
            ended = [id]
        } else {
            ended = joined.suspensions.keys.sorted()
        }
        for id in ended { current?.suspensions.removeValue(forKey: id)?.end() }
        events.timeline(of: coordinator, in: joined.session)
        return ["session": .string(joined.session.id), "ended": .array(ended.map(JSONValue.string))]
    }

    func position() async throws(Failure) -> [String: JSONValue] {
        let (joined, coordinator) = try await requirePlayback()
        let timeline = coordinator.timeline
        return [
            "session": .string(joined.session.id), "item": timeline.item.map(JSONValue.string) ?? .null,
            "position": .double(coordinator.expectedMediaTime()), "rate": .double(timeline.rate),
            "playing": .bool(timeline.isPlaying), "group_ms": coordinator.groupTime().map { .double($0.milliseconds) } ?? .null,
            "reference": coordinator.clockReference.map { .string($0.id) } ?? .null,
            "lead_ms": .double(BridgeEvents.milliseconds(coordinator.lead)),
        ]
    }
}
