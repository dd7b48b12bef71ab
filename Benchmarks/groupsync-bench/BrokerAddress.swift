import Foundation

/// Host and port of an `mqtt://host:port` URL, for the raw libmosquitto clients.
struct BrokerAddress: Sendable {
    let host: String
    let port: Int

    init(_ url: String) throws {
        guard let components = URLComponents(string: url), let host = components.host, !host.isEmpty else {
            throw SessionCluster.Failure(description: "'\(url)' is not an mqtt://host:port URL")
        }
        self.host = host
        self.port = components.port ?? 1883
    }
}
