import BrokerSupport
import Foundation
import Testing

@testable import MQTT

/// The connection's logic without a broker: every input is driven by hand, and continuations are
/// resumed by the effects the machine returns, as the client does.
@Suite struct ConnectionStateMachineTests {
    typealias Machine = ConnectionStateMachine
    static let backoff = Backoff(initial: .milliseconds(100), maximum: .seconds(10))

    static let h = MQTTClient.Server(host: "h", port: 1)

    func makeMachine(_ servers: [MQTTClient.Server] = [h]) -> Machine { Machine(backoff: Self.backoff, servers: servers) }

    /// A machine whose first connect succeeded.
    func connected(limits: Machine.BrokerLimits = .init()) async -> Machine {
        var machine = makeMachine()
        let result = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            let started = machine.onConnectRequested(waiter)
            #expect(started)
            machine.onSocketOpened()
            machine.onConnack(reasonCode: 0, reason: "", sessionPresent: false, limits: limits, now: .now, random: 0).resumeAll()
        }
        #expect(throws: Never.self) { try result.get() }
        return machine
    }

    func failure(_ result: Result<Void, MQTTError>) -> MQTTError? {
        if case let .failure(error) = result { return error }
        return nil
    }

    func sink(_ finished: LockedValue<Int>? = nil) -> MessageSink {
        MessageSink(deliver: { _ in true }, finish: { finished?.withLock { $0 += 1 } })
    }

    // MARK: - Connecting

    /// A failed first connect is not retried, and its caller learns why once the network thread has
    /// ended (so that the caller, not that thread, destroys the connection).
    @Test func aFailedFirstConnectIsReportedWhenTheThreadEndsAndNotRetried() async {
        var machine = makeMachine()
        let result = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            let (first, second) = (machine.onConnectRequested(waiter), machine.onConnectRequested(waiter))
            #expect(first && !second, "connect() once")
            #expect(machine.nextStep == .connect(to: 0, notBefore: nil))
            let failed = machine.onConnectFailed(.unreachable(host: "h", port: 1, detail: "refused"), now: .now, random: 0)
            #expect(failed.connectResult == nil, "not before the thread ends")
            #expect(machine.nextStep == .exit)
            machine.onStopped().resumeAll()
        }
        #expect(failure(result) == .unreachable(host: "h", port: 1, detail: "refused"))
        #expect(machine.isStopped)
    }

    /// A cancelled first connect stops the network thread and fails with `cancelled` once the thread has
    /// ended; a cancellation after CONNACK changes nothing.
    @Test func aCancelledFirstConnectFailsWhenTheThreadEnds() async {
        var machine = makeMachine()
        let result = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            _ = machine.onConnectRequested(waiter)
            machine.onSocketOpened()
            let (first, second) = (machine.onConnectCancelled(), machine.onConnectCancelled())
            #expect(first && !second, "the network thread is stopped, once")
            #expect(machine.nextStep == .exit)
            let late = machine.onConnack(reasonCode: 0, reason: "", sessionPresent: false, limits: .init(), now: .now, random: 0)
            #expect(late.connectResult == nil, "a CONNACK after the cancellation does not connect")
            machine.onStopped().resumeAll()
        }
        #expect(failure(result) == .cancelled)
        #expect(machine.isStopped)

        var connected = await connected()
        let afterConnack = connected.onConnectCancelled()
        #expect(!afterConnack && connected.isConnected)
        var idle = makeMachine()
        let beforeConnect = idle.onConnectCancelled()
        #expect(!beforeConnect, "before connect() there is nothing to stop")
    }

    @Test func aRefusedFirstConnackFailsConnect() async {
        var machine = makeMachine()
        let result = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            _ = machine.onConnectRequested(waiter)
            machine.onSocketOpened()
            #expect(machine.nextStep == .loop)
            machine.onConnack(reasonCode: 135, reason: "Not authorized", sessionPresent: false, limits: .init(), now: .now, random: 0)
                .resumeAll()
            #expect(machine.nextStep == .exit)
            machine.onStopped().resumeAll()
        }
        #expect(failure(result) == .connectionRefused(reasonCode: 135, reason: "Not authorized"))
    }

    /// A first connection that ends before CONNACK fails `connect()` with the loop's cause.
    @Test func aFirstConnectionLostBeforeConnackReportsItsCause() async {
        var machine = makeMachine()
        let result = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            _ = machine.onConnectRequested(waiter)
            machine.onSocketOpened()
            machine.onConnectionLost(reason: "r", cause: .tooManyOpenDescriptors, now: .now, random: 0).resumeAll()
            #expect(machine.nextStep == .exit)
            machine.onStopped().resumeAll()
        }
        #expect(failure(result) == .tooManyOpenDescriptors)
    }

    @Test func theFirstConnackRestoresSubscriptionsMadeBeforeIt() async throws {
        var machine = makeMachine()
        #expect(
            try machine.onSubscriptionAdded(id: 1, [TopicSubscription("a"), TopicSubscription("b", qos: .exactlyOnce)], sink: sink()) == [])
        var restored: [TopicSubscription] = []
        var events: [ConnectionEvent] = []
        let result = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            _ = machine.onConnectRequested(waiter)
            machine.onSocketOpened()
            let effects = machine.onConnack(reasonCode: 0, reason: "", sessionPresent: true, limits: .init(), now: .now, random: 0)
            (restored, events) = (effects.restore, effects.events)
            effects.resumeAll()
        }
        #expect(throws: Never.self) { try result.get() }
        #expect(restored.map(\.filter) == ["a", "b"] && restored.map(\.qos) == [.atLeastOnce, .exactlyOnce])
        #expect(events == [.connected(to: Self.h, sessionPresent: true)])
        #expect(machine.isConnected)
        #expect(try machine.onSubscriptionAdded(id: 2, [TopicSubscription("c")], sink: sink()).map(\.filter) == ["c"], "sent at once")
    }

    // MARK: - Several brokers

    static let servers = [
        MQTTClient.Server(host: "a", port: 1), MQTTClient.Server(host: "b", port: 2), MQTTClient.Server(host: "c", port: 3),
    ]

    /// A first connect with a list of brokers tries each in turn when one cannot be reached, and fails
    /// with the last one's error when none can.
    @Test func aFirstConnectTriesEveryBrokerOfItsList() async {
        var machine = makeMachine(Self.servers)
        let result = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            _ = machine.onConnectRequested(waiter)
            for (index, server) in Self.servers.enumerated() {
                #expect(machine.nextStep == .connect(to: index, notBefore: nil))
                #expect(machine.currentServer == server)
                _ = machine.onConnectFailed(.unreachable(host: server.host, port: server.port, detail: "refused"), now: .now, random: 0)
            }
            #expect(machine.nextStep == .exit)
            machine.onStopped().resumeAll()
        }
        #expect(failure(result) == .unreachable(host: "c", port: 3, detail: "refused"))
    }

    /// A broker that refuses the credentials (or the TLS handshake) ends the first connect at once: the
    /// others take the same ones. A broker that is down does not.
    @Test func aRefusalEndsTheFirstConnectWithoutTryingTheRest() async {
        var machine = makeMachine(Self.servers)
        let result = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            _ = machine.onConnectRequested(waiter)
            _ = machine.onConnectFailed(.unreachable(host: "a", port: 1, detail: "refused"), now: .now, random: 0)
            machine.onSocketOpened()
            machine.onConnack(reasonCode: 135, reason: "Not authorized", sessionPresent: false, limits: .init(), now: .now, random: 0)
                .resumeAll()
            #expect(machine.nextStep == .exit)
            machine.onStopped().resumeAll()
        }
        #expect(failure(result) == .connectionRefused(reasonCode: 135, reason: "Not authorized"))
    }

    /// After a lost connection every attempt goes to the next broker of the list, round and round, with
    /// the usual backoff; CONNACK says which broker took us.
    @Test func reconnectsMoveRoundTheList() async {
        var machine = makeMachine(Self.servers)
        _ = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            _ = machine.onConnectRequested(waiter)
            machine.onSocketOpened()
            machine.onConnack(reasonCode: 0, reason: "", sessionPresent: false, limits: .init(), now: .now, random: 0).resumeAll()
        }
        let now = ContinuousClock.now
        let lost = machine.onConnectionLost(reason: "gone", now: now, random: 0)
        #expect(lost.events == [.disconnected(reason: "gone"), .reconnecting(attempt: 1, delay: .milliseconds(50))])
        #expect(machine.nextStep == .connect(to: 1, notBefore: now + .milliseconds(50)))
        _ = machine.onConnectFailed(.notConnected, now: now, random: 0)
        #expect(machine.nextStep == .connect(to: 2, notBefore: now + .milliseconds(100)))
        _ = machine.onConnectFailed(.notConnected, now: now, random: 0)
        #expect(machine.nextStep == .connect(to: 0, notBefore: now + .milliseconds(200)), "round again")
        _ = machine.onConnectFailed(.notConnected, now: now, random: 0)
        machine.onSocketOpened()
        let back = machine.onConnack(reasonCode: 0, reason: "", sessionPresent: false, limits: .init(), now: now, random: 0)
        #expect(back.events == [.connected(to: Self.servers[1], sessionPresent: false)])
    }

    // MARK: - Reconnecting

    @Test func aLostConnectionBacksOffWithJitterAndReconnects() async {
        var machine = await connected()
        let now = ContinuousClock.now
        for random in [0.0, 0.5, 0.999] {
            var copy = machine
            let effects = copy.onConnectionLost(reason: "gone", now: now, random: random)
            guard case let .reconnecting(1, delay)? = effects.events.last else {
                Issue.record("no reconnect scheduled: \(effects.events)")
                return
            }
            #expect(effects.events.first == .disconnected(reason: "gone"))
            // Equal jitter: half of the initial delay fixed, half random.
            #expect(delay >= .milliseconds(50) && delay <= .milliseconds(100))
            #expect(copy.nextStep == .connect(to: nil, notBefore: now + delay), "mosquitto_reconnect to the one broker")
        }
        _ = machine.onConnectionLost(reason: "gone", now: now, random: 1)
        #expect(machine.generation == 1)
        #expect(!machine.isConnected)
        // Each failed attempt doubles the delay, up to the maximum.
        var delays: [Duration] = []
        for _ in 0..<10 {
            guard case let .reconnecting(_, delay)? = machine.onConnectFailed(.notConnected, now: now, random: 1).events.last else { break }
            delays.append(delay)
        }
        #expect(delays.prefix(3) == [.milliseconds(200), .milliseconds(400), .milliseconds(800)])
        #expect(delays.last == Self.backoff.maximum)
        // The socket opens, CONNACK comes: connected again, and the next loss starts from attempt 1.
        machine.onSocketOpened()
        #expect(machine.nextStep == .loop)
        let back = machine.onConnack(reasonCode: 0, reason: "", sessionPresent: false, limits: .init(), now: now, random: 0)
        #expect(back.events == [.connected(to: Self.h, sessionPresent: false)] && machine.isConnected)
        #expect(
            machine.onConnectionLost(reason: "again", now: now, random: 0).events
                == [.disconnected(reason: "again"), .reconnecting(attempt: 1, delay: .milliseconds(50))])
    }

    @Test func aRefusedReconnectWaitsTheLongestDelay() async {
        var machine = await connected()
        _ = machine.onConnectionLost(reason: "gone", now: .now, random: 0)
        machine.onSocketOpened()
        let effects = machine.onConnack(
            reasonCode: 135, reason: "Not authorized", sessionPresent: false, limits: .init(), now: .now, random: 0)
        #expect(effects.events == [.reconnecting(attempt: 2, delay: Self.backoff.maximum)])
        // The disconnect that follows a refused CONNACK does not schedule a second attempt.
        #expect(machine.onConnectionLost(reason: "closed", now: .now, random: 0).events.isEmpty)
    }

    @Test func reconnectRestoresLiveFiltersOnly() async throws {
        var machine = await connected()
        _ = try machine.onSubscriptionAdded(id: 1, [TopicSubscription("x/#")], sink: sink())
        _ = try machine.onSubscriptionAdded(id: 2, [TopicSubscription("x/#"), TopicSubscription("y")], sink: sink())
        #expect(machine.onSubscriptionRemoved(id: 1)?.unsubscribe == [], "x/# is still used by subscription 2")
        _ = machine.onConnectionLost(reason: "gone", now: .now, random: 0)
        machine.onSocketOpened()
        let effects = machine.onConnack(reasonCode: 0, reason: "", sessionPresent: false, limits: .init(), now: .now, random: 0)
        #expect(effects.restore.map(\.filter) == ["x/#", "y"])
        #expect(machine.onSubscriptionRemoved(id: 2)?.unsubscribe == ["x/#", "y"])
        #expect(machine.onSubscriptionRemoved(id: 2) == nil, "removed once")
    }

    // MARK: - Publishing

    /// A client configured without retained messages never uses them, whatever the broker announces.
    @Test func retainedMessagesTurnedOffStayOff() async {
        var machine = Machine(backoff: Self.backoff, servers: [Self.h], retainedMessages: false)
        #expect(!machine.limits.retainAvailable, "before CONNACK too")
        _ = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            _ = machine.onConnectRequested(waiter)
            machine.onSocketOpened()
            machine.onConnack(reasonCode: 0, reason: "", sessionPresent: false, limits: .init(retainAvailable: true), now: .now, random: 0)
                .resumeAll()
        }
        #expect(!machine.limits.retainAvailable)
        #expect(machine.checkPublish(qos: .atLeastOnce, retain: true, size: 10) == .failure(.retainUnavailable))
    }

    @Test func whetherAPublishMayGoOut() async {
        var machine = makeMachine()
        #expect(machine.checkPublish(qos: .atLeastOnce, retain: false, size: 10) == .failure(.notConnected))
        machine = await connected(limits: .init(retainAvailable: false, maximumPacketSize: 100))
        #expect(machine.checkPublish(qos: .atMostOnce, retain: false, size: 100) == .success(0))
        #expect(machine.checkPublish(qos: .atMostOnce, retain: true, size: 10) == .failure(.retainUnavailable))
        #expect(machine.checkPublish(qos: .atMostOnce, retain: false, size: 101) == .failure(.payloadTooLarge(size: 101, limit: 100)))
        _ = machine.onConnectionLost(reason: "gone", now: .now, random: 0)
        // While reconnecting, QoS ≥ 1 is queued for the next connection; QoS 0 is refused.
        #expect(machine.checkPublish(qos: .atMostOnce, retain: false, size: 10) == .failure(.notConnected))
        #expect(machine.checkPublish(qos: .atLeastOnce, retain: false, size: 10) == .success(1))
        #expect(
            machine.checkPublish(qos: .atLeastOnce, retain: true, size: 10) == .failure(.retainUnavailable),
            "the last CONNACK's limits hold")
        _ = await withCheckedContinuation { (waiter: Machine.StopWaiter) in
            _ = machine.onDisconnectRequested(id: 1, waiter)
            machine.onStopped().resumeAll()
        }
        #expect(machine.checkPublish(qos: .atLeastOnce, retain: false, size: 10) == .failure(.disconnected))
    }

    /// Registers a publish waiter for `mid`, runs `then` on the machine while it waits, and returns its
    /// outcome; `then` must lead the machine to resume it.
    func outcome(
        _ machine: inout Machine, mid: Int32, qos: QoS, generation: Int? = nil, cancelled: Bool = false,
        then: (inout Machine) -> [Machine.PublishOutcome] = { _ in [] }
    ) async -> Result<PublishReceipt, MQTTError> {
        await withUnsafeContinuation { continuation in
            var outcomes = machine.onPublishRegistered(
                mid: mid, qos: qos, generation: generation ?? machine.generation, cancelled: cancelled, .task(continuation))
            if outcomes.isEmpty { outcomes = then(&machine) }
            for (waiter, result) in outcomes { waiter.resume(returning: result) }
        }
    }

    @Test func aPublishIsAcknowledgedBeforeOrAfterItsSenderWaits() async {
        var machine = await connected()
        let after = await outcome(&machine, mid: 1, qos: .atLeastOnce) { machine in
            [machine.onPublishAcknowledged(mid: 1, reasonCode: 16, now: .now)].compactMap { $0 }
        }
        #expect(after.map(\.noMatchingSubscribers) == .success(true))
        #expect(machine.onPublishAcknowledged(mid: 2, reasonCode: 135, now: .now) == nil, "nobody waits yet")
        #expect(await outcome(&machine, mid: 2, qos: .atLeastOnce) == .failure(.notAuthorized(topic: "")))
    }

    @Test func aLostConnectionFailsQoS0AndKeepsQoS1Waiting() async {
        var machine = await connected()
        let qos0 = await outcome(&machine, mid: 1, qos: .atMostOnce) { machine in
            machine.onConnectionLost(reason: "gone", now: .now, random: 0).publishResults
        }
        #expect(qos0 == .failure(.connectionLost))
        // A QoS 0 publish sent on the connection that was lost fails when it registers.
        #expect(await outcome(&machine, mid: 2, qos: .atMostOnce, generation: 0) == .failure(.connectionLost))
        let qos1 = await outcome(&machine, mid: 3, qos: .atLeastOnce) { machine in
            #expect(machine.onConnectionLost(reason: "again", now: .now, random: 0).publishResults.isEmpty, "QoS 1 stays queued")
            return [machine.onPublishAcknowledged(mid: 3, reasonCode: 0, now: .now)].compactMap { $0 }
        }
        #expect(qos1.map(\.reasonCode) == .success(0))
        let stopped = await outcome(&machine, mid: 4, qos: .atLeastOnce) { machine in
            _ = machine.onDropped()
            return machine.onStopped().publishResults
        }
        #expect(stopped == .failure(.disconnected))
    }

    @Test func aHandlerLearnsWhenTheMessageLeftEvenAfterTheFact() async {
        var machine = await connected()
        let told = LockedValue<[Result<PublishReceipt, MQTTError>]>([])
        let handler = Machine.PublishWaiter.handler { result in told.withLock { $0.append(result) } }
        // Written before its sender registered: the receipt still carries the moment of the write.
        let written = ContinuousClock.now
        #expect(machine.onPublishAcknowledged(mid: 1, reasonCode: 0, now: written) == nil)
        for (waiter, result) in machine.onPublishRegistered(mid: 1, qos: .atMostOnce, generation: machine.generation, handler) {
            waiter.resume(returning: result)
        }
        #expect(told.withLock { $0 } == [.success(PublishReceipt(reasonCode: 0, completed: written))])
        // Registered first: told when the write comes.
        #expect(machine.onPublishRegistered(mid: 2, qos: .atMostOnce, generation: machine.generation, handler).isEmpty)
        let later = written + .milliseconds(3)
        machine.onPublishAcknowledged(mid: 2, reasonCode: 0, now: later).map { $0.waiter.resume(returning: $0.result) }
        #expect(told.withLock { $0.last } == .success(PublishReceipt(reasonCode: 0, completed: later)))
    }

    @Test func aCancelledSendLeavesNothingForALaterMessageWithItsID() async {
        var machine = await connected()
        // Cancelled while waiting: it fails at once; its acknowledgement, when it comes, is dropped.
        let cancelled = await outcome(&machine, mid: 5, qos: .atLeastOnce) { machine in
            [machine.onPublishCancelled(mid: 5)].compactMap { $0 }
        }
        #expect(cancelled == .failure(.cancelled))
        #expect(machine.onPublishAcknowledged(mid: 5, reasonCode: 0, now: .now) == nil)
        // Cancelled before it registered: the same.
        #expect(await outcome(&machine, mid: 7, qos: .atLeastOnce, cancelled: true) == .failure(.cancelled))
        #expect(machine.onPublishAcknowledged(mid: 7, reasonCode: 0, now: .now) == nil)
        // A later message with the same ID waits for its own acknowledgement.
        let later = await outcome(&machine, mid: 7, qos: .atLeastOnce) { machine in
            [machine.onPublishAcknowledged(mid: 7, reasonCode: 1, now: .now)].compactMap { $0 }
        }
        #expect(later.map(\.reasonCode) == .success(1))
        // A cancellation that finds nothing registered records nothing either.
        #expect(machine.onPublishCancelled(mid: 9) == nil)
    }

    // MARK: - Subscribing

    @Test func subscribeAcknowledgements() async {
        var machine = await connected()
        let (events, listener) = AsyncStream.makeStream(of: ConnectionEvent.self)
        let added = machine.onListenerAdded(listener)
        #expect(added != nil)
        // Acknowledged after, and before, its caller waits.
        let after = await withCheckedContinuation { (waiter: Machine.SubscribeWaiter) in
            #expect(machine.onSubscribeRegistered(mid: 1, waiter) == nil)
            machine.onSubscribeAcknowledged(mid: 1, codes: [1]).resumeAll()
        }
        #expect(after == .success([1]))
        machine.onSubscribeAcknowledged(mid: 2, codes: [0, 135]).resumeAll()
        let before = await withCheckedContinuation { (waiter: Machine.SubscribeWaiter) in
            if let (waiter, result) = machine.onSubscribeRegistered(mid: 2, waiter) { waiter.resume(returning: result) }
        }
        #expect(before == .success([0, 135]))
        // A SUBACK the lost connection will never bring: the caller stops waiting.
        let lost = await withCheckedContinuation { (waiter: Machine.SubscribeWaiter) in
            _ = machine.onSubscribeRegistered(mid: 3, waiter)
            machine.onConnectionLost(reason: "gone", now: .now, random: 0).resumeAll()
        }
        #expect(lost == .success([]))
        // A subscription the broker refuses to restore is announced.
        machine.onSocketOpened()
        _ = machine.onConnack(reasonCode: 0, reason: "", sessionPresent: false, limits: .init(), now: .now, random: 0)
        machine.onRestoreRegistered(mid: 4, filter: "f")
        let refused = machine.onSubscribeAcknowledged(mid: 4, codes: [135])
        #expect(refused.events == [.subscriptionRestoreFailed(filter: "f", reasonCode: 135)] && refused.listeners.count == 1)
        machine.onListenerRemoved(id: added!)
        listener.finish()
        var iterator = events.makeAsyncIterator()
        #expect(await iterator.next() == .disconnected(reason: "gone"))
    }

    @Test func messagesRouteByFilter() async throws {
        var machine = await connected()
        _ = try machine.onSubscriptionAdded(id: 1, [TopicSubscription("a/+")], sink: sink())
        #expect(machine.onMessage(topic: "a/b").count == 1)
        #expect(machine.onMessage(topic: "b/b").isEmpty)
        // Routes are remembered per topic, and forgotten when the subscriptions change.
        #expect(machine.onMessage(topic: "a/b").count == 1)
        _ = try machine.onSubscriptionAdded(id: 2, [TopicSubscription("#")], sink: sink())
        #expect(machine.onMessage(topic: "a/b").map(\.id).sorted() == [1, 2])
        #expect(machine.onMessage(topic: "b/b").map(\.id) == [2])
        _ = machine.onSubscriptionRemoved(id: 1)
        #expect(machine.onMessage(topic: "a/b").map(\.id) == [2])
        _ = machine.onSubscriptionRemoved(id: 2)
        #expect(machine.onMessage(topic: "a/b").isEmpty)
    }

    /// A subscription's retained replay (a newcomer's hundred member records) is routed like live
    /// traffic but not remembered: each of its topics comes once, and it would push live routes out.
    @Test func retainedMessagesAreRoutedButNotRemembered() async throws {
        var machine = await connected()
        _ = try machine.onSubscriptionAdded(id: 1, [TopicSubscription("a/+")], sink: sink())
        _ = machine.onMessage(topic: "a/live")
        for index in 0..<200 {
            #expect(machine.onMessage(topic: "a/\(index)", remember: false).map(\.id) == [1])
        }
        #expect(machine.routes.keys.sorted() == ["a/live"])
    }

    // MARK: - Stopping

    @Test func disconnectBeforeConnectStopsAtOnce() async {
        var machine = makeMachine()
        let finished = LockedValue(0)
        _ = try? machine.onSubscriptionAdded(id: 1, [TopicSubscription("a")], sink: sink(finished))
        let running = machine.onDropped()
        #expect(!running, "no network thread to stop")
        await withCheckedContinuation { (waiter: Machine.StopWaiter) in
            let (effects, running) = machine.onDisconnectRequested(id: 1, waiter)
            #expect(!running)
            effects.resumeAll()
        }
        #expect(machine.isStopped && finished.withLock { $0 } == 1)
        #expect(throws: MQTTError.disconnected) { try machine.onSubscriptionAdded(id: 2, [TopicSubscription("b")], sink: sink()) }
        let added = machine.onListenerAdded(AsyncStream.makeStream(of: ConnectionEvent.self).continuation)
        #expect(added == nil)
    }

    /// `disconnect()` while the first connect hangs in the kernel: after its timeout, both it and the
    /// `connect()` return; the network thread ends later on its own.
    @Test func aDisconnectThatTimesOutReleasesTheHangingConnect() async throws {
        let machine = LockedValue(makeMachine())
        let connecting = Task {
            await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
                _ = machine.withLock { $0.onConnectRequested(waiter) }
            }
        }
        try await waitUntil("connect() waits") { machine.withLock { if case .firstConnect = $0.state { true } else { false } } }
        await withCheckedContinuation { (waiter: Machine.StopWaiter) in
            let (effects, running) = machine.withLock { $0.onDisconnectRequested(id: 7, waiter) }
            #expect(running && effects.stopWaiters.isEmpty, "waits for the network thread")
            machine.withLock { $0.onDisconnectTimedOut(id: 7) }.resumeAll()
        }
        #expect(failure(await connecting.value) == .disconnected)
        let late = machine.withLock { $0.onStopped() }
        #expect(late.stopWaiters.isEmpty && late.connectResult == nil, "nobody is resumed twice")
        #expect(machine.withLock { $0.isStopped })
    }
}
