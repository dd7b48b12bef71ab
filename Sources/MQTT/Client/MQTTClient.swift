import Foundation

/// One MQTT connection through libmosquitto, usable from any task.
///
/// ```swift
/// let client = try MQTTClient(configuration: .init(url: "mqtt://127.0.0.1:1883"))
/// try await client.connect()
/// try await client.subscribe(to: [TopicSubscription("sensors/#")]) { messages in
///     try await client.publish(to: "sensors/1", payload: Data("21.5".utf8))
///     for await message in messages { print(message.topic, message.string ?? "") ; break }
/// }
/// await client.disconnect()
/// ```
///
/// After the first successful ``connect()``, the client reconnects by itself with exponential backoff and
/// jitter (``Configuration/reconnect``) and restores every live subscription; ``events()`` reports each
/// step. ``disconnect()`` ends it for good. Dropping the last reference also disconnects.
public final class MQTTClient: Sendable {
    public let configuration: Configuration
    let connection: MosquittoConnection

    /// Creates a client. Nothing touches the network until ``connect()``.
    public init(configuration: Configuration) throws(MQTTError) {
        self.configuration = configuration
        self.connection = try MosquittoConnection(configuration: configuration)
    }

    deinit {
        connection.update { $0.onDropped() }
    }

    /// Whether CONNACK was received and the connection is up now.
    public var isConnected: Bool { connection.state.withLock { $0.isConnected } }

    /// Whether retained messages are used: the broker stores them (its CONNACK did not say
    /// `retain_available 0`) and the configuration did not turn them off
    /// (``Configuration/retainedMessages``).
    public var retainAvailable: Bool { connection.state.withLock { $0.limits.retainAvailable } }

    /// The largest packet the broker accepts (its CONNACK's Maximum Packet Size); nil when it set none.
    public var maximumPacketSize: Int? { connection.state.withLock { $0.limits.maximumPacketSize } }

    /// Messages dropped because a subscription's consumer fell behind its buffer (see
    /// ``MQTTSubscription/BufferingPolicy``).
    public var droppedMessageCount: Int { connection.droppedMessages.load(ordering: .relaxed) }

    /// Connects and returns once the broker accepted (CONNACK). Fails at once, without retrying, when the
    /// broker is unreachable, refuses the credentials or the TLS handshake fails; reconnects after a
    /// successful first connection are automatic. Call it once.
    ///
    /// Cancelling the waiting task before CONNACK stops the attempt as ``disconnect()`` would (a
    /// DISCONNECT follows the CONNECT if the socket is open) and fails with ``MQTTError/cancelled`` once
    /// the network thread has ended — which can take about a second against a broker that never answers,
    /// or as long as the kernel's TCP connect to a host that never answers. The client is then stopped.
    /// Called from a task already cancelled, it fails with ``MQTTError/cancelled`` without an attempt.
    public func connect() async throws(MQTTError) {
        guard !Task.isCancelled else { throw .cancelled }
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { (waiter: ConnectionStateMachine.ConnectWaiter) in
                // Read under the lock: a cancellation that came before the attempt existed found nothing to stop.
                connection.update { $0.onConnectRequested(waiter, cancelled: Task.isCancelled) }
            }
        } onCancel: {
            connection.update { $0.onConnectCancelled() }
        }
        try result.get()
    }

    /// Closes the connection cleanly (DISCONNECT: the broker does not publish the will — unless, for a
    /// session that outlives the connection, a message arrives in the instant the socket closes), ends
    /// every subscription and event sequence, and fails pending operations with ``MQTTError/disconnected``.
    /// Idempotent; returns within two seconds even when the broker is unreachable or a connection attempt
    /// hangs (the network thread then finishes in the background).
    ///
    /// - Parameter expireSession: with a ``Configuration/sessionExpiry``, also tell the broker to discard
    ///   the session now (MQTT 5) instead of keeping it for the expiry interval.
    public func disconnect(expireSession: Bool = false) async {
        let connection = self.connection
        let id = connection.makeID()
        let timeout = Task {
            try? await Task.sleep(for: .seconds(2))
            connection.update { $0.onDisconnectTimedOut(id: id) }
        }
        await stop(expireSession ? .expireSession : .disconnect, id: id)
        timeout.cancel()
    }

    /// Stops the network thread as `stop` says, and waits for its end (or the timeout of the stop `id`).
    private func stop(_ stop: ConnectionStateMachine.Stop, id: UInt64) async {
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            connection.update { $0.onDisconnectRequested(id: id, waiter, stop: stop) }
        }
    }

    /// Publishes `payload` to `topic`.
    ///
    /// Returns when a QoS 0 message was written to the socket, and when a QoS 1 or 2 message was
    /// acknowledged by the broker. A QoS ≥ 1 publish made while the connection is down is queued and sent
    /// after the reconnect, in order; the call waits until then. Cancelling the waiting task returns
    /// ``MQTTError/cancelled`` but cannot recall a message already handed to the connection.
    @discardableResult
    public func publish(
        to topic: String, payload: Data, qos: QoS = .atLeastOnce, retain: Bool = false,
        properties: MQTTProperties = .init()
    ) async throws(MQTTError) -> PublishReceipt {
        let ticket = try enqueuePublish(to: topic, payload: payload, qos: qos, retain: retain, properties: properties)
        return try await acknowledgement(of: ticket)
    }

    /// A publish handed to the connection, whose acknowledgement can be awaited.
    package struct PublishTicket: Sendable {
        let mid: Int32
        let qos: QoS
        let generation: Int
        let topic: String
        let size: Int
    }

    /// The synchronous half of ``publish(to:payload:qos:retain:properties:)``: hands the message to the
    /// connection now, so that messages enqueued one after the other go out in that order.
    ///
    /// The calling thread writes it to the socket itself when it can, and libmosquitto then runs the
    /// callbacks of what it wrote on that thread (a publish's outcome handler, a lost connection). A
    /// caller that holds a lock such a callback may take passes `writeNow` false and calls ``flush()``
    /// once it released the lock. `payload` is `Data`, or an array for payloads written byte by byte.
    package func enqueuePublish(
        to topic: String, payload: some ContiguousBytes, qos: QoS, retain: Bool = false, properties: MQTTProperties = .init(),
        writeNow: Bool = true
    ) throws(MQTTError) -> PublishTicket {
        guard Topic.isValidName(topic) else { throw .invalidTopic(topic) }
        if configuration.protocolVersion == .v311 && !properties.isEmpty {
            throw .invalidConfiguration("MQTT 3.1.1 has no message properties")
        }
        return try payload.withUnsafeBytes { bytes in
            connection.publish(topic: topic, payload: bytes, qos: qos, retain: retain, properties: properties, writeNow: writeNow).map {
                mid, generation in
                PublishTicket(mid: mid, qos: qos, generation: generation, topic: topic, size: bytes.count)
            }
        }.get()
    }

    /// Writes what was enqueued with `writeNow` false (or wakes the network thread to).
    package func flush() { connection.writeFromCaller() }

    /// Gives up on a ticket's acknowledgement without waiting (a fire-and-forget publish): the client
    /// forgets it when it comes. Use this, ``acknowledgement(of:)`` or ``onOutcome(of:_:)`` once per ticket.
    package func detach(_ ticket: PublishTicket) {
        connection.state.withLock { $0.onPublishDetached(mid: ticket.mid, qos: ticket.qos) }
    }

    /// Hands a ticket's outcome to `handler` instead of awaiting it: called where the message is written
    /// (QoS 0: the network thread, or a publishing thread that holds no lock of its caller's, see
    /// ``enqueuePublish(to:payload:qos:retain:properties:writeNow:)``) or acknowledged (QoS ≥ 1: the
    /// network thread), or at once on this thread when its outcome is known already — its receipt's
    /// `completed` says when either way. `handler` must return at once (it can hold up the connection).
    /// Use this, ``detach(_:)`` or ``acknowledgement(of:)`` once per ticket.
    package func onOutcome(of ticket: PublishTicket, _ handler: @escaping @Sendable (Result<PublishReceipt, MQTTError>) -> Void) {
        connection.update { $0.onPublishRegistered(mid: ticket.mid, qos: ticket.qos, generation: ticket.generation, .handler(handler)) }
    }

    /// The asynchronous half: waits until the message was written (QoS 0) or acknowledged (QoS ≥ 1).
    package func acknowledgement(of ticket: PublishTicket) async throws(MQTTError) -> PublishReceipt {
        let result = await withTaskCancellationHandler {
            await withUnsafeContinuation { continuation in
                connection.update {
                    $0.onPublishRegistered(
                        mid: ticket.mid, qos: ticket.qos, generation: ticket.generation, cancelled: Task.isCancelled,
                        .task(continuation))
                }
            }
        } onCancel: {
            connection.update { $0.onPublishCancelled(mid: ticket.mid) }
        }
        switch result {
        case .success(let receipt): return receipt
        case .failure(.notAuthorized): throw .notAuthorized(topic: ticket.topic)
        case .failure(.publishRefused(_, let code)): throw .publishRefused(topic: ticket.topic, reasonCode: code)
        case .failure(.payloadTooLarge(_, let limit)): throw .payloadTooLarge(size: ticket.size, limit: limit)
        case .failure(let error): throw error
        }
    }

    /// Publishes UTF-8 text.
    @discardableResult
    public func publish(
        to topic: String, string: String, qos: QoS = .atLeastOnce, retain: Bool = false,
        properties: MQTTProperties = .init()
    ) async throws(MQTTError) -> PublishReceipt {
        try await publish(to: topic, payload: Data(string.utf8), qos: qos, retain: retain, properties: properties)
    }

    /// Subscribes to `subscriptions` and returns their messages once the broker acknowledged them
    /// (so retained messages and everything published afterwards are in the sequence).
    ///
    /// While disconnected it returns at once; the filters are subscribed on the next connection.
    /// Throws ``MQTTError/subscriptionRefused(filter:reasonCode:)`` when the broker refuses a filter, and
    /// ``MQTTError/cancelled`` at once when the waiting task is cancelled (a frozen broker may never answer):
    /// the subscription is then removed.
    public func subscribe(
        to subscriptions: [TopicSubscription], bufferingPolicy: MQTTSubscription.BufferingPolicy = .default
    ) async throws(MQTTError) -> MQTTSubscription {
        let (stream, continuation) = AsyncStream.makeStream(
            of: MQTTMessage.self, bufferingPolicy: bufferingPolicy.streamPolicy)
        let connection = self.connection
        let id = try await register(subscriptions, sink: .stream(continuation)) { id in
            continuation.onTermination = { _ in connection.update { $0.onSubscriptionRemoved(id: id) } }
        }
        return MQTTSubscription(stream: stream, id: id, connection: connection, filters: subscriptions)
    }

    /// Subscribes with a handler that the network thread calls for each message, in the broker's order,
    /// with no lock held — the shortest path from the socket to its consumer, for library code only.
    /// `handler` must return quickly: it must never block, await or run user code (hand that to a task).
    /// `onEnd` runs once when the subscription ends (``MessageHandlerSubscription/unsubscribe()`` or
    /// ``disconnect()``). `endOfBurst` runs on the network thread after messages that arrived together
    /// (nothing more waiting on the socket), so that their effects can be shown at once. Returns, like
    /// ``subscribe(to:bufferingPolicy:)``, once the broker acknowledged.
    ///
    /// `connected` runs on the network thread when the client has reconnected, at CONNACK, before any
    /// message of the new connection (the session-present flag).
    ///
    /// `whenSent` runs once the SUBSCRIBE packets were handed to the connection, before their SUBACKs are
    /// awaited: what it publishes reaches the broker after them, so the broker delivers every retained
    /// message of these filters to us before anything it sends in reaction — without a round trip
    /// in between.
    package func subscribe(
        to subscriptions: [TopicSubscription],
        handler: @escaping @Sendable (MQTTMessage) -> Void,
        endOfBurst: (@Sendable () -> Void)? = nil,
        connected: (@Sendable (_ sessionPresent: Bool) -> Void)? = nil,
        onEnd: @escaping @Sendable () -> Void = {},
        whenSent: () -> Void = {}
    ) async throws(MQTTError) -> MessageHandlerSubscription {
        let sink = MessageSink(
            deliver: {
                handler($0)
                return true
            }, finish: onEnd, endOfBurst: endOfBurst, connected: connected)
        let id = try await register(subscriptions, sink: sink, registered: { _ in }, whenSent: whenSent)
        return MessageHandlerSubscription(id: id, connection: connection)
    }

    /// Adds a subscription with its sink, sends SUBSCRIBE for the filters not subscribed yet — one packet
    /// per distinct QoS and options, all before awaiting any SUBACK — and waits for their SUBACKs.
    /// `registered` runs once the subscription exists, before anything is sent; `whenSent` once every
    /// SUBSCRIBE was handed to the connection.
    private func register(
        _ subscriptions: [TopicSubscription], sink: MessageSink, registered: (UInt64) -> Void,
        whenSent: () -> Void = {}
    ) async throws(MQTTError) -> UInt64 {
        for request in subscriptions where !Topic.isValidFilter(request.filter) {
            throw .invalidTopicFilter(request.filter)
        }
        let id = connection.makeID()
        let toSend: [TopicSubscription]
        switch connection.update({ $0.onSubscriptionAdded(id: id, subscriptions, sink: sink) }) {
        case let .subscribe(filters)?: toSend = filters
        case let .refuse(error)?: throw error
        case .publish?, nil: preconditionFailure("a subscription is answered with its filters or a refusal")
        }
        registered(id)
        var packets: [[TopicSubscription]] = []
        for request in toSend {
            if let index = packets.firstIndex(where: { $0[0].qos == request.qos && $0[0].optionBits == request.optionBits }) {
                packets[index].append(request)
            } else {
                packets.append([request])
            }
        }
        var sent: [(mid: Int32, filters: [TopicSubscription])] = []
        for packet in packets {
            switch connection.subscribe(packet) {
            case .success(let mid?): sent.append((mid, packet))
            case .success(nil): break
            case .failure(let error):
                connection.update { $0.onSubscriptionRemoved(id: id) }
                throw error
            }
        }
        whenSent()
        var failure: MQTTError?
        for (mid, filters) in sent {  // every SUBACK is claimed, even after a refusal or a cancellation
            let codes = await withTaskCancellationHandler {
                await withCheckedContinuation { (waiter: ConnectionStateMachine.SubscribeWaiter) in
                    connection.update { $0.onSubscribeRegistered(mid: mid, cancelled: Task.isCancelled, waiter) }
                }
            } onCancel: {
                connection.update { $0.onSubscribeCancelled(mid: mid) }
            }
            switch codes {
            case .success(let codes):
                for (request, code) in zip(filters, codes) where code >= 128 && failure == nil {
                    failure =
                        code == 135 ? .notAuthorized(topic: request.filter) : .subscriptionRefused(filter: request.filter, reasonCode: code)
                }
            case .failure(let error):
                failure = failure ?? error
            }
        }
        if let failure {
            connection.update { $0.onSubscriptionRemoved(id: id) }
            throw failure
        }
        return id
    }

    /// Subscribes, runs `body` with the messages, and unsubscribes when `body` returns or throws.
    public func subscribe<Result: Sendable>(
        to subscriptions: [TopicSubscription], bufferingPolicy: MQTTSubscription.BufferingPolicy = .default,
        _ body: (MQTTSubscription) async throws -> Result
    ) async throws -> Result {
        let subscription = try await subscribe(to: subscriptions, bufferingPolicy: bufferingPolicy)
        defer { subscription.unsubscribe() }
        return try await body(subscription)
    }

    /// Connection events from now on, in order, until ``disconnect()``. Each call returns a new sequence;
    /// a consumer that falls 1,000 events behind loses the oldest.
    public func events() -> ConnectionEvents {
        let connection = self.connection
        let (stream, continuation) = AsyncStream.makeStream(of: ConnectionEvent.self, bufferingPolicy: .bufferingNewest(1_000))
        let id = connection.makeID()
        continuation.onTermination = { _ in connection.state.withLock { $0.onListenerRemoved(id: id) } }
        connection.update { $0.onListenerAdded(id: id, continuation) }
        return ConnectionEvents(stream: stream)
    }

    /// Test and demo hook: dies as a crashed process would — the socket closes without DISCONNECT (so
    /// the broker publishes the will) and the client never reconnects.
    package func abort() async {
        await stop(.abort, id: connection.makeID())
    }
}
