/// The application message of the messenger benchmarks: pings, their echoes, and the throughput stream.
struct Ping: Codable, Sendable, Equatable {
    var seq: Int
}
