import Foundation

/// Sends `Codable` messages to a session's participants and receives theirs — the counterpart of
/// GroupActivities' `GroupSessionMessenger`.
///
/// - Delivery: `.reliable` (MQTT QoS 1) messages from one sender arrive at each receiver in send order,
///   exactly once, also across reconnects (redeliveries are dropped by sequence number). `.unreliable`
///   (QoS 0) messages may be lost and are never redelivered.
/// - Routing: `.all` reaches every other joined participant; `.only(…)` is published on each recipient's
///   own topic, so no other connection ever receives it. The sender never receives its own messages.
/// - Types: a message reaches only the ``messages(of:)`` sequences of its own type (matched by type name).
public final class GroupSessionMessenger: Sendable {
    public enum DeliveryMode: Sendable, Hashable {
        /// MQTT QoS 1, ordered and deduplicated per sender.
        case reliable
        /// MQTT QoS 0: cheapest, may be lost (for positions while dragging, cursors…).
        case unreliable
    }

    /// Reliable messages of one sender that will never arrive: the sender can no longer re-send them (they
    /// left its outbox, or it crashed or left before it could). Comes in the place of those messages: a
    /// sender's messages that follow the gap come after it.
    public struct Gap: Sendable, Hashable {
        /// Who sent them.
        public let source: Participant
        /// How many messages are missing.
        public let count: Int64
        /// Sent to everyone (true), or to this participant only.
        public let toEveryone: Bool
    }

    /// Context of a received message.
    public struct MessageContext: Sendable, Hashable {
        /// Who sent it (taken from the topic, which a broker ACL can make unforgeable).
        public let source: Participant
    }

    public let deliveryMode: DeliveryMode
    /// Largest encoded message accepted by ``send(_:to:)`` (default 256 KiB, as on Apple platforms).
    public let maximumMessageSize: Int
    let core: SessionCore

    public init<A: GroupActivity>(session: GroupSession<A>, deliveryMode: DeliveryMode = .reliable, maximumMessageSize: Int = 256 * 1024) {
        self.core = session.core
        self.deliveryMode = deliveryMode
        self.maximumMessageSize = maximumMessageSize
    }

    /// The name under which messages of `T` travel (`"type"` in the envelope): the type's name without
    /// its module, e.g. `GalleryState` — what `String(describing: T.self)` prints.
    public static func typeName<T>(_ type: T.Type) -> String {
        // The runtime's cached name: the same text as `String(describing:)` (checked for nested, generic,
        // local and standard-library types in `MessageTypeNameTests`), without reflecting on the type for
        // every message sent.
        _typeName(type, qualified: false)
    }

    /// Sends `message` and returns when it was handed over (`.unreliable`) or acknowledged by the broker
    /// (`.reliable`). Throws ``GroupSyncError/notJoined`` before `join()`, ``GroupSyncError/messageTooLarge(size:limit:)``
    /// when the encoded envelope exceeds ``maximumMessageSize``. Cancelling the task while it waits for
    /// the acknowledgement throws ``GroupSyncError/cancelled``; the message, handed over, is still
    /// delivered (a reliable one in its place in the sender's order).
    public func send<Message: Codable & Sendable>(_ message: Message, to participants: Participants = .all) async throws(GroupSyncError) {
        try await core.send(
            type: GroupSessionMessenger.typeName(Message.self), envelope: try Wire.EnvelopeBytes(body: message), to: participants,
            reliable: deliveryMode == .reliable, limit: maximumMessageSize)
    }

    /// Sends raw bytes (base64 in the JSON envelope, type `Data`); receive them with `messages(of: Data.self)`.
    public func send(_ data: Data, to participants: Participants = .all) async throws(GroupSyncError) {
        try await core.send(
            type: "Data", envelope: try Wire.EnvelopeBytes(body: data), to: participants, reliable: deliveryMode == .reliable,
            limit: maximumMessageSize)
    }

    /// Messages of type `Message` from other participants, in arrival order, each with its sender. Ends
    /// when the session is invalidated or the iterating task is cancelled. A message that fails to decode
    /// as `Message` is skipped and counted in ``GroupCoordinator/rejectedMessageCount``; the sequence goes on.
    public func messages<Message: Codable & Sendable>(of type: Message.Type) -> GroupMessages<Message> {
        GroupMessages(consumer: .init(core.listen(.messages(type: GroupSessionMessenger.typeName(Message.self)))), core: core)
    }

    /// Every reliable message of another participant that will never arrive, whatever its type, as a
    /// ``Gap`` — never silence. Gaps are rare: they take a broker that lost acknowledged messages (killed
    /// before it saved them, or restarted without persistence) and a sender that could not re-send them.
    /// Ends like ``messages(of:)``.
    public func gaps() -> GroupUpdates<Gap> {
        GroupUpdates(core.listen(.gaps)) { update in if case let .gap(gap) = update { gap } else { nil } }
    }
}

/// Received messages of one type. See ``GroupSessionMessenger/messages(of:)``.
public struct GroupMessages<Message: Codable & Sendable>: AsyncSequence, Sendable {
    public typealias Element = (message: Message, context: GroupSessionMessenger.MessageContext)
    let consumer: Inbox<SessionStateMachine.Update>.Consumer
    let core: SessionCore

    public struct AsyncIterator: AsyncIteratorProtocol {
        let consumer: Inbox<SessionStateMachine.Update>.Consumer
        let core: SessionCore

        public mutating func next() async -> Element? {
            while let update = await consumer.inbox.next() {
                guard case let .message(inbound) = update else { continue }
                // Decoded here, in the consumer's task (never on the network thread), from where the
                // receiving connection found the body when it read the envelope.
                if let message = Wire.decodeBody(Message.self, from: inbound.payload[inbound.body]) {
                    return (message, .init(source: inbound.sender))
                }
                core.rejectBody(of: inbound)
            }
            return nil
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(consumer: consumer, core: core) }
}
