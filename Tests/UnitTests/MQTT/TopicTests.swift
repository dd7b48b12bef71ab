import Testing

@testable import MQTT

@Suite struct TopicTests {
    @Test(arguments: [
        ("a/b/c", "a/b/c", true), ("a/b/c", "a/+/c", true), ("a/b/c", "a/#", true), ("a", "a/#", true),
        ("a/b", "#", true), ("a/b/c", "a/+", false), ("a/b", "a/b/c", false), ("$SYS/x", "#", false),
        ("$SYS/x", "+/x", false), ("$SYS/x", "$SYS/#", true), ("a//b", "a/+/b", true), ("/a", "+/a", true),
        ("groupsync/v2/g/s/1/all/p", "groupsync/v2/g/s/1/all/+", true),
    ])
    func matching(name: String, filter: String, expected: Bool) {
        #expect(Topic.matches(name, filter: filter) == expected, "\(name) ~ \(filter)")
    }

    /// The matcher against a plain level-by-level reference, over random topics and filters built from a
    /// small alphabet so that matches are frequent.
    @Test func matchingAgreesWithAReferenceOnRandomInputs() {
        func reference(_ name: String, _ filter: String) -> Bool {
            let n = name.split(separator: "/", omittingEmptySubsequences: false)
            let f = filter.split(separator: "/", omittingEmptySubsequences: false)
            if name.hasPrefix("$") && (f.first == "+" || f.first == "#") { return false }
            var i = 0
            for level in f {
                if level == "#" { return true }
                guard i < n.count else { return false }
                if level != "+" && level != n[i] { return false }
                i += 1
            }
            return i == n.count
        }
        var generator = SystemRandomNumberGenerator()
        let levels = ["a", "b", "", "ab", "$x"]
        for _ in 0..<20_000 {
            let name = (0..<Int.random(in: 1...4, using: &generator)).map { _ in levels.randomElement(using: &generator)! }.joined(
                separator: "/")
            var filterLevels = (0..<Int.random(in: 1...4, using: &generator)).map { _ in
                (levels + ["+", "+"]).randomElement(using: &generator)!
            }
            if Bool.random(using: &generator) { filterLevels.append("#") }
            let filter = filterLevels.joined(separator: "/")
            guard Topic.isValidFilter(filter), Topic.isValidName(name) else { continue }
            #expect(Topic.matches(name, filter: filter) == reference(name, filter), "\(name) ~ \(filter)")
        }
    }

    @Test func names() {
        #expect(Topic.isValidName("a/b"))
        #expect(!Topic.isValidName(""))
        #expect(!Topic.isValidName("a/+"))
        #expect(!Topic.isValidName("a/#"))
        #expect(!Topic.isValidName("a\u{0}b"))
    }

    @Test func filters() {
        for valid in ["#", "+", "a/+/b", "a/#", "+/+", "/"] { #expect(Topic.isValidFilter(valid), "\(valid)") }
        for invalid in ["", "a/#/b", "a+", "a/b#", "#/a", "a/+b"] { #expect(!Topic.isValidFilter(invalid), "\(invalid)") }
    }
}

@Suite struct BackoffTests {
    @Test func growsExponentiallyWithinJitterAndCaps() {
        let backoff = Backoff(initial: .milliseconds(100), maximum: .seconds(2))
        #expect(backoff.delay(attempt: 1, random: 0) == .milliseconds(50))
        #expect(backoff.delay(attempt: 1, random: 1) == .milliseconds(100))
        #expect(backoff.delay(attempt: 3, random: 0) == .milliseconds(200))
        #expect(backoff.delay(attempt: 3, random: 0.5) == .milliseconds(300))
        #expect(backoff.delay(attempt: 50, random: 1) == .seconds(2))
        #expect(backoff.delay(attempt: 50, random: 0) == .seconds(1))
    }
}

@Suite struct ConfigurationTests {
    @Test func parsesURLs() throws {
        let plain = try MQTTClient.Configuration(url: "mqtt://127.0.0.1")
        #expect(plain.host == "127.0.0.1" && plain.port == 1883 && plain.tls == nil && plain.username == nil)
        let full = try MQTTClient.Configuration(url: "mqtt://alice:s%40cret@broker.local:1999")
        #expect(full.host == "broker.local" && full.port == 1999 && full.username == "alice" && full.password == "s@cret")
        let tls = try MQTTClient.Configuration(url: "mqtts://h", tls: .init(caFile: "/ca.pem"))
        #expect(tls.port == 8883 && tls.tls?.caFile == "/ca.pem")
        let system = try MQTTClient.Configuration(url: "mqtts://h")
        #expect(system.tls == MQTTClient.TLS(), "checked against the system's trust store")
    }

    /// A comma list names brokers to move between: one scheme and one set of credentials for all.
    @Test func parsesListsOfBrokers() throws {
        let list = try MQTTClient.Configuration(url: "mqtt://u:p@a:1999, mqtt://b,mqtt://u:p@c:7")
        #expect(list.host == "a" && list.port == 1999 && list.username == "u" && list.password == "p")
        #expect(list.servers.map(\.description) == ["a:1999", "b:1883", "c:7"])
        #expect(throws: MQTTError.self) { try MQTTClient.Configuration(url: "mqtt://a,mqtts://b", tls: .init(caFile: "/ca.pem")) }
        #expect(throws: MQTTError.self) { try MQTTClient.Configuration(url: "mqtt://u:p@a,mqtt://v:p@b") }
        #expect(throws: MQTTError.self) { try MQTTClient.Configuration(url: "mqtt://a,") }
        #expect(MQTTClient.Configuration.redacted("mqtt://u:p@a,mqtt://b,mqtt://u:p@c") == "mqtt://u:***@a,mqtt://b,mqtt://u:***@c")
        var config = list
        config.fallbacks.append(.init(host: "d", port: 0))
        #expect(throws: MQTTError.self) { try config.validate() }
    }

    @Test func rejectsBadURLsWithReasons() {
        #expect(throws: MQTTError.self) { try MQTTClient.Configuration(url: "http://h") }
        #expect(throws: MQTTError.self) { try MQTTClient.Configuration(url: "mqtt://") }
        #expect(throws: MQTTError.self) { try MQTTClient.Configuration(url: "mqtt://h/path") }
        #expect(throws: MQTTError.self) { try MQTTClient.Configuration(url: "mqtt://h:99999") }
        #expect(throws: MQTTError.self) { try MQTTClient.Configuration(url: "mqtt://h:0") }
        var config = MQTTClient.Configuration()
        config.keepAlive = 1
        #expect(throws: MQTTError.self) { try config.validate() }
    }
}
