/// Someone in a group: one process (or one coordinator) identified by a stable ID.
public struct Participant: Sendable, Hashable, Codable, Identifiable, CustomStringConvertible {
    /// Unique in the group; also the last topic level of everything this participant publishes.
    public let id: String

    public init(id: String) { self.id = id }

    public var description: String { id }
}
