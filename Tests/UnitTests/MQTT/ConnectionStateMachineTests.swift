import BrokerSupport
import Foundation
import Testing

@testable import MQTT

/// An effect as the tests compare it: continuations, sinks and listeners are not Equatable, so a
/// resumption shows its result, a sink its ID, listeners their count.
enum Kind: Equatable {
    enum Connect: Equatable {
        case success
        case failure(MQTTError)
    }
    case resumeConnect(Connect)
    case resumePublish(Result<PublishReceipt, MQTTError>)
    case resumeSubscribe(Result<[Int], MQTTError>)
    case resumeStop
    case announce(ConnectionEvent)
    case tellConnected(sink: UInt64, sessionPresent: Bool)
    case restore(TopicSubscription)
    case deliver(topic: String, sinks: [UInt64])
    case endBurst(UInt64)
    case finishSubscription(UInt64)
    case finishListeners(Int)
    case startNetworkThread
    case stopNetworkThread(ConnectionStateMachine.Stop)
    case unsubscribe([String])
    case reply(ConnectionStateMachine.Reply)
}

extension ConnectionStateMachine.Effect {
    var kind: Kind {
        switch self {
        case let .resumeConnect(_, .failure(error)): .resumeConnect(.failure(error))
        case .resumeConnect(_, .success): .resumeConnect(.success)
        case let .resumePublish(_, result): .resumePublish(result)
        case let .resumeSubscribe(_, result): .resumeSubscribe(result)
        case .resumeStop: .resumeStop
        case let .announce(event, _): .announce(event)
        case let .tellConnected(sink, sessionPresent): .tellConnected(sink: sink.id, sessionPresent: sessionPresent)
        case let .restore(request): .restore(request)
        case let .deliver(message, sinks): .deliver(topic: message.topic, sinks: sinks.map(\.id).sorted())
        case let .endBurst(sink): .endBurst(sink.id)
        case let .finishSubscription(sink): .finishSubscription(sink.id)
        case let .finishListeners(listeners): .finishListeners(listeners.count)
        case .startNetworkThread: .startNetworkThread
        case let .stopNetworkThread(stop): .stopNetworkThread(stop)
        case let .unsubscribe(filters): .unsubscribe(filters)
        case let .reply(reply): .reply(reply)
        }
    }
}

/// Runs `action` as the connection does, but only what needs no connection (resumes, yields, finishes):
/// there is no network thread here. Returns what it asked for.
func run(_ action: ConnectionStateMachine.Action) -> [Kind] {
    let local = action.filter {
        switch $0 {
        case .restore, .deliver, .endBurst, .startNetworkThread, .stopNetworkThread, .unsubscribe: false
        default: true
        }
    }
    MosquittoConnection.perform(local, on: nil)
    return action.map(\.kind)
}

/// The connection's logic without a broker: every input is driven by hand, every action it returns is
/// checked, and continuations are resumed by running it, as the client does.
@Suite struct ConnectionStateMachineTests {
    typealias Machine = ConnectionStateMachine
    static let backoff = Backoff(initial: .milliseconds(100), maximum: .seconds(10))

    static let h = MQTTClient.Server(host: "h", port: 1)

    func makeMachine(_ servers: [MQTTClient.Server] = [h]) -> Machine { Machine(backoff: Self.backoff, servers: servers) }

    /// A machine whose first connect succeeded.
    func connected(limits: Machine.BrokerLimits = .init()) async -> Machine {
        var machine = makeMachine()
        let result = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            #expect(run(machine.onConnectRequested(waiter)) == [.startNetworkThread])
            #expect(run(machine.onSocketOpened(restored: [])) == [])
            #expect(
                run(machine.onConnack(reasonCode: 0, reason: "", sessionPresent: false, limits: limits, now: .now, random: 0))
                    == [.resumeConnect(.success), .announce(.connected(to: Self.h, sessionPresent: false))])
        }
        #expect(throws: Never.self) { try result.get() }
        return machine
    }

    func failure(_ result: Result<Void, MQTTError>) -> MQTTError? {
        if case let .failure(error) = result { return error }
        return nil
    }

    func sink(_ finished: LockedValue<Int>? = nil, connected: (@Sendable (Bool) -> Void)? = nil) -> MessageSink {
        MessageSink(deliver: { _ in true }, finish: { finished?.withLock { $0 += 1 } }, connected: connected)
    }

    func message(_ topic: String, retain: Bool = false) -> MQTTMessage { MQTTMessage(topic: topic, payload: Data(), retain: retain) }

    // MARK: - Connecting

    /// A failed first connect is not retried, and its caller learns why once the network thread has
    /// ended (so that the caller, not that thread, destroys the connection).
    @Test func aFailedFirstConnectIsReportedWhenTheThreadEndsAndNotRetried() async {
        var machine = makeMachine()
        let result = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            #expect(run(machine.onConnectRequested(waiter)) == [.startNetworkThread])
            // Not run: it would resume the same continuation twice.
            #expect(
                machine.onConnectRequested(waiter).map(\.kind)
                    == [.resumeConnect(.failure(.invalidConfiguration("connect() was already called on this client")))], "connect() once")
            #expect(machine.nextStep == .connect(to: 0, notBefore: nil))
            let failed = machine.onConnectFailed(.unreachable(host: "h", port: 1, detail: "refused"), now: .now, random: 0)
            #expect(run(failed) == [], "not before the thread ends")
            #expect(machine.nextStep == .exit)
            #expect(
                run(machine.onStopped()) == [
                    .resumeConnect(.failure(.unreachable(host: "h", port: 1, detail: "refused"))), .finishListeners(0),
                ])
        }
        #expect(failure(result) == .unreachable(host: "h", port: 1, detail: "refused"))
        #expect(machine.isStopped)
    }

    /// A cancelled first connect stops the network thread and fails with `cancelled` once the thread has
    /// ended; a cancellation after CONNACK changes nothing.
    @Test func aCancelledFirstConnectFailsWhenTheThreadEnds() async {
        var machine = makeMachine()
        let result = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            #expect(run(machine.onConnectRequested(waiter)) == [.startNetworkThread])
            #expect(run(machine.onSocketOpened(restored: [])) == [])
            #expect(run(machine.onConnectCancelled()) == [.stopNetworkThread(.disconnect)], "the network thread is stopped")
            #expect(run(machine.onConnectCancelled()) == [], "once")
            #expect(machine.nextStep == .exit)
            let late = machine.onConnack(reasonCode: 0, reason: "", sessionPresent: false, limits: .init(), now: .now, random: 0)
            #expect(run(late) == [], "a CONNACK after the cancellation does not connect")
            #expect(run(machine.onStopped()) == [.resumeConnect(.failure(.cancelled)), .finishListeners(0)])
        }
        #expect(failure(result) == .cancelled)
        #expect(machine.isStopped)

        var connected = await connected()
        #expect(run(connected.onConnectCancelled()) == [])
        #expect(connected.isConnected)
        var idle = makeMachine()
        #expect(run(idle.onConnectCancelled()) == [], "before connect() there is nothing to stop")
    }

    /// `connect()` from a task cancelled before the attempt existed: the network thread starts, exits at
    /// once, and the connect fails with `cancelled` when it has ended.
    @Test func aConnectCancelledBeforeItStartedFailsWhenTheThreadEnds() async {
        var machine = makeMachine()
        let result = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            #expect(run(machine.onConnectRequested(waiter, cancelled: true)) == [.startNetworkThread])
            #expect(machine.nextStep == .exit, "no attempt")
            #expect(run(machine.onStopped()) == [.resumeConnect(.failure(.cancelled)), .finishListeners(0)])
        }
        #expect(failure(result) == .cancelled)
    }

    @Test func aRefusedFirstConnackFailsConnect() async {
        var machine = makeMachine()
        let result = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            #expect(run(machine.onConnectRequested(waiter)) == [.startNetworkThread])
            #expect(run(machine.onSocketOpened(restored: [])) == [])
            #expect(machine.nextStep == .loop)
            let refused = machine.onConnack(
                reasonCode: 135, reason: "Not authorized", sessionPresent: false, limits: .init(), now: .now, random: 0)
            #expect(run(refused) == [], "told when the thread has ended")
            #expect(machine.nextStep == .exit)
            #expect(
                run(machine.onStopped()) == [
                    .resumeConnect(.failure(.connectionRefused(reasonCode: 135, reason: "Not authorized"))), .finishListeners(0),
                ])
        }
        #expect(failure(result) == .connectionRefused(reasonCode: 135, reason: "Not authorized"))
    }

    /// A first connection that ends before CONNACK fails `connect()` with the loop's cause.
    @Test func aFirstConnectionLostBeforeConnackReportsItsCause() async {
        var machine = makeMachine()
        let result = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            #expect(run(machine.onConnectRequested(waiter)) == [.startNetworkThread])
            #expect(run(machine.onSocketOpened(restored: [])) == [])
            #expect(run(machine.onConnectionLost(reason: "r", cause: .tooManyOpenDescriptors, now: .now, random: 0)) == [])
            #expect(machine.nextStep == .exit)
            #expect(run(machine.onStopped()) == [.resumeConnect(.failure(.tooManyOpenDescriptors)), .finishListeners(0)])
        }
        #expect(failure(result) == .tooManyOpenDescriptors)
    }

    /// Subscriptions made before the socket opens are sent as soon as it is, right behind CONNECT (by the
    /// connect step, or by the machine for one made meanwhile), and one made while CONNACK is awaited at
    /// once; CONNACK tells them of the connection before `connect()`
    /// returns and `.connected` is announced.
    @Test func theFirstSocketRestoresSubscriptionsMadeBeforeIt() async throws {
        var machine = makeMachine()
        let told = LockedValue<[Bool]>([])
        let a = TopicSubscription("a"), b = TopicSubscription("b", qos: .exactlyOnce), d = TopicSubscription("d")
        let added = machine.onSubscriptionAdded(id: 1, [a, b], sink: sink { present in told.withLock { $0.append(present) } })
        #expect(run(added) == [.reply(.subscribe([]))], "sent once the socket is open")
        let result = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            #expect(run(machine.onConnectRequested(waiter)) == [.startNetworkThread])
            #expect(run(machine.onSocketOpened(restored: [a])) == [.restore(b)], "b was added after the connect step read them")
            #expect(run(machine.onSubscriptionAdded(id: 3, [d], sink: sink())) == [.reply(.subscribe([d]))], "CONNACK awaited")
            #expect(
                run(machine.onConnack(reasonCode: 0, reason: "", sessionPresent: true, limits: .init(), now: .now, random: 0)) == [
                    .tellConnected(sink: 1, sessionPresent: true), .resumeConnect(.success),
                    .announce(.connected(to: Self.h, sessionPresent: true)),
                ])
        }
        #expect(throws: Never.self) { try result.get() }
        #expect(told.withLock { $0 } == [true])
        #expect(machine.isConnected)
        #expect(
            run(machine.onSubscriptionAdded(id: 2, [TopicSubscription("c")], sink: sink())) == [
                .reply(.subscribe([TopicSubscription("c")]))
            ])
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
            #expect(run(machine.onConnectRequested(waiter)) == [.startNetworkThread])
            for (index, server) in Self.servers.enumerated() {
                #expect(machine.nextStep == .connect(to: index, notBefore: nil))
                #expect(machine.currentServer == server)
                let failed = machine.onConnectFailed(
                    .unreachable(host: server.host, port: server.port, detail: "refused"), now: .now, random: 0)
                #expect(run(failed) == [])
            }
            #expect(machine.nextStep == .exit)
            #expect(
                run(machine.onStopped()) == [
                    .resumeConnect(.failure(.unreachable(host: "c", port: 3, detail: "refused"))), .finishListeners(0),
                ])
        }
        #expect(failure(result) == .unreachable(host: "c", port: 3, detail: "refused"))
    }

    /// A broker that takes the connection and drops it before CONNACK is reported twice (the disconnect
    /// callback, then the step that failed): the second report does not use up the next broker.
    @Test func aConnectionLostBeforeConnackIsCountedOnceWhenReportedTwice() async {
        var machine = makeMachine(Self.servers)
        let result = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            #expect(run(machine.onConnectRequested(waiter)) == [.startNetworkThread])
            #expect(run(machine.onSocketOpened(restored: [])) == [])
            #expect(run(machine.onConnectionLost(reason: "closed", now: .now, random: 0)) == [])
            #expect(run(machine.onConnectionLost(reason: "closed", now: .now, random: 0)) == [], "reported again")
            #expect(machine.nextStep == .connect(to: 1, notBefore: nil) && machine.currentServer == Self.servers[1])
            #expect(run(machine.onSocketOpened(restored: [])) == [])
            #expect(
                run(machine.onConnack(reasonCode: 0, reason: "", sessionPresent: false, limits: .init(), now: .now, random: 0))
                    == [.resumeConnect(.success), .announce(.connected(to: Self.servers[1], sessionPresent: false))])
        }
        #expect(throws: Never.self) { try result.get() }
    }

    /// A broker that refuses the credentials (or the TLS handshake) ends the first connect at once: the
    /// others take the same ones. A broker that is down does not.
    @Test func aRefusalEndsTheFirstConnectWithoutTryingTheRest() async {
        var machine = makeMachine(Self.servers)
        let result = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            #expect(run(machine.onConnectRequested(waiter)) == [.startNetworkThread])
            #expect(run(machine.onConnectFailed(.unreachable(host: "a", port: 1, detail: "refused"), now: .now, random: 0)) == [])
            #expect(run(machine.onSocketOpened(restored: [])) == [])
            let refused = machine.onConnack(
                reasonCode: 135, reason: "Not authorized", sessionPresent: false, limits: .init(), now: .now, random: 0)
            #expect(run(refused) == [])
            #expect(machine.nextStep == .exit)
            #expect(
                run(machine.onStopped()) == [
                    .resumeConnect(.failure(.connectionRefused(reasonCode: 135, reason: "Not authorized"))), .finishListeners(0),
                ])
        }
        #expect(failure(result) == .connectionRefused(reasonCode: 135, reason: "Not authorized"))
    }

    /// After a lost connection every attempt goes to the next broker of the list, round and round, with
    /// the usual backoff; CONNACK says which broker took us.
    @Test func reconnectsMoveRoundTheList() async {
        var machine = makeMachine(Self.servers)
        let result = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            #expect(run(machine.onConnectRequested(waiter)) == [.startNetworkThread])
            #expect(run(machine.onSocketOpened(restored: [])) == [])
            #expect(
                run(machine.onConnack(reasonCode: 0, reason: "", sessionPresent: false, limits: .init(), now: .now, random: 0))
                    == [.resumeConnect(.success), .announce(.connected(to: Self.servers[0], sessionPresent: false))])
        }
        #expect(throws: Never.self) { try result.get() }
        let now = ContinuousClock.now
        #expect(
            run(machine.onConnectionLost(reason: "gone", now: now, random: 0)) == [
                .announce(.disconnected(reason: "gone")), .announce(.reconnecting(attempt: 1, delay: .milliseconds(50))),
            ])
        #expect(machine.nextStep == .connect(to: 1, notBefore: now + .milliseconds(50)))
        #expect(
            run(machine.onConnectFailed(.notConnected, now: now, random: 0)) == [
                .announce(.reconnecting(attempt: 2, delay: .milliseconds(100)))
            ])
        #expect(machine.nextStep == .connect(to: 2, notBefore: now + .milliseconds(100)))
        #expect(
            run(machine.onConnectFailed(.notConnected, now: now, random: 0)) == [
                .announce(.reconnecting(attempt: 3, delay: .milliseconds(200)))
            ])
        #expect(machine.nextStep == .connect(to: 0, notBefore: now + .milliseconds(200)), "round again")
        #expect(
            run(machine.onConnectFailed(.notConnected, now: now, random: 0)) == [
                .announce(.reconnecting(attempt: 4, delay: .milliseconds(400)))
            ])
        #expect(run(machine.onSocketOpened(restored: [])) == [])
        let back = machine.onConnack(reasonCode: 0, reason: "", sessionPresent: false, limits: .init(), now: now, random: 0)
        #expect(run(back) == [.announce(.connected(to: Self.servers[1], sessionPresent: false))])
    }

    // MARK: - Reconnecting

    @Test func aLostConnectionBacksOffWithJitterAndReconnects() async {
        var machine = await connected()
        let now = ContinuousClock.now
        for random in [0.0, 0.5, 0.999] {
            var copy = machine
            let kinds = run(copy.onConnectionLost(reason: "gone", now: now, random: random))
            guard kinds.count == 2, case let .announce(.reconnecting(1, delay)) = kinds[1] else {
                Issue.record("no reconnect scheduled: \(kinds)")
                return
            }
            #expect(kinds[0] == .announce(.disconnected(reason: "gone")))
            // Equal jitter: half of the initial delay fixed, half random.
            #expect(delay >= .milliseconds(50) && delay <= .milliseconds(100))
            #expect(copy.nextStep == .connect(to: nil, notBefore: now + delay), "mosquitto_reconnect to the one broker")
        }
        #expect(
            run(machine.onConnectionLost(reason: "gone", now: now, random: 1)) == [
                .announce(.disconnected(reason: "gone")), .announce(.reconnecting(attempt: 1, delay: .milliseconds(100))),
            ])
        #expect(machine.generation == 1)
        #expect(!machine.isConnected)
        // Each failed attempt doubles the delay, up to the maximum.
        var delays: [Duration] = []
        for attempt in 2...11 {
            let kinds = run(machine.onConnectFailed(.notConnected, now: now, random: 1))
            guard kinds.count == 1, case .announce(.reconnecting(attempt, let delay)) = kinds[0] else {
                Issue.record("no reconnect attempt \(attempt) scheduled: \(kinds)")
                break
            }
            delays.append(delay)
        }
        #expect(delays.prefix(3) == [.milliseconds(200), .milliseconds(400), .milliseconds(800)])
        #expect(delays.last == Self.backoff.maximum)
        // The socket opens, CONNACK comes: connected again, and the next loss starts from attempt 1.
        #expect(run(machine.onSocketOpened(restored: [])) == [])
        #expect(machine.nextStep == .loop)
        let back = machine.onConnack(reasonCode: 0, reason: "", sessionPresent: false, limits: .init(), now: now, random: 0)
        #expect(run(back) == [.announce(.connected(to: Self.h, sessionPresent: false))])
        #expect(machine.isConnected)
        #expect(
            run(machine.onConnectionLost(reason: "again", now: now, random: 0)) == [
                .announce(.disconnected(reason: "again")), .announce(.reconnecting(attempt: 1, delay: .milliseconds(50))),
            ])
    }

    @Test func aRefusedReconnectWaitsTheLongestDelay() async {
        var machine = await connected()
        #expect(
            run(machine.onConnectionLost(reason: "gone", now: .now, random: 0)) == [
                .announce(.disconnected(reason: "gone")), .announce(.reconnecting(attempt: 1, delay: .milliseconds(50))),
            ])
        #expect(run(machine.onSocketOpened(restored: [])) == [])
        let refused = machine.onConnack(
            reasonCode: 135, reason: "Not authorized", sessionPresent: false, limits: .init(), now: .now, random: 0)
        #expect(run(refused) == [.announce(.reconnecting(attempt: 2, delay: Self.backoff.maximum))])
        // The disconnect that follows a refused CONNACK does not schedule a second attempt.
        #expect(run(machine.onConnectionLost(reason: "closed", now: .now, random: 0)) == [])
    }

    @Test func reconnectRestoresLiveFiltersOnly() async throws {
        var machine = await connected()
        let x = TopicSubscription("x/#"), y = TopicSubscription("y")
        #expect(run(machine.onSubscriptionAdded(id: 1, [x], sink: sink())) == [.reply(.subscribe([x]))])
        #expect(run(machine.onSubscriptionAdded(id: 2, [x, y], sink: sink())) == [.reply(.subscribe([x, y]))])
        #expect(run(machine.onSubscriptionRemoved(id: 1)) == [.finishSubscription(1)], "x/# is still used by subscription 2")
        #expect(
            run(machine.onConnectionLost(reason: "gone", now: .now, random: 0)) == [
                .announce(.disconnected(reason: "gone")), .announce(.reconnecting(attempt: 1, delay: .milliseconds(50))),
            ])
        #expect(run(machine.onSubscriptionAdded(id: 3, [TopicSubscription("z")], sink: sink())) == [.reply(.subscribe([]))], "no socket")
        #expect(run(machine.onSubscriptionRemoved(id: 3)) == [.finishSubscription(3)], "nothing to unsubscribe without a socket")
        #expect(run(machine.onSocketOpened(restored: [x, y])) == [])
        #expect(
            run(machine.onConnack(reasonCode: 0, reason: "", sessionPresent: false, limits: .init(), now: .now, random: 0)) == [
                .announce(.connected(to: Self.h, sessionPresent: false))
            ])
        #expect(run(machine.onSubscriptionRemoved(id: 2)) == [.unsubscribe(["x/#", "y"]), .finishSubscription(2)])
        #expect(run(machine.onSubscriptionRemoved(id: 2)) == [], "removed once")
    }

    // MARK: - Publishing

    /// A client configured without retained messages never uses them, whatever the broker announces.
    @Test func retainedMessagesTurnedOffStayOff() async {
        var machine = Machine(backoff: Self.backoff, servers: [Self.h], retainedMessages: false)
        #expect(!machine.limits.retainAvailable, "before CONNACK too")
        let result = await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
            #expect(run(machine.onConnectRequested(waiter)) == [.startNetworkThread])
            #expect(run(machine.onSocketOpened(restored: [])) == [])
            let connack = machine.onConnack(
                reasonCode: 0, reason: "", sessionPresent: false, limits: .init(retainAvailable: true), now: .now, random: 0)
            #expect(run(connack) == [.resumeConnect(.success), .announce(.connected(to: Self.h, sessionPresent: false))])
        }
        #expect(throws: Never.self) { try result.get() }
        #expect(!machine.limits.retainAvailable)
        #expect(run(machine.onPublishRequested(qos: .atLeastOnce, retain: true, size: 10)) == [.reply(.refuse(.retainUnavailable))])
    }

    @Test func whetherAPublishMayGoOut() async {
        var machine = makeMachine()
        #expect(run(machine.onPublishRequested(qos: .atLeastOnce, retain: false, size: 10)) == [.reply(.refuse(.notConnected))])
        machine = await connected(limits: .init(retainAvailable: false, maximumPacketSize: 100))
        #expect(run(machine.onPublishRequested(qos: .atMostOnce, retain: false, size: 100)) == [.reply(.publish(generation: 0))])
        #expect(run(machine.onPublishRequested(qos: .atMostOnce, retain: true, size: 10)) == [.reply(.refuse(.retainUnavailable))])
        #expect(
            run(machine.onPublishRequested(qos: .atMostOnce, retain: false, size: 101))
                == [.reply(.refuse(.payloadTooLarge(size: 101, limit: 100)))])
        #expect(
            run(machine.onConnectionLost(reason: "gone", now: .now, random: 0)) == [
                .announce(.disconnected(reason: "gone")), .announce(.reconnecting(attempt: 1, delay: .milliseconds(50))),
            ])
        // While reconnecting, QoS ≥ 1 is queued for the next connection; QoS 0 is refused.
        #expect(run(machine.onPublishRequested(qos: .atMostOnce, retain: false, size: 10)) == [.reply(.refuse(.notConnected))])
        #expect(run(machine.onPublishRequested(qos: .atLeastOnce, retain: false, size: 10)) == [.reply(.publish(generation: 1))])
        #expect(
            run(machine.onPublishRequested(qos: .atLeastOnce, retain: true, size: 10)) == [.reply(.refuse(.retainUnavailable))],
            "the last CONNACK's limits hold")
        await withCheckedContinuation { (waiter: Machine.StopWaiter) in
            #expect(run(machine.onDisconnectRequested(id: 1, waiter, stop: .disconnect)) == [.stopNetworkThread(.disconnect)])
            #expect(run(machine.onStopped()) == [.finishListeners(0), .resumeStop])
        }
        #expect(run(machine.onPublishRequested(qos: .atLeastOnce, retain: false, size: 10)) == [.reply(.refuse(.disconnected))])
    }

    /// Registers a publish waiter for `mid`, runs `then` on the machine while it waits, and returns its
    /// outcome; `then` must lead the machine to resume it (and check the rest of what it asks for).
    func outcome(
        _ machine: inout Machine, mid: Int32, qos: QoS, generation: Int? = nil, cancelled: Bool = false,
        then: (inout Machine) -> Machine.Action = { _ in [] }
    ) async -> Result<PublishReceipt, MQTTError> {
        await withUnsafeContinuation { continuation in
            let registered = machine.onPublishRegistered(
                mid: mid, qos: qos, generation: generation ?? machine.generation, cancelled: cancelled, .task(continuation))
            #expect(registered.count <= 1, "nothing but this sender's outcome")
            let action = registered.isEmpty ? then(&machine) : registered
            #expect(action.filter { if case .resumePublish = $0 { true } else { false } }.count == 1, "resumed once")
            #expect(!run(action).isEmpty)
        }
    }

    @Test func aPublishIsAcknowledgedBeforeOrAfterItsSenderWaits() async {
        var machine = await connected()
        let after = await outcome(&machine, mid: 1, qos: .atLeastOnce) { machine in
            machine.onPublishAcknowledged(mid: 1, reasonCode: 16, now: .now)
        }
        #expect(after.map(\.noMatchingSubscribers) == .success(true))
        #expect(run(machine.onPublishAcknowledged(mid: 2, reasonCode: 135, now: .now)) == [], "nobody waits yet")
        #expect(await outcome(&machine, mid: 2, qos: .atLeastOnce) == .failure(.notAuthorized(topic: "")))
    }

    @Test func aLostConnectionFailsQoS0AndKeepsQoS1Waiting() async {
        var machine = await connected()
        let qos0 = await outcome(&machine, mid: 1, qos: .atMostOnce) { machine in
            let lost = machine.onConnectionLost(reason: "gone", now: .now, random: 0)
            #expect(
                lost.map(\.kind) == [
                    .resumePublish(.failure(.connectionLost)), .announce(.disconnected(reason: "gone")),
                    .announce(.reconnecting(attempt: 1, delay: .milliseconds(50))),
                ])
            return lost
        }
        #expect(qos0 == .failure(.connectionLost))
        // A QoS 0 publish sent on the connection that was lost fails when it registers.
        #expect(await outcome(&machine, mid: 2, qos: .atMostOnce, generation: 0) == .failure(.connectionLost))
        let qos1 = await outcome(&machine, mid: 3, qos: .atLeastOnce) { machine in
            #expect(run(machine.onConnectionLost(reason: "again", now: .now, random: 0)) == [], "QoS 1 stays queued")
            return machine.onPublishAcknowledged(mid: 3, reasonCode: 0, now: .now)
        }
        #expect(qos1.map(\.reasonCode) == .success(0))
        let stopped = await outcome(&machine, mid: 4, qos: .atLeastOnce) { machine in
            #expect(run(machine.onDropped()) == [.stopNetworkThread(.disconnect)])
            let stopped = machine.onStopped()
            #expect(stopped.map(\.kind) == [.resumePublish(.failure(.disconnected)), .finishListeners(0)])
            return stopped
        }
        #expect(stopped == .failure(.disconnected))
    }

    @Test func aHandlerLearnsWhenTheMessageLeftEvenAfterTheFact() async {
        var machine = await connected()
        let told = LockedValue<[Result<PublishReceipt, MQTTError>]>([])
        let handler = Machine.PublishWaiter.handler { result in told.withLock { $0.append(result) } }
        // Written before its sender registered: the receipt still carries the moment of the write.
        let written = ContinuousClock.now
        let receipt = PublishReceipt(reasonCode: 0, completed: written)
        #expect(run(machine.onPublishAcknowledged(mid: 1, reasonCode: 0, now: written)) == [])
        #expect(
            run(machine.onPublishRegistered(mid: 1, qos: .atMostOnce, generation: machine.generation, handler)) == [
                .resumePublish(.success(receipt))
            ])
        #expect(told.withLock { $0 } == [.success(receipt)])
        // Registered first: told when the write comes.
        #expect(run(machine.onPublishRegistered(mid: 2, qos: .atMostOnce, generation: machine.generation, handler)) == [])
        let later = PublishReceipt(reasonCode: 0, completed: written + .milliseconds(3))
        #expect(run(machine.onPublishAcknowledged(mid: 2, reasonCode: 0, now: later.completed)) == [.resumePublish(.success(later))])
        #expect(told.withLock { $0.last } == .success(later))
    }

    @Test func aCancelledSendLeavesNothingForALaterMessageWithItsID() async {
        var machine = await connected()
        // Cancelled while waiting: it fails at once; its acknowledgement, when it comes, is dropped.
        let cancelled = await outcome(&machine, mid: 5, qos: .atLeastOnce) { machine in machine.onPublishCancelled(mid: 5) }
        #expect(cancelled == .failure(.cancelled))
        #expect(run(machine.onPublishAcknowledged(mid: 5, reasonCode: 0, now: .now)) == [])
        // Cancelled before it registered: the same.
        #expect(await outcome(&machine, mid: 7, qos: .atLeastOnce, cancelled: true) == .failure(.cancelled))
        #expect(run(machine.onPublishAcknowledged(mid: 7, reasonCode: 0, now: .now)) == [])
        // A later message with the same ID waits for its own acknowledgement.
        let later = await outcome(&machine, mid: 7, qos: .atLeastOnce) { machine in
            machine.onPublishAcknowledged(mid: 7, reasonCode: 1, now: .now)
        }
        #expect(later.map(\.reasonCode) == .success(1))
        // A cancellation that finds nothing registered records nothing either.
        #expect(run(machine.onPublishCancelled(mid: 9)) == [])
    }

    // MARK: - Subscribing

    @Test func subscribeAcknowledgements() async {
        var machine = await connected()
        let (events, listener) = AsyncStream.makeStream(of: ConnectionEvent.self)
        #expect(run(machine.onListenerAdded(id: 1, listener)) == [])
        // Acknowledged after, and before, its caller waits.
        let after = await withCheckedContinuation { (waiter: Machine.SubscribeWaiter) in
            #expect(run(machine.onSubscribeRegistered(mid: 1, waiter)) == [])
            #expect(run(machine.onSubscribeAcknowledged(mid: 1, codes: [1])) == [.resumeSubscribe(.success([1]))])
        }
        #expect(after == .success([1]))
        #expect(run(machine.onSubscribeAcknowledged(mid: 2, codes: [0, 135])) == [])
        let before = await withCheckedContinuation { (waiter: Machine.SubscribeWaiter) in
            #expect(run(machine.onSubscribeRegistered(mid: 2, waiter)) == [.resumeSubscribe(.success([0, 135]))])
        }
        #expect(before == .success([0, 135]))
        // A SUBACK the lost connection will never bring: the caller stops waiting.
        let lost = await withCheckedContinuation { (waiter: Machine.SubscribeWaiter) in
            #expect(run(machine.onSubscribeRegistered(mid: 3, waiter)) == [])
            #expect(
                run(machine.onConnectionLost(reason: "gone", now: .now, random: 0)) == [
                    .resumeSubscribe(.success([])), .announce(.disconnected(reason: "gone")),
                    .announce(.reconnecting(attempt: 1, delay: .milliseconds(50))),
                ])
        }
        #expect(lost == .success([]))
        // A caller that stops waiting (its task cancelled, before or while it waits) fails at once, and
        // its SUBACK, when it comes, goes nowhere: not to a later SUBSCRIBE that reuses the ID.
        let cancelled = await withCheckedContinuation { (waiter: Machine.SubscribeWaiter) in
            #expect(run(machine.onSubscribeRegistered(mid: 5, waiter)) == [])
            #expect(run(machine.onSubscribeCancelled(mid: 5)) == [.resumeSubscribe(.failure(.cancelled))])
        }
        #expect(cancelled == .failure(.cancelled))
        #expect(run(machine.onSubscribeAcknowledged(mid: 5, codes: [1])) == [])
        #expect(run(machine.onSubscribeCancelled(mid: 6)) == [], "nothing registered: nothing to record")
        let cancelledFirst = await withCheckedContinuation { (waiter: Machine.SubscribeWaiter) in
            #expect(run(machine.onSubscribeRegistered(mid: 6, cancelled: true, waiter)) == [.resumeSubscribe(.failure(.cancelled))])
        }
        #expect(cancelledFirst == .failure(.cancelled))
        #expect(run(machine.onSubscribeAcknowledged(mid: 6, codes: [1])) == [])
        let reused = await withCheckedContinuation { (waiter: Machine.SubscribeWaiter) in
            #expect(run(machine.onSubscribeRegistered(mid: 6, waiter)) == [])
            #expect(run(machine.onSubscribeAcknowledged(mid: 6, codes: [0])) == [.resumeSubscribe(.success([0]))])
        }
        #expect(reused == .success([0]))
        // A subscription the broker refuses to restore is announced.
        #expect(run(machine.onSocketOpened(restored: [])) == [])
        let connack = machine.onConnack(reasonCode: 0, reason: "", sessionPresent: false, limits: .init(), now: .now, random: 0)
        #expect(run(connack) == [.announce(.connected(to: Self.h, sessionPresent: false))])
        machine.onRestoreRegistered(mid: 4, filter: "f")
        #expect(
            run(machine.onSubscribeAcknowledged(mid: 4, codes: [135])) == [
                .announce(.subscriptionRestoreFailed(filter: "f", reasonCode: 135))
            ])
        machine.onListenerRemoved(id: 1)
        #expect(run(machine.onSubscribeAcknowledged(mid: 5, codes: [0])) == [], "nobody waits yet")
        listener.finish()
        var heard: [ConnectionEvent] = []
        for await event in events { heard.append(event) }
        #expect(
            heard == [
                .disconnected(reason: "gone"), .reconnecting(attempt: 1, delay: .milliseconds(50)),
                .connected(to: Self.h, sessionPresent: false),
                .subscriptionRestoreFailed(filter: "f", reasonCode: 135),
            ])
    }

    @Test func messagesRouteByFilter() async throws {
        var machine = await connected()
        #expect(
            run(machine.onSubscriptionAdded(id: 1, [TopicSubscription("a/+")], sink: sink())) == [
                .reply(.subscribe([TopicSubscription("a/+")]))
            ])
        #expect(run(machine.onMessage(message("a/b"))) == [.deliver(topic: "a/b", sinks: [1])])
        #expect(run(machine.onMessage(message("b/b"))) == [.deliver(topic: "b/b", sinks: [])])
        // Routes are remembered per topic, and forgotten when the subscriptions change.
        #expect(machine.routes.keys.sorted() == ["a/b", "b/b"])
        #expect(run(machine.onMessage(message("a/b"))) == [.deliver(topic: "a/b", sinks: [1])])
        #expect(
            run(machine.onSubscriptionAdded(id: 2, [TopicSubscription("#")], sink: sink())) == [
                .reply(.subscribe([TopicSubscription("#")]))
            ])
        #expect(machine.routes.isEmpty)
        #expect(run(machine.onMessage(message("a/b"))) == [.deliver(topic: "a/b", sinks: [1, 2])])
        #expect(run(machine.onMessage(message("b/b"))) == [.deliver(topic: "b/b", sinks: [2])])
        #expect(run(machine.onSubscriptionRemoved(id: 1)) == [.unsubscribe(["a/+"]), .finishSubscription(1)])
        #expect(run(machine.onMessage(message("a/b"))) == [.deliver(topic: "a/b", sinks: [2])])
        #expect(run(machine.onSubscriptionRemoved(id: 2)) == [.unsubscribe(["#"]), .finishSubscription(2)])
        #expect(run(machine.onMessage(message("a/b"))) == [.deliver(topic: "a/b", sinks: [])])
    }

    /// A burst ends for the sinks that want to hear of it once a turn ends with nothing more waiting on
    /// the socket (asked only when some sink waits for the end), or after the most messages a burst holds.
    @Test func aBurstEndsWhenNothingMoreIsWaitingOrItIsLong() async {
        var machine = await connected()
        var burstSink = sink()
        burstSink.endOfBurst = {}
        #expect(
            run(machine.onSubscriptionAdded(id: 1, [TopicSubscription("a/+")], sink: burstSink)) == [
                .reply(.subscribe([TopicSubscription("a/+")]))
            ])
        #expect(
            run(machine.onSubscriptionAdded(id: 2, [TopicSubscription("#")], sink: sink())) == [
                .reply(.subscribe([TopicSubscription("#")]))
            ])
        #expect(
            run(
                machine.onTurnEnded {
                    Issue.record("asked with no burst under way")
                    return false
                }) == [])
        #expect(run(machine.onMessage(message("a/b"))) == [.deliver(topic: "a/b", sinks: [1, 2])])
        #expect(run(machine.onMessage(message("a/c"))) == [.deliver(topic: "a/c", sinks: [1, 2])])
        #expect(run(machine.onTurnEnded { true }) == [], "more of the burst waits on the socket")
        #expect(run(machine.onTurnEnded { false }) == [.endBurst(1)], "once, for the sink that asked, not per message")
        #expect(run(machine.onTurnEnded { false }) == [])
        for _ in 0..<Machine.maximumBurst { #expect(run(machine.onMessage(message("a/b"))) == [.deliver(topic: "a/b", sinks: [1, 2])]) }
        #expect(run(machine.onTurnEnded { true }) == [.endBurst(1)], "a long burst ends even so")
    }

    /// A subscription's retained replay (a newcomer's hundred member records) is routed like live
    /// traffic but not remembered: each of its topics comes once, and it would push live routes out.
    @Test func retainedMessagesAreRoutedButNotRemembered() async throws {
        var machine = await connected()
        #expect(
            run(machine.onSubscriptionAdded(id: 1, [TopicSubscription("a/+")], sink: sink())) == [
                .reply(.subscribe([TopicSubscription("a/+")]))
            ])
        #expect(run(machine.onMessage(message("a/live"))) == [.deliver(topic: "a/live", sinks: [1])])
        for index in 0..<200 {
            #expect(run(machine.onMessage(message("a/\(index)", retain: true))) == [.deliver(topic: "a/\(index)", sinks: [1])])
        }
        #expect(machine.routes.keys.sorted() == ["a/live"])
    }

    // MARK: - Stopping

    @Test func disconnectBeforeConnectStopsAtOnce() async {
        var machine = makeMachine()
        let finished = LockedValue(0)
        #expect(
            run(machine.onSubscriptionAdded(id: 1, [TopicSubscription("a")], sink: sink(finished))) == [.reply(.subscribe([]))],
            "sent once connected")
        #expect(run(machine.onDropped()) == [], "no network thread to stop")
        await withCheckedContinuation { (waiter: Machine.StopWaiter) in
            #expect(
                run(machine.onDisconnectRequested(id: 1, waiter, stop: .disconnect)) == [
                    .finishSubscription(1), .finishListeners(0), .resumeStop,
                ])
        }
        #expect(machine.isStopped && finished.withLock { $0 } == 1)
        #expect(run(machine.onSubscriptionAdded(id: 2, [TopicSubscription("b")], sink: sink())) == [.reply(.refuse(.disconnected))])
        let (events, listener) = AsyncStream.makeStream(of: ConnectionEvent.self)
        #expect(run(machine.onListenerAdded(id: 3, listener)) == [.finishListeners(1)])
        for await event in events { Issue.record("an event after the stop: \(event)") }
        await withCheckedContinuation { (waiter: Machine.StopWaiter) in
            #expect(run(machine.onDisconnectRequested(id: 4, waiter, stop: .abort)) == [.resumeStop], "stopped already")
        }
    }

    /// `disconnect()` while the first connect hangs in the kernel: after its timeout, both it and the
    /// `connect()` return; the network thread ends later on its own.
    @Test func aDisconnectThatTimesOutReleasesTheHangingConnect() async throws {
        let machine = LockedValue(makeMachine())
        let connecting = Task {
            await withCheckedContinuation { (waiter: Machine.ConnectWaiter) in
                #expect(run(machine.withLock { $0.onConnectRequested(waiter) }) == [.startNetworkThread])
            }
        }
        try await waitUntil("connect() waits") { machine.withLock { if case .firstConnect = $0.state { true } else { false } } }
        await withCheckedContinuation { (waiter: Machine.StopWaiter) in
            let requested = machine.withLock { $0.onDisconnectRequested(id: 7, waiter, stop: .expireSession) }
            #expect(run(requested) == [.stopNetworkThread(.expireSession)], "waits for the network thread")
            #expect(run(machine.withLock { $0.onDisconnectTimedOut(id: 7) }) == [.resumeConnect(.failure(.disconnected)), .resumeStop])
        }
        #expect(failure(await connecting.value) == .disconnected)
        #expect(run(machine.withLock { $0.onStopped() }) == [.finishListeners(0)], "nobody is resumed twice")
        #expect(run(machine.withLock { $0.onDisconnectTimedOut(id: 7) }) == [], "the thread ended first")
        #expect(machine.withLock { $0.isStopped })
    }
}
