import Foundation

/// The JSON payloads of protocol version 1 (docs/PROTOCOL.md). Every payload carries `"v": 1`; a
/// payload with another version, or that fails to decode, is rejected and counted, never applied.
public enum Wire {
    public static let version = 1

    /// `…/presence/<participant>`, retained. Online while the connection lives; the connection's will
    /// replaces it with `"status": "lost"` and the same epoch. An empty payload means offline (clean exit).
    public struct Presence: Codable, Sendable, Hashable, Versioned {
        public var v = Wire.version
        public var participant: String
        public var status: Status
        /// Identifies the coordinator's connection, kept across its automatic reconnects (ms since 1970
        /// when the coordinator connected, increasing per participant): a will or a retained message with
        /// an older epoch never overrides a newer one.
        public var epoch: Int64
        public var name: String?

        public enum Status: String, Codable, Sendable { case online, lost }
    }

    /// `…/session/<session>`, retained: the announcement. An empty payload means the session ended.
    public struct Announcement: Codable, Sendable, Hashable, Versioned {
        public var v = Wire.version
        public var session: String
        public var activity: Activity
        public var createdBy: String
        /// ms since 1970.
        public var createdAt: Int64
        /// Increases with every activity change; the highest wins.
        public var revision: HLCTimestamp

        public struct Activity: Codable, Sendable, Hashable {
            /// The activity's `activityIdentifier`.
            public var type: String
            public var metadata: GroupActivityMetadata
            /// The activity value itself, as the app encoded it.
            public var data: JSONValue
        }
    }

    /// `…/s/<session>/member/<participant>`, retained: this participant joined with the connection
    /// `epoch`. An empty payload means it left.
    public struct Member: Codable, Sendable, Hashable, Versioned {
        public var v = Wire.version
        public var participant: String
        public var epoch: Int64
    }

    /// `…/s/<session>/state/<key>/<writer>`, retained: the writer's latest value for `key`. Readers keep,
    /// per key, the record with the largest clock.
    public struct StateRecord: Codable, Sendable, Hashable, Versioned {
        public var v = Wire.version
        public var key: String
        public var value: JSONValue
        public var clock: HLCTimestamp
    }

    /// `…/msg/all/<sender>` and `…/msg/to/<recipient>/<sender>`: an application message, or a control
    /// message whose type starts with `$`.
    public struct Envelope<Body: Codable & Sendable>: Codable, Sendable, Versioned {
        public var v = Wire.version
        /// The message type: the Swift type's name for app messages; `$catchup` for catch-up.
        public var type: String
        /// The sender's connection epoch.
        public var epoch: Int64
        /// Per sender, epoch and delivery mode: 1, 2, 3… Receivers drop a reliable message whose `seq` is
        /// not above the last one seen from that sender and epoch (a redelivery).
        public var seq: Int64
        public var reliable: Bool
        public var body: Body
    }

    /// The part of an ``Envelope`` read before its body's type is known.
    public struct EnvelopeHeader: Codable, Sendable, Hashable, Versioned {
        public var v: Int
        public var type: String
        public var epoch: Int64
        public var seq: Int64
        public var reliable: Bool
    }

    /// Body of `$catchup`: what a newcomer needs, sent by one existing participant to the newcomer only.
    public struct CatchUp: Codable, Sendable, Hashable {
        /// The winning record of every key.
        public var states: [StateRecord]
        /// The sender's view of who is active, with their connection epochs.
        public var members: [Member]
    }

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    public static func encode(_ value: some Encodable) throws(GroupSyncError) -> Data {
        do {
            return try encoder.encode(value)
        } catch {
            throw .encodingFailed(String(describing: error))
        }
    }

    /// A payload with a protocol version field.
    public protocol Versioned { var v: Int { get } }

    /// Decodes a payload of this protocol version; nil for anything else (too large, not JSON, wrong
    /// shape, other version).
    public static func decodeVersioned<T: Decodable & Versioned>(_ type: T.Type, from data: Data) -> T? {
        guard data.count <= maximumPayload, let value = decode(type, from: data), value.v == version else { return nil }
        return value
    }

    /// Larger payloads are rejected before parsing (10 MiB).
    public static let maximumPayload = 10 << 20

    /// One decoder for every payload (it holds no per-call state; making one per message showed up in
    /// profiles).
    static let decoder = JSONDecoder()

    public static func decode<T: Decodable>(_ type: T.Type, from data: Data) -> T? {
        try? decoder.decode(type, from: data)
    }

    /// Encodes any Codable app value as a ``JSONValue``.
    public static func jsonValue(_ value: some Encodable) throws(GroupSyncError) -> JSONValue {
        let data = try JSONBytesEncoder.encode(value)
        guard let json = JSONValue.parseFast(data) ?? decode(JSONValue.self, from: data) else { throw .encodingFailed("not JSON") }
        return json
    }

    /// Decodes an app value from a ``JSONValue``: directly when ``JSONValueDecoder`` can, through its
    /// JSON text and `JSONDecoder` otherwise (the same result either way).
    public static func value<T: Decodable>(_ type: T.Type, from json: JSONValue) -> T? {
        if let value = try? JSONValueDecoder.decode(type, from: json) { return value }
        guard let data = try? encoder.encode(json) else { return nil }
        return decode(type, from: data)
    }
}
