/// The connection's logic, as a value: every input is a `mutating func on…` that returns the side effects
/// to perform. It never calls libmosquitto and never resumes anything itself; ``MQTTClient`` runs the
/// returned ``Effects`` after releasing the lock that guards this value.
struct ConnectionStateMachine {
    typealias ConnectWaiter = CheckedContinuation<Result<Void, MQTTError>, Never>
    /// Unchecked, unlike the others: one is made for every reliable message sent, and the checked kind
    /// allocates and frees a canary each time (≈ 400 instructions). It is resumed exactly once because
    /// this machine holds it in one place — a `waiting` entry, taken out when it goes into an effect
    /// (acknowledged, failed, cancelled, or the connection closed) — and effects are run once.
    typealias PublishWaiter = UnsafeContinuation<Result<PublishReceipt, MQTTError>, Never>
    typealias SubscribeWaiter = CheckedContinuation<Result<[Int], MQTTError>, Never>

    enum Phase: Equatable, Sendable {
        /// No socket yet: `connect()` not called, or called and the first attempt not made.
        case idle
        /// A socket is being opened or CONNACK is awaited.
        case connecting
        case connected
        /// Waiting before the next reconnect attempt.
        case backingOff
        /// `disconnect()` was called; the network thread is finishing.
        case stopping
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

        init(filters: [TopicSubscription], sink: MessageSink) {
            self.filters = filters
            self.sink = sink
            self.filterBytes = filters.map { Array($0.filter.utf8) }
        }

        func matches(_ topic: UnsafeBufferPointer<UInt8>) -> Bool {
            filterBytes.contains { filter in filter.withUnsafeBufferPointer { Topic.matches(topic, $0) } }
        }
    }

    private(set) var phase: Phase = .idle
    private(set) var limits = BrokerLimits()
    /// Incremented every time a connection ends; lets a late publish registration know it was cut off.
    private(set) var generation = 0
    private var hasConnected = false
    /// `connect()` was called: the network thread runs (phase `.idle` until it opens the socket).
    private var started = false
    private var attempt = 0
    private var reconnectAt: ContinuousClock.Instant?
    private var connectWaiter: ConnectWaiter?
    private var stopWaiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
    private var publishes: [Int32: PublishEntry] = [:]
    private var subacks: [Int32: SubscribeEntry] = [:]
    private var subscriptions: [UInt64: SubscriptionEntry] = [:] {
        didSet { routes = [:] }
    }
    /// Which sinks each recently received topic goes to: an application's topics repeat (one per sender
    /// and kind), so most messages skip matching every filter. Emptied whenever a subscription comes or
    /// goes, and when it grows past ``maximumRoutes`` (small: a process holding 1,000 participants of one
    /// session has 1,000 of these tables, and a cap of 4,096 cost it 200 MiB).
    private(set) var routes: [String: [MessageSink]] = [:]
    static let maximumRoutes = 128
    /// How many live subscriptions use each filter, and the options it was last subscribed with.
    private var filters: [String: (count: Int, options: TopicSubscription)] = [:]
    private var listeners: [UInt64: AsyncStream<ConnectionEvent>.Continuation] = [:]
    private let backoff: Backoff
    private let host: String
    private let port: Int

    init(backoff: Backoff, host: String, port: Int) {
        self.backoff = backoff
        self.host = host
        self.port = port
    }

    /// Side effects to perform outside the lock, in this order.
    struct Effects {
        var connectResult: (ConnectWaiter, Result<Void, MQTTError>)?
        var publishResults: [(PublishWaiter, Result<PublishReceipt, MQTTError>)] = []
        var subscribeResults: [(SubscribeWaiter, Result<[Int], MQTTError>)] = []
        var events: [ConnectionEvent] = []
        var listeners: [AsyncStream<ConnectionEvent>.Continuation] = []
        /// Sinks to tell of a new connection, before the subscriptions are restored.
        var connectedSinks: [MessageSink] = []
        var finishSubscriptions: [MessageSink] = []
        var finishListeners = false
        var stopWaiters: [CheckedContinuation<Void, Never>] = []
        /// libmosquitto work for the network thread or the caller.
        var subscribe: [TopicSubscription] = []
        var unsubscribe: [String] = []

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

    /// `connect()` is waiting for its first CONNACK.
    var isConnectingForTheFirstTime: Bool { connectWaiter != nil && started }

    /// Every filter some live subscription uses.
    var liveFilters: [String] { filters.keys.sorted() }

    /// Subscription sequences still open.
    var liveSubscriptionCount: Int { subscriptions.count }

    // MARK: - Caller side

    /// `connect()` was called. Returns false when the client was already started (or stopped).
    mutating func onConnectRequested(_ waiter: ConnectWaiter) -> Bool {
        guard phase == .idle, !started else { return false }
        started = true
        connectWaiter = waiter
        return true
    }

    /// A publish was handed to libmosquitto as message `mid` while the connection was at `generation`,
    /// and its sender now waits for the outcome — unless its task was `cancelled` already.
    mutating func onPublishRegistered(
        mid: Int32, qos: QoS, generation sentAt: Int, cancelled: Bool = false, _ waiter: PublishWaiter
    ) -> Effects {
        var effects = Effects()
        switch publishes.removeValue(forKey: mid) {
        case let .completed(result):
            effects.publishResults.append((waiter, result))
        case let .waiting(_, older):
            // Only if libmosquitto reused the ID of a message still awaited: that waiter cannot be told
            // its outcome any more; it fails rather than waiting forever.
            effects.publishResults.append((older, .failure(.connectionLost)))
            fallthrough
        case .cancelled, nil:  // a cancelled entry belongs to an older message
            if phase == .stopped || phase == .stopping {
                effects.publishResults.append((waiter, .failure(.disconnected)))
            } else if qos == .atMostOnce && sentAt != generation {
                effects.publishResults.append((waiter, .failure(.connectionLost)))
            } else if cancelled {
                publishes[mid] = .cancelled(qos: qos)  // its acknowledgement is still to come: drop it then
                effects.publishResults.append((waiter, .failure(.cancelled)))
            } else {
                publishes[mid] = .waiting(qos: qos, waiter)
            }
        }
        return effects
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
    mutating func onPublishCancelled(mid: Int32) -> Effects {
        var effects = Effects()
        switch publishes[mid] {
        case let .waiting(qos, waiter):
            // Keep the entry: the acknowledgement still comes and must not be left for a later message
            // that reuses this ID.
            publishes[mid] = .cancelled(qos: qos)
            effects.publishResults.append((waiter, .failure(.cancelled)))
        case .completed, .cancelled, nil:
            // Not registered yet (the task sees its cancellation when it registers), or over already:
            // nothing to record — an entry here would outlive the message and meet a later one that
            // reuses its ID.
            break
        }
        return effects
    }

    /// A new subscription. Returns the filters to send now (empty while disconnected: the next
    /// connection subscribes them), or throws when the client is stopped.
    mutating func onSubscriptionAdded(
        id: UInt64, _ requested: [TopicSubscription], sink: MessageSink
    ) throws(MQTTError) -> [TopicSubscription] {
        guard phase != .stopped && phase != .stopping else { throw .disconnected }
        var sink = sink
        sink.id = id
        subscriptions[id] = SubscriptionEntry(filters: requested, sink: sink)
        for request in requested {
            filters[request.filter, default: (0, request)].count += 1
            filters[request.filter]?.options = request
        }
        return phase == .connected ? requested : []
    }

    /// SUBSCRIBE `mid` was sent for a caller now awaiting its SUBACK.
    mutating func onSubscribeRegistered(mid: Int32, _ waiter: SubscribeWaiter) -> Effects {
        var effects = Effects()
        if case let .completed(codes) = subacks.removeValue(forKey: mid) {
            effects.subscribeResults.append((waiter, .success(codes)))
        } else if phase == .stopped || phase == .stopping {
            effects.subscribeResults.append((waiter, .failure(.disconnected)))
        } else {
            subacks[mid] = .waiting(waiter)
        }
        return effects
    }

    /// The network thread resubscribed `filter` after a reconnect as `mid`.
    mutating func onRestoreRegistered(mid: Int32, filter: String) {
        subacks[mid] = .restore(filter)
    }

    /// A subscription stream ended (consumer cancelled, unsubscribe, or deallocation). Returns the
    /// filters no other subscription uses, to unsubscribe.
    mutating func onSubscriptionRemoved(id: UInt64) -> Effects {
        var effects = Effects()
        guard let entry = subscriptions.removeValue(forKey: id) else { return effects }
        effects.finishSubscriptions.append(entry.sink)
        for request in entry.filters {
            guard let current = filters[request.filter] else { continue }
            if current.count <= 1 {
                filters[request.filter] = nil
                if phase == .connected { effects.unsubscribe.append(request.filter) }
            } else {
                filters[request.filter]?.count = current.count - 1
            }
        }
        return effects
    }

    mutating func onListenerAdded(id: UInt64, _ continuation: AsyncStream<ConnectionEvent>.Continuation) -> Bool {
        guard phase != .stopped else { return false }
        listeners[id] = continuation
        return true
    }

    mutating func onListenerRemoved(id: UInt64) {
        listeners[id] = nil
    }

    /// `disconnect()` gave up waiting for the network thread (stuck in a blocking TCP connect to an
    /// unresponsive host): its waiter is resumed now; the thread finishes on its own later.
    mutating func onDisconnectTimedOut(id: UInt64) -> Effects {
        var effects = Effects()
        guard let waiter = stopWaiters.removeValue(forKey: id) else { return effects }
        effects.stopWaiters = [waiter]
        if let connecting = connectWaiter {
            // connect() is stuck in the same blocking call: it fails now rather than minutes later.
            connectWaiter = nil
            effects.connectResult = (connecting, .failure(.disconnected))
        }
        return effects
    }

    /// The client was dropped without `disconnect()`: stop the network thread (nobody waits for it).
    mutating func onDropped() -> Bool {
        switch phase {
        case .idle where !started, .stopped, .stopping:
            return false
        case .idle, .connecting, .connected, .backingOff:
            phase = .stopping
            return true
        }
    }

    /// `disconnect()` was called. `wasRunning` is false when there is no network thread to wait for.
    mutating func onDisconnectRequested(id: UInt64, _ waiter: CheckedContinuation<Void, Never>) -> (Effects, wasRunning: Bool) {
        switch phase {
        case .stopped:
            var effects = Effects()
            effects.stopWaiters = [waiter]
            return (effects, false)
        case .idle where !started:
            phase = .stopped
            var effects = finishEverything(with: .disconnected)
            effects.stopWaiters = [waiter]
            return (effects, false)
        case .idle, .connecting, .connected, .backingOff, .stopping:
            phase = .stopping
            stopWaiters[id] = waiter
            return (Effects(), true)
        }
    }

    // MARK: - Network thread side

    /// The network thread asks what to do next.
    enum NextStep: Equatable {
        /// Open a socket, not before `notBefore` (nil: now).
        case connect(first: Bool, notBefore: ContinuousClock.Instant?)
        case loop
        case exit
    }

    var nextStep: NextStep {
        switch phase {
        case .idle, .backingOff: return .connect(first: !hasConnected && attempt == 0, notBefore: reconnectAt)
        case .connecting, .connected: return .loop
        case .stopping, .stopped: return .exit
        }
    }

    /// Opening the socket failed before any CONNACK.
    mutating func onConnectFailed(_ error: MQTTError, now: ContinuousClock.Instant, random: Double) -> Effects {
        if phase == .stopping { return Effects() }
        if !hasConnected, let waiter = connectWaiter {
            // The first connect fails fast and for good: the caller learns why at once.
            connectWaiter = nil
            phase = .stopping
            var effects = Effects()
            effects.connectResult = (waiter, .failure(error))
            return effects
        }
        return scheduleReconnect(reason: error.description, now: now, random: random, refused: false)
    }

    /// The socket is open; CONNACK is awaited.
    mutating func onSocketOpened() {
        if phase == .backingOff || phase == .idle { phase = .connecting }
    }

    /// CONNACK arrived. `reasonCode` 0 is success.
    mutating func onConnack(
        reasonCode: Int, reason: String, sessionPresent: Bool, limits newLimits: BrokerLimits,
        now: ContinuousClock.Instant, random: Double
    ) -> Effects {
        var effects = Effects()
        guard reasonCode == 0 else {
            let error = MQTTError.connectionRefused(reasonCode: reasonCode, reason: reason)
            if !hasConnected, let waiter = connectWaiter {
                connectWaiter = nil
                phase = .stopping
                effects.connectResult = (waiter, .failure(error))
                return effects
            }
            return scheduleReconnect(reason: error.description, now: now, random: random, refused: true)
        }
        guard phase != .stopping else { return effects }
        phase = .connected
        hasConnected = true
        attempt = 0
        limits = newLimits
        if let waiter = connectWaiter {
            connectWaiter = nil
            effects.connectResult = (waiter, .success(()))
        }
        effects.subscribe = filters.values.map(\.options).sorted { $0.filter < $1.filter }
        effects.connectedSinks = subscriptions.values.map(\.sink).filter { $0.connected != nil }
        effects.events = [.connected(sessionPresent: sessionPresent)]
        effects.listeners = Array(listeners.values)
        return effects
    }

    /// The connection ended after its socket was opened (broker gone, keepalive, CONNACK refused, or the
    /// DISCONNECT written after `disconnect()`).
    /// `cause` is what a first `connect()` fails with if the connection ends before CONNACK.
    mutating func onConnectionLost(
        reason: String, cause: MQTTError? = nil, now: ContinuousClock.Instant, random: Double
    ) -> Effects {
        generation += 1
        var effects = Effects()
        // QoS 0 messages not yet written died with the socket; QoS ≥ 1 stay queued in libmosquitto and are
        // sent again on the next connection, so their callers keep waiting.
        for (mid, entry) in publishes {
            switch entry {
            case let .waiting(qos, waiter) where qos == .atMostOnce:
                publishes[mid] = nil
                effects.publishResults.append((waiter, .failure(.connectionLost)))
            case .cancelled(qos: .atMostOnce):
                publishes[mid] = nil  // its acknowledgement died with the socket
            default:
                break
            }
        }
        // SUBACKs that will never come: the next connection subscribes every live filter anyway.
        for (mid, entry) in subacks {
            subacks[mid] = nil
            if case let .waiting(waiter) = entry { effects.subscribeResults.append((waiter, .success([]))) }
        }
        switch phase {
        case .idle, .backingOff, .stopped:
            return effects
        case .stopping:
            return effects
        case .connecting:
            if !hasConnected, let waiter = connectWaiter {
                connectWaiter = nil
                phase = .stopping
                effects.connectResult = (waiter, .failure(cause ?? .unreachable(host: host, port: port, detail: reason)))
                return effects
            }
        case .connected:
            effects.events.append(.disconnected(reason: reason))
        }
        let next = scheduleReconnect(reason: reason, now: now, random: random, refused: false)
        effects.events += next.events
        effects.listeners = next.listeners
        return effects
    }

    mutating func onPublishAcknowledged(mid: Int32, reasonCode: Int, topic: String?) -> Effects {
        var effects = Effects()
        let result: Result<PublishReceipt, MQTTError>
        switch reasonCode {
        case 0..<128: result = .success(PublishReceipt(reasonCode: reasonCode))
        case 135: result = .failure(.notAuthorized(topic: topic ?? ""))
        case 149: result = .failure(.payloadTooLarge(size: -1, limit: limits.maximumPacketSize ?? -1))
        default: result = .failure(.publishRefused(topic: topic ?? "", reasonCode: reasonCode))
        }
        switch publishes.removeValue(forKey: mid) {
        case let .waiting(_, waiter): effects.publishResults.append((waiter, result))
        case .cancelled, .completed: break
        case nil: publishes[mid] = .completed(result)
        }
        return effects
    }

    mutating func onSubscribeAcknowledged(mid: Int32, codes: [Int]) -> Effects {
        var effects = Effects()
        switch subacks.removeValue(forKey: mid) {
        case let .waiting(waiter):
            effects.subscribeResults.append((waiter, .success(codes)))
        case let .restore(filter):
            if let code = codes.first, code >= 128 {
                effects.events = [.subscriptionRestoreFailed(filter: filter, reasonCode: code)]
                effects.listeners = Array(listeners.values)
            }
        case .completed, nil:
            subacks[mid] = .completed(codes)
        }
        return effects
    }

    /// Which subscription streams receive a message on `topic`. With `remember` false (a retained
    /// message: each topic of a subscription's replay comes once) the route is not added to the table,
    /// where a replay of a hundred records would only push out the routes of live traffic.
    ///
    /// The one input that returns its action alone, not in ``Effects``: it runs for every message, and
    /// building and destroying that large value cost more than the look-up.
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
        phase = .stopped
        var effects = finishEverything(with: .disconnected)
        effects.stopWaiters = Array(stopWaiters.values)
        stopWaiters = [:]
        return effects
    }

    // MARK: - Helpers

    private mutating func scheduleReconnect(reason: String, now: ContinuousClock.Instant, random: Double, refused: Bool) -> Effects {
        attempt += 1
        phase = .backingOff
        // A refused CONNACK (bad credentials, banned) will not fix itself quickly: wait the longest delay.
        let delay = refused ? backoff.maximum : backoff.delay(attempt: attempt, random: random)
        var effects = Effects()
        effects.events = [.reconnecting(attempt: attempt, delay: delay)]
        effects.listeners = Array(listeners.values)
        reconnectAt = now + delay
        return effects
    }

    private mutating func finishEverything(with error: MQTTError) -> Effects {
        var effects = Effects()
        if let waiter = connectWaiter {
            connectWaiter = nil
            effects.connectResult = (waiter, .failure(error))
        }
        for (_, entry) in publishes {
            if case let .waiting(_, waiter) = entry { effects.publishResults.append((waiter, .failure(error))) }
        }
        publishes = [:]
        for (_, entry) in subacks {
            if case let .waiting(waiter) = entry { effects.subscribeResults.append((waiter, .failure(error))) }
        }
        subacks = [:]
        effects.finishSubscriptions = subscriptions.values.map(\.sink)
        subscriptions = [:]
        filters = [:]
        effects.listeners = Array(listeners.values)
        effects.finishListeners = true
        listeners = [:]
        return effects
    }
}
