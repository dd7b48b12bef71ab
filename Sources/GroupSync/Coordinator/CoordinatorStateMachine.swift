import Foundation
import MQTT

/// The group-level logic of one coordinator: who is online (by connection epoch), which sessions are
/// announced (by ID and activity type) and which `sessions()` listeners want them. A value type without
/// side effects: every input returns what to do, and ``GroupCoordinator`` does it — it also keeps the
/// session objects for the IDs held here.
struct CoordinatorStateMachine {
    /// The activity type of a listener that wants every session.
    static let anyActivity = "*"

    /// A `sessions()` sequence: the activity type it wants, and where its sessions go.
    struct Listener {
        let activityType: String
        let inbox: Inbox<SessionCore>

        func wants(_ type: String) -> Bool {
            activityType == type || activityType == CoordinatorStateMachine.anyActivity
        }
    }

    enum State {
        case open(Group)
        /// `close()` was called: no sessions, no listeners, presence no longer followed.
        case closed
    }

    struct Group {
        /// The online epoch of every participant with a live connection, us included.
        var online: [String: Int64]
        /// The newest presence epoch seen per participant (online or lost), to reject stale ones.
        var newestEpoch: [String: Int64]
        /// When each online participant was last heard of (retained, live or heartbeat presence).
        var lastHeard: [String: ContinuousClock.Instant] = [:]
        /// Announced sessions: ID → activity type.
        var sessions: [String: String] = [:]
        var listeners = ListenerRegistry<Listener>()
    }

    enum PresenceAction: Equatable {
        case none
        /// Tell every session: `participant`'s live connection is now `epoch` (nil: gone).
        case changed(participant: String, epoch: Int64?)
        /// Our own presence was overwritten (a late will of this very connection): publish it again.
        case republishOwn
        /// Forged: the record names another participant than its topic.
        case rejected
    }

    enum AnnouncementAction {
        case none
        /// A session seen for the first time: make its session object, knowing `presence`, and hand it
        /// to `listeners`.
        case new(listeners: [Inbox<SessionCore>], presence: [String: Int64])
        /// A known session's announcement changed: tell its session object.
        case changed
        /// The announcement was cleared: the session ended.
        case ended
        /// It names another session than its topic, an invalid activity type, or an implausible revision.
        case rejected
    }

    let me: String
    let myEpoch: Int64
    private(set) var state: State

    init(me: String, myEpoch: Int64) {
        self.me = me
        self.myEpoch = myEpoch
        state = .open(Group(online: [me: myEpoch], newestEpoch: [me: myEpoch]))
    }

    /// Participant → epoch of its live connection (empty once closed).
    var online: [String: Int64] {
        if case let .open(group) = state { return group.online }
        return [:]
    }

    var isClosed: Bool {
        if case .closed = state { return true }
        return false
    }

    // MARK: - Presence

    /// A presence record on `participant`'s topic (`nil`: cleared, the participant went offline cleanly).
    mutating func onPresence(_ participant: String, _ presence: Wire.Presence?, now: ContinuousClock.Instant) -> PresenceAction {
        if let presence, !presence.matches(participant: participant) { return .rejected }
        if participant == me {
            // We read our own topic, so this connection is alive: it must say so. A cleared record, a
            // late will (of this or an older connection) or an older retained record is overwritten; a
            // newer connection of the same participant (another process) is left alone.
            if let presence, presence.epoch > myEpoch || (presence.epoch == myEpoch && presence.status == .online) {
                return .none
            }
            return isClosed ? .none : .republishOwn
        }
        return modifyGroup { group in
            guard let presence else {
                return group.online.removeValue(forKey: participant) == nil ? .none : .changed(participant: participant, epoch: nil)
            }
            if let newest = group.newestEpoch[participant], presence.epoch < newest {
                return .none  // from an older connection: never overrides a newer one
            }
            group.newestEpoch[participant] = presence.epoch
            switch presence.status {
            case .online:
                group.lastHeard[participant] = now
                guard group.online[participant] != presence.epoch else { return .none }
                group.online[participant] = presence.epoch
                return .changed(participant: participant, epoch: presence.epoch)
            case .lost:
                return group.online.removeValue(forKey: participant) == nil ? .none : .changed(participant: participant, epoch: nil)
            }
        } ?? .none
    }

    /// Presence heartbeats: a participant not heard of for `timeout` is gone (frozen, or cut off) even
    /// before the broker's keepalive check publishes its will; it comes back with its next heartbeat.
    /// Returns the participants that are gone, sorted.
    mutating func expireSilent(now: ContinuousClock.Instant, timeout: Duration) -> [String] {
        let me = self.me
        return modifyGroup { group in
            let silent = group.online.keys.filter { participant in
                guard participant != me, let heard = group.lastHeard[participant] else { return false }
                return now - heard > timeout
            }
            for participant in silent {
                group.online[participant] = nil
                group.lastHeard[participant] = nil
            }
            return silent.sorted()
        } ?? []
    }

    /// While we were disconnected we could hear nobody: everyone gets a fresh grace period.
    mutating func onReconnected(now: ContinuousClock.Instant) {
        modifyGroup { group in
            for participant in group.online.keys { group.lastHeard[participant] = now }
        }
    }

    // MARK: - Sessions

    /// An announcement on `sessionID`'s topic (`nil`: cleared, the session ended), read at local
    /// wall-clock time `now` (ms). For `.new` and `.changed` the caller merges its revision into the
    /// participant's clock. A known session's activity type is the one it was first announced with.
    mutating func onAnnouncement(_ sessionID: String, _ announcement: Wire.Announcement?, now: Int64) -> AnnouncementAction {
        guard let announcement else {
            return modifyGroup { $0.sessions.removeValue(forKey: sessionID) == nil ? .none : .ended } ?? .none
        }
        guard announcement.matches(session: sessionID), announcement.revision.isPlausible(now: now),
            Identifier.isValid(announcement.activity.type)
        else { return .rejected }
        return modifyGroup { group in
            if group.sessions[sessionID] != nil { return .changed }
            let type = announcement.activity.type
            group.sessions[sessionID] = type
            return .new(listeners: group.listeners.filter { $0.wants(type) }.map(\.inbox), presence: group.online)
        } ?? .none
    }

    /// A session ended (here or elsewhere): forget it, so a new announcement with its ID is a new session.
    mutating func forget(_ sessionID: String) {
        modifyGroup { $0.sessions[sessionID] = nil }
    }

    /// A new `sessions()` listener. It gets every announced session it wants at once (returned, sorted
    /// by ID), then each new one. Returns nil as its ID once closed: then it ends at once.
    mutating func addListener(_ listener: Listener) -> (id: ListenerRegistry<Listener>.ID?, sessions: [String]) {
        modifyGroup { group in
            let sessions = group.sessions.filter { listener.wants($0.value) }.keys.sorted()
            return (group.listeners.add(listener), sessions)
        } ?? (nil, [])
    }

    mutating func removeListener(_ id: ListenerRegistry<Listener>.ID) {
        modifyGroup { $0.listeners.remove(id) }
    }

    /// `close()`: no new sessions. Returns the listeners to end and the sessions to leave.
    mutating func close() -> (listeners: [Inbox<SessionCore>], sessions: [String]) {
        guard case var .open(group) = state else { return ([], []) }
        state = .closed
        return (group.listeners.removeAll().map(\.inbox), group.sessions.keys.sorted())
    }

    /// Changes the open group in place (it holds the only copy meanwhile); nil once closed.
    @discardableResult
    private mutating func modifyGroup<Result>(_ body: (inout Group) -> Result) -> Result? {
        guard case .open(var group) = state else { return nil }
        state = .closed
        defer { state = .open(group) }
        return body(&group)
    }
}
