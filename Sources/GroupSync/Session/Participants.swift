/// Who receives a message.
public struct Participants: Sendable, Hashable {
    enum Storage: Sendable, Hashable {
        case all
        case only(Set<Participant>)
    }

    let storage: Storage

    /// Every other participant of the session (not the sender itself).
    public static let all = Participants(storage: .all)

    /// Only these participants. Routed by topic: nobody else's connection ever receives it.
    public static func only(_ participants: Set<Participant>) -> Participants { Participants(storage: .only(participants)) }

    /// Only this participant.
    public static func only(_ participant: Participant) -> Participants { Participants(storage: .only([participant])) }
}
