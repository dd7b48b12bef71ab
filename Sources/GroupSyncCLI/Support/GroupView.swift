import Foundation
import GroupSync
import MQTT

/// What an observer (not a participant) knows of a group from its traffic: sessions, who is online,
/// who joined what, the current state values. Fed with raw MQTT messages; used by `sessions`, `watch`
/// and `dashboard`. A session lasts while a copy of its announcement does, as for a participant
/// (PROTOCOL.md, Lifetimes): each copy expires when its message expiry (a stored copy's remaining one)
/// or its `ttl` runs out unless it is published again, and ``expire(now:)`` forgets what expired.
///
/// In a private group it opens what its keyring can (PROTOCOL.md, Private sessions); what it cannot stays
/// sealed: a session's title shows as "private session", and a sealed state value is reported as sealed and
/// not kept (so a dashboard without the key shows participants and counts, not values).
struct GroupView {
    struct Session {
        /// The copy with the largest revision.
        var announcement: Wire.Announcement
        /// The copies that keep the session alive, by publisher: when each expires (wall clock, ms).
        var copies: [String: Int64] = [:]
        var members: [String: Int64] = [:]
        var states: [String: Wire.StateRecord] = [:]
        /// What opens its sealed payloads, once made (``GroupView/sealer(_:)``).
        var sealer: SessionSealer?
    }

    /// One decoded message, ready to print.
    struct Event {
        var kind: String
        var session: String?
        var participant: String?
        var text: String
        var fields: [String: JSONValue]
    }

    let topics: GroupTopics
    /// The group's keys, if this observer has them.
    let keyring: GroupKeyring?
    /// The ID this observer asked to be welcomed as (PROTOCOL.md, "Observers"): welcomes and catch-ups
    /// addressed to it are applied as the records they stand for. Nil: it reads retained records only.
    let observer: String?
    private(set) var online: [String: Int64] = [:]
    private(set) var sessions: [String: Session] = [:]
    /// Member and state records of sessions whose announcement has not arrived yet: retained messages
    /// of different topics come in any order, so they wait here instead of being lost.
    private var early: [String: (members: [String: Int64], states: [String: Wire.StateRecord])] = [:]

    init(group: String, observer: String? = nil, keyring: GroupKeyring? = nil) {
        topics = GroupTopics(group: group)
        self.observer = observer
        self.keyring = keyring
    }

    /// What opens `session`'s sealed payloads: nil without a keyring. Kept with the session while it is
    /// known (one costs a key derivation and two cipher contexts per key).
    private mutating func sealer(_ session: String) -> SessionSealer? {
        guard let keyring else { return nil }
        if let sealer = sessions[session]?.sealer { return sealer }
        let sealer = SessionSealer(keyring: keyring, group: topics.group, session: session)
        sessions[session]?.sealer = sealer
        return sealer
    }

    /// Opened: `.some(record)`; sealed with a key this observer lacks: `.some(nil)`; not opening with a
    /// key it has (forged or damaged), or in clear while it has keys (participants reject it too): nil.
    private mutating func readable(_ record: Wire.StateRecord, session: String) -> Wire.StateRecord?? {
        guard let keyID = record.sealed else { return keyring == nil ? .some(record) : nil }
        guard let sealer = sealer(session), sealer.opens(keyID: keyID) else { return .some(nil) }
        return record.opened(by: sealer, session: session).map { .some($0) } ?? nil
    }

    /// An announcement copy as participants read it: opened where this observer's keyring can; kept
    /// closed when sealed with a key it lacks; nil (rejected) when it does not open with a key it has, or
    /// comes in clear while it has keys.
    private mutating func readable(_ announcement: Wire.Announcement) -> Wire.Announcement? {
        guard let keyID = announcement.activity.sealed else { return keyring == nil ? announcement : nil }
        guard let sealer = sealer(announcement.session), sealer.opens(keyID: keyID) else { return announcement }
        return announcement.opened(by: sealer)
    }

    /// Participants of `session` that joined and whose connection is alive.
    func active(_ session: Session) -> [String] {
        session.members.filter { online[$0.key] == $0.value }.map(\.key).sorted()
    }

    /// When the next copy of an announcement expires (wall clock, ms): ``expire(now:)`` is due then.
    var nextExpiry: Int64? { sessions.values.compactMap { $0.copies.values.min() }.min() }

    /// Forgets the copies expired at `now` (wall clock, ms), and the sessions left without one; returns
    /// an event for each session forgotten.
    mutating func expire(now: Int64) -> [Event] {
        var events: [Event] = []
        for (id, session) in sessions.sorted(by: { $0.key < $1.key }) {
            let left = session.copies.filter { $0.value > now }
            guard left.isEmpty else {
                sessions[id]?.copies = left
                continue
            }
            sessions[id] = nil
            early[id] = nil
            events.append(Event(kind: "expired", session: id, text: "session \(id) expired: nobody kept it alive", fields: [:]))
        }
        return events
    }

    /// Applies a message read at `now` (wall clock, ms); returns what it was, or nil for anything that is
    /// not GroupSync traffic and for heartbeats of participants known to be online (they only say that
    /// nothing changed).
    mutating func apply(_ message: MQTTMessage, now: Int64) -> Event? {
        guard let kind = topics.parse(message.topic) else { return nil }
        let payload = message.payload
        switch kind {
        case let .presence(participant):
            if payload.isEmpty {
                online[participant] = nil
                return Event(kind: "offline", participant: participant, text: "\(participant) went offline", fields: [:])
            }
            guard let presence = Wire.decode(Wire.Presence.self, from: payload) else { return invalid(message) }
            if presence.status == .online {
                online[participant] = presence.epoch
                return Event(
                    kind: "online", participant: participant, text: "\(participant) online (epoch \(presence.epoch))",
                    fields: ["epoch": .int(presence.epoch)])
            }
            if online[participant] == presence.epoch { online[participant] = nil }
            return Event(
                kind: "lost", participant: participant,
                text: "\(participant) LOST — connection died without leaving (epoch \(presence.epoch))",
                fields: ["epoch": .int(presence.epoch)])
        case let .welcome(recipient, sender):
            guard recipient == observer else { return nil }  // a newcomer's copy of what the others know
            guard let welcome = Wire.decode(Wire.Welcome.self, from: payload) else { return invalid(message) }
            for presence in welcome.presences where presence.status == .online { online[presence.participant] = presence.epoch }
            // Each session as a live copy of the welcomer's, as participants apply it.
            for copy in welcome.sessions {
                guard let announcement = readable(copy) else { continue }
                _ = applyCopy(announcement, publisher: sender, expiresAt: now &+ announcement.ttl &* 1_000)
            }
            var fields: [String: JSONValue] = [
                "online": .int(Int64(welcome.presences.count)), "sessions": .int(Int64(welcome.sessions.count)),
            ]
            if welcome.more == true { fields["more"] = .bool(true) }
            return Event(
                kind: "welcome", participant: sender,
                text: "\(sender) welcomed this observer: \(welcome.presences.count) online, \(welcome.sessions.count) sessions"
                    + (welcome.more == true ? " (more to come)" : ""),
                fields: fields)
        case let .observe(observer):
            guard Wire.decode(Wire.Observe.self, from: payload) != nil else { return invalid(message) }
            return Event(kind: "observe", participant: observer, text: "observer \(observer) asks to be welcomed", fields: [:])
        case let .heartbeat(participant):
            guard let heartbeat = Wire.decode(Wire.Heartbeat.self, from: payload) else { return invalid(message) }
            guard online[participant] != heartbeat.epoch else { return nil }
            online[participant] = heartbeat.epoch
            return Event(
                kind: "online", participant: participant, text: "\(participant) alive (epoch \(heartbeat.epoch))",
                fields: ["epoch": .int(heartbeat.epoch)])
        case let .announcement(id, publisher):
            if payload.isEmpty {
                sessions[id]?.copies[publisher] = nil
                guard sessions[id]?.copies.isEmpty == true else { return nil }
                sessions[id] = nil
                early[id] = nil
                return Event(kind: "ended", session: id, text: "session \(id) ended (announcement cleared)", fields: [:])
            }
            guard let copy = Wire.decode(Wire.Announcement.self, from: payload), copy.session == id, let announcement = readable(copy)
            else { return invalid(message) }
            if announcement.ended == true {
                guard announcement.activity.sealed == nil else { return nil }  // closed: it proves nothing
                let known = sessions.removeValue(forKey: id) != nil
                early[id] = nil
                return known
                    ? Event(kind: "ended", session: id, participant: publisher, text: "\(publisher) ended session \(id)", fields: [:])
                    : nil
            }
            // A stored copy lives what is left of its message expiry; a live one its whole ttl.
            let expiresAt = now &+ (message.properties.messageExpiry.map(Int64.init) ?? announcement.ttl) &* 1_000
            guard let event = applyCopy(announcement, publisher: publisher, expiresAt: expiresAt) else { return invalid(message) }
            return event
        case let .member(id, participant):
            if payload.isEmpty {
                setMember(id, participant, nil)
                return Event(kind: "leave", session: id, participant: participant, text: "\(participant) left \(id)", fields: [:])
            }
            guard let member = Wire.decode(Wire.Member.self, from: payload) else { return invalid(message) }
            setMember(id, participant, member.epoch)
            return Event(
                kind: "join", session: id, participant: participant, text: "\(participant) joined \(id)",
                fields: ["epoch": .int(member.epoch)])
        case let .state(id, key, writer):
            if payload.isEmpty {
                return Event(
                    kind: "state-cleared", session: id, participant: writer, text: "\(writer)'s \(key) in \(id) cleared",
                    fields: ["key": .string(key)])
            }
            guard let sealed = Wire.decode(Wire.StateRecord.self, from: payload), let readable = readable(sealed, session: id) else {
                return invalid(message)
            }
            guard let record = readable else {
                return Event(
                    kind: "state", session: id, participant: writer, text: "\(writer) set \(key) = sealed in \(id) (clock \(sealed.clock))",
                    fields: ["key": .string(key), "sealed": .string(sealed.sealed ?? ""), "clock": .string(sealed.clock.description)])
            }
            keepNewer(record, session: id)
            return Event(
                kind: "state", session: id, participant: writer,
                text: "\(writer) set \(key) = \(json(record.value)) in \(id) (clock \(record.clock))",
                fields: ["key": .string(key), "value": record.value, "clock": .string(record.clock.description)])
        case let .journal(id, attachment, owner):
            if payload.isEmpty {
                return Event(
                    kind: "detach", session: id, participant: owner,
                    text: "\(owner) removed attachment \(attachment.prefix(12)) from \(id)",
                    fields: ["digest": .string(attachment)])
            }
            guard var record = Wire.decode(Wire.JournalRecord.self, from: payload), record.id == attachment,
                record.sealed != nil || keyring == nil
            else { return invalid(message) }
            if let keyID = record.sealed {
                guard let sealer = sealer(id), sealer.opens(keyID: keyID) else {
                    return Event(
                        kind: "attach", session: id, participant: owner,
                        text: "\(owner) attached a sealed attachment (\(record.size) bytes, \(record.chunks.count) chunks) to \(id)",
                        fields: ["digest": .string(attachment), "size": .int(record.size), "sealed": .string(keyID)])
                }
                guard let opened = record.opened(by: sealer, session: id) else { return invalid(message) }
                record = opened
            }
            return Event(
                kind: "attach", session: id, participant: owner,
                text: "\(owner) attached \(record.name) (\(record.size) bytes, \(record.type), \(record.chunks.count) chunks) to \(id)",
                fields: [
                    "digest": .string(attachment), "name": .string(record.name), "size": .int(record.size),
                    "type": .string(record.type),
                ])
        case let .broadcast(id, sender):
            return messageEvent(message, session: id, sender: sender, recipient: nil)
        case let .direct(id, recipient, sender):
            return messageEvent(message, session: id, sender: sender, recipient: recipient)
        }
    }

    /// A copy of a session's announcement, live until `expiresAt` (wall clock, ms). Returns nil when it is
    /// rejected — only the creator chooses the activity and the lifetime, as participants read —, else
    /// the event it makes (none for a copy or a refresh of what is known).
    private mutating func applyCopy(_ announcement: Wire.Announcement, publisher: String, expiresAt: Int64) -> Event?? {
        let id = announcement.session
        // A closed copy (sealed with a key this observer lacks) lists a session not known yet and keeps
        // its publisher's copy alive, no more; the first open copy replaces a closed one.
        let (closed, currentClosed) = (announcement.activity.sealed != nil, sessions[id]?.announcement.activity.sealed != nil)
        if let current = sessions[id]?.announcement, !closed, !currentClosed, publisher != announcement.createdBy,
            announcement.activity.type != current.activity.type || announcement.ttl != current.ttl
        {
            return nil
        }
        let changed = sessions[id] != nil
        if let current = sessions[id] {
            sessions[id]?.copies[publisher] = expiresAt
            guard !closed, announcement.revision > current.announcement.revision || currentClosed else { return .some(nil) }
            sessions[id]?.announcement = announcement
        } else {
            let waiting = early.removeValue(forKey: id)
            sessions[id] = Session(
                announcement: announcement, copies: [publisher: expiresAt], members: waiting?.members ?? [:],
                states: waiting?.states ?? [:])
        }
        let title = announcement.activity.title
        return Event(
            kind: changed ? "activity" : "announce", session: id, participant: announcement.createdBy,
            text: changed
                ? "session \(id) activity changed: \(json(announcement.activity.data))"
                : "session \(id) announced by \(announcement.createdBy): \(announcement.activity.type) \"\(title)\"",
            fields: [
                "activity": .string(announcement.activity.type), "title": .string(title),
                "revision": .string(announcement.revision.description),
            ])
    }

    /// A catch-up addressed to this observer: its members and records, as if read from the broker.
    private mutating func applyCatchUp(_ catchUp: Wire.CatchUp, session: String) {
        for member in catchUp.members { setMember(session, member.participant, member.epoch) }
        for state in catchUp.states {
            if case let record?? = readable(state, session: session) { keepNewer(record, session: session) }
        }
    }

    private mutating func keepNewer(_ record: Wire.StateRecord, session id: String) {
        let current = sessions[id]?.states[record.key] ?? early[id]?.states[record.key]
        guard current.map({ $0.clock < record.clock }) ?? true else { return }  // a reader keeps the newer record
        if sessions[id] != nil {
            sessions[id]?.states[record.key] = record
        } else {
            early[id, default: ([:], [:])].states[record.key] = record
        }
    }

    private mutating func setMember(_ session: String, _ participant: String, _ epoch: Int64?) {
        if sessions[session] != nil {
            sessions[session]?.members[participant] = epoch
        } else {
            early[session, default: ([:], [:])].members[participant] = epoch
        }
    }

    private mutating func messageEvent(_ message: MQTTMessage, session: String, sender: String, recipient: String?) -> Event? {
        guard let envelope = Wire.decodeEnvelope(message.payload) else { return invalid(message) }
        let header = envelope.header
        let to = recipient ?? "all"
        var fields: [String: JSONValue] = [
            "to": .string(to), "type": .string(header.type), "size": .int(Int64(message.payload.count)),
            "reliable": .bool(header.reliable),
        ]
        if let seq = header.seq { fields["seq"] = .int(seq) }
        if let keyID = header.sealed { fields["sealed"] = .string(keyID) }
        switch header.type {
        case "$catchup":
            if recipient != nil, recipient == observer {
                guard let catchUp = Wire.decode(Wire.CatchUp.self, from: message.payload[envelope.body]) else { return invalid(message) }
                applyCatchUp(catchUp, session: session)
                if catchUp.more == true { fields["more"] = .bool(true) }
            }
            return Event(
                kind: "catch-up", session: session, participant: sender,
                text: "\(sender) → \(to): catch-up for the newcomer (\(message.payload.count) bytes)", fields: fields)
        case "$end":
            return Event(kind: "end", session: session, participant: sender, text: "\(sender) ends session \(session)", fields: fields)
        default:
            return Event(
                kind: "message", session: session, participant: sender,
                text:
                    "\(sender) → \(to): \(header.type), \(message.payload.count) bytes\(header.seq.map { ", seq \($0)" } ?? "")\(header.reliable ? "" : " (unreliable)")",
                fields: fields)
        }
    }

    private func invalid(_ message: MQTTMessage) -> Event {
        Event(
            kind: "invalid", text: "rejected payload on \(message.topic) (\(message.payload.count) bytes)",
            fields: ["topic": .string(message.topic)]
        )
    }

    func json(_ value: JSONValue) -> String {
        (try? Wire.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? "null"
    }
}
