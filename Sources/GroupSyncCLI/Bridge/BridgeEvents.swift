import Foundation
import GroupSync
import MQTT

/// Everything `groupsync bridge` writes to stdout: answers and events, one JSON object per line (keys
/// sorted), through ``Output`` so that each line is written whole.
///
/// Session events are written under one lock, which is what gives the ordering of docs/BRIDGE.md:
/// - A report reads the library's *current* value under the lock and writes it only when it differs
///   from the last one written on that channel. Follower tasks only say "something changed", so a slow
///   follower can never write a stale value after a newer one, and the bridge can bring a channel up to
///   date itself before answering a request ("answers come after the effect") without duplicates.
/// - A session's `session` event and its state are brought up to date before any other event of it, and
///   once it was reported invalidated nothing more of that session is written.
final class BridgeEvents: Sendable {
    private struct Memory {
        /// Last value written per channel (`state/<session>`, `participants/<session>`, `value/<session>/<key>`).
        var last: [String: JSONValue] = [:]
        /// Sessions whose `session` event was written.
        var announced: Set<String> = []
        /// Sessions reported invalidated: nothing more of them is written.
        var closed: Set<String> = []
        /// The session object of the latest join of each session: reports through an object of an
        /// earlier join of the same session (a follower not yet stopped) are ignored.
        var views: [String: ObjectIdentifier] = [:]
    }

    private let memory = LockedValue(Memory())

    /// The initial value of the bridge's shared states: "nobody has written this key yet", never reported.
    static let unset = JSONValue.string("\u{1}groupsync-bridge: no value")

    // MARK: - Answers and errors

    func ok(_ id: JSONValue, _ fields: [String: JSONValue] = [:]) {
        var fields = fields
        fields["event"] = .string("ok")
        fields["id"] = id
        write(fields)
    }

    /// An error: the answer to the request `id`, or unsolicited when `id` is nil.
    func error(_ message: String, id: JSONValue? = nil) {
        var fields: [String: JSONValue] = ["event": .string("error"), "message": .string(message)]
        if let id { fields["id"] = id }
        write(fields)
    }

    // MARK: - Session events

    /// The `session` event of `session`, once per session.
    func announce(_ session: GroupSession<AnyGroupActivity>) {
        memory.withLock { announce(session, &$0) }
    }

    /// Starts reporting `session` afresh (a join, possibly of a session this bridge left before): its
    /// state, participants and values are reported again from their current values.
    func open(_ session: GroupSession<AnyGroupActivity>) {
        memory.withLock { memory in
            memory.views[session.id] = ObjectIdentifier(session)
            memory.closed.remove(session.id)
            for channel in ["state/\(session.id)", "participants/\(session.id)"] { memory.last[channel] = nil }
            memory.last = memory.last.filter { !$0.key.hasPrefix("value/\(session.id)/") }
            // An empty journal is not reported: its first `journal` event lists something.
            memory.last["journal/\(session.id)"] = .array([])
        }
    }

    /// Brings the `state` event of `session` up to date.
    func state(of session: GroupSession<AnyGroupActivity>) {
        memory.withLock { _ = syncState(session, &$0) }
    }

    /// Brings the `participants` event of `session` up to date.
    func participants(of session: GroupSession<AnyGroupActivity>) {
        memory.withLock { memory in
            guard syncState(session, &memory) else { return }
            let ids = JSONValue.array(session.activeParticipants.map(\.id).sorted().map(JSONValue.string))
            guard update("participants/\(session.id)", to: ids, &memory) else { return }
            write(["event": .string("participants"), "session": .string(session.id), "participants": ids])
        }
    }

    /// Brings the `value` event of `state`'s key up to date (nothing while nobody has written the key).
    func value(of state: SharedState<JSONValue>, in session: GroupSession<AnyGroupActivity>) {
        memory.withLock { memory in
            guard syncState(session, &memory) else { return }
            let value = state.value
            guard value != BridgeEvents.unset, update("value/\(session.id)/\(state.key)", to: value, &memory) else { return }
            write(["event": .string("value"), "session": .string(session.id), "key": .string(state.key), "value": value])
        }
    }

    /// A `message` event (dropped once the session was reported invalidated).
    func message(_ value: JSONValue, from sender: String, in session: GroupSession<AnyGroupActivity>) {
        memory.withLock { memory in
            guard syncState(session, &memory) else { return }
            write(["event": .string("message"), "session": .string(session.id), "from": .string(sender), "value": value])
        }
    }

    /// A `gap` event: `gap.count` reliable messages of `gap.source` that will never arrive (dropped once
    /// the session was reported invalidated).
    func gap(_ gap: GroupSessionMessenger.Gap, in session: GroupSession<AnyGroupActivity>) {
        memory.withLock { memory in
            guard syncState(session, &memory) else { return }
            write([
                "event": .string("gap"), "session": .string(session.id), "from": .string(gap.source.id), "count": .int(gap.count),
                "to_everyone": .bool(gap.toEveryone),
            ])
        }
    }

    /// A `rejected` event: the bridge's participant rejected the message of `size` bytes on `topic`
    /// (malformed, forged, out of range, a body that does not decode…). Not tied to the joined session:
    /// rejected group records (presence, announcements) are reported too.
    func rejected(topic: String, size: Int) {
        write(["event": .string("rejected"), "topic": .string(topic), "size": .int(Int64(size))])
    }

    /// Brings the `timeline` event of `session` up to date with `coordinator`'s timeline.
    func timeline(of coordinator: PlaybackCoordinator, in session: GroupSession<AnyGroupActivity>) {
        memory.withLock { _ = syncTimeline(coordinator.timeline, of: session, &$0) }
    }

    /// A `start` event: the host starts its player now. Written after the `timeline` event of the timeline
    /// it starts, and dropped when that timeline was replaced meanwhile (or the session was reported
    /// invalidated): a host never starts a timeline it was told is over.
    func start(_ start: PlaybackStart, of coordinator: PlaybackCoordinator, in session: GroupSession<AnyGroupActivity>) {
        memory.withLock { memory in
            let timeline = coordinator.timeline
            guard timeline.isPlaying, timeline.anchor == start.scheduled, syncTimeline(timeline, of: session, &memory) else { return }
            write([
                "event": .string("start"), "session": .string(session.id), "item": start.item.map(JSONValue.string) ?? .null,
                "position": .double(start.mediaTime), "rate": .double(start.rate), "scheduled": .double(start.scheduled.milliseconds),
                "lateness_ms": .double(BridgeEvents.milliseconds(start.lateness)),
            ])
        }
    }

    /// Brings the `journal` event of `session` up to date with `journal`'s attachments.
    func journal(of journal: GroupSessionJournal, in session: GroupSession<AnyGroupActivity>) {
        memory.withLock { memory in
            guard syncState(session, &memory) else { return }
            let list = JSONValue.array(journal.attachments.map(BridgeEvents.describe))
            guard update("journal/\(session.id)", to: list, &memory) else { return }
            write(["event": .string("journal"), "session": .string(session.id), "attachments": list])
        }
    }

    /// An event of a load under way (`progress`, `loaded`, or its `error`): dropped once the session was
    /// reported invalidated.
    func load(_ event: String, _ fields: [String: JSONValue], in session: GroupSession<AnyGroupActivity>) {
        memory.withLock { memory in
            guard syncState(session, &memory) else { return }
            write(fields.merging(["event": .string(event), "session": .string(session.id)]) { $1 })
        }
    }

    static func describe(_ attachment: JournalAttachment) -> JSONValue {
        .object([
            "owner": .string(attachment.owner.id), "digest": .string(attachment.digest), "name": .string(attachment.name),
            "type": .string(attachment.mediaType), "size": .int(Int64(attachment.size)),
            "metadata": .object(attachment.metadata.mapValues(JSONValue.string)),
        ])
    }

    /// `duration` in milliseconds, with a fraction.
    static func milliseconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) * 1e3 + Double(duration.components.attoseconds) / 1e15
    }

    static func describe(_ timeline: PlaybackTimeline) -> [String: JSONValue] {
        [
            "item": timeline.item.map(JSONValue.string) ?? .null, "position": .double(timeline.position), "rate": .double(timeline.rate),
            "anchor": .double(timeline.anchor.milliseconds), "playing": .bool(timeline.isPlaying),
            "intended_rate": .double(timeline.intendedRate),
            "waiting": .array(timeline.waitingFor.map(\.id).sorted().map(JSONValue.string)),
        ]
    }

    // MARK: - Under the lock

    private func announce(_ session: GroupSession<AnyGroupActivity>, _ memory: inout Memory) {
        guard memory.announced.insert(session.id).inserted else { return }
        var fields: [String: JSONValue] = [
            "event": .string("session"), "session": .string(session.id), "activity": .string(session.activityIdentifier),
            "title": .string(session.metadata.title), "type": .string(session.metadata.type.rawValue),
            "initiator": .string(session.initiator.id), "value": session.activity.value,
        ]
        if let subtitle = session.metadata.subtitle { fields["subtitle"] = .string(subtitle) }
        write(fields)
    }

    /// Writes the session's `session` event if needed and its state if it changed. Returns whether the
    /// session is still open (not invalidated).
    private func syncState(_ session: GroupSession<AnyGroupActivity>, _ memory: inout Memory) -> Bool {
        guard !memory.closed.contains(session.id) else { return false }
        if let view = memory.views[session.id], view != ObjectIdentifier(session) { return false }
        announce(session, &memory)
        let state = session.state
        let fields = BridgeEvents.describe(state)
        if update("state/\(session.id)", to: .object(fields), &memory) {
            write(fields.merging(["event": .string("state"), "session": .string(session.id)]) { $1 })
        }
        if state.isInvalidated {
            memory.closed.insert(session.id)
            return false
        }
        return true
    }

    /// Writes the `timeline` event of `session` if `timeline` differs from the last one written. Returns
    /// whether the session is still open.
    private func syncTimeline(_ timeline: PlaybackTimeline, of session: GroupSession<AnyGroupActivity>, _ memory: inout Memory) -> Bool {
        guard syncState(session, &memory) else { return false }
        let fields = BridgeEvents.describe(timeline)
        if update("timeline/\(session.id)", to: .object(fields), &memory) {
            write(fields.merging(["event": .string("timeline"), "session": .string(session.id)]) { $1 })
        }
        return true
    }

    /// Records `value` as the last of `channel`; false when it already was.
    private func update(_ channel: String, to value: JSONValue, _ memory: inout Memory) -> Bool {
        guard memory.last[channel] != value else { return false }
        memory.last[channel] = value
        return true
    }

    static func describe(_ state: GroupSessionState) -> [String: JSONValue] {
        switch state {
        case .waiting:
            return ["state": .string("waiting")]
        case .joined:
            return ["state": .string("joined")]
        case .invalidated(reason: .left):
            return ["state": .string("invalidated"), "reason": .string("left")]
        case let .invalidated(reason: .ended(by)):
            return ["state": .string("invalidated"), "reason": .string("ended"), "by": by.map { .string($0.id) } ?? .null]
        case .invalidated(reason: .coordinatorClosed):
            return ["state": .string("invalidated"), "reason": .string("closed")]
        case .invalidated(reason: .expired):
            return ["state": .string("invalidated"), "reason": .string("expired")]
        }
    }

    private func write(_ fields: [String: JSONValue]) {
        guard let data = try? Wire.encode(JSONValue.object(fields)) else {
            Output.error("groupsync bridge: could not encode an event: \(fields)")
            return
        }
        Output.line(String(decoding: data, as: UTF8.self))
    }
}
