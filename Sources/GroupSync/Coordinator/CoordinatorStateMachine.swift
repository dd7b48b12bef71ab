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

        func wants(_ type: String) -> Bool { activityType == type || activityType == CoordinatorStateMachine.anyActivity }
    }

    enum State {
        case open(Group)
        /// `close()` was called: no sessions, no listeners, presence no longer followed.
        case closed
    }

    struct Group {
        /// Every participant with a live connection (us too), and how it is judged alive.
        var connections: [String: Connection]
        /// The ``Challenger`` of a participant in `connections`, apart from them, whose every entry it would
        /// otherwise enlarge: a participant holds one per member of its group, and a challenger is rare.
        var challengers: [String: Challenger] = [:]
        /// The epoch of the last connection of a participant that a will ended, until a connection of it
        /// at least that new proves itself with a heartbeat (or it goes offline): a connection older than
        /// it is never confirmed, and gives way at once to a newer one's heartbeat.
        var lastWill: [String: Int64] = [:]
        var sessions: [String: Announced] = [:]
        /// Sessions whose end we saw, until their ended copy expires: older copies that arrive later (a
        /// retained replay is in no particular order) do not bring them back.
        var ended: [String: Ended] = [:]
        var listeners = ListenerRegistry<Listener>()

        var online: [String: Int64] { connections.mapValues(\.epoch) }

        /// When `participant`'s challenger is forgotten unless heard of again (judged by its own interval,
        /// else its connection's; ours by our own); nil when it has none or is never forgotten: a newer
        /// epoch of ours that sends heartbeats is another process of ours.
        func challengerForgottenAfter(_ participant: String, me: String, ownInterval: Int64?) -> ContinuousClock.Instant? {
            guard let connection = connections[participant], let challenger = challengers[participant] else { return nil }
            let interval: Int64?
            if participant == me {
                guard challenger.heartbeats == 0 else { return nil }
                interval = ownInterval ?? challenger.interval
            } else {
                interval = challenger.interval ?? connection.interval
            }
            return challenger.lastHeard + Connection.silence(interval: interval ?? CoordinatorStateMachine.assumedInterval)
        }

        /// `participant`'s connection is gone: its challenger, if any, takes its place.
        mutating func replaceGone(_ participant: String) -> PresenceAction {
            guard connections.removeValue(forKey: participant) != nil else { return .none }
            guard let challenger = challengers.removeValue(forKey: participant) else {
                return .changed(participant: participant, epoch: nil)
            }
            connections[participant] = challenger.connection
            return .changed(participant: participant, epoch: challenger.epoch)
        }
    }

    /// A participant's live connection: 24 bytes, one per participant of the group.
    struct Connection {
        var epoch: Int64
        /// When it was last heard of: its presence (retained or live) or a heartbeat.
        @CompactInstant var lastHeard: ContinuousClock.Instant
        /// Its heartbeat interval (ms): the largest it stated; nil when it sends none (never judged by
        /// silence).
        @PackedOptional<Int32> var interval: Int64?
        /// A heartbeat of this epoch was heard: the connection proved itself with its own traffic, which a
        /// presence record (retained, possibly forged) alone does not.
        var confirmed = false

        /// Gone: silent past ``silentAfter``.
        func isSilent(at now: ContinuousClock.Instant) -> Bool { silentAfter.map { now > $0 } ?? false }

        /// When it counts as gone unless heard of again; nil without an interval (never).
        var silentAfter: ContinuousClock.Instant? { interval.map { lastHeard + Connection.silence(interval: $0) } }

        /// How long a connection that states `interval` may be silent: three intervals less half a second
        /// (1.5 × keepalive − 0.5 s for the usual interval of keepalive / 2), never less than a second. The
        /// interval's range (at most 32,767,500 ms) keeps the product far from overflowing.
        static func silence(interval: Int64) -> Duration { max(.milliseconds(interval * 3 - 500), .seconds(1)) }
    }

    /// Another connection epoch of a participant than its live connection's, not taken for it at once (see
    /// ``heard(_:epoch:interval:byHeartbeat:now:)``): it takes over only once it proves itself (two
    /// heartbeats) or that connection is gone.
    struct Challenger {
        var epoch: Int64
        var interval: Int64?
        var lastHeard: ContinuousClock.Instant
        var heartbeats = 0

        var connection: Connection { Connection(epoch: epoch, lastHeard: lastHeard, interval: interval, confirmed: heartbeats > 0) }
    }

    /// An announced session: its kind of activity and when each publisher's copy expires (wall-clock ms).
    struct Announced {
        var activityType: String
        /// The records' lifetime (seconds), chosen by the creator: every copy says the same.
        var ttl: Int64
        var copies: [String: Int64]
        /// The type was read from its creator's own copy (its publisher is its `createdBy`), not from a
        /// copy of someone else's that could be foreign.
        var typeFromCreator: Bool
        /// Known from closed copies only: its type and `ttl` are unauthenticated, and the first open copy
        /// decides them.
        var closed = false
    }

    /// An ended session: when its ended copy expires (wall-clock ms), and who still has a copy from
    /// before the end on the broker.
    struct Ended {
        var expiresAt: Int64
        var copies: Set<String>
    }

    enum PresenceAction: Equatable {
        case none
        /// Tell every session: `participant`'s live connection is now `epoch` (nil: gone).
        case changed(participant: String, epoch: Int64?)
        /// Our own presence was overwritten (a late will of this very connection): publish it again.
        case republishOwn
        /// Forged or implausible: the record names another participant than its topic, or an epoch
        /// further ahead of our clock than a day.
        case rejected
    }

    enum AnnouncementAction: Equatable {
        case none
        /// A session seen for the first time: make its session object, knowing `presence`, and hand it
        /// to `listeners`.
        case new(listeners: [Inbox<SessionCore>], presence: [String: Int64])
        /// A known session's announcement changed: tell its session object.
        case changed
        /// The session's creator says its activity type is another than the copy it was first read from:
        /// the session object made from that copy is replaced by a new one, for `listeners`.
        case retyped(listeners: [Inbox<SessionCore>], presence: [String: Int64])
        /// The session ended: `by` published the ended copy (nil: every copy was cleared). `settled`: no
        /// copy from before the end is left either, so the ended copies may go too.
        case ended(by: String?, settled: Bool)
        /// The last copy from before the end of an ended session was cleared: its ended copy is no longer
        /// needed to hide one.
        case settled
        /// It names another session than its topic, an invalid activity type, or an implausible revision;
        /// or it disagrees with the session on what only its creator chooses: the activity type or the `ttl`.
        case rejected
    }

    /// What the coordinator's one timer is asked to wake for (see ``takeWakeRequest()``).
    struct WakeRequest: Equatable {
        /// A connection or challenger may fall silent by then.
        var silence: ContinuousClock.Instant?
        /// An announcement copy or an ended session expires by then (wall-clock ms).
        var expiry: Int64?

        mutating func formEarliest(_ other: WakeRequest) {
            silence = [silence, other.silence].compactMap { $0 }.min()
            expiry = [expiry, other.expiry].compactMap { $0 }.min()
        }
    }

    /// The interval a connection is judged by when neither it nor anything else states one (the
    /// default keepalive's half, in ms).
    static let assumedInterval: Int64 = 2_500

    let me: String
    let myEpoch: Int64
    private(set) var state: State
    /// What the inputs since the last ``takeWakeRequest()`` asked to be woken for.
    private var wakeRequest = WakeRequest()

    init(me: String, myEpoch: Int64) {
        self.me = me
        self.myEpoch = myEpoch
        state = .open(Group(connections: [me: Connection(epoch: myEpoch, lastHeard: .now, interval: nil)]))
    }

    /// Participant → epoch of its live connection (empty once closed).
    var online: [String: Int64] { if case let .open(group) = state { group.online } else { [:] } }

    /// Participant → its live connection's epoch and heartbeat interval (empty once closed).
    var connections: [String: (epoch: Int64, interval: Int64?)] {
        if case let .open(group) = state { group.connections.mapValues { ($0.epoch, $0.interval) } } else { [:] }
    }

    /// An epoch, like a clock, is wall-clock time of its participant: one more than a day ahead of ours
    /// is forged or broken, and accepting it would hide the real connection.
    static func isPlausible(epoch: Int64, now: Int64) -> Bool { epoch >= 0 && epoch <= now &+ HLCTimestamp.maximumSkew }

    var isClosed: Bool { if case .closed = state { true } else { false } }

    // MARK: - Presence

    /// A presence record on `participant`'s topic (`nil`: cleared, the participant went offline cleanly),
    /// read at wall-clock time `wallNow` (ms). A `lost` record (a will) ends only the connection it names:
    /// a will of an older connection, or one of a connection never seen online, changes nothing.
    mutating func onPresence(
        _ participant: String, _ presence: Wire.Presence?, wallNow: Int64, now: ContinuousClock.Instant
    ) -> PresenceAction {
        if let presence, !presence.matches(participant: participant) || !Self.isPlausible(epoch: presence.epoch, now: wallNow) {
            return .rejected
        }
        if let presence, presence.status == .online { wake(forSilenceOf: presence.interval, heardAt: now) }
        if participant == me { return onOwnPresence(presence, now: now) }
        guard let presence else { return remove(participant) }
        switch presence.status {
        case .online: return heard(participant, epoch: presence.epoch, interval: presence.interval, byHeartbeat: false, now: now)
        case .lost: return lost(participant, epoch: presence.epoch, now: now)
        }
    }

    /// Our own topic: this connection is alive, so it must say so. A cleared record, a late will (of this
    /// or an older connection) or an older retained record is overwritten at once. A newer epoch may be
    /// another process of ours, left alone while it proves itself with heartbeats; one that does not
    /// within the silence bound of our own interval is a forgery, overwritten then (``expireSilent(now:)``).
    private mutating func onOwnPresence(_ presence: Wire.Presence?, now: ContinuousClock.Instant) -> PresenceAction {
        guard !isClosed else { return .none }
        guard let presence, presence.epoch >= myEpoch, presence.epoch > myEpoch || presence.status == .online else {
            return .republishOwn
        }
        if presence.epoch > myEpoch, presence.status == .online {
            let me = self.me
            modifyGroup { group in
                if group.connections[me] != nil, group.challengers[me]?.epoch != presence.epoch {
                    group.challengers[me] = Challenger(epoch: presence.epoch, interval: presence.interval, lastHeard: now)
                }
            }
        }
        return .none
    }

    /// A heartbeat of `participant`: its connection `epoch` is alive, and sends one every `interval` ms.
    mutating func onHeartbeat(
        _ participant: String, _ heartbeat: Wire.Heartbeat, wallNow: Int64, now: ContinuousClock.Instant
    ) -> PresenceAction {
        guard Self.isPlausible(epoch: heartbeat.epoch, now: wallNow) else { return .rejected }
        wake(forSilenceOf: heartbeat.interval, heardAt: now)
        guard participant != me else {
            // Another process of ours proves itself: leave its presence alone.
            let me = self.me
            modifyGroup { group in
                if group.challengers[me]?.epoch == heartbeat.epoch { group.challengers[me]?.heartbeats += 1 }
            }
            return .none
        }
        return heard(participant, epoch: heartbeat.epoch, interval: heartbeat.interval, byHeartbeat: true, now: now)
    }

    /// `participant`'s connection `epoch` is alive (`byHeartbeat`: its own traffic says so; otherwise a
    /// presence record, which anyone could have published without the ACL).
    ///
    /// - The current epoch is refreshed; a silent current connection gives way to any epoch.
    /// - A newer epoch takes the place of a connection that sends no heartbeats at once. One that does
    ///   send them it only challenges: the challenger takes over once it sent two heartbeats, or when the
    ///   current connection is gone (its will, or silence).
    /// - An older epoch is a stale process, ignored — unless the current connection never sent a
    ///   heartbeat (it is known from a record only, possibly forged): then the older one challenges it
    ///   with its heartbeats, the same way.
    /// - A connection older than one a will ended is never confirmed, and the first heartbeat of a newer
    ///   epoch takes its place at once (the participant's own, after a forged will and a forged older
    ///   heartbeat).
    ///
    /// So a single forged record or heartbeat never takes a live participant's place.
    private mutating func heard(
        _ participant: String, epoch: Int64, interval: Int64?, byHeartbeat: Bool, now: ContinuousClock.Instant
    ) -> PresenceAction {
        modifyGroup { group in
            // Older than a connection a will ended: a stale process, or a forgery.
            func predatesWill(_ epoch: Int64) -> Bool { group.lastWill[participant].map { epoch < $0 } ?? false }
            func confirm(_ connection: inout Connection) {
                guard byHeartbeat, !predatesWill(connection.epoch) else { return }
                connection.confirmed = true
                group.lastWill[participant] = nil
            }
            guard var current = group.connections[participant], !current.isSilent(at: now) else {
                let previous = group.connections[participant]
                var connection = Connection(
                    epoch: epoch, lastHeard: now, interval: interval, confirmed: previous?.epoch == epoch && previous?.confirmed == true)
                confirm(&connection)
                group.connections[participant] = connection
                group.challengers[participant] = nil
                return previous?.epoch == epoch ? .none : .changed(participant: participant, epoch: epoch)
            }
            if epoch == current.epoch {
                current.lastHeard = now
                // Judged by the largest interval this connection stated: a forged smaller one never makes
                // a live participant flap.
                if let interval { current.interval = max(current.interval ?? interval, interval) }
                confirm(&current)
                group.connections[participant] = current
                return .none
            }
            if epoch > current.epoch, current.interval == nil || byHeartbeat && predatesWill(current.epoch) {
                var connection = Connection(epoch: epoch, lastHeard: now, interval: interval)
                confirm(&connection)
                group.connections[participant] = connection
                group.challengers[participant] = nil
                return .changed(participant: participant, epoch: epoch)
            }
            if epoch < current.epoch, !byHeartbeat || current.confirmed { return .none }
            var challenger =
                group.challengers[participant].flatMap { $0.epoch == epoch ? $0 : nil }
                ?? Challenger(epoch: epoch, interval: interval, lastHeard: now)
            challenger.lastHeard = now
            if let interval { challenger.interval = max(challenger.interval ?? interval, interval) }
            if byHeartbeat { challenger.heartbeats += 1 }
            guard challenger.heartbeats >= 2 else {
                group.challengers[participant] = challenger
                return .none
            }
            group.connections[participant] = challenger.connection
            group.challengers[participant] = nil
            return .changed(participant: participant, epoch: epoch)
        } ?? .none
    }

    /// A will of `participant`'s connection `epoch`: that connection is gone (its challenger, if any, takes
    /// its place); a will of any other connection changes nothing.
    private mutating func lost(_ participant: String, epoch: Int64, now: ContinuousClock.Instant) -> PresenceAction {
        modifyGroup { group in
            guard let current = group.connections[participant] else { return .none }
            if group.challengers[participant]?.epoch == epoch {
                group.challengers[participant] = nil
                return .none
            }
            guard current.epoch == epoch else { return .none }
            group.lastWill[participant] = max(group.lastWill[participant] ?? epoch, epoch)
            return group.replaceGone(participant)
        } ?? .none
    }

    private mutating func remove(_ participant: String) -> PresenceAction {
        modifyGroup { group in
            group.challengers[participant] = nil
            group.lastWill[participant] = nil
            return group.connections.removeValue(forKey: participant) == nil ? .none : .changed(participant: participant, epoch: nil)
        } ?? .none
    }

    /// A participant not heard of for three of its own heartbeat intervals is gone (frozen, or cut off)
    /// even before the broker's keepalive check publishes its will; it comes back with its next
    /// heartbeat. A newer epoch that challenged it takes its place. Returns what changed, sorted by
    /// participant, and whether our own presence must be published again: a newer epoch of ours that did
    /// not prove itself with heartbeats within our own silence bound is no other process of ours.
    mutating func expireSilent(now: ContinuousClock.Instant, ownInterval: Int64?) -> (changes: [PresenceAction], republishOwn: Bool) {
        let me = self.me
        return modifyGroup { group in
            var changes: [PresenceAction] = []
            for participant in group.connections.keys.sorted() where participant != me {
                if group.connections[participant]!.isSilent(at: now) {
                    changes.append(group.replaceGone(participant))
                } else if let forgotten = group.challengerForgottenAfter(participant, me: me, ownInterval: ownInterval), now > forgotten {
                    // A challenger that fell silent (or never sent anything but its record) is forgotten.
                    group.challengers[participant] = nil
                }
            }
            var republishOwn = false
            if let forgotten = group.challengerForgottenAfter(me, me: me, ownInterval: ownInterval), now > forgotten {
                group.challengers[me] = nil
                republishOwn = true
            }
            return (changes.filter { $0 != .none }, republishOwn)
        } ?? ([], false)
    }

    /// The timer requests made by the inputs since the last call, which the coordinator schedules. An
    /// input asks for what it may have made due (a connection heard may fall silent one silence bound
    /// later); a wake-up finds what is actually due, then asks ``nextWake(ownInterval:)`` for the next.
    mutating func takeWakeRequest() -> WakeRequest {
        defer { wakeRequest = WakeRequest() }
        return wakeRequest
    }

    /// When the next connection or challenger can fall silent and the next session copy expires, from
    /// the whole state (after a wake-up, or a reconnect that gave everyone a fresh grace period).
    func nextWake(ownInterval: Int64?) -> WakeRequest {
        guard case let .open(group) = state else { return WakeRequest() }
        var next = WakeRequest()
        // The same deadlines ``expireSilent(now:ownInterval:)`` acts on: one it would not act on would
        // come back at once, again and again.
        for (participant, connection) in group.connections where participant != me {
            next.formEarliest(WakeRequest(silence: connection.silentAfter))
        }
        for participant in group.challengers.keys {
            next.formEarliest(WakeRequest(silence: group.challengerForgottenAfter(participant, me: me, ownInterval: ownInterval)))
        }
        for session in group.sessions.values {
            if let last = session.copies.values.max() { next.formEarliest(WakeRequest(expiry: last)) }
        }
        for ended in group.ended.values { next.formEarliest(WakeRequest(expiry: ended.expiresAt)) }
        return next
    }

    private mutating func wake(forSilenceOf interval: Int64?, heardAt now: ContinuousClock.Instant) {
        wakeRequest.formEarliest(WakeRequest(silence: now + Connection.silence(interval: interval ?? Self.assumedInterval)))
    }

    /// Whether we welcome `newcomer` (a new connection of it just came online) on a broker without
    /// retained messages: among the participants online, the newcomer aside, the one with the largest
    /// rendezvous rank answers, as for a session's catch-up.
    func isWelcomeResponder(for newcomer: String) -> Bool {
        guard newcomer != me else { return false }
        let mine = SessionStateMachine.rank(newcomer, me)
        return !online.keys.contains { $0 != newcomer && $0 != me && SessionStateMachine.rank(newcomer, $0) > mine }
    }

    /// While we were disconnected we could hear nobody: everyone gets a fresh grace period.
    mutating func onReconnected(now: ContinuousClock.Instant) {
        modifyGroup { group in
            for participant in group.connections.keys { group.connections[participant]?.lastHeard = now }
        }
    }

    // MARK: - Sessions

    /// `publisher`'s copy of `sessionID`'s announcement (`nil`: cleared), read at wall-clock time `now`
    /// (ms), which the broker keeps until `expiresAt` unless its publisher refreshes it. For `.new` and
    /// `.changed` the caller merges an open copy's revision into the participant's clock; the session
    /// machine keeps the copy with the largest revision. A known session's activity type is the one it
    /// was first announced with. The session ends with a copy that says so, or when its last copy is cleared.
    ///
    /// The copy comes as the coordinator keeps it: opened in a private group where it can be. One still
    /// sealed is closed (sealed with a key we lack: nothing of it is authenticated to us): it only lists a
    /// session not known yet (`.new`) and keeps its publisher's copy alive; of a known session it changes
    /// nothing else (`.none`), neither its type nor its end.
    mutating func onAnnouncement(
        _ sessionID: String, publisher: String, _ announcement: Wire.Announcement?, expiresAt: Int64, now: Int64
    ) -> AnnouncementAction {
        guard let announcement else {
            var remaining: Int64?
            let action =
                modifyGroup { group -> AnnouncementAction in
                    if group.ended[sessionID]?.copies.remove(publisher) != nil {
                        return group.ended[sessionID]?.copies.isEmpty == true ? .settled : .none
                    }
                    guard group.sessions[sessionID]?.copies.removeValue(forKey: publisher) != nil else { return .none }
                    remaining = group.sessions[sessionID]?.copies.values.max()
                    guard remaining == nil else { return .none }
                    group.sessions[sessionID] = nil
                    return .ended(by: nil, settled: true)
                } ?? .none
            // The session now lasts only as long as the copies left: it may expire sooner than it would have.
            if let remaining { wakeRequest.formEarliest(WakeRequest(expiry: remaining)) }
            return action
        }
        guard announcement.matches(session: sessionID), announcement.revision.isPlausible(now: now),
            Identifier.isValid(announcement.activity.type)
        else { return .rejected }
        let action =
            announcement.activity.sealed != nil
            ? acceptClosedAnnouncement(sessionID, publisher: publisher, announcement, expiresAt: expiresAt)
            : acceptAnnouncement(sessionID, publisher: publisher, announcement, expiresAt: expiresAt)
        if case .rejected = action { return action }
        wakeRequest.formEarliest(WakeRequest(expiry: expiresAt))
        return action
    }

    private mutating func acceptClosedAnnouncement(
        _ sessionID: String, publisher: String, _ announcement: Wire.Announcement, expiresAt: Int64
    ) -> AnnouncementAction {
        modifyGroup { group in
            if group.sessions[sessionID] != nil {
                group.sessions[sessionID]!.copies[publisher] = expiresAt
                return .none
            }
            if group.ended[sessionID] != nil {
                if announcement.ended != true { group.ended[sessionID]?.copies.insert(publisher) }  // from before the end
                return .none
            }
            guard announcement.ended != true else { return .none }
            let type = announcement.activity.type
            group.sessions[sessionID] = Announced(
                activityType: type, ttl: announcement.ttl, copies: [publisher: expiresAt], typeFromCreator: false, closed: true)
            return .new(listeners: group.listeners.filter { $0.wants(type) }.map(\.inbox), presence: group.online)
        } ?? .none
    }

    private mutating func acceptAnnouncement(
        _ sessionID: String, publisher: String, _ announcement: Wire.Announcement, expiresAt: Int64
    ) -> AnnouncementAction {
        modifyGroup { group in
            let type = announcement.activity.type
            let fromCreator = publisher == announcement.createdBy
            let listeners = group.listeners.filter { $0.wants(type) }.map(\.inbox)
            if let session = group.sessions[sessionID], type != session.activityType || announcement.ttl != session.ttl {
                // Only the creator chooses the kind of activity and the lifetime. Its own copy decides what
                // the session is when the session was taken from someone else's copy (any open copy, when
                // from closed ones only); any other copy that disagrees is rejected (it changes nothing, not
                // even the clock).
                guard fromCreator && !session.typeFromCreator || session.closed else { return .rejected }
                if announcement.ended != true {
                    group.sessions[sessionID] = Announced(
                        activityType: type, ttl: announcement.ttl, copies: [publisher: expiresAt], typeFromCreator: fromCreator)
                    return .retyped(listeners: listeners, presence: group.online)
                }
            }
            if announcement.ended == true {
                let live = group.sessions.removeValue(forKey: sessionID)
                var ended = group.ended[sessionID] ?? Ended(expiresAt: expiresAt, copies: [])
                ended.expiresAt = max(ended.expiresAt, expiresAt)
                if let live { ended.copies.formUnion(live.copies.keys) }
                ended.copies.remove(publisher)
                group.ended[sessionID] = ended
                if live != nil { return .ended(by: publisher, settled: ended.copies.isEmpty) }
                // Known to have ended already: the other copies may all be gone by now.
                return ended.copies.isEmpty ? .settled : .none
            }
            if group.ended[sessionID] != nil {  // a copy from before the end
                group.ended[sessionID]?.copies.insert(publisher)
                return .none
            }
            guard group.sessions[sessionID] != nil else {
                group.sessions[sessionID] = Announced(
                    activityType: type, ttl: announcement.ttl, copies: [publisher: expiresAt], typeFromCreator: fromCreator)
                return .new(listeners: listeners, presence: group.online)
            }
            // In place: a copy of the session taken out of the dictionary would copy its table of copies —
            // one per participant — at every copy read.
            group.sessions[sessionID]!.copies[publisher] = expiresAt
            group.sessions[sessionID]!.typeFromCreator = group.sessions[sessionID]!.typeFromCreator || fromCreator
            group.sessions[sessionID]!.closed = false
            return .changed
        } ?? .none
    }

    /// Sessions whose every copy expired on the broker by wall-clock time `now` (ms): nobody refreshed
    /// them, so everyone who kept one has gone. Returns them, sorted, forgotten.
    mutating func expireSessions(now: Int64) -> [String] {
        modifyGroup { group in
            group.ended = group.ended.filter { $0.value.expiresAt > now }
            let expired = group.sessions.filter { $0.value.copies.values.allSatisfy { $0 <= now } }.keys.sorted()
            for sessionID in expired { group.sessions[sessionID] = nil }
            return expired
        } ?? []
    }

    /// Who has a copy of `sessionID`'s announcement on the broker, from before its end too.
    func publishers(of sessionID: String) -> [String] {
        guard case let .open(group) = state else { return [] }
        var publishers = group.ended[sessionID]?.copies ?? []
        if let live = group.sessions[sessionID] { publishers.formUnion(live.copies.keys) }
        return Array(publishers)
    }

    /// A session ended (here or elsewhere): forget it, so a new announcement with its ID is a new session.
    /// Its copies are still tracked until they expire, so that an ended copy is cleared once they are
    /// all gone, and an older copy read later does not bring the session back.
    mutating func forget(_ sessionID: String) {
        modifyGroup { group in
            guard let session = group.sessions.removeValue(forKey: sessionID) else { return }
            var ended = group.ended[sessionID] ?? Ended(expiresAt: 0, copies: [])
            ended.expiresAt = max(ended.expiresAt, session.copies.values.max() ?? 0)
            ended.copies.formUnion(session.copies.keys)
            group.ended[sessionID] = ended
        }
    }

    /// A new `sessions()` listener. It gets every announced session it wants at once (returned, sorted
    /// by ID), then each new one. Returns nil once closed: then it ends at once, not added. Its sequence
    /// removes it by its inbox (``removeListener(_:)``).
    mutating func addListener(_ listener: Listener) -> [String]? {
        modifyGroup { group in
            group.listeners.add(listener, id: ObjectIdentifier(listener.inbox))
            return group.sessions.filter { listener.wants($0.value.activityType) }.keys.sorted()
        }
    }

    /// The sequence of the inbox `id` ended.
    mutating func removeListener(_ id: ObjectIdentifier) { modifyGroup { $0.listeners.remove(id) } }

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
