/// An activity known only at run time — for bridges, command-line tools and clients in other languages.
/// It is the activity's JSON value; its identifier and metadata are the session's
/// (``GroupSession/activityIdentifier``, ``GroupSession/metadata``). Get such sessions from
/// ``GroupCoordinator/sessions(activityIdentifier:)`` and start them with
/// ``GroupCoordinator/activate(activityIdentifier:value:metadata:)``.
public struct AnyGroupActivity: GroupActivity, Hashable {
    /// Not used for routing: `AnyGroupActivity` sessions are selected by identifier at run time.
    public static var activityIdentifier: String { "*" }

    public var value: JSONValue

    public init(_ value: JSONValue) { self.value = value }

    public init(from decoder: any Decoder) throws { value = try JSONValue(from: decoder) }

    public func encode(to encoder: any Encoder) throws { try value.encode(to: encoder) }
}
