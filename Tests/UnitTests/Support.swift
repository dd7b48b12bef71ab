import GroupSync
// Every file of this target sees the test support (timeBound, waitUntil, …) through this import. Nothing
// here starts a broker: `swift test --filter UnitTests` runs these tests alone, in seconds.
@_exported import GroupSyncTestSupport

struct Chat: Codable, Sendable, Equatable {
    var text: String
}

func ids(_ participants: Set<Participant>) -> Set<String> { Set(participants.map(\.id)) }
