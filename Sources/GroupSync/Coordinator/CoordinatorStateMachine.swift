import Foundation

/// The group-level logic of one coordinator: who is online (by connection epoch), which sessions are
/// announced, which listeners have been given which session, and which retained messages this
/// participant owns. Pure: inputs return effects; ``GroupCoordinator`` performs them outside its lock.
struct CoordinatorStateMachine {
    typealias SessionContinuation = AsyncStream<SessionCore>.Continuation
    /// The listener type that matches every activity.
    static let anyActivity = "*"

    let me: String
    let myEpoch: Int64
    /// The online epoch of every participant with a live connection.
    private(set) var online: [String: Int64] = [:]
    /// The newest presence epoch seen per participant (online or lost), to reject stale ones.
    private var newestEpoch: [String: Int64] = [:]
    /// When each online participant was last heard of (any presence message: retained, live, heartbeat).
    private var lastHeard: [String: ContinuousClock.Instant] = [:]
    private(set) var cores: [String: SessionCore] = [:]
    private var listeners: [UInt64: (type: String, continuation: SessionContinuation, delivered: Set<String>)] = [:]
    /// Retained messages this participant published and keeps alive: republished after every reconnect
    /// (a broker restarted without persistence forgets them), cleared when their owner ends.
    private(set) var ownedRetained: [String: Data] = [:]
    private(set) var closed = false
    private(set) var rejected = 0

    private var nextID: UInt64 = 0

    init(me: String, myEpoch: Int64) {
        self.me = me
        self.myEpoch = myEpoch
        online[me] = myEpoch
        newestEpoch[me] = myEpoch
    }

    struct Effects {
        var deliver: [(SessionContinuation, SessionCore)] = []
        var finish: [SessionContinuation] = []
        /// Presence changes to forward to every session: participant → online epoch (nil: gone).
        var presenceChanges: [(String, Int64?)] = []
        var invalidate: [SessionCore] = []
        var announcementChanged: [(SessionCore, Wire.Announcement)] = []
        /// Our own presence was overwritten (a late will of this very connection): publish it again.
        var republishPresence = false

        func perform() {
            for (continuation, core) in deliver { continuation.yield(core) }
            for continuation in finish { continuation.finish() }
        }
    }

    mutating func countRejected() {
        rejected += 1
    }

    mutating func makeID() -> UInt64 {
        nextID += 1
        return nextID
    }

    // MARK: - Presence

    /// A presence message (`nil`: cleared, the participant went offline cleanly).
    mutating func onPresence(_ participant: String, _ presence: Wire.Presence?, now: ContinuousClock.Instant = .now) -> Effects {
        var effects = Effects()
        if let presence, presence.participant != participant {
            rejected += 1
            return effects
        }
        if participant == me {
            // We read our own topic, so this connection is alive: it must say so. A cleared record, a
            // late will (of this or an older connection) or an older retained record is overwritten; a
            // newer connection of the same participant (another process) is left alone.
            if let presence, presence.epoch > myEpoch || (presence.epoch == myEpoch && presence.status == .online) {
                return effects
            }
            effects.republishPresence = !closed
            return effects
        }
        guard let presence else {
            if online.removeValue(forKey: participant) != nil {
                effects.presenceChanges = [(participant, nil)]
            }
            return effects
        }
        if let newest = newestEpoch[participant], presence.epoch < newest {
            return effects  // from an older connection: never overrides a newer one
        }
        newestEpoch[participant] = presence.epoch
        switch presence.status {
        case .online:
            lastHeard[participant] = now
            guard online[participant] != presence.epoch else { return effects }
            online[participant] = presence.epoch
            effects.presenceChanges = [(participant, presence.epoch)]
        case .lost:
            if online.removeValue(forKey: participant) != nil {
                effects.presenceChanges = [(participant, nil)]
            }
        }
        return effects
    }

    /// Presence heartbeats: a participant not heard of for `timeout` is gone (frozen, or cut off) even
    /// before the broker's keepalive check publishes its will. It comes back with its next heartbeat.
    mutating func expireSilent(now: ContinuousClock.Instant, timeout: Duration) -> Effects {
        var effects = Effects()
        for (participant, _) in online where participant != me {
            if let heard = lastHeard[participant], now - heard > timeout {
                online[participant] = nil
                lastHeard[participant] = nil
                effects.presenceChanges.append((participant, nil))
            }
        }
        return effects
    }

    /// While we were disconnected we could hear nobody: everyone gets a fresh grace period.
    mutating func onReconnected(now: ContinuousClock.Instant) {
        for participant in online.keys { lastHeard[participant] = now }
    }

    // MARK: - Sessions

    /// An announcement (`nil`: cleared, the session ended). `makeCore` builds the session object for a
    /// session seen for the first time.
    mutating func onAnnouncement(
        _ sessionID: String, _ announcement: Wire.Announcement?, makeCore: (Wire.Announcement) -> SessionCore
    ) -> Effects {
        var effects = Effects()
        guard let announcement else {
            if let core = cores.removeValue(forKey: sessionID) { effects.invalidate = [core] }
            return effects
        }
        guard announcement.session == sessionID, !closed else {
            rejected += 1
            return effects
        }
        if let core = cores[sessionID] {
            effects.announcementChanged = [(core, announcement)]
            return effects
        }
        let core = makeCore(announcement)
        cores[sessionID] = core
        for (id, listener) in listeners where listener.type == announcement.activity.type || listener.type == CoordinatorStateMachine.anyActivity {
            listeners[id]?.delivered.insert(sessionID)
            effects.deliver.append((listener.continuation, core))
        }
        return effects
    }

    /// A session ended: forget it (a new announcement with the same ID is a new session).
    mutating func forget(_ sessionID: String) {
        cores[sessionID] = nil
    }

    /// The local participant left a session that is still announced: a fresh, waiting session object
    /// replaces the left one, for `sessions()` listeners that start from now on and for
    /// `currentSessions` — listeners that already got the session do not get it again, so an app that
    /// joins every session it receives does not rejoin what the user left.
    mutating func replace(_ left: SessionCore, with fresh: SessionCore) {
        guard cores[left.id] === left, !closed else { return }
        cores[left.id] = fresh
    }

    /// A new `sessions()` listener for activities of `type`: it gets every live session at once, then new ones.
    mutating func addListener(type: String, _ continuation: SessionContinuation) -> (UInt64, Effects) {
        var effects = Effects()
        let id = makeID()
        if closed {
            effects.finish = [continuation]
            return (id, effects)
        }
        var delivered = Set<String>()
        for (sessionID, core) in cores.sorted(by: { $0.key < $1.key }) where (core.activityType == type || type == CoordinatorStateMachine.anyActivity) && !core.isInvalidated {
            delivered.insert(sessionID)
            effects.deliver.append((continuation, core))
        }
        listeners[id] = (type, continuation, delivered)
        return (id, effects)
    }

    mutating func removeListener(_ id: UInt64) {
        listeners[id] = nil
    }

    // MARK: - Owned retained messages

    /// Stops republishing `topic` after reconnects (someone else cleared it), without publishing.
    mutating func disown(_ topic: String) {
        ownedRetained[topic] = nil
    }

    mutating func own(_ topic: String, _ payload: Data) {
        if payload.isEmpty { ownedRetained[topic] = nil } else { ownedRetained[topic] = payload }
    }

    /// `close()`: no new sessions; every listener ends. Returns the sessions to leave.
    mutating func close() -> (Effects, [SessionCore]) {
        var effects = Effects()
        closed = true
        effects.finish = listeners.values.map(\.continuation)
        listeners = [:]
        let open = Array(cores.values)
        cores = [:]
        return (effects, open)
    }
}
