/// The connection's logic, as a value: a ``State`` whose cases carry their own data, and one
/// `mutating func on…` per input that returns what to do: an ``Action``, its effects in the order to run
/// them. It never calls libmosquitto and never resumes anything itself; ``MosquittoConnection`` runs the
/// effects (`perform`) after releasing the lock that guards this value.
struct ConnectionStateMachine {
    typealias ConnectWaiter = CheckedContinuation<Result<Void, MQTTError>, Never>
    /// Who is told a publish's outcome. It is told exactly once because this machine holds it in one
    /// place — a `waiting` entry, taken out when it goes into an effect (acknowledged, failed, cancelled,
    /// or the connection closed) — and effects are run once.
    enum PublishWaiter: Sendable {
        /// A task awaiting it. Unchecked, unlike the other continuations: one is made for every reliable
        /// message sent, and the machine guarantees the single resume.
        case task(UnsafeContinuation<Result<PublishReceipt, MQTTError>, Never>)
        /// A function called where the outcome becomes known (see ``MQTTClient/onOutcome(of:_:)``).
        case handler(@Sendable (Result<PublishReceipt, MQTTError>) -> Void)
    }
    typealias SubscribeWaiter = CheckedContinuation<Result<[Int], MQTTError>, Never>
    typealias StopWaiter = CheckedContinuation<Void, Never>
    typealias Listener = AsyncStream<ConnectionEvent>.Continuation

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

    /// One thing to do after an input, outside the lock.
    enum Effect {
        case resumeConnect(ConnectWaiter, Result<Void, MQTTError>)
        case resumePublish(PublishWaiter, Result<PublishReceipt, MQTTError>)
        case resumeSubscribe(SubscribeWaiter, Result<[Int], MQTTError>)
        case resumeStop(StopWaiter)
        /// Yield the event to these listeners of ``MQTTClient/events()``.
        case announce(ConnectionEvent, to: [Listener])
        /// Tell a subscription of a new connection, with CONNACK's session-present flag.
        case tellConnected(MessageSink, sessionPresent: Bool)
        /// Subscribe a live filter again on a new connection, then ``onRestoreRegistered(mid:filter:)``.
        case restore(TopicSubscription)
        case deliver(MQTTMessage, to: [MessageSink])
        /// Tell a sink that the burst its messages came in is over (``MessageSink/endOfBurst``).
        case endBurst(MessageSink)
        case finishSubscription(MessageSink)
        case finishListeners([Listener])
        /// Start the network thread; it runs until ``nextStep`` says exit.
        case startNetworkThread
        /// Wake the network thread to stop (the state is stopping already), as `Stop` says.
        case stopNetworkThread(Stop)
        /// Send UNSUBSCRIBE for filters no live subscription uses any more.
        case unsubscribe([String])
        /// The answer to the caller of the input, which acts on it; an input gives at most one, last.
        case reply(Reply)
    }

    /// What an input asks for, in the order to do it.
    typealias Action = [Effect]

    /// The answer to the input's caller: hand the PUBLISH to libmosquitto (it goes out on connection
    /// `generation`), send SUBSCRIBE for these filters now, or fail the request with this error.
    enum Reply: Equatable {
        case publish(generation: Int)
        case subscribe([TopicSubscription])
        case refuse(MQTTError)
    }

    /// How the network thread stops: with DISCONNECT (the broker keeps the session for its expiry
    /// interval and does not publish the will), with DISCONNECT that also ends the session (MQTT 5), or
    /// aborting without one, as in a crash (the broker publishes the will).
    enum Stop: Equatable { case disconnect, expireSession, abort }

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
        /// The caller stopped waiting: the SUBACK, when it comes, is dropped.
        case cancelled
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
    /// The sinks that received messages since the last end of a burst and want to hear of it, and how
    /// many messages that was.
    private var burst: (sinks: [MessageSink], messages: Int) = ([], 0)
    private var subscriptions: [UInt64: SubscriptionEntry] = [:] {
        didSet { routes = [:] }
    }
    /// Which sinks each recently received topic goes to: an application's topics repeat (one per sender
    /// and kind), so most messages skip matching every filter. Emptied whenever a subscription comes or
    /// goes, and past ``maximumRoutes``: enough for a small group's topics, and small, as a process may
    /// hold a thousand connections (in a group of a thousand a miss costs matching a handful of filters).
    private(set) var routes: [String: [MessageSink]] = [:]
    static let maximumRoutes = 32
    /// The listeners of ``MQTTClient/events()``, under the IDs their sequences remove them by.
    private var listeners: [UInt64: Listener] = [:]
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

    var isConnected: Bool { if case .connected = state { true } else { false } }
    /// Whether SUBSCRIBE and UNSUBSCRIBE can be sent: the socket is open, CONNACK may still be awaited.
    private var isSocketOpen: Bool {
        switch state {
        case .connected, .reconnecting, .firstConnect(_, socketOpen: true): true
        case .idle, .firstConnect(_, socketOpen: false), .backingOff, .stopping, .stopped: false
        }
    }
    var isStopped: Bool { if case .stopped = state { true } else { false } }
    /// Whether the client was stopped or is stopping: nothing new starts.
    private var isEnding: Bool { if case .stopping = state { true } else { isStopped } }

    /// Every filter some live subscription uses, each with the options it was last subscribed with.
    var liveFilters: [TopicSubscription] {
        var newest: [String: TopicSubscription] = [:]
        for id in subscriptions.keys.sorted() {
            for request in subscriptions[id]!.filters { newest[request.filter] = request }
        }
        return newest.values.sorted { $0.filter < $1.filter }
    }

    // MARK: - Caller side

    /// `connect()` was called, from a task `cancelled` already or not: the network thread starts. Once
    /// cancelled, the thread exits at once and the connect fails with ``MQTTError/cancelled`` when it has
    /// ended, as a cancelled first connect does. A second call fails: the client was already started.
    mutating func onConnectRequested(_ waiter: ConnectWaiter, cancelled: Bool = false) -> Action {
        guard case .idle = state else {
            return [.resumeConnect(waiter, .failure(.invalidConfiguration("connect() was already called on this client")))]
        }
        state =
            cancelled
            ? .stopping(connectWaiter: waiter, connectFailure: .cancelled, stopWaiters: [:]) : .firstConnect(waiter, socketOpen: false)
        return [.startNetworkThread]
    }

    /// The task waiting in the first `connect()` was cancelled: the network thread stops, and the connect
    /// fails with ``MQTTError/cancelled`` once the thread has ended. Once the first connect is over (or
    /// before it started), nothing changes.
    mutating func onConnectCancelled() -> Action {
        guard case let .firstConnect(waiter, _) = state else { return [] }
        state = .stopping(connectWaiter: waiter, connectFailure: .cancelled, stopWaiters: [:])
        return [.stopNetworkThread(.disconnect)]
    }

    /// A PUBLISH of `size` bytes at `qos` is to be handed to libmosquitto: replies with the connection
    /// generation it is sent on, or refuses it. QoS ≥ 1 may be queued while reconnecting (libmosquitto
    /// sends it once connected); QoS 0 only goes out on a live connection.
    func onPublishRequested(qos: QoS, retain: Bool, size: Int) -> Action {
        switch state {
        case .stopping, .stopped: return [.reply(.refuse(.disconnected))]
        case .idle: return [.reply(.refuse(.notConnected))]
        case .firstConnect, .backingOff, .reconnecting:
            if qos == .atMostOnce { return [.reply(.refuse(.notConnected))] }
        case .connected: break
        }
        if retain && !limits.retainAvailable { return [.reply(.refuse(.retainUnavailable))] }
        if let limit = limits.maximumPacketSize, size > limit { return [.reply(.refuse(.payloadTooLarge(size: size, limit: limit)))] }
        return [.reply(.publish(generation: generation))]
    }

    /// A publish was handed to libmosquitto as message `mid` while the connection was at `generation`,
    /// and its sender now waits for the outcome — unless its task was `cancelled` already. Resumes the
    /// outcomes known now (none: the sender waits).
    mutating func onPublishRegistered(
        mid: Int32, qos: QoS, generation sentAt: Int, cancelled: Bool = false, _ waiter: PublishWaiter
    ) -> Action {
        var action: Action = []
        switch publishes.removeValue(forKey: mid) {
        case let .completed(result):
            return [.resumePublish(waiter, result)]
        case let .waiting(_, older):
            // Only if libmosquitto reused the ID of a message still awaited: that waiter cannot be told
            // its outcome any more; it fails rather than waiting forever.
            action.append(.resumePublish(older, .failure(.connectionLost)))
        case .cancelled, nil:  // a cancelled entry belongs to an older message
            break
        }
        switch state {
        case .stopping, .stopped:
            action.append(.resumePublish(waiter, .failure(.disconnected)))
        case _ where qos == .atMostOnce && sentAt != generation:
            action.append(.resumePublish(waiter, .failure(.connectionLost)))
        case _ where cancelled:
            publishes[mid] = .cancelled(qos: qos)  // its acknowledgement is still to come: drop it then
            action.append(.resumePublish(waiter, .failure(.cancelled)))
        default:
            publishes[mid] = .waiting(qos: qos, waiter)
        }
        return action
    }

    /// Nobody will await publish `mid` (sent at `qos`): its acknowledgement, if any comes, is dropped.
    mutating func onPublishDetached(mid: Int32, qos: QoS) {
        switch publishes[mid] {
        case .completed: publishes[mid] = nil
        case nil: publishes[mid] = .cancelled(qos: qos)
        case .waiting, .cancelled: break  // an older message's entry: it is not ours to change
        }
    }

    /// The task awaiting publish `mid` was cancelled: it fails with ``MQTTError/cancelled``.
    mutating func onPublishCancelled(mid: Int32) -> Action {
        // Not registered yet (the task sees its cancellation when it registers), or over already: nothing
        // to record — an entry would outlive the message and meet a later one that reuses its ID.
        guard case let .waiting(qos, waiter) = publishes[mid] else { return [] }
        publishes[mid] = .cancelled(qos: qos)  // its acknowledgement still comes: not one for a later message
        return [.resumePublish(waiter, .failure(.cancelled))]
    }

    /// A new subscription: replies with the filters to subscribe now — none while disconnected, the next
    /// connection subscribes them — or refuses it once the client is stopping.
    mutating func onSubscriptionAdded(id: UInt64, _ requested: [TopicSubscription], sink: MessageSink) -> Action {
        guard !isEnding else { return [.reply(.refuse(.disconnected))] }
        var sink = sink
        sink.id = id
        subscriptions[id] = SubscriptionEntry(filters: requested, sink: sink, filterBytes: requested.map { Array($0.filter.utf8) })
        return [.reply(.subscribe(isSocketOpen ? requested : []))]
    }

    /// SUBSCRIBE `mid` was sent for a caller now awaiting its SUBACK: resumed at once if it came already,
    /// the client is stopping, or the caller's task is `cancelled` already.
    mutating func onSubscribeRegistered(mid: Int32, cancelled: Bool = false, _ waiter: SubscribeWaiter) -> Action {
        if case let .completed(codes) = subacks.removeValue(forKey: mid) { return [.resumeSubscribe(waiter, .success(codes))] }
        guard !isEnding else { return [.resumeSubscribe(waiter, .failure(.disconnected))] }
        guard !cancelled else {
            subacks[mid] = .cancelled
            return [.resumeSubscribe(waiter, .failure(.cancelled))]
        }
        subacks[mid] = .waiting(waiter)
        return []
    }

    /// The task awaiting SUBACK `mid` was cancelled: it fails with ``MQTTError/cancelled`` now, and the
    /// SUBACK is dropped when it comes (a frozen broker may never send it).
    mutating func onSubscribeCancelled(mid: Int32) -> Action {
        guard case let .waiting(waiter) = subacks[mid] else { return [] }
        subacks[mid] = .cancelled
        return [.resumeSubscribe(waiter, .failure(.cancelled))]
    }

    /// The network thread resubscribed `filter` after a reconnect as `mid` (``Effect/restore(_:)``).
    mutating func onRestoreRegistered(mid: Int32, filter: String) {
        subacks[mid] = .restore(filter)
    }

    /// A subscription ended (consumer cancelled, unsubscribe, or deallocation; whichever comes first —
    /// the others find nothing to do): the filters no other subscription uses are unsubscribed while the
    /// socket is open (CONNACK may still be awaited; without a socket the next connection restores only
    /// live filters), then its sink is finished.
    mutating func onSubscriptionRemoved(id: UInt64) -> Action {
        guard let entry = subscriptions.removeValue(forKey: id) else { return [] }
        let stillUsed = Set(subscriptions.values.flatMap { $0.filters.map(\.filter) })
        let unused = Set(entry.filters.map(\.filter)).subtracting(stillUsed)
        return (isSocketOpen && !unused.isEmpty ? [.unsubscribe(unused.sorted())] : []) + [.finishSubscription(entry.sink)]
    }

    /// A listener of connection events, which its sequence removes under `id`; finished at once when the
    /// client is stopped.
    mutating func onListenerAdded(id: UInt64, _ listener: Listener) -> Action {
        guard !isStopped else { return [.finishListeners([listener])] }
        listeners[id] = listener
        return []
    }

    /// A listener's sequence ended.
    mutating func onListenerRemoved(id: UInt64) {
        listeners[id] = nil
    }

    /// `disconnect()` (or `abort()`, as `stop` says) was called: the network thread stops and `waiter` is
    /// resumed when it has ended — at once when there is none.
    mutating func onDisconnectRequested(id: UInt64, _ waiter: StopWaiter, stop: Stop) -> Action {
        switch state {
        case .stopped: return [.resumeStop(waiter)]
        case .idle: return self.stop() + [.resumeStop(waiter)]
        case .firstConnect, .connected, .backingOff, .reconnecting, .stopping: return stopRunning(stop, waiter: [id: waiter])
        }
    }

    /// `disconnect()` gave up waiting for the network thread (stuck in a blocking TCP connect to an
    /// unresponsive host): its waiter is resumed now, and so is a `connect()` stuck in the same call;
    /// the thread finishes on its own later. Nothing to do when the thread ended first.
    mutating func onDisconnectTimedOut(id: UInt64) -> Action {
        guard case .stopping(let connecting, let failure, var waiters) = state, let waiter = waiters.removeValue(forKey: id) else {
            return []
        }
        state = .stopping(connectWaiter: nil, connectFailure: nil, stopWaiters: waiters)
        return (connecting.map { [.resumeConnect($0, .failure(failure ?? .disconnected))] } ?? []) + [.resumeStop(waiter)]
    }

    /// The client was dropped without `disconnect()`: a running network thread stops (nobody waits for it).
    mutating func onDropped() -> Action {
        switch state {
        case .idle, .stopping, .stopped: return []
        case .firstConnect, .connected, .backingOff, .reconnecting: return stopRunning(.disconnect)
        }
    }

    // MARK: - Network thread side

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

    /// Opening the socket failed before any CONNACK. Only the network thread's connect step comes here
    /// (``nextStep``), in the first connect or backing off — or stopping, when `disconnect()` came
    /// meanwhile: nothing changes then.
    mutating func onConnectFailed(_ error: MQTTError, now: ContinuousClock.Instant, random: Double) -> Action {
        switch state {
        case let .firstConnect(waiter, socketOpen: false):
            return failFirstConnectOrMoveOn(waiter, error)
        case let .backingOff(attempt, _):
            return scheduleReconnect(attempt: attempt + 1, now: now, random: random)
        case .stopping:
            return []
        case .idle, .firstConnect(_, socketOpen: true), .connected, .reconnecting, .stopped:
            preconditionFailure("a connect failed outside the network thread's connect step: \(state)")
        }
    }

    /// The socket is open, CONNECT queued, and the connect step already sent SUBSCRIBE for `restored`,
    /// the ``liveFilters`` it read when the socket opened; CONNACK is awaited. Only the connect step comes
    /// here, as for ``onConnectFailed(_:now:random:)``. Restores the filters added since, and unsubscribes
    /// those removed since.
    ///
    /// Subscriptions go right behind CONNECT (MQTT lets a client send before CONNACK): a message published
    /// once the connection is `.reconnecting` reaches the broker after them, and one published while no
    /// socket was open waits in libmosquitto until CONNACK, so that a subscriber gets its own retained
    /// messages live, not back in the replay of its resubscription. (A publish that races the socket's
    /// opening itself, microseconds long, can still precede them.) From here on a new subscription is sent
    /// at once.
    mutating func onSocketOpened(restored: [TopicSubscription]) -> Action {
        switch state {
        case let .firstConnect(waiter, socketOpen: false): state = .firstConnect(waiter, socketOpen: true)
        case let .backingOff(attempt, _): state = .reconnecting(attempt: attempt)
        case .stopping: return []
        case .idle, .firstConnect(_, socketOpen: true), .connected, .reconnecting, .stopped:
            preconditionFailure("a socket opened outside the network thread's connect step: \(state)")
        }
        let live = liveFilters
        let gone = Set(restored.map(\.filter)).subtracting(live.map(\.filter))
        return live.filter { !restored.contains($0) }.map(Effect.restore) + (gone.isEmpty ? [] : [.unsubscribe(gone.sorted())])
    }

    /// CONNACK arrived. `reasonCode` 0 is success: the subscriptions (restored already, see
    /// ``onSocketOpened(restored:)``) hear of the new connection before anyone else does (a first
    /// `connect()` returns, `.connected` is announced), and before its replay of retained messages
    /// arrives. No CONNACK comes before `connect()`; one after `disconnect()` (or a cancelled connect)
    /// changes nothing.
    mutating func onConnack(
        reasonCode: Int, reason: String, sessionPresent: Bool, limits: BrokerLimits,
        now: ContinuousClock.Instant, random: Double
    ) -> Action {
        var connecting: ConnectWaiter?
        switch state {
        case .idle:
            preconditionFailure("CONNACK before connect()")
        case .connected, .stopping, .stopped:
            return []
        case let .firstConnect(waiter, _):
            guard reasonCode == 0 else {
                return failFirstConnect(waiter, .connectionRefused(reasonCode: reasonCode, reason: reason))
            }
            connecting = waiter
        case let .backingOff(attempt, _), let .reconnecting(attempt):
            // A refused CONNACK (bad credentials, banned) will not fix itself quickly: wait the longest.
            guard reasonCode == 0 else { return scheduleReconnect(attempt: attempt + 1, now: now, random: random, delay: backoff.maximum) }
        }
        state = .connected
        self.limits = limits
        self.limits.retainAvailable = limits.retainAvailable && retainedMessages
        let told = subscriptions.values.map(\.sink).filter { $0.connected != nil }
        return told.map { .tellConnected($0, sessionPresent: sessionPresent) }
            + (connecting.map { [.resumeConnect($0, .success(()))] } ?? [])
            + [.announce(.connected(to: currentServer, sessionPresent: sessionPresent), to: Array(listeners.values))]
    }

    /// The connection ended after its socket was opened (broker gone, keepalive, CONNACK refused, or the
    /// DISCONNECT written after `disconnect()`). `cause` is what a first `connect()` fails with if the
    /// connection ends before CONNACK. Reported by the disconnect callback, and by the loop when
    /// libmosquitto closed the socket without it: once reported (backing off, stopping, stopped), it
    /// changes nothing.
    mutating func onConnectionLost(
        reason: String, cause: MQTTError? = nil, now: ContinuousClock.Instant, random: Double
    ) -> Action {
        // Reported already (by the disconnect callback, then by the step that failed): the next broker of
        // the first connect is still to be tried.
        if case .firstConnect(_, socketOpen: false) = state { return [] }
        generation += 1
        var action: Action = []
        // QoS 0 messages not yet written died with the socket; QoS ≥ 1 stay queued in libmosquitto and are
        // sent again on the next connection, so their callers keep waiting.
        for (mid, entry) in publishes {
            switch entry {
            case let .waiting(.atMostOnce, waiter): action.append(.resumePublish(waiter, .failure(.connectionLost)))
            case .cancelled(qos: .atMostOnce): break  // its acknowledgement died with the socket
            case .waiting, .cancelled, .completed: continue
            }
            publishes[mid] = nil
        }
        // SUBACKs that will never come: the next connection subscribes every live filter anyway.
        for case let .waiting(waiter) in subacks.values { action.append(.resumeSubscribe(waiter, .success([]))) }
        subacks = [:]
        switch state {
        case .idle: preconditionFailure("a connection lost before connect()")
        case .backingOff, .stopping, .stopped: return action
        case let .firstConnect(waiter, _):
            let server = currentServer
            return action + failFirstConnectOrMoveOn(waiter, cause ?? .unreachable(host: server.host, port: server.port, detail: reason))
        case .connected:
            action.append(.announce(.disconnected(reason: reason), to: Array(listeners.values)))
            return action + scheduleReconnect(attempt: 1, now: now, random: random)
        case let .reconnecting(attempt):
            return action + scheduleReconnect(attempt: attempt + 1, now: now, random: random)
        }
    }

    /// Message `mid` was written (QoS 0) or acknowledged (QoS ≥ 1) at `now`, with `reasonCode`: its
    /// sender learns the outcome, now or when it registers (``onPublishRegistered(mid:qos:generation:cancelled:_:)``).
    mutating func onPublishAcknowledged(mid: Int32, reasonCode: Int, now: ContinuousClock.Instant) -> Action {
        let result: Result<PublishReceipt, MQTTError>
        switch reasonCode {
        case 0..<128: result = .success(PublishReceipt(reasonCode: reasonCode, completed: now))
        case 135: result = .failure(.notAuthorized(topic: ""))
        case 149: result = .failure(.payloadTooLarge(size: -1, limit: limits.maximumPacketSize ?? -1))
        default: result = .failure(.publishRefused(topic: "", reasonCode: reasonCode))
        }
        switch publishes.removeValue(forKey: mid) {
        case let .waiting(_, waiter): return [.resumePublish(waiter, result)]
        case .cancelled, .completed: return []
        case nil:
            publishes[mid] = .completed(result)
            return []
        }
    }

    /// SUBACK `mid` arrived: its caller is resumed (now, or when it registers), and a restored
    /// subscription the broker refused is announced.
    mutating func onSubscribeAcknowledged(mid: Int32, codes: [Int]) -> Action {
        switch subacks.removeValue(forKey: mid) {
        case let .waiting(waiter):
            return [.resumeSubscribe(waiter, .success(codes))]
        case let .restore(filter):
            guard let code = codes.first, code >= 128 else { return [] }
            return [.announce(.subscriptionRestoreFailed(filter: filter, reasonCode: code), to: Array(listeners.values))]
        case .cancelled:
            return []
        case .completed, nil:
            subacks[mid] = .completed(codes)
            return []
        }
    }

    /// A message arrived: it goes to the subscriptions whose filters match its topic. A retained
    /// message's route is not added to the table (each topic of a subscription's replay comes once, and
    /// a replay of a hundred records would only push out the routes of live traffic).
    /// The sinks that want to hear of the burst's end are noted (see ``onTurnEnded(moreWaiting:)``).
    mutating func onMessage(_ message: MQTTMessage) -> Action {
        let sinks = route(message.topic, remember: !message.retain)
        for sink in sinks where sink.endOfBurst != nil {
            burst.messages += 1
            if !burst.sinks.contains(where: { $0.id == sink.id }) { burst.sinks.append(sink) }
        }
        return [.deliver(message, to: sinks)]
    }

    /// The network thread ended a turn: the sinks of the messages read since the last end of a burst hear
    /// that it is over — unless `moreWaiting()` (asked only then) says that bytes which came with them
    /// already wait on the socket, to be read at once. A burst ends after ``maximumBurst`` messages even
    /// so, so that a continuous stream never holds back what its first messages changed.
    mutating func onTurnEnded(moreWaiting: () -> Bool) -> Action {
        guard !burst.sinks.isEmpty, burst.messages >= Self.maximumBurst || !moreWaiting() else { return [] }
        defer {
            burst.sinks.removeAll(keepingCapacity: true)  // a burst is often one message: no allocation for the next
            burst.messages = 0
        }
        return burst.sinks.map(Effect.endBurst)
    }

    static let maximumBurst = 64

    /// The network thread is exiting — only ever once, and only when stopping (``nextStep``): everything
    /// still open ends, and the waiters of the end are resumed last.
    mutating func onStopped() -> Action {
        guard case let .stopping(connecting, failure, waiters) = state else {
            preconditionFailure("the network thread ended while \(state)")
        }
        return stop(connecting, failure) + waiters.values.map(Effect.resumeStop)
    }

    // MARK: - Helpers

    private mutating func route(_ topic: String, remember: Bool) -> [MessageSink] {
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

    /// The first connect failed for good. Its caller learns why once the network thread has ended
    /// (``onStopped()``) and let go of the connection (see ``MosquittoConnection/startNetworkThread()``).
    private mutating func failFirstConnect(_ waiter: ConnectWaiter, _ error: MQTTError) -> Action {
        state = .stopping(connectWaiter: waiter, connectFailure: error, stopWaiters: [:])
        return []
    }

    /// A first connect that failed moves on to the next broker, when there is one it has not tried —
    /// unless the broker refused us or the TLS handshake failed: the others take the same credentials.
    private mutating func failFirstConnectOrMoveOn(_ waiter: ConnectWaiter, _ error: MQTTError) -> Action {
        switch error {
        case .connectionRefused, .tls: break
        default:
            if server + 1 < servers.count {
                server += 1
                state = .firstConnect(waiter, socketOpen: false)
                return []
            }
        }
        return failFirstConnect(waiter, error)
    }

    /// The next reconnect attempt, to the next broker when there are several.
    private mutating func scheduleReconnect(
        attempt: Int, now: ContinuousClock.Instant, random: Double, delay: Duration? = nil
    ) -> Action {
        server = (server + 1) % servers.count
        let delay = delay ?? backoff.delay(attempt: attempt, random: random)
        state = .backingOff(attempt: attempt, until: now + delay)
        return [.announce(.reconnecting(attempt: attempt, delay: delay), to: Array(listeners.values))]
    }

    /// Stops the running network thread; `waiter` waits for its end, with those waiting already.
    private mutating func stopRunning(_ stop: Stop, waiter: [UInt64: StopWaiter] = [:]) -> Action {
        switch state {
        case let .firstConnect(connecting, _):
            state = .stopping(connectWaiter: connecting, connectFailure: nil, stopWaiters: waiter)
        case let .stopping(connecting, failure, waiters):
            state = .stopping(connectWaiter: connecting, connectFailure: failure, stopWaiters: waiters.merging(waiter) { $1 })
        case .idle, .connected, .backingOff, .reconnecting, .stopped:
            state = .stopping(connectWaiter: nil, connectFailure: nil, stopWaiters: waiter)
        }
        return [.stopNetworkThread(stop)]
    }

    /// Ends everything still open: `connecting`, a first `connect()` waiting for the end, with `failure`,
    /// the rest with ``MQTTError/disconnected`` (the stop waiters are the caller's).
    private mutating func stop(_ connecting: ConnectWaiter? = nil, _ failure: MQTTError? = nil) -> Action {
        var action: Action = connecting.map { [.resumeConnect($0, .failure(failure ?? .disconnected))] } ?? []
        state = .stopped
        for case let .waiting(_, waiter) in publishes.values { action.append(.resumePublish(waiter, .failure(.disconnected))) }
        publishes = [:]
        for case let .waiting(waiter) in subacks.values { action.append(.resumeSubscribe(waiter, .failure(.disconnected))) }
        subacks = [:]
        action += subscriptions.values.map { .finishSubscription($0.sink) }
        subscriptions = [:]
        defer { listeners = [:] }
        return action + [.finishListeners(Array(listeners.values))]
    }
}
