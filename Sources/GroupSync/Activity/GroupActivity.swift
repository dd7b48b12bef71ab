/// Something a group does together, e.g. looking at one gallery. Declare one per kind of activity.
///
/// ```swift
/// struct SharedGallery: GroupActivity {
///     static let activityIdentifier = "com.example.gallery"
///     var galleryID: String
///     var metadata: GroupActivityMetadata { .init(title: "Gallery \(galleryID)") }
/// }
/// ```
/// The activity value is encoded as JSON in the session announcement, so every participant — and any
/// client in another language — sees the same one.
public protocol GroupActivity: Codable, Sendable {
    /// Stable identifier of the kind of activity; sessions are delivered to listeners of the same one.
    static var activityIdentifier: String { get }
    /// Shown by participants and dashboards.
    var metadata: GroupActivityMetadata { get }
    /// How long a session of this activity outlives its participants: every retained record of it
    /// (announcement, member and state records) lives this long on the broker after its owner last
    /// refreshed it. Participants refresh what they own while they are in the session, so a session that
    /// everyone left, crashed out of or never returned to — and that nobody ended — disappears from
    /// `sessions()` and from the broker this long after the last of them. One hour by default; whole
    /// seconds, at least one.
    static var sessionTimeToLive: Duration { get }
}

extension GroupActivity {
    public var metadata: GroupActivityMetadata { GroupActivityMetadata(title: Self.activityIdentifier, type: .generic) }

    public static var sessionTimeToLive: Duration { GroupActivityMetadata.defaultTimeToLive }
}

/// How an activity presents itself.
public struct GroupActivityMetadata: Sendable, Hashable, Codable {
    public enum ActivityType: String, Sendable, Hashable, Codable {
        case generic, watchTogether, listenTogether, workoutTogether, shopTogether, exploreTogether, createTogether, learnTogether,
            playTogether, readTogether
    }

    public var title: String
    public var subtitle: String?
    public var type: ActivityType

    /// The default ``GroupActivity/sessionTimeToLive``: one hour.
    public static let defaultTimeToLive = Duration.seconds(3600)

    public init(title: String, subtitle: String? = nil, type: ActivityType = .generic) {
        self.title = title
        self.subtitle = subtitle
        self.type = type
    }
}

extension GroupActivityMetadata: Wire.Record {
    /// An activity type this version does not know reads as `generic`.
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        self.init(
            title: try fields.string(CodingKeys.title), subtitle: try fields.optionalString(CodingKeys.subtitle),
            type: ActivityType(rawValue: try fields.string(CodingKeys.type)) ?? .generic)
    }
}

/// What `prepareForActivation()` recommends.
public enum GroupActivityActivationResult: Sendable, Hashable {
    /// A group and a broker connection are there: `activate()` will announce the session.
    case activationPreferred
    /// No broker connection or no group: carry on alone.
    case activationDisabled
    /// The task was cancelled while preparing.
    case cancelled
}
