/// The connection's logic, as a value: a ``State`` whose cases carry their own data, and one
/// `mutating func on…` per input that returns what to do. It never calls libmosquitto and never resumes
/// anything itself; ``MosquittoConnection`` and ``MQTTClient`` do that after releasing the lock that
/// guards this value.
struct ConnectionStateMachine {
    typealias ConnectWaiter = CheckedContinuation<Result<Void, MQTTError>, Never>
    /// Who is told a publish's outcome. It is told exactly once because this machine holds it in one
    /// place — a `waiting` entry, taken out when it goes into an outcome (acknowledged, failed, cancelled,
    /// or the connection closed) — and outcomes are run once.
    enum PublishWaiter: Sendable {
        /// A task awaiting it. Unchecked, unlike the other continuations: one is made for every reliable
        /// message sent, and the machine guarantees the single resume.
        case task(UnsafeContinuation<Result<PublishReceipt, MQTTError>, Never>)
        /// A function called where the outcome becomes known: on the network thread for a write or an
        /// acknowledgement, so it must return at once.
        case handler(@Sendable (Result<PublishReceipt, MQTTError>) -> Void)

        func resume(returning result: Result<PublishReceipt, MQTTError>) {
            switch self {
            case let .task(continuation): continuation.resume(returning: result)
            case let .handler(handler): handler(result)
            }
        }
    }
    typealias SubscribeWaiter = CheckedContinuation<Result<[Int], MQTTError>, Never>
    typealias StopWaiter = CheckedContinuation<Void, Never>
    typealias PublishOutcome = (waiter: PublishWaiter, result: Result<PublishReceipt, MQTTError>)
    typealias SubscribeOutcome = (waiter: SubscribeWaiter, result: Result<[Int], MQTTError>)

    enum State {
        /// `connect()` not called yet: no network thread.
        case idle
        /// `connect()` waits for the first CONNACK; `socketOpen` once the socket is open.
        case firstConnect(ConnectWaiter, socketOpen: Bool)
        case connected
        /// Reconnect attempt `attempt` (1-based) starts at `until`.
        case backingOff(attempt: Int, until: ContinuousClock.Instant)
        /// Reconnect attempt `attempt` opened its socket and awaits CONNACK.
        case reconnecting(attempt: Int)
        /// `disconnect()` was called, the client was dropped, or the first connect failed: the network
        /// thread is finishing. `connectWaiter`: a first `connect()` still waiting for it, resumed when the
        /// thread has ended, with `connectFailure` (why the first connect failed) or else
        /// ``MQTTError/disconnected``.
        case stopping(connectWaiter: ConnectWaiter?, connectFailure: MQTTError?, stopWaiters: [UInt64: StopWaiter])
        /// The network thread is gone; nothing works any more.
        case stopped
    }

    /// What the broker announced in CONNACK.
    struct BrokerLimits: Equatable, Sendable {
        var retainAvailable = true
        var maximumPacketSize: Int?
    }

    private enum PublishEntry {
        case waiting(qos: QoS, PublishWaiter)
        case completed(Result<PublishReceipt, MQTTError>)
        /// The caller stopped waiting (or never will wait); the acknowledgement, if any comes, is dropped.
        case cancelled(qos: QoS)
    }

    private enum SubscribeEntry {
        case waiting(SubscribeWaiter)
        case completed([Int])
        /// A resubscription made by the network thread after a reconnect.
        case restore(String)
    }

    private struct SubscriptionEntry {
        var filters: [TopicSubscription]
        var sink: MessageSink
        /// The filters' UTF-8 bytes, matched against every received topic.
        var filterBytes: [[UInt8]]

        func matches(_ topic: UnsafeBufferPointer<UInt8>) -> Bool {
            filterBytes.contains { filter in filter.withUnsafeBufferPointer { Topic.matches(topic, $0) } }
        }
    }

    private(set) var state = State.idle
    /// What the broker announced in its last CONNACK; kept while reconnecting, for the messages queued
    /// meanwhile.
    private(set) var limits = BrokerLimits()
    /// Incremented every time a connection ends; lets a late publish registration know it was cut off.
    private(set) var generation = 0
    private var publishes: [Int32: PublishEntry] = [:]
    private var subacks: [Int32: SubscribeEntry] = [:]
    private var subscriptions: [UInt64: SubscriptionEntry] = [:] {
        didSet { routes = [:] }
    }
    /// Which sinks each recently received topic goes to: an application's topics repeat (one per sender
    /// and kind), so most messages skip matching every filter. Emptied whenever a subscription comes or
    /// goes, and when it grows past ``maximumRoutes`` (small, since a process may hold a thousand
    /// connections, each with its own table).
    private(set) var routes: [String: [MessageSink]] = [:]
    static let maximumRoutes = 128
    private var listeners = ListenerRegistry<AsyncStream<ConnectionEvent>.Continuation>()
    private let backoff: Backoff
    /// The brokers, in the order they are tried (the configuration's host, then its fallbacks).
    private let servers: [MQTTClient.Server]
    /// Which of `servers` the current or next attempt goes to.
    private(set) var server = 0

    /// Whether the client uses retained messages at all (``MQTTClient/Configuration/retainedMessages``).
    private let retainedMessages: Bool

    init(backoff: Backoff, servers: [MQTTClient.Server], retainedMessages: Bool = true) {
        precondition(!servers.isEmpty)
        self.backoff = backoff
        self.servers = servers
        self.retainedMessages = retainedMessages
        self.limits.retainAvailable = retainedMessages
    }

    /// The broker the current or next attempt goes to.
    var currentServer: MQTTClient.Server { servers[server] }

    /// What a change of the connection's state asks for, run outside the lock in this order by
    /// ``resumeAll()``; `restore` is the network thread's to send first (see `didConnect`).
    struct Effects {
        var connectResult: (ConnectWaiter, Result<Void, MQTTError>)?
        var publishResults: [PublishOutcome] = []
        var subscribeResults: [SubscribeOutcome] = []
        var events: [ConnectionEvent] = []
        var listeners: [AsyncStream<ConnectionEvent>.Continuation] = []
        /// Sinks to tell of a new connection, before the subscriptions are restored.
        var connectedSinks: [MessageSink] = []
        /// Filters to subscribe again on a new connection.
        var restore: [TopicSubscription] = []
        var finishSubscriptions: [MessageSink] = []
        var finishListeners = false
        var stopWaiters: [StopWaiter] = []

        /// Resumes continuations and yields to sequences. Never calls libmosquitto.
        func resumeAll() {
            if let (waiter, result) = connectResult { waiter.resume(returning: result) }
            for (waiter, result) in publishResults { waiter.resume(returning: result) }
            for (waiter, result) in subscribeResults { waiter.resume(returning: result) }
            for event in events {
                for listener in listeners { listener.yield(event) }
            }
            for sink in finishSubscriptions { sink.finish() }
            if finishListeners {
                for listener in listeners { listener.finish() }
            }
            for waiter in stopWaiters { waiter.resume() }
        }
    }

    var isConnected: Bool {
        if case .connected = state { return true }
        return false
    }

    var isStopped: Bool {
        if case .stopped = state { return true }
        return false
    }

    /// Every filter some live subscription uses, each with the options it was last subscribed with.
    var liveFilters: [TopicSubscription] {
        var newest: [String: TopicSubscription] = [:]
        for id in subscriptions.keys.sorted() {
            for request in subscriptions[id]!.filters { newest[request.filter] = request }
        }
        return newest.values.sorted { $0.filter < $1.filter }
    }

    // MARK: - Caller side

    /// `connect()` was called. Returns false when the client was already started (or stopped).
    mutating func onConnectRequested(_ waiter: ConnectWaiter) -> Bool {
        guard case .idle = state else { return false }
        state = .firstConnect(waiter, socketOpen: false)
        return true
    }

    /// The task waiting in the first `connect()` was cancelled. Returns whether the network thread must be
    /// stopped: the connect then fails with ``MQTTError/cancelled`` once the thread has ended, as a failed
    /// first connect does. Nothing changes once the first connect is over (or before it started).
    mutating func onConnectCancelled() -> Bool {
        guard case let .firstConnect(waiter, _) = state else { return false }
        state = .stopping(connectWaiter: waiter, connectFailure: .cancelled, stopWaiters: [:])
        return true
    }

    /// Whether a PUBLISH of `size` bytes at `qos` may be handed to libmosquitto now; on success, the
    /// connection generation it is sent on. QoS ≥ 1 may be queued while reconnecting (libmosquitto
    /// sends it once connected); QoS 0 only goes out on a live connection.
    func checkPublish(qos: QoS, retain: Bool, size: Int) -> Result<Int, MQTTError> {
        switch state {
        case .stopping, .stopped: return .failure(.disconnected)
        case .idle: return .failure(.notConnected)
        case .firstConnect, .backingOff, .reconnecting:
            if qos == .atMostOnce { return .failure(.notConnected) }
        case .connected:
            break
        }
        if retain && !limits.retainAvailable { return .failure(.retainUnavailable) }
        if let limit = limits.maximumPacketSize, size > limit { return .failure(.payloadTooLarge(size: size, limit: limit)) }
        return .success(generation)
    }

    /// A publish was handed to libmosquitto as message `mid` while the connection was at `generation`,
    /// and its sender now waits for the outcome — unless its task was `cancelled` already. Returns the
    /// outcomes known now (none: the sender waits).
    mutating func onPublishRegistered(
        mid: Int32, qos: QoS, generation sentAt: Int, cancelled: Bool = false, _ waiter: PublishWaiter
    ) -> [PublishOutcome] {
        var outcomes: [PublishOutcome] = []
        switch publishes.removeValue(forKey: mid) {
        case let .completed(result):
            return [(waiter, result)]
        case let .waiting(_, older):
            // Only if libmosquitto reused the ID of a message still awaited: that waiter cannot be told
            // its outcome any more; it fails rather than waiting forever.
            outcomes.append((older, .failure(.connectionLost)))
        case .cancelled, nil:  // a cancelled entry belongs to an older message
            break
        }
        switch state {
        case .stopping, .stopped:
            outcomes.append((waiter, .failure(.disconnected)))
        case _ where qos == .atMostOnce && sentAt != generation:
            outcomes.append((waiter, .failure(.connectionLost)))
        case _ where cancelled:
            publishes[mid] = .cancelled(qos: qos)  // its acknowledgement is still to come: drop it then
            outcomes.append((waiter, .failure(.cancelled)))
        default:
            publishes[mid] = .waiting(qos: qos, waiter)
        }
        return outcomes
    }

    /// Nobody will await publish `mid` (sent at `qos`): its acknowledgement, if any comes, is dropped.
    mutating func onPublishDetached(mid: Int32, qos: QoS) {
        switch publishes[mid] {
        case .completed: publishes[mid] = nil
        case nil: publishes[mid] = .cancelled(qos: qos)
        case .waiting, .cancelled: break  // an older message's entry: it is not ours to change
        }
    }

    /// The task awaiting publish `mid` was cancelled.
    mutating func onPublishCancelled(mid: Int32) -> PublishOutcome? {
        // Not registered yet (the task sees its cancellation when it registers), or over already: nothing
        // to record — an entry would outlive the message and meet a later one that reuses its ID.
        guard case let .waiting(qos, waiter) = publishes[mid] else { return nil }
        // The entry stays: the acknowledgement still comes and must not be left for a later message
        // that reuses this ID.
        publishes[mid] = .cancelled(qos: qos)
        return (waiter, .failure(.cancelled))
    }

    /// A new subscription. Returns the filters to send now (none while disconnected: the next
    /// connection subscribes them), or throws when the client is stopped.
    mutating func onSubscriptionAdded(
        id: UInt64, _ requested: [TopicSubscription], sink: MessageSink
    ) throws(MQTTError) -> [TopicSubscription] {
        switch state {
        case .stopping, .stopped: throw .disconnected
        default: break
        }
        var sink = sink
        sink.id = id
        subscriptions[id] = SubscriptionEntry(filters: requested, sink: sink, filterBytes: requested.map { Array($0.filter.utf8) })
        return isConnected ? requested : []
    }

    /// SUBSCRIBE `mid` was sent for a caller now awaiting its SUBACK.
    mutating func onSubscribeRegistered(mid: Int32, _ waiter: SubscribeWaiter) -> SubscribeOutcome? {
        if case let .completed(codes) = subacks.removeValue(forKey: mid) { return (waiter, .success(codes)) }
        switch state {
        case .stopping, .stopped: return (waiter, .failure(.disconnected))
        default:
            subacks[mid] = .waiting(waiter)
            return nil
        }
    }

    /// The network thread resubscribed `filter` after a reconnect as `mid`.
    mutating func onRestoreRegistered(mid: Int32, filter: String) {
        subacks[mid] = .restore(filter)
    }

    /// A subscription ended (consumer cancelled, unsubscribe, or deallocation). Returns its sink, to
    /// finish, and the filters no other subscription uses, to unsubscribe while connected.
    mutating func onSubscriptionRemoved(id: UInt64) -> (sink: MessageSink, unsubscribe: [String])? {
        guard let entry = subscriptions.removeValue(forKey: id) else { return nil }
        let stillUsed = Set(subscriptions.values.flatMap { $0.filters.map(\.filter) })
        let unused = Set(entry.filters.map(\.filter)).subtracting(stillUsed)
        return (entry.sink, isConnected ? unused.sorted() : [])
    }

    /// A listener of connection events; nil once stopped (its sequence is to be finished at once).
    mutating func onListenerAdded(_ continuation: AsyncStream<ConnectionEvent>.Continuation) -> ListenerRegistry<
        AsyncStream<ConnectionEvent>.Continuation
    >.ID? {
        isStopped ? nil : listeners.add(continuation)
    }

    mutating func onListenerRemoved(id: ListenerRegistry<AsyncStream<ConnectionEvent>.Continuation>.ID) {
        listeners.remove(id)
    }

    /// `disconnect()` was called. `wasRunning` is false when there is no network thread to wait for.
    mutating func onDisconnectRequested(id: UInt64, _ waiter: StopWaiter) -> (Effects, wasRunning: Bool) {
        switch state {
        case .stopped:
            return (Effects(stopWaiters: [waiter]), false)
        case .idle:
            var effects = stop()
            effects.stopWaiters = [waiter]
            return (effects, false)
        case let .firstConnect(connecting, _):
            state = .stopping(connectWaiter: connecting, connectFailure: nil, stopWaiters: [id: waiter])
        case .connected, .backingOff, .reconnecting:
            state = .stopping(connectWaiter: nil, connectFailure: nil, stopWaiters: [id: waiter])
        case .stopping(let connecting, let failure, var waiters):
            waiters[id] = waiter
            state = .stopping(connectWaiter: connecting, connectFailure: failure, stopWaiters: waiters)
        }
        return (Effects(), true)
    }

    /// `disconnect()` gave up waiting for the network thread (stuck in a blocking TCP connect to an
    /// unresponsive host): its waiter is resumed now, and so is a `connect()` stuck in the same call;
    /// the thread finishes on its own later.
    mutating func onDisconnectTimedOut(id: UInt64) -> Effects {
        guard case .stopping(let connecting, let failure, var waiters) = state, let waiter = waiters.removeValue(forKey: id) else {
            return Effects()
        }
        state = .stopping(connectWaiter: nil, connectFailure: nil, stopWaiters: waiters)
        return Effects(connectResult: connecting.map { ($0, .failure(failure ?? .disconnected)) }, stopWaiters: [waiter])
    }

    /// The client was dropped without `disconnect()`. Returns whether a network thread must be stopped
    /// (nobody waits for it).
    mutating func onDropped() -> Bool {
        switch state {
        case .idle, .stopping, .stopped:
            return false
        case let .firstConnect(connecting, _):
            state = .stopping(connectWaiter: connecting, connectFailure: nil, stopWaiters: [:])
        case .connected, .backingOff, .reconnecting:
            state = .stopping(connectWaiter: nil, connectFailure: nil, stopWaiters: [:])
        }
        return true
    }

    // MARK: - Network thread side

    /// What the network thread does next.
    enum NextStep: Equatable {
        /// Open a socket, not before `notBefore` (nil: now): with `mosquitto_connect` to `servers[to]` (the
        /// first time, and every time when there are several brokers), else (nil) with `mosquitto_reconnect`
        /// to the one broker.
        case connect(to: Int?, notBefore: ContinuousClock.Instant?)
        /// Run the open connection.
        case loop
        case exit
    }

    var nextStep: NextStep {
        switch state {
        case .firstConnect(_, socketOpen: false): return .connect(to: server, notBefore: nil)
        case let .backingOff(_, until): return .connect(to: servers.count > 1 ? server : nil, notBefore: until)
        case .firstConnect, .connected, .reconnecting: return .loop
        case .idle, .stopping, .stopped: return .exit
        }
    }

    /// Opening the socket failed before any CONNACK.
    mutating func onConnectFailed(_ error: MQTTError, now: ContinuousClock.Instant, random: Double) -> Effects {
        switch state {
        case let .firstConnect(waiter, _):
            // The first connect fails fast and for good, once every broker was tried: the caller learns why.
            return failFirstConnectOrMoveOn(waiter, error)
        case let .backingOff(attempt, _), let .reconnecting(attempt):
            return scheduleReconnect(attempt: attempt + 1, now: now, random: random)
        case .idle, .connected, .stopping, .stopped:
            return Effects()
        }
    }

    /// The socket is open; CONNACK is awaited.
    mutating func onSocketOpened() {
        switch state {
        case let .firstConnect(waiter, _): state = .firstConnect(waiter, socketOpen: true)
        case let .backingOff(attempt, _): state = .reconnecting(attempt: attempt)
        default: break
        }
    }

    /// CONNACK arrived. `reasonCode` 0 is success.
    mutating func onConnack(
        reasonCode: Int, reason: String, sessionPresent: Bool, limits: BrokerLimits,
        now: ContinuousClock.Instant, random: Double
    ) -> Effects {
        var effects = Effects()
        switch state {
        case .idle, .connected, .stopping, .stopped:
            return effects
        case let .firstConnect(waiter, _):
            guard reasonCode == 0 else {
                return failFirstConnect(waiter, .connectionRefused(reasonCode: reasonCode, reason: reason))
            }
            effects.connectResult = (waiter, .success(()))
        case let .backingOff(attempt, _), let .reconnecting(attempt):
            // A refused CONNACK (bad credentials, banned) will not fix itself quickly: wait the longest.
            guard reasonCode == 0 else { return scheduleReconnect(attempt: attempt + 1, now: now, random: random, delay: backoff.maximum) }
        }
        state = .connected
        self.limits = limits
        self.limits.retainAvailable = limits.retainAvailable && retainedMessages
        effects.restore = liveFilters
        effects.connectedSinks = subscriptions.values.map(\.sink).filter { $0.connected != nil }
        effects.events = [.connected(to: currentServer, sessionPresent: sessionPresent)]
        effects.listeners = listeners.all
        return effects
    }

    /// The connection ended after its socket was opened (broker gone, keepalive, CONNACK refused, or the
    /// DISCONNECT written after `disconnect()`). `cause` is what a first `connect()` fails with if the
    /// connection ends before CONNACK.
    mutating func onConnectionLost(
        reason: String, cause: MQTTError? = nil, now: ContinuousClock.Instant, random: Double
    ) -> Effects {
        generation += 1
        var effects = Effects()
        // QoS 0 messages not yet written died with the socket; QoS ≥ 1 stay queued in libmosquitto and are
        // sent again on the next connection, so their callers keep waiting.
        for (mid, entry) in publishes {
            switch entry {
            case let .waiting(.atMostOnce, waiter):
                publishes[mid] = nil
                effects.publishResults.append((waiter, .failure(.connectionLost)))
            case .cancelled(qos: .atMostOnce):
                publishes[mid] = nil  // its acknowledgement died with the socket
            default:
                break
            }
        }
        // SUBACKs that will never come: the next connection subscribes every live filter anyway.
        for case let .waiting(waiter) in subacks.values { effects.subscribeResults.append((waiter, .success([]))) }
        subacks = [:]
        let next: Effects
        switch state {
        case .idle, .backingOff, .stopping, .stopped:
            return effects
        case let .firstConnect(waiter, _):
            let server = currentServer
            next = failFirstConnectOrMoveOn(waiter, cause ?? .unreachable(host: server.host, port: server.port, detail: reason))
        case .connected:
            effects.events = [.disconnected(reason: reason)]
            next = scheduleReconnect(attempt: 1, now: now, random: random)
        case let .reconnecting(attempt):
            next = scheduleReconnect(attempt: attempt + 1, now: now, random: random)
        }
        effects.connectResult = next.connectResult
        effects.events += next.events
        effects.listeners = next.listeners
        return effects
    }

    /// Message `mid` was written (QoS 0) or acknowledged (QoS ≥ 1) at `now`, with `reasonCode`.
    mutating func onPublishAcknowledged(mid: Int32, reasonCode: Int, now: ContinuousClock.Instant) -> PublishOutcome? {
        let result: Result<PublishReceipt, MQTTError>
        switch reasonCode {
        case 0..<128: result = .success(PublishReceipt(reasonCode: reasonCode, completed: now))
        case 135: result = .failure(.notAuthorized(topic: ""))
        case 149: result = .failure(.payloadTooLarge(size: -1, limit: limits.maximumPacketSize ?? -1))
        default: result = .failure(.publishRefused(topic: "", reasonCode: reasonCode))
        }
        switch publishes.removeValue(forKey: mid) {
        case let .waiting(_, waiter): return (waiter, result)
        case .cancelled, .completed: return nil
        case nil:
            publishes[mid] = .completed(result)
            return nil
        }
    }

    /// SUBACK `mid` arrived. Returns the waiter to resume, or — for a restored subscription the broker
    /// refused — the event to announce, with its listeners.
    mutating func onSubscribeAcknowledged(mid: Int32, codes: [Int]) -> Effects {
        switch subacks.removeValue(forKey: mid) {
        case let .waiting(waiter):
            return Effects(subscribeResults: [(waiter, .success(codes))])
        case let .restore(filter):
            guard let code = codes.first, code >= 128 else { return Effects() }
            return Effects(events: [.subscriptionRestoreFailed(filter: filter, reasonCode: code)], listeners: listeners.all)
        case .completed, nil:
            subacks[mid] = .completed(codes)
            return Effects()
        }
    }

    /// Which subscriptions receive a message on `topic`. With `remember` false (a retained message: each
    /// topic of a subscription's replay comes once) the route is not added to the table, where a replay
    /// of a hundred records would only push out the routes of live traffic.
    mutating func onMessage(topic: String, remember: Bool = true) -> [MessageSink] {
        if let targets = routes[topic] { return targets }
        var targets: [MessageSink] = []
        var bytes = topic
        bytes.withUTF8 { bytes in
            for entry in subscriptions.values where entry.matches(bytes) { targets.append(entry.sink) }
        }
        guard remember else { return targets }
        if routes.count >= ConnectionStateMachine.maximumRoutes { routes.removeAll(keepingCapacity: true) }
        routes[topic] = targets
        return targets
    }

    /// The network thread is exiting: everything still open ends.
    mutating func onStopped() -> Effects {
        var waiters: [StopWaiter] = []
        if case let .stopping(_, _, stopWaiters) = state { waiters = Array(stopWaiters.values) }
        var effects = stop()
        effects.stopWaiters = waiters
        return effects
    }

    // MARK: - Helpers

    /// The first connect failed for good. Its caller learns why once the network thread has ended
    /// (``onStopped()``): by then the thread has let go of the connection, so a caller that drops the
    /// client and exits the process at once destroys libmosquitto's handle itself, before the exit — not
    /// a network thread racing the process's exit handlers (OpenSSL's among them).
    private mutating func failFirstConnect(_ waiter: ConnectWaiter, _ error: MQTTError) -> Effects {
        state = .stopping(connectWaiter: waiter, connectFailure: error, stopWaiters: [:])
        return Effects()
    }

    /// A first connect that failed moves on to the next broker, when there is one it has not tried —
    /// unless the broker refused us or the TLS handshake failed: the others take the same credentials.
    private mutating func failFirstConnectOrMoveOn(_ waiter: ConnectWaiter, _ error: MQTTError) -> Effects {
        switch error {
        case .connectionRefused, .tls: break
        default:
            if server + 1 < servers.count {
                server += 1
                state = .firstConnect(waiter, socketOpen: false)
                return Effects()
            }
        }
        return failFirstConnect(waiter, error)
    }

    /// The next reconnect attempt, to the next broker when there are several.
    private mutating func scheduleReconnect(
        attempt: Int, now: ContinuousClock.Instant, random: Double, delay: Duration? = nil
    ) -> Effects {
        server = (server + 1) % servers.count
        let delay = delay ?? backoff.delay(attempt: attempt, random: random)
        state = .backingOff(attempt: attempt, until: now + delay)
        return Effects(events: [.reconnecting(attempt: attempt, delay: delay)], listeners: listeners.all)
    }

    /// Ends everything still open with ``MQTTError/disconnected`` (the stop waiters are the caller's).
    private mutating func stop() -> Effects {
        var effects = Effects()
        switch state {
        case let .firstConnect(waiter, _):
            effects.connectResult = (waiter, .failure(.disconnected))
        case let .stopping(waiter?, failure, _):
            effects.connectResult = (waiter, .failure(failure ?? .disconnected))
        default:
            break
        }
        state = .stopped
        for case let .waiting(_, waiter) in publishes.values { effects.publishResults.append((waiter, .failure(.disconnected))) }
        publishes = [:]
        for case let .waiting(waiter) in subacks.values { effects.subscribeResults.append((waiter, .failure(.disconnected))) }
        subacks = [:]
        effects.finishSubscriptions = subscriptions.values.map(\.sink)
        subscriptions = [:]
        effects.listeners = listeners.removeAll()
        effects.finishListeners = true
        return effects
    }
}
