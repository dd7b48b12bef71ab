import BrokerSupport
import Foundation
import Testing

@testable import MQTT

/// The network thread's loop: wake-ups, a connection cut under publishers, TLS records holding many
/// packets, keepalive, and descriptors above `select()`'s limit.
@Suite(.timeLimit(.minutes(timeLimitMinutes(1)))) struct NetworkLoopTests {
    /// A packet queued by another thread is written at once (by that thread, or by the loop it wakes),
    /// and a stop request wakes the loop too.
    @Test func publishSubscribeAndStopWakeTheLoopAtOnce() async throws {
        try await MosquittoBroker.withBroker { broker in
            let a = try await connectedClient(broker)
            let b = try await connectedClient(broker)
            let messages = Collector(try await b.subscribe(to: [TopicSubscription("w")]))
            // One after the other: a packet left for the loop's one-second timeout instead of a wake-up
            // takes about a second per round trip (measured with the wake-up removed); woken at once,
            // a round trip takes well under a millisecond, plus this loop's 5 ms polling and the load of
            // the tests running in parallel. The median ignores a round trip that a busy machine stalls.
            // Under a sanitizer, with the whole suite starting at once, even the fastest of the 20 can take
            // a third of a second: there only the plain run tells the two apart (``judgesTimings``).
            var roundTrips: [Duration] = []
            for i in 1...20 {
                let start = ContinuousClock.now
                try await a.publish(to: "w", string: "\(i)", qos: .atMostOnce)
                try await messages.waitForCount(i)
                roundTrips.append(ContinuousClock.now - start)
            }
            #expect(roundTrips.sorted()[10] < .milliseconds(300) || !judgesTimings, "round trips: \(roundTrips)")
            #expect(messages.elements.map { $0.string } == (1...20).map { "\($0)" })
            let stopping = ContinuousClock.now
            await a.disconnect()
            await b.disconnect()
            // Left to the timeout, disconnect() gives up waiting after two seconds.
            #expect(ContinuousClock.now - stopping < timeBound(.milliseconds(1500)))
        }
    }

    /// Messages of mixed QoS arrive in the order they were published, over TCP and over TLS.
    @Test(.needsOwnBroker("a TLS listener")) func mixedQoSPublishesArriveInOrderOverTCPAndTLS() async throws {
        try await MosquittoBroker.withBroker { broker in
            let a = try await connectedClient(broker)
            let b = try await connectedClient(broker)
            let messages = Collector(try await b.subscribe(to: [TopicSubscription("own/#", qos: .atLeastOnce)]))
            for i in 0..<100 {
                try await a.publish(to: "own/\(i % 2)", string: "\(i)", qos: i % 2 == 0 ? .atMostOnce : .atLeastOnce)
            }
            try await messages.waitForCount(100)
            #expect(messages.elements.map { $0.string } == (0..<100).map { "\($0)" })
            await a.disconnect()
            await b.disconnect()
        }
        try await withTLSBroker { broker, tls, _ in
            let client = try MQTTClient(configuration: .init(url: "mqtts://127.0.0.1:\(broker.port)", tls: tls))
            try await client.connect()
            let echo = Collector(try await client.subscribe(to: [TopicSubscription("tls/#", qos: .atLeastOnce)]))
            for i in 0..<20 { try await client.publish(to: "tls/\(i)", string: "\(i)", qos: i % 2 == 0 ? .atMostOnce : .atLeastOnce) }
            try await echo.waitForCount(20)
            #expect(echo.elements.map { $0.string } == (0..<20).map { "\($0)" })
            await client.disconnect()
        }
    }

    /// Publishing tasks write while the network thread reads the same connection's incoming messages,
    /// and the socket is shut down under them twice. No publish hangs, each one either succeeds or
    /// throws a typed error, and every acknowledged QoS 1 message arrives.
    @Test func concurrentPublishersSurviveTheSocketClosingUnderThem() async throws {
        try await MosquittoBroker.withBroker { broker in
            let client = try await connectedClient(broker) {
                $0.cleanStart = false
                $0.sessionExpiry = 60
            }
            let watcher = try await connectedClient(broker)
            let seen = Collector(try await watcher.subscribe(to: [TopicSubscription("busy/#", qos: .atLeastOnce)]))
            let echo = Collector(try await client.subscribe(to: [TopicSubscription("busy/#", qos: .atMostOnce)]))
            let acknowledged = try await withThrowingTaskGroup(of: [String].self) { group in
                for publisher in 0..<4 {
                    group.addTask {
                        var sent: [String] = []
                        for i in 0..<150 {
                            if publisher == 0 && (i == 40 || i == 100) { client.connection.closeSocketAbruptly() }
                            let text = "\(publisher)-\(i)"
                            do {
                                try await client.publish(
                                    to: "busy/\(publisher)", string: text, qos: i % 3 == 0 ? .atMostOnce : .atLeastOnce)
                                if i % 3 != 0 { sent.append(text) }
                            } catch let error as MQTTError {
                                switch error {
                                case .connectionLost, .notConnected: break
                                default: throw error
                                }
                            }
                        }
                        return sent
                    }
                }
                return try await group.reduce(into: [String]()) { $0 += $1 }
            }
            #expect(acknowledged.count > 300)
            try await waitUntil(timeout: timeBound(.seconds(10)), "every acknowledged message seen") {
                Set(acknowledged).isSubset(of: Set(seen.elements.map { $0.string }))
            }
            #expect(client.isConnected && echo.count > 0)
            await client.disconnect()
            await watcher.disconnect()
        }
    }

    /// With TLS, bytes OpenSSL decrypted already are invisible to select(); a burst of 300 QoS 1 messages
    /// (300 PUBLISH and 300 PUBACK coming back, more wake-ups than libmosquitto's socket pair holds) must
    /// all arrive, without a stall until the next keepalive exchange (5 s).
    @Test(.needsOwnBroker("a TLS listener")) func tlsBurstArrivesWhole() async throws {
        try await withTLSBroker { broker, tls, _ in
            let client = try MQTTClient(configuration: .init(url: "mqtts://127.0.0.1:\(broker.port)", tls: tls))
            try await client.connect()
            let echo = Collector(try await client.subscribe(to: [TopicSubscription("burst/#", qos: .atLeastOnce)]))
            let start = ContinuousClock.now
            let tickets = try (0..<300).map { i in
                try client.enqueuePublish(to: "burst/\(i)", payload: Data("m\(i)".utf8), qos: .atLeastOnce)
            }
            for ticket in tickets { _ = try await client.acknowledgement(of: ticket) }
            try await echo.waitForCount(300)
            #expect(ContinuousClock.now - start < timeBound(.seconds(5)))
            #expect(echo.elements.map { $0.string } == (0..<300).map { "m\($0)" })
            await client.disconnect()
        }
    }

    /// Every turn of the loop ends with libmosquitto's keepalive check (at least once a second): an idle
    /// connection pings within its keepalive and stays up past 1.5 × keepalive, when the broker would
    /// drop it.
    @Test(.needsOwnBroker("reads its debug log for the pings")) func anIdleConnectionPingsAndStaysUp() async throws {
        var config = MosquittoBroker.Configuration()
        config.extraLines = ["log_type debug"]  // logs "Received PINGREQ from <client>"
        try await MosquittoBroker.withBroker(config) { broker in
            let id = MQTTClient.Configuration.randomClientID()
            let client = try await connectedClient(broker, id: id) { $0.keepAlive = 5 }
            let events = Collector(client.events())
            try await waitUntil(timeout: .seconds(15), "two PINGREQs") {
                broker.logText.components(separatedBy: "Received PINGREQ from \(id)").count > 2  // two or more
            }
            #expect(client.isConnected)
            #expect(!events.elements.contains { if case .disconnected = $0 { true } else { false } })
            await client.disconnect()
        }
    }

    /// A broker may put several packets in one TLS record (mosquitto does not, so `openssl s_server`
    /// plays the broker: whatever it reads from its standard input in one go it sends as one record).
    /// Here CONNACK and 400 QoS 1 PUBLISH come in one record: replying with 400 PUBACKs fills
    /// libmosquitto's wake-up pair within one `mosquitto_loop_read`, whose early stop on EAGAIN then
    /// leaves the rest decrypted inside OpenSSL, where select() cannot see it. The server never sends
    /// anything else, so without the loop's extra read over TLS those messages would never arrive.
    @Test func packetsBufferedInsideOpenSSLAreRead() async throws {
        try await withTestPKI { pki in
            let port = try FreePort.loopback()
            let (bannerStream, bannerContinuation) = AsyncStream<String>.makeStream()
            let banner = Collector(bannerStream)
            let server = try ChildProcess(
                "/usr/bin/env",
                [
                    "openssl", "s_server", "-4", "-accept", "127.0.0.1:\(port)", "-naccept", "1",
                    "-cert", pki.serverCert, "-key", pki.serverKey,
                ],
                input: .pipe,
                output: .handler { chunk in
                    if chunk.isEmpty {
                        bannerContinuation.finish()
                    } else {
                        bannerContinuation.yield(String(decoding: chunk, as: UTF8.self))
                    }
                })
            defer { server.signal(SIGTERM) }
            try await waitUntil("s_server listens") { banner.elements.joined().contains("ACCEPT") }
            // Written before the client connects, read by s_server in one go once it has: one TLS record.
            let count = 400
            var script: [UInt8] = [0x20, 0x03, 0x00, 0x00, 0x00]  // CONNACK, MQTT 5, success, no properties
            for i in 1...count {
                let payload = Array("m\(i)".utf8)
                let body: [UInt8] = [0x00, 0x01, UInt8(ascii: "t"), UInt8(i >> 8), UInt8(i & 0xFF), 0x00] + payload
                script += [0x32, UInt8(body.count)] + body  // PUBLISH, QoS 1, topic "t", packet ID i
            }
            server.write(script)
            let client = try MQTTClient(
                configuration: .init(url: "mqtts://127.0.0.1:\(port)", tls: .init(caFile: pki.caCert)))
            // Subscribed before connecting: the filter is live when the PUBLISH right behind CONNACK arrive.
            let messages = Collector(try await client.subscribe(to: [TopicSubscription("t", qos: .atLeastOnce)]))
            try await client.connect()
            try await messages.waitForCount(count, timeout: timeBound(.seconds(3)))
            #expect(messages.elements.map { $0.string } == (1...count).map { "m\($0)" })
            await client.abort()  // s_server answers nothing, so not even the polite disconnect's UNSUBSCRIBE
        }
    }

    /// The loop waits with `poll()`, so a connection whose descriptors are all above 1024 (where
    /// `select()` stops) works like any other; and a process out of descriptors gets a typed error that
    /// says what to do. Run in a child process of this test binary: filling the descriptors here would
    /// starve the tests running in parallel.
    @Test func connectionsAbove1024DescriptorsWorkAndRunningOutIsATypedError() async throws {
        let output = LockedValue<[UInt8]>([])
        var environment = ProcessInfo.processInfo.environment
        environment[Self.childVariable] = "1"
        let child = try ChildProcess(
            try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"),
            ["--testing-library", "swift-testing", "--filter", "NetworkLoopTests/descriptorsInAChildProcess"],
            environment: environment, output: .handler { chunk in output.withLock { $0 += chunk } },
            errors: .handler { chunk in output.withLock { $0 += chunk } })
        let termination = await child.wait(until: .after(.seconds(30)))
        let text = output.withLock { String(decoding: $0, as: UTF8.self) }
        #expect(termination == .exited(0), "\(text)")
        #expect(text.contains("descriptorsInAChildProcess() passed"), "\(text)")
    }

    static let childVariable = "MQTT_TESTS_DESCRIPTOR_LIMIT_CHILD"

    @Test(.enabled(if: ProcessInfo.processInfo.environment[childVariable] != nil))
    func descriptorsInAChildProcess() async throws {
        FileLimit.raise(to: 2048)
        try await MosquittoBroker.withBroker { broker in
            let fillers = try occupyFreeDescriptors(below: 1024)
            defer { fillers.forEach { close($0) } }
            let a = try await connectedClient(broker)
            let b = try await connectedClient(broker)
            let messages = Collector(try await b.subscribe(to: [TopicSubscription("high", qos: .atLeastOnce)]))
            try await a.publish(to: "high", string: "above 1024", qos: .atLeastOnce)
            try await messages.waitForCount(1)
            #expect(messages.elements.map { $0.string } == ["above 1024"])
            await a.disconnect()
            await b.disconnect()

            let rest = try occupyFreeDescriptors(below: Int32.max)
            defer { rest.forEach { close($0) } }
            do throws(MQTTError) {
                _ = try MQTTClient(configuration: .init(url: "mqtt://127.0.0.1:\(broker.port)"))
                Issue.record("a client was made without a free descriptor")
            } catch {
                #expect(error == .tooManyOpenDescriptors)
                #expect(error.description.contains("ulimit -n"))
            }
        }
    }
}

/// Opens `/dev/null` copies (close-on-exec, so no child inherits them) on every free descriptor below
/// `floor` (or on every free one), so that the next descriptors this process opens are ≥ `floor`.
private func occupyFreeDescriptors(below floor: Int32) throws -> [Int32] {
    let null = open("/dev/null", O_RDONLY | O_CLOEXEC)
    guard null >= 0 else { throw MQTTError.library(code: Int(errno), message: "open /dev/null") }
    var fillers = [null]
    while case let copy = fcntl(null, F_DUPFD_CLOEXEC, 0), copy >= 0 {
        if copy >= floor {
            close(copy)
            return fillers
        }
        fillers.append(copy)
    }
    if floor == Int32.max { return fillers }
    fillers.forEach { close($0) }
    throw MQTTError.library(code: Int(errno), message: "out of descriptors below \(floor)")
}
