import MQTT

/// A live instance of an activity that the group's participants can join — the counterpart of
/// GroupActivities' `GroupSession`. Get one from ``GroupActivity/sessions()`` (or
/// ``GroupCoordinator/sessions(of:)``); every participant, the one that activated it included, receives
/// the same session there.
///
/// Views of the same session compare equal (by ``id``). The session is over for this participant once
/// ``state`` is `.invalidated`; it never becomes valid again.
public final class GroupSession<Activity: GroupActivity>: Sendable, Identifiable, Hashable {
    let core: SessionCore
    /// The last activity value that decoded as `Activity`: a change that does not (another app version,
    /// a foreign client) leaves the previous value in place instead of failing.
    private let lastActivity: LockedValue<Activity>

    /// A view of `core` if its activity decodes as `Activity`.
    init?(core: SessionCore) {
        guard let activity = Wire.value(Activity.self, from: core.announcement.activity.data) else { return nil }
        self.core = core
        self.lastActivity = LockedValue(activity)
    }

    /// Unique in the group; the `<session>` level of the session's topics.
    public var id: String { core.id }

    /// The activity. Setting it announces the new value to every participant (who see it here and in
    /// ``activityUpdates()``); concurrent changes resolve to the one with the latest clock.
    public var activity: Activity {
        get {
            let current = Wire.value(Activity.self, from: core.announcement.activity.data)
            return lastActivity.withLock { last in
                if let current { last = current }
                return last
            }
        }
        set {
            guard let data = try? Wire.jsonValue(newValue) else { return }
            // A run-time activity keeps the session's identifier and metadata.
            let metadata = newValue is AnyGroupActivity ? core.announcement.activity.metadata : newValue.metadata
            core.updateActivity(.init(type: core.activityType, metadata: metadata, data: data))
        }
    }

    /// The activity's identifier (its type's `activityIdentifier`).
    public var activityIdentifier: String { core.activityType }

    /// The activity's title, subtitle and type, as announced. A private session whose key this participant
    /// does not have shows a title that says so.
    public var metadata: GroupActivityMetadata {
        core.announcement.activity.metadata ?? GroupActivityMetadata(title: core.announcement.activity.title)
    }

    /// Who started the session.
    public var initiator: Participant { Participant(id: core.announcement.createdBy) }

    public var state: GroupSessionState { core.state }

    /// The current state first, then every change, in order; ends after `.invalidated`.
    public func stateUpdates() -> GroupUpdates<GroupSessionState> {
        GroupUpdates(core.listen(.state)) { if case let .state(state) = $0 { state } else { nil } }
    }

    public var localParticipant: Participant { core.context.me }

    /// Participants that joined and whose connection is alive, the local one included once joined.
    public var activeParticipants: Set<Participant> { core.activeParticipants }

    /// The current set of active participants first, then every change (a crashed participant leaves it
    /// within about a second, a frozen one within 1.5 × keepalive). Ends when the session is invalidated.
    /// A slow consumer skips intermediate sets, never the latest.
    public func activeParticipantUpdates() -> GroupUpdates<Set<Participant>> {
        GroupUpdates(core.listen(.participants, keepingNewest: 1)) { if case let .participants(active) = $0 { active } else { nil } }
    }

    /// The current activity first, then the activity after each change made by any participant, this
    /// one included. Ends when the session is invalidated. A slow consumer skips to the latest activity;
    /// a value that does not decode as `Activity` is skipped.
    public func activityUpdates() -> GroupUpdates<Activity> {
        GroupUpdates(core.listen(.activity, keepingNewest: 1)) { update in
            guard case let .activity(value) = update else { return nil }
            return Wire.value(Activity.self, from: value)
        }
    }

    /// Joins: subscribes to the session, announces this participant, and returns once caught up — every
    /// shared state holds the group's current value (from retained messages, or from the one participant
    /// chosen to answer a newcomer, waiting at most the coordinator's `catchUpTimeout`).
    /// Throws ``GroupSyncError/sessionInvalidated`` if the session is over, and ``GroupSyncError/cancelled``
    /// when its task is cancelled before it is joined: the session is then as before (`join()` again).
    public func join() async throws(GroupSyncError) { try await core.join() }

    /// Leaves the session: others see this participant go; its last shared state stays visible to them.
    /// Every subscription and task of the session on this side ends. Idempotent. Returns within the
    /// coordinator's ``GroupCoordinator/Configuration/farewellTimeout`` whatever the broker does: a
    /// member record it could not clear then expires with the session's `ttl`. A cancelled task cuts the
    /// wait short: the farewell is handed to the connection first and still goes out.
    public func leave() async { await core.leave() }

    /// Ends the session for everyone: each participant's session becomes `.invalidated(.ended(by:))` and
    /// every retained message of the session is removed from the broker. Returns within the
    /// coordinator's ``GroupCoordinator/Configuration/farewellTimeout`` whatever the broker does: the
    /// session is over here then, and what could not be cleared expires with the session's `ttl`. A
    /// cancelled task cuts the waits short, as the timeout does.
    public func end() async { await core.end() }

    public static func == (lhs: GroupSession, rhs: GroupSession) -> Bool { lhs.id == rhs.id }
    public func hash(into hasher: inout Hasher) { hasher.combine(id) }
}
