import BrokerSupport
import Foundation
import Testing

@testable import MQTT

/// The client against a real mosquitto started for each test.
@Suite(.timeLimit(.minutes(timeLimitMinutes(1)))) struct MQTTClientTests {
    @Test(arguments: [QoS.atMostOnce, .atLeastOnce, .exactlyOnce])
    func publishAndReceive(qos: QoS) async throws {
        try await MosquittoBroker.withBroker { broker in
            let a = try await connectedClient(broker)
            let b = try await connectedClient(broker)
            let root = broker.unique("t")
            let messages = Collector(try await b.subscribe(to: [TopicSubscription("\(root)/#", qos: qos)]))
            for i in 0..<50 {
                try await a.publish(
                    to: "\(root)/\(i % 3)", string: "m\(i)", qos: qos,
                    properties: .init(contentType: "text/plain", userProperties: [.init("k", "v\(i)")]))
            }
            try await messages.waitForCount(50)
            #expect(messages.elements.map { $0.string } == (0..<50).map { "m\($0)" })
            #expect(messages.elements.allSatisfy { $0.qos == qos && !$0.retain })
            #expect(messages.elements[7].properties.userProperties == [.init("k", "v7")])
            #expect(messages.elements[7].properties.contentType == "text/plain")
            await a.disconnect()
            await b.disconnect()
            try await waitUntil("subscription ends on disconnect") { messages.isFinished }
        }
    }

    /// A QoS 2 subscriber that falls behind — its network thread descheduled on a busy machine — keeps
    /// its connection and every message. While it lags, mosquitto 2.0.11 queues what exceeds the
    /// subscriber's receive maximum; the acknowledgement of the oldest message in flight then releases
    /// up to a receive maximum of queued messages at once, however many are still in flight. A client
    /// that announced libmosquitto's default of 20 took the 21st unacknowledged PUBLISH for a protocol
    /// error, reconnected with a clean session, and the broker dropped the rest (how
    /// `publishAndReceive(qos: .exactlyOnce)` failed under load, with 4 to 15 of its 50 messages).
    @Test func laggingQoS2SubscriberKeepsItsConnectionAndEveryMessage() async throws {
        try await MosquittoBroker.withBroker { broker in
            let publisher = try await connectedClient(broker)
            let subscriber = try await connectedClient(broker)
            let events = Collector(subscriber.events())
            let received = LockedValue<[String]>([])
            let allPublished = DispatchSemaphore(value: 0)
            // The handler runs on the subscriber's network thread: holding the gate message there stalls
            // the subscriber the way a descheduled thread does (bounded, should the test fail early).
            let subscription = try await subscriber.subscribe(
                to: [TopicSubscription("lag/#", qos: .exactlyOnce)],
                handler: { message in
                    if message.topic == "lag/gate" {
                        _ = allPublished.wait(timeout: .now() + .seconds(10))
                    } else {
                        received.withLock { $0.append(message.string ?? "") }
                    }
                })
            try await publisher.publish(to: "lag/gate", string: "", qos: .exactlyOnce)
            // Published while the subscriber stalls: the broker sends it what its window allows and queues
            // the rest, all before the gate's PUBCOMP reaches it.
            let tickets = try (0..<100).map { i in
                try publisher.enqueuePublish(to: "lag/\(i % 3)", payload: Data("m\(i)".utf8), qos: .exactlyOnce)
            }
            for ticket in tickets { _ = try await publisher.acknowledgement(of: ticket) }
            allPublished.signal()
            do {
                try await waitUntil("all 100 messages arrive") { received.withLock(\.count) >= 100 }
            } catch {
                Issue.record("received \(received.withLock(\.count)); the subscriber's events: \(events.elements)")
                throw error
            }
            #expect(received.withLock { $0 } == (0..<100).map { "m\($0)" })
            #expect(events.elements == [], "the subscriber's connection never dropped")
            subscription.unsubscribe()
            await publisher.disconnect()
            await subscriber.disconnect()
        }
    }

    @Test func retainedMessageReachesLaterSubscriberAndIsClearedByEmptyPayload() async throws {
        try await MosquittoBroker.withBroker { broker in
            let a = try await connectedClient(broker)
            try await a.publish(to: "r/state", string: "42", retain: true)
            let b = try await connectedClient(broker)
            let first = Collector(try await b.subscribe(to: [TopicSubscription("r/#")]))
            try await first.waitForCount(1)
            #expect(first.elements[0].retain && first.elements[0].string == "42")

            try await a.publish(to: "r/state", payload: Data(), retain: true)
            let c = try await connectedClient(broker)
            let probe = Collector(try await c.subscribe(to: [TopicSubscription("r/#"), TopicSubscription("done")]))
            try await a.publish(to: "done", string: "x")
            try await probe.waitForCount(1)
            #expect(probe.elements.map(\.topic) == ["done"], "a cleared retained message is not delivered")
            for client in [a, b, c] { await client.disconnect() }
        }
    }

    @Test(.needsOwnBroker("reads its log to see the child connect")) func willIsPublishedWhenAChildProcessIsKilled() async throws {
        try await MosquittoBroker.withBroker { broker in
            let watcher = try await connectedClient(broker)
            let wills = Collector(try await watcher.subscribe(to: [TopicSubscription("wills/#")]))
            let child = try ChildProcess(
                "/usr/bin/mosquitto_sub",
                [
                    "-h", "127.0.0.1", "-p", "\(broker.port)", "-t", "unused", "-i", "doomed",
                    "--will-topic", "wills/doomed", "--will-payload", "gone", "--will-qos", "1",
                ])
            try await waitUntil("child connected") { broker.logText.contains("doomed") }
            child.signal(SIGKILL)
            #expect(await child.wait(until: .after(.seconds(5))) == .signalled(SIGKILL))
            try await wills.waitForCount(1, timeout: timeBound(.seconds(2)))
            #expect(wills.elements[0].string == "gone")
            await watcher.disconnect()
        }
    }

    @Test func willIsPublishedWhenTheSocketClosesUnderTheClientButNotOnDisconnect() async throws {
        try await MosquittoBroker.withBroker { broker in
            let watcher = try await connectedClient(broker)
            let wills = Collector(try await watcher.subscribe(to: [TopicSubscription("wills/#")]))
            let will = MQTTClient.Will(topic: "wills/x", payload: Array("lost".utf8))
            let crashing = try await connectedClient(broker) { $0.will = will }
            let polite = try await connectedClient(broker) { $0.will = MQTTClient.Will(topic: "wills/polite", payload: [1]) }
            await polite.disconnect()
            crashing.connection.closeSocketAbruptly()
            try await wills.waitForCount(1)
            try await watcher.publish(to: "wills/marker", string: "end")
            try await wills.waitForCount(2)
            #expect(wills.elements.map(\.topic).prefix(2) == ["wills/x", "wills/marker"], "a clean disconnect sends no will")
            await crashing.disconnect()
            await watcher.disconnect()
        }
    }

    @Test func noLocalSuppressesOwnMessages() async throws {
        try await MosquittoBroker.withBroker { broker in
            let a = try await connectedClient(broker)
            let b = try await connectedClient(broker)
            let own = Collector(try await a.subscribe(to: [TopicSubscription("n/#", noLocal: true)]))
            try await a.publish(to: "n/1", string: "mine")
            try await b.publish(to: "n/1", string: "theirs")
            try await own.waitForCount(1)
            #expect(own.elements.map { $0.string } == ["theirs"])
            await a.disconnect()
            await b.disconnect()
        }
    }

    @Test(.needsOwnBroker("restarts it")) func reconnectsAndRestoresSubscriptionsAfterBrokerRestart() async throws {
        try await MosquittoBroker.withBroker { broker in
            let a = try await connectedClient(broker)
            let b = try await connectedClient(broker)
            let events = Collector(b.events())
            let messages = Collector(try await b.subscribe(to: [TopicSubscription("x")]))
            try await a.publish(to: "x", string: "before")
            try await messages.waitForCount(1)
            try await broker.restart()
            try await waitUntil(timeout: .seconds(10), "both reconnected") { a.isConnected && b.isConnected }
            // The restored subscription may lag the CONNACK by one round trip: publish until one arrives.
            try await waitUntil(timeout: .seconds(5), "traffic resumes") {
                try await a.publish(to: "x", string: "after")
                return messages.elements.contains { $0.string == "after" }
            }
            #expect(events.elements.contains { if case .disconnected = $0 { true } else { false } })
            #expect(events.elements.contains { if case .reconnecting = $0 { true } else { false } })
            #expect(events.elements.filter { if case .connected = $0 { true } else { false } }.count >= 1)
            await a.disconnect()
            await b.disconnect()
        }
    }

    /// A connection that drops comes back with its subscriptions, sent right behind CONNECT: on whichever
    /// broker the suite runs against (mosquitto, or an external one such as ejabberd).
    @Test func aDroppedConnectionComesBackWithItsSubscriptions() async throws {
        try await MosquittoBroker.withBroker { broker in
            let topic = "drop/\(UInt32.random(in: 0...UInt32.max))"
            let client = try await connectedClient(broker)
            let sender = try await connectedClient(broker)
            let events = Collector(client.events())
            let messages = Collector(try await client.subscribe(to: [TopicSubscription(topic, qos: .atLeastOnce)]))
            client.connection.closeSocketAbruptly()
            try await waitUntil(timeout: timeBound(.seconds(10)), "the client reconnects") {
                events.elements.contains { if case .connected = $0 { true } else { false } } && client.isConnected
            }
            try await sender.publish(to: topic, string: "after", qos: .atLeastOnce)
            try await waitUntil(timeout: timeBound(.seconds(5)), "the restored subscription delivers") {
                messages.elements.contains { $0.string == "after" }
            }
            await client.disconnect()
            await sender.disconnect()
        }
    }

    /// After a reconnect the subscriptions are restored before anything the client publishes on the new
    /// connection reaches the broker, even while CONNACK is awaited: a client's own retained messages come
    /// back live, never in the replay of its resubscription, where they would look stored before it came
    /// back (which a participant takes as proof that the broker kept its retained messages).
    @Test(.needsOwnBroker("pauses it")) func ownMessagesPublishedBeforeConnackComeBackLiveNotInTheReplay() async throws {
        try await MosquittoBroker.withBroker { broker in
            let client = try await connectedClient(broker)
            let received = Collector(try await client.subscribe(to: [TopicSubscription("own/#", qos: .atLeastOnce)]))
            // A frozen broker: the kernel still accepts the client's next socket, and its CONNACK waits.
            broker.pause()
            client.connection.closeSocketAbruptly()
            let sent = LockedValue(0)
            let seen = LockedValue<Set<String>>([])  // the connection's states, should the wait fail
            do {
                try await waitUntil(timeout: timeBound(.seconds(10)), "50 published while CONNACK is awaited") {
                    let state = client.connection.state.withLock { $0.state }
                    seen.withLock { _ = $0.insert("\(state)".prefix(40).description) }
                    guard case .reconnecting = state else { return false }
                    try sent.withLock { sent in
                        _ = try client.enqueuePublish(to: "own/\(sent)", payload: Data("x".utf8), qos: .atLeastOnce, retain: true)
                        sent += 1
                    }
                    return sent.withLock { $0 } >= 50
                }
            } catch {
                Issue.record("the connection's states meanwhile: \(seen.withLock { $0 }), \(sent.withLock { $0 }) published")
                throw error
            }
            broker.resume()
            try await waitUntil(timeout: .seconds(10), "all 50 arrive") { Set(received.elements.map(\.topic)).count == 50 }
            #expect(received.elements.filter(\.retain).map(\.topic) == [], "replayed as stored")
            await client.disconnect()
        }
    }

    @Test(.needsOwnBroker("restarts it with persistence")) func qos1PublishedWhileBrokerIsDownIsDeliveredAfterRestart() async throws {
        var config = MosquittoBroker.Configuration()
        config.persistence = true
        try await MosquittoBroker.withBroker(config) { broker in
            let persistent: (inout MQTTClient.Configuration) -> Void = {
                $0.cleanStart = false
                $0.sessionExpiry = 600
            }
            let receiver = try await connectedClient(broker, id: "receiver", persistent)
            let received = Collector(try await receiver.subscribe(to: [TopicSubscription("q/#", qos: .atLeastOnce)]))
            let sender = try await connectedClient(broker, id: "sender")
            try await sender.publish(to: "q/1", string: "one")
            try await received.waitForCount(1)
            await broker.stop()
            try await waitUntil("sender sees the outage") { !sender.isConnected }
            let pending = Task { try await sender.publish(to: "q/1", string: "two", qos: .atLeastOnce) }
            try await broker.restart()
            _ = try await pending.value
            try await received.waitForCount(2, timeout: .seconds(10))
            #expect(received.elements.map { $0.string } == ["one", "two"])
            await sender.disconnect()
            await receiver.disconnect()
        }
    }

    @Test(.needsOwnBroker("users with passwords")) func wrongPasswordIsATypedErrorAndStopsRetrying() async throws {
        var config = MosquittoBroker.Configuration()
        config.users = ["alice": "right"]
        try await MosquittoBroker.withBroker(config) { broker in
            let client = try makeClient(broker) {
                $0.username = "alice"
                $0.password = "wrong"
            }
            await #expect {
                try await client.connect()
            } throws: { error in
                guard case let .connectionRefused(code, _) = error as? MQTTError else { return false }
                return code == 134 || code == 135
            }
            try await waitUntil("network thread stopped") { client.connection.state.withLock { $0.isStopped } }
            let good = try makeClient(broker) {
                $0.username = "alice"
                $0.password = "right"
            }
            try await good.connect()
            await good.disconnect()
        }
    }

    @Test(.needsOwnBroker("kills it")) func unreachableBrokerFailsFastAndDisconnectNeverHangs() async throws {
        let closed = try ClosedPort()
        let client = try MQTTClient(configuration: .init(url: closed.url))
        await #expect(throws: MQTTError.self) { try await client.connect() }
        await client.disconnect()
        await client.disconnect()

        try await MosquittoBroker.withBroker { broker in
            let c = try await connectedClient(broker)
            broker.kill()
            try await waitUntil("client notices") { !c.isConnected }
            let start = ContinuousClock.now
            await c.disconnect()
            #expect(ContinuousClock.now - start < timeBound(.seconds(2)))
            await #expect(throws: MQTTError.disconnected) { try await c.publish(to: "a", string: "b") }
        }
    }

    /// A list of brokers: the first `connect()` goes on to the next when one is down, and reports the
    /// last failure when none answers.
    @Test func aListOfBrokersConnectsToTheFirstThatAnswers() async throws {
        let (down, alsoDown) = (try ClosedPort(), try ClosedPort())
        try await MosquittoBroker.withBroker { broker in
            let client = try MQTTClient(configuration: .init(url: "\(broker.url(port: down.port)),\(broker.url)"))
            let events = Collector(client.events())
            defer { events.cancel() }
            try await client.connect()
            try await events.waitForCount(1)
            #expect(events.elements[0] == .connected(to: .init(host: "127.0.0.1", port: Int(broker.port)), sessionPresent: false))
            await client.disconnect()
        }
        let none = try MQTTClient(configuration: .init(url: "\(down.url),\(alsoDown.url)"))
        await #expect {
            try await none.connect()
        } throws: { error in
            if case let MQTTError.unreachable(_, port, _) = error { return port == Int(alsoDown.port) }
            return false
        }
    }

    @Test(.needsOwnBroker("turns retained messages off")) func retainUnavailableIsDetected() async throws {
        var config = MosquittoBroker.Configuration()
        config.retainAvailable = false
        try await MosquittoBroker.withBroker(config) { broker in
            let client = try await connectedClient(broker)
            await #expect(throws: MQTTError.retainUnavailable) {
                try await client.publish(to: "r", string: "x", retain: true)
            }
            try await client.publish(to: "r", string: "x")
            await client.disconnect()
        }
    }

    @Test func cancellingTheConsumerUnsubscribes() async throws {
        try await MosquittoBroker.withBroker { broker in
            let a = try await connectedClient(broker)
            let b = try await connectedClient(broker)
            let messages = Collector(try await b.subscribe(to: [TopicSubscription("c")]))
            let receipt = try await a.publish(to: "c", string: "1")
            #expect(!receipt.noMatchingSubscribers)
            try await messages.waitForCount(1)
            messages.cancel()
            try await waitUntil("broker reports no subscriber") {
                try await a.publish(to: "c", string: "2").noMatchingSubscribers
            }
            try await waitUntil("the cancelled sequence ends") { messages.isFinished }

            // The scoped form unsubscribes when its body returns.
            let whileSubscribed = try await b.subscribe(to: [TopicSubscription("scoped")]) { _ in
                try await a.publish(to: "scoped", string: "1")
            }
            #expect(!whileSubscribed.noMatchingSubscribers)
            try await waitUntil("scoped subscription removed") {
                try await a.publish(to: "scoped", string: "2").noMatchingSubscribers
            }
            await a.disconnect()
            await b.disconnect()
        }
    }

    /// A client whose TLS files cannot be used is refused with a typed error, and the libmosquitto
    /// handle it had made is freed once (a second free aborts the process).
    @Test func aClientWithUnusableTLSFilesIsRefused() {
        for _ in 0..<20 {
            var configuration = MQTTClient.Configuration(host: "127.0.0.1", port: 1)
            configuration.tls = MQTTClient.TLS(caFile: "/nonexistent/ca.pem")
            #expect(throws: MQTTError.self) { _ = try MQTTClient(configuration: configuration) }
        }
    }

    @Test(.needsOwnBroker("a TLS listener")) func tlsWithGeneratedCertificatesAndWrongCA() async throws {
        try await withTLSBroker { broker, tls, pki in
            let url = "mqtts://127.0.0.1:\(broker.port)"
            let client = try MQTTClient(configuration: .init(url: url, tls: tls))
            try await client.connect()
            let echo = Collector(try await client.subscribe(to: [TopicSubscription("secure")]))
            try await client.publish(to: "secure", string: "hi")
            try await echo.waitForCount(1)
            await client.disconnect()

            let wrong = MQTTClient.TLS(caFile: pki.wrongCACert, certificateFile: pki.clientCert, keyFile: pki.clientKey)
            let impostor = try MQTTClient(configuration: .init(url: url, tls: wrong))
            await #expect {
                try await impostor.connect()
            } throws: { error in
                if case .tls = error as? MQTTError { return true }
                return false
            }
            await impostor.disconnect()
        }
    }

    @Test(.needsOwnBroker("sets a packet size limit")) func oversizedPayloadIsATypedError() async throws {
        var config = MosquittoBroker.Configuration()
        config.extraLines = ["max_packet_size 1000"]
        try await MosquittoBroker.withBroker(config) { broker in
            let client = try await connectedClient(broker)
            await #expect {
                try await client.publish(to: "big", payload: Data(count: 5_000))
            } throws: { error in
                if case .payloadTooLarge(_, 1000) = error as? MQTTError { return true }
                return false
            }
            try await client.publish(to: "small", payload: Data(count: 100))
            await client.disconnect()
        }
    }

    /// A connect to a host that never answers blocks in the kernel for minutes; disconnect() must not
    /// wait for it. The "host" is a loopback listener whose backlog is full, so further SYNs are dropped.
    @Test func disconnectReturnsWhileAConnectAttemptHangs() async throws {
        let (listener, listening) = Self.loopbackListener(backlog: 0)
        defer { close(listener) }
        var address = listening
        let length = socklen_t(MemoryLayout<sockaddr_in>.size)
        var fillers: [Int32] = []
        defer { fillers.forEach { close($0) } }
        for _ in 0..<4 {  // fill the accept queue; nothing is ever accepted
            let filler = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            _ = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(filler, $0, length) }
            }
            fillers.append(filler)
        }
        let port = Int(UInt16(bigEndian: address.sin_port))
        let client = try MQTTClient(configuration: .init(url: "mqtt://127.0.0.1:\(port)"))
        let attempt = Task { try await client.connect() }
        try await waitUntil(timeout: .seconds(1), "the network thread is connecting") {
            client.connection.state.withLock { if case .firstConnect = $0.state { true } else { false } }
        }
        let start = ContinuousClock.now
        await client.disconnect()
        // disconnect() gives the thread two seconds; the kernel would hold it for minutes. The margin is
        // for a loaded machine, where the two seconds' timer itself has come a second late.
        #expect(ContinuousClock.now - start < timeBound(.seconds(10)))
        await #expect(throws: MQTTError.self) { try await attempt.value }
    }

    /// A broker that takes the TCP connection but never answers the CONNECT (here a listener that never
    /// accepts: the kernel completes the handshake anyway) makes libmosquitto give up after the
    /// keepalive with a bare error code; connect() must say what happened and what to change.
    @Test func aBrokerThatNeverSendsConnackIsReportedAsSuch() async throws {
        let (listener, address) = Self.loopbackListener(backlog: 8)
        defer { close(listener) }
        let port = Int(UInt16(bigEndian: address.sin_port))
        let client = try MQTTClient(configuration: .init(url: "mqtt://127.0.0.1:\(port)"))  // keepAlive 5 s
        let start = ContinuousClock.now
        do {
            try await client.connect()
            Issue.record("connected to a listener that never answers")
        } catch {
            #expect(error == .noAnswer(host: "127.0.0.1", port: port, seconds: 5))
            #expect("\(error)".contains("no CONNACK within the keepalive (5 s)"), "\(error)")
        }
        #expect(ContinuousClock.now - start >= .seconds(4))
        await client.disconnect()
    }

    /// Cancelling the task that waits in connect() to a broker that never answers stops the attempt: the
    /// connect fails with `cancelled` once the network thread has ended — well before the keepalive
    /// would end it — and the client is stopped.
    @Test func cancellingAConnectStopsTheAttempt() async throws {
        let (listener, address) = Self.loopbackListener(backlog: 8)
        defer { close(listener) }
        let port = Int(UInt16(bigEndian: address.sin_port))
        var configuration = try MQTTClient.Configuration(url: "mqtt://127.0.0.1:\(port)")
        configuration.keepAlive = 60
        let client = try MQTTClient(configuration: configuration)
        let attempt = Task { try await client.connect() }
        try await waitUntil(timeout: .seconds(5), "the CONNECT waits for its CONNACK") {
            client.connection.state.withLock { if case .firstConnect(_, socketOpen: true) = $0.state { true } else { false } }
        }
        let start = ContinuousClock.now
        attempt.cancel()
        await #expect(throws: MQTTError.cancelled) { try await attempt.value }
        #expect(ContinuousClock.now - start < timeBound(.seconds(3)))
        #expect(client.connection.state.withLock { $0.isStopped }, "the network thread has ended")
    }

    /// Cancelling the task that waits for a SUBACK a frozen broker never sends ends the wait at once
    /// with `cancelled`, and the subscription is gone: a command stopped while it subscribes never hangs.
    @Test(.needsOwnBroker("freezes it")) func cancellingASubscribeEndsItsWait() async throws {
        try await MosquittoBroker.withBroker { broker in
            let client = try MQTTClient(configuration: .init(url: broker.url))
            try await client.connect()
            broker.pause()
            defer { broker.resume() }
            let subscribing = Task { try await client.subscribe(to: [TopicSubscription("frozen/#")]) }
            try await waitUntil(timeout: .seconds(5), "the SUBSCRIBE waits for its SUBACK") {
                client.connection.state.withLock { $0.liveFilters.contains { $0.filter == "frozen/#" } }
            }
            let start = ContinuousClock.now
            subscribing.cancel()
            await #expect(throws: MQTTError.cancelled) { _ = try await subscribing.value }
            #expect(ContinuousClock.now - start < timeBound(.seconds(1)))
            #expect(!client.connection.state.withLock { $0.liveFilters.contains { $0.filter == "frozen/#" } }, "unsubscribed")
            broker.resume()
            await client.disconnect()
        }
    }

    /// A connect called from a task already cancelled makes no attempt at all: no connection reaches the
    /// listener, and the client never starts.
    @Test func aConnectAlreadyCancelledMakesNoAttempt() async throws {
        let (listener, address) = Self.loopbackListener(backlog: 8)
        defer { close(listener) }
        let client = try MQTTClient(configuration: .init(url: "mqtt://127.0.0.1:\(Int(UInt16(bigEndian: address.sin_port)))"))
        let attempt = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await client.connect()
        }
        await #expect(throws: MQTTError.cancelled) { try await attempt.value }
        #expect(client.connection.state.withLock { if case .idle = $0.state { true } else { false } }, "never started")
    }

    /// A listening TCP socket on a free loopback port that never accepts, and its address.
    static func loopbackListener(backlog: Int32) -> (descriptor: Int32, address: sockaddr_in) {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        listen(listener, backlog)
        return (listener, address)
    }
}
