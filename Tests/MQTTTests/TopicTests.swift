import Testing
@testable import MQTT

@Suite struct TopicTests {
    @Test(arguments: [
        ("a/b/c", "a/b/c", true), ("a/b/c", "a/+/c", true), ("a/b/c", "a/#", true), ("a", "a/#", true),
        ("a/b", "#", true), ("a/b/c", "a/+", false), ("a/b", "a/b/c", false), ("$SYS/x", "#", false),
        ("$SYS/x", "+/x", false), ("$SYS/x", "$SYS/#", true), ("a//b", "a/+/b", true), ("/a", "+/a", true),
        ("groupsync/v1/g/s/1/msg/all/p", "groupsync/v1/g/s/1/msg/all/+", true),
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
            let name = (0..<Int.random(in: 1...4, using: &generator)).map { _ in levels.randomElement(using: &generator)! }.joined(separator: "/")
            var filterLevels = (0..<Int.random(in: 1...4, using: &generator)).map { _ in (levels + ["+", "+"]).randomElement(using: &generator)! }
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
    }

    @Test func rejectsBadURLsWithReasons() {
        #expect(throws: MQTTError.self) { try MQTTClient.Configuration(url: "http://h") }
        #expect(throws: MQTTError.self) { try MQTTClient.Configuration(url: "mqtt://") }
        #expect(throws: MQTTError.self) { try MQTTClient.Configuration(url: "mqtts://h") }
        #expect(throws: MQTTError.self) { try MQTTClient.Configuration(url: "mqtt://h/path") }
        var config = MQTTClient.Configuration()
        config.keepAlive = 1
        #expect(throws: MQTTError.self) { try config.validate() }
    }
}

@Suite struct ConnectionStateMachineTests {
    typealias Machine = ConnectionStateMachine

    func connected() -> Machine {
        var machine = Machine(backoff: Backoff(), host: "h", port: 1)
        _ = machine.onConnack(reasonCode: 0, reason: "", sessionPresent: false, limits: .init(), now: .now, random: 0)
        return machine
    }

    @Test func firstConnectFailureStopsWithoutRetry() {
        var machine = Machine(backoff: Backoff(), host: "h", port: 1)
        #expect(machine.nextStep == .connect(first: true, notBefore: nil))
        // No waiter registered: behaves as a reconnect; with one, it stops.
        _ = machine.onConnectFailed(.unreachable(host: "h", port: 1, detail: "refused"), now: .now, random: 0)
        #expect(machine.phase == .backingOff)
    }

    @Test func lostConnectionSchedulesBackoffAndReportsEvents() {
        var machine = connected()
        let now = ContinuousClock.now
        let effects = machine.onConnectionLost(reason: "gone", now: now, random: 0)
        #expect(machine.phase == .backingOff)
        #expect(effects.events == [.disconnected(reason: "gone"), .reconnecting(attempt: 1, delay: .milliseconds(50))])
        #expect(machine.nextStep == .connect(first: false, notBefore: now + .milliseconds(50)))
        #expect(machine.generation == 1)
    }

    @Test func refusedReconnectWaitsTheLongestDelay() {
        var machine = connected()
        _ = machine.onConnectionLost(reason: "gone", now: .now, random: 0)
        machine.onSocketOpened()
        let effects = machine.onConnack(reasonCode: 135, reason: "Not authorized", sessionPresent: false, limits: .init(), now: .now, random: 0)
        #expect(effects.events == [.reconnecting(attempt: 2, delay: Backoff().maximum)])
        // The disconnect that follows a refused CONNACK does not schedule a second attempt.
        let after = machine.onConnectionLost(reason: "closed", now: .now, random: 0)
        #expect(after.events.isEmpty)
    }

    @Test func reconnectRestoresLiveFiltersOnly() {
        var machine = connected()
        let (_, a) = AsyncStream.makeStream(of: MQTTMessage.self)
        let (_, b) = AsyncStream.makeStream(of: MQTTMessage.self)
        _ = try? machine.onSubscriptionAdded(id: 1, [TopicSubscription("x/#")], sink: .stream(a))
        _ = try? machine.onSubscriptionAdded(id: 2, [TopicSubscription("x/#"), TopicSubscription("y")], sink: .stream(b))
        let removed = machine.onSubscriptionRemoved(id: 1)
        #expect(removed.unsubscribe.isEmpty, "x/# is still used by subscription 2")
        _ = machine.onConnectionLost(reason: "gone", now: .now, random: 0)
        let effects = machine.onConnack(reasonCode: 0, reason: "", sessionPresent: false, limits: .init(), now: .now, random: 0)
        #expect(effects.subscribe.map(\.filter) == ["x/#", "y"])
        #expect(machine.onSubscriptionRemoved(id: 2).unsubscribe.sorted() == ["x/#", "y"])
    }

    @Test func messagesRouteByFilter() {
        var machine = connected()
        let (_, a) = AsyncStream.makeStream(of: MQTTMessage.self)
        _ = try? machine.onSubscriptionAdded(id: 1, [TopicSubscription("a/+")], sink: .stream(a))
        #expect(machine.onMessage(topic: "a/b").count == 1)
        #expect(machine.onMessage(topic: "b/b").isEmpty)
        // Routes are remembered per topic, and forgotten when the subscriptions change.
        #expect(machine.onMessage(topic: "a/b").count == 1)
        let (_, b) = AsyncStream.makeStream(of: MQTTMessage.self)
        _ = try? machine.onSubscriptionAdded(id: 2, [TopicSubscription("#")], sink: .stream(b))
        #expect(machine.onMessage(topic: "a/b").map(\.id).sorted() == [1, 2])
        #expect(machine.onMessage(topic: "b/b").map(\.id) == [2])
        _ = machine.onSubscriptionRemoved(id: 1)
        #expect(machine.onMessage(topic: "a/b").map(\.id) == [2])
        _ = machine.onSubscriptionRemoved(id: 2)
        #expect(machine.onMessage(topic: "a/b").isEmpty)
    }

    /// A subscription's retained replay (a newcomer's hundred member records) is routed like live
    /// traffic but not remembered: each of its topics comes once, and it would push live routes out.
    @Test func retainedMessagesAreRoutedButNotRemembered() {
        var machine = connected()
        let (_, a) = AsyncStream.makeStream(of: MQTTMessage.self)
        _ = try? machine.onSubscriptionAdded(id: 1, [TopicSubscription("a/+")], sink: .stream(a))
        _ = machine.onMessage(topic: "a/live")
        for index in 0..<200 {
            #expect(machine.onMessage(topic: "a/\(index)", remember: false).map(\.id) == [1])
        }
        #expect(machine.routes.keys.sorted() == ["a/live"])
    }

    /// The outcome a registered publish waiter is resumed with.
    func outcome(
        _ machine: inout Machine, mid: Int32, qos: QoS, cancelled: Bool = false
    ) async -> (Result<PublishReceipt, MQTTError>?, Machine) {
        var copy = machine
        let result = await withUnsafeContinuation { (waiter: Machine.PublishWaiter) in
            let effects = copy.onPublishRegistered(mid: mid, qos: qos, generation: copy.generation, cancelled: cancelled, waiter)
            if effects.publishResults.isEmpty {
                waiter.resume(returning: .failure(.notConnected))  // still waiting: stands for "no outcome yet"
            } else {
                effects.resumeAll()
            }
        }
        if case .failure(.notConnected) = result { return (nil, copy) }
        return (result, copy)
    }

    @Test func aSendCancelledBeforeItWaitsLeavesNothingForALaterMessageWithItsID() async {
        var machine = connected()
        // The task was cancelled before it registered: it fails at once, and the acknowledgement, when it
        // comes, is dropped instead of being kept for whoever reuses the ID.
        var (result, next) = await outcome(&machine, mid: 7, qos: .atLeastOnce, cancelled: true)
        guard case .failure(.cancelled)? = result else { Issue.record("expected cancelled, got \(String(describing: result))"); return }
        machine = next
        #expect(machine.onPublishAcknowledged(mid: 7, reasonCode: 0, topic: "t").publishResults.isEmpty)
        // A later message with the same ID waits for its own acknowledgement.
        (result, next) = await outcome(&machine, mid: 7, qos: .atLeastOnce)
        #expect(result == nil, "a later message must not inherit the earlier acknowledgement")
        machine = next
        // A cancellation that finds nothing registered records nothing either.
        #expect(machine.onPublishCancelled(mid: 9).publishResults.isEmpty)
        (result, _) = await outcome(&machine, mid: 9, qos: .atLeastOnce)
        #expect(result == nil, "no stale cancellation for the next message with ID 9")
    }

}
