import BrokerSupport
import Foundation
import GroupSyncTestSupport
import Testing

/// The files users deploy with: `docker-compose.yml` and the broker configuration it mounts. No Docker
/// engine runs the tests, so these check that what users start is what the tests start by hand.
@Suite struct DeployFilesTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    static func text(_ path: String) throws -> String {
        try String(contentsOf: repository.appendingPathComponent(path), encoding: .utf8)
    }

    /// The directives of a `mosquitto.conf`, comments and blank lines aside, with runs of blanks as one.
    static func directives(_ configuration: String) -> [String] {
        configuration.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ") }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
    }

    /// The services of `docker-compose.yml`, each with its lines (the file's two-space indentation).
    static func services(_ compose: String) -> [String: [String]] {
        var services: [String: [String]] = [:]
        var current: String?, inServices = false
        for line in compose.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if !line.hasPrefix(" ") && !line.isEmpty { inServices = line == "services:" }
            guard inServices else { continue }
            if line.hasPrefix("  ") && !line.hasPrefix("   ") && line.hasSuffix(":") {
                current = String(line.dropFirst(2).dropLast())
                services[current!] = []
            } else if let current, line.hasPrefix("    ") {
                services[current]!.append(line.trimmingCharacters(in: .whitespaces))
            }
        }
        return services
    }

    /// The entries of the list `key:` among a service's `lines`, unquoted, comments aside.
    static func list(_ key: String, in lines: [String]) -> [String] {
        guard let start = lines.firstIndex(of: "\(key):") else { return [] }
        return lines[(start + 1)...].prefix { $0.hasPrefix("- ") }.map { line in
            String(line.dropFirst(2).prefix { $0 != "#" }).trimmingCharacters(in: .whitespaces)
                .trimmingCharacters(in: CharacterSet(charactersIn: "\""))
        }
    }

    @Test func everyComposeBrokerIsPinnedPublishedOnLoopbackAndHealthChecked() throws {
        let services = Self.services(try Self.text("docker-compose.yml"))
        #expect(Set(services.keys) == ["mosquitto", "mosquitto-b"])
        for (name, lines) in services {
            // The 2.0 line the tests run (Debian's 2.0.11), not a floating `2` that may become 2.1 or 3.
            let images = lines.filter { $0.hasPrefix("image: ") }
            #expect(images.count == 1 && images[0].hasPrefix("image: eclipse-mosquitto:2.0."), "\(name): \(images)")
            // The mounted configuration lets anyone in: reachable from this machine only.
            let ports = Self.list("ports", in: lines)
            #expect(ports.contains { $0.hasSuffix(":1883") }, "\(name) publishes its MQTT port")
            for port in ports { #expect(port.hasPrefix("127.0.0.1:"), "\(name) publishes \(port) beyond loopback") }
            #expect(lines.contains("healthcheck:"), "\(name) has a healthcheck")
            for mount in Self.list("volumes", in: lines).filter({ $0.hasPrefix("./") }) {
                let path = String(mount.dropFirst(2).prefix { $0 != ":" })
                #expect(FileManager.default.fileExists(atPath: Self.repository.appendingPathComponent(path).path), "\(name) mounts \(path)")
            }
        }
    }

    /// `deploy/mosquitto/mosquitto.conf` (what `docker compose up` runs) against the configuration the tests
    /// give their own mosquitto: every setting the library's behaviour depends on (Nagle off, the keepalive
    /// range, persistence and its autosave, global ACL settings, the log) is the same, so the tests speak
    /// for the deployed broker.
    @Test(.needsOwnBroker("a configuration with persistence and websockets, read from its file"))
    func theComposeBrokerRunsTheConfigurationTheTestsRun() async throws {
        let shipped = Self.directives(try Self.text("deploy/mosquitto/mosquitto.conf"))
        let configuration = MosquittoBroker.Configuration(
            websocketsPort: try FreePort.loopback(), persistence: true, autosave: .every(seconds: 60))
        let tested = try await MosquittoBroker.withBroker(configuration) { broker in
            Self.directives(try String(contentsOfFile: broker.configFile, encoding: .utf8))
        }
        // `autosave_on_changes false` is mosquitto's default, written out in the shipped file for its comment.
        #expect(Set(shipped.filter(Self.comparable)) == Set(tested.filter(Self.comparable)))
        #expect(shipped.contains("protocol websockets") && shipped.contains("listener 9001"))
    }

    /// `deploy/mosquitto/mosquitto-bridge.conf` (the compose file's second broker) bridges as the tests'
    /// bridged brokers do (docs/SCALING.md), to the first broker's address in the compose network.
    @Test func theComposeBridgeIsTheOneTheTestsRun() throws {
        let shipped = Self.directives(try Self.text("deploy/mosquitto/mosquitto-bridge.conf"))
        let tested = MosquittoBroker.Configuration.bridged(to: 1883).extraLines
        let bridge = Array(shipped.drop { !$0.hasPrefix("connection ") })
        #expect(Set(bridge.filter { !$0.hasPrefix("address ") }) == Set(tested.filter { !$0.hasPrefix("address ") }))
        #expect(bridge.contains("address mosquitto:1883"))
        let base = Self.directives(try Self.text("deploy/mosquitto/mosquitto.conf")).filter(Self.comparable)
        let shippedBase = Array(shipped.prefix { !$0.hasPrefix("connection ") }).filter(Self.comparable)
        #expect(Set(shippedBase).isSubset(of: Set(base)), "the second broker runs the first one's settings, websockets aside")
    }

    /// Directives two configurations of the same broker may differ in: listeners (the container listens on
    /// every interface of its own network, published on 127.0.0.1 by the compose file; the tests on
    /// loopback ports of their own), file locations, the tests' `user root` (they run as root in a private
    /// directory) and log timestamps, and mosquitto's defaults written out.
    static func comparable(_ directive: String) -> Bool {
        !["listener ", "persistence_location ", "user ", "log_timestamp "].contains { directive.hasPrefix($0) }
            && !["protocol mqtt", "autosave_on_changes false"].contains(directive)
    }
}
