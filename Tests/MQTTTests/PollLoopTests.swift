import BrokerSupport
import Foundation
import Testing
@testable import MQTT

/// The network thread's `poll()` loop: its wake-ups, libmosquitto's wake-up pair, TLS, and descriptors
/// above `select()`'s limit of 1024.
@Suite(.timeLimit(.minutes(1))) struct PollLoopTests {
    static let wakeSources: [WakeChannel.Source] = [.silencedLibraryPairIfVerified, .ownPipeOnly]

    /// libmosquitto's wake-up pair is found, proven and silenced: it never holds a byte, however many
    /// packets are queued, and neither does our own wake-up pipe once the network thread has drained it.
    @Test func libmosquittosWakeUpPairIsProvenAndSilenced() async throws {
        #expect(WakeChannel.layoutIsVerified,
                "this libmosquitto's layout is not the proven one: clients fall back to a pipe and its pair fills")
        try await MosquittoBroker.withBroker { broker in
            let a = try await connectedClient(broker)
            let b = try await connectedClient(broker)
            #expect(a.connection.wake.silencesLibraryPair && b.connection.wake.silencesLibraryPair)
            let messages = Collector(try await b.subscribe(to: [TopicSubscription("d/#", qos: .atLeastOnce)]))
            // Far more packets than the ≈ 278 one-byte wake-ups that fill a pair nobody drains: a's come
            // from this task's publishes, b's from its network thread's own PUBACKs.
            for i in 0..<600 {
                try await a.publish(to: "d/\(i)", string: "m", qos: .atLeastOnce)
            }
            try await messages.waitForCount(600)
            #expect(unreadBytes(a.connection.wake.silencedLibraryPairReadEnd) == 0)
            #expect(unreadBytes(b.connection.wake.silencedLibraryPairReadEnd) == 0)
            try await waitUntil("both wake-up pipes are drained") {
                unreadBytes(a.connection.wake.descriptor) == 0 && unreadBytes(b.connection.wake.descriptor) == 0
            }
            await a.disconnect()
            await b.disconnect()
        }
    }

    @Test(arguments: wakeSources)
    func publishSubscribeAndStopWakeThePollAtOnce(wake: WakeChannel.Source) async throws {
        try await MosquittoBroker.withBroker { broker in
            let a = try await connectedClient(broker, wake: wake)
            let b = try await connectedClient(broker, wake: wake)
            #expect(a.connection.wake.silencesLibraryPair == (wake == .silencedLibraryPairIfVerified))
            let messages = Collector(try await b.subscribe(to: [TopicSubscription("w")]))
            // One after the other: a packet left for poll()'s one-second timeout instead of a wake-up
            // takes about a second per round trip (measured with the wake-up removed); woken at once,
            // a round trip takes well under a millisecond, plus this loop's 5 ms polling and the load of
            // the tests running in parallel. The median ignores a round trip that a busy machine stalls.
            var roundTrips: [Duration] = []
            for i in 1...20 {
                let start = ContinuousClock.now
                try await a.publish(to: "w", string: "\(i)", qos: .atMostOnce)
                try await messages.waitForCount(i)
                roundTrips.append(ContinuousClock.now - start)
            }
            #expect(roundTrips.sorted()[10] < timeBound(.milliseconds(300)), "round trips: \(roundTrips)")
            #expect(messages.elements.map { $0.string } == (1...20).map { "\($0)" })
            let stopping = ContinuousClock.now
            await a.disconnect()
            await b.disconnect()
            // Left to the timeout, disconnect() gives up waiting after two seconds.
            #expect(ContinuousClock.now - stopping < timeBound(.milliseconds(1500)))
        }
    }

    /// A publish is written by the task that makes it when the network thread is not inside libmosquitto
    /// (one thread hand-over less per message); over TLS it never is (OpenSSL's state is the network
    /// thread's). Either way every message arrives, in order.
    @Test func publishersWriteTheirOwnPacketsExceptOverTLS() async throws {
        try await MosquittoBroker.withBroker { broker in
            let a = try await connectedClient(broker)
            let b = try await connectedClient(broker)
            let messages = Collector(try await b.subscribe(to: [TopicSubscription("own/#", qos: .atLeastOnce)]))
            for i in 0..<100 {
                try await a.publish(to: "own/\(i % 2)", string: "\(i)", qos: i % 2 == 0 ? .atMostOnce : .atLeastOnce)
            }
            try await messages.waitForCount(100)
            #expect(messages.elements.map { $0.string } == (0..<100).map { "\($0)" })
            // A publish leaves its packet to the network thread only when that thread holds `io` (in the
            // middle of a read or write); on a loaded machine that may happen often, but not every one of
            // a hundred times.
            #expect(a.connection.callerWrites.load(ordering: .relaxed) > 0)
            #expect(a.connection.callerWriteFailures.load(ordering: .relaxed) == 0)
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
            #expect(client.connection.callerWrites.load(ordering: .relaxed) == 0)
            await client.disconnect()
        }
    }

    /// A publisher whose own write fails (the socket's sending side shut down: EPIPE) closes the socket on
    /// its thread, gets a typed error, and wakes the network thread, which reconnects at once rather than
    /// at `poll()`'s one-second timeout. Whoever notices first — the publisher, or the network thread
    /// reading the broker's end of the connection — the outcome is the same.
    @Test(arguments: wakeSources)
    func aPublisherWhoseWriteFailsGetsATypedErrorAndTheClientReconnects(wake: WakeChannel.Source) async throws {
        try await MosquittoBroker.withBroker { broker in
            var failuresSeenByThePublisher = 0
            for round in 0..<5 {
                let client = try await connectedClient(broker, wake: wake)
                let events = Collector(client.events())
                client.simulateWriteFailure()
                let dropped = ContinuousClock.now
                do {
                    try await client.publish(to: "gone/\(round)", string: "x", qos: .atMostOnce)
                    Issue.record("a write on a socket shut down for sending succeeded")
                } catch let error as MQTTError {
                    #expect(error == .connectionLost || error == .notConnected, "\(error)")
                }
                try await waitUntil("reconnected") {
                    events.elements.contains { if case .disconnected = $0 { true } else { false } }
                        && events.elements.last.map { if case .connected = $0 { true } else { false } } == true
                }
                #expect(ContinuousClock.now - dropped < timeBound(.milliseconds(900)))
                try await client.publish(to: "back/\(round)", string: "y", qos: .atLeastOnce)
                failuresSeenByThePublisher += client.connection.callerWriteFailures.load(ordering: .relaxed)
                await client.disconnect()
            }
            // The publisher writes at once; the broker's reaction to the half-closed socket takes a round
            // trip. On a loaded machine the network thread may still win a round, but not all five.
            #expect(failuresSeenByThePublisher > 0)
        }
    }

    /// Publishing tasks write while the network thread reads the same connection's incoming messages,
    /// and the socket is shut down under them twice. No publish hangs, each one either succeeds or
    /// throws a typed error, and every acknowledged QoS 1 message arrives.
    @Test(arguments: wakeSources)
    func concurrentPublishersSurviveTheSocketClosingUnderThem(wake: WakeChannel.Source) async throws {
        try await MosquittoBroker.withBroker { broker in
            let client = try await connectedClient(broker, wake: wake) { $0.cleanStart = false; $0.sessionExpiry = 60 }
            let watcher = try await connectedClient(broker)
            let seen = Collector(try await watcher.subscribe(to: [TopicSubscription("busy/#", qos: .atLeastOnce)]))
            let echo = Collector(try await client.subscribe(to: [TopicSubscription("busy/#", qos: .atMostOnce)]))
            let acknowledged = try await withThrowingTaskGroup(of: [String].self) { group in
                for publisher in 0..<4 {
                    group.addTask {
                        var sent: [String] = []
                        for i in 0..<150 {
                            if publisher == 0 && (i == 40 || i == 100) { client.simulateConnectionDrop() }
                            let text = "\(publisher)-\(i)"
                            do {
                                try await client.publish(to: "busy/\(publisher)", string: text, qos: i % 3 == 0 ? .atMostOnce : .atLeastOnce)
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

    /// With TLS, bytes OpenSSL decrypted already are invisible to poll(); a burst of 300 QoS 1 messages
    /// (300 PUBLISH and 300 PUBACK coming back, more wake-ups than a pair nobody drains holds) must all
    /// arrive, without a stall until the next keepalive exchange (5 s).
    @Test(arguments: wakeSources)
    func tlsBurstArrivesWhole(wake: WakeChannel.Source) async throws {
        try await withTLSBroker { broker, tls, _ in
            let client = try MQTTClient(
                configuration: .init(url: "mqtts://127.0.0.1:\(broker.port)", tls: tls), wakeSource: wake)
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

    /// The loop sends the keepalive pings itself (`mosquitto_loop_misc`, about once a second): an idle
    /// connection pings within its keepalive and stays up past 1.5 × keepalive, when the broker would
    /// drop it.
    @Test func anIdleConnectionPingsAndStaysUp() async throws {
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
    /// leaves the rest decrypted inside OpenSSL, where poll() cannot see it. The server never sends
    /// anything else, so without the loop's `SSL_pending` check those messages would never arrive.
    @Test(arguments: wakeSources)
    func packetsBufferedInsideOpenSSLAreRead(wake: WakeChannel.Source) async throws {
        try await withTestPKI { pki in
            let port = try FreePort.loopback()
            let (bannerStream, bannerContinuation) = AsyncStream<String>.makeStream()
            let banner = Collector(bannerStream)
            let server = try ChildProcess(
                "/usr/bin/env",
                ["openssl", "s_server", "-4", "-accept", "127.0.0.1:\(port)", "-naccept", "1",
                 "-cert", pki.serverCert, "-key", pki.serverKey],
                input: .pipe,
                output: .handler { chunk in
                    if chunk.isEmpty { bannerContinuation.finish() } else { bannerContinuation.yield(String(decoding: chunk, as: UTF8.self)) }
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
                configuration: .init(url: "mqtts://127.0.0.1:\(port)", tls: .init(caFile: pki.caCert)), wakeSource: wake)
            // Subscribed before connecting: the filter is live when the PUBLISH right behind CONNACK arrive.
            let messages = Collector(try await client.subscribe(to: [TopicSubscription("t", qos: .atLeastOnce)]))
            try await client.connect()
            try await messages.waitForCount(count, timeout: timeBound(.seconds(3)))
            #expect(messages.elements.map { $0.string } == (1...count).map { "m\($0)" })
            await client.abort()  // s_server answers nothing, so not even the polite disconnect's UNSUBSCRIBE
        }
    }

    /// `mosquitto_loop`'s select() failed at once for a descriptor ≥ 1024 (FD_SETSIZE), which capped a
    /// process at about 340 connections.
    @Test func aConnectionWhoseDescriptorsAreAbove1024ConnectsPublishesAndReceives() async throws {
        try await MosquittoBroker.withBroker { broker in
            let (client, fillers) = try await connectedClientAboveDescriptor(1024, broker)
            defer { fillers.forEach { close($0) } }
            #expect(client.connection.socketDescriptor >= 1024 && client.connection.wake.descriptor >= 1024)
            let peer = try await connectedClient(broker)
            let received = Collector(try await client.subscribe(to: [TopicSubscription("high/#", qos: .atLeastOnce)]))
            try await client.publish(to: "high/own", string: "0", qos: .atMostOnce)
            try await peer.publish(to: "high/peer", string: "1", qos: .atLeastOnce)
            try await client.publish(to: "high/own", string: "2", qos: .exactlyOnce)
            try await received.waitForCount(3)
            #expect(received.elements.map { $0.string } == ["0", "1", "2"])
            await client.disconnect()
            await peer.disconnect()
        }
    }
}

/// A connected client whose socket and wake-up descriptors are all ≥ `floor`, and the filler descriptors
/// that pushed them there (close them when done). Raises `RLIMIT_NOFILE` if needed; other tests running
/// in parallel may free a low descriptor in between, so it tries again until the socket lands above.
private func connectedClientAboveDescriptor(
    _ floor: Int32, _ broker: MosquittoBroker
) async throws -> (MQTTClient, [Int32]) {
    FileLimit.raise(to: Int(floor) + 1024)
    var fillers: [Int32] = []
    for _ in 0..<10 {
        fillers += try occupyFreeDescriptors(below: floor + 16)
        let client = try makeClient(broker)
        try await client.connect()
        if client.connection.socketDescriptor >= floor && client.connection.wake.descriptor >= floor {
            return (client, fillers)
        }
        await client.disconnect()
    }
    fillers.forEach { close($0) }
    throw MQTTError.library(code: -1, message: "could not get a connection above descriptor \(floor)")
}

/// Opens `/dev/null` copies (close-on-exec, so no child inherits them) on every free descriptor below
/// `floor`, so that the next descriptors this process opens are ≥ `floor`.
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
    fillers.forEach { close($0) }
    throw MQTTError.library(code: Int(errno), message: "out of descriptors below \(floor)")
}

