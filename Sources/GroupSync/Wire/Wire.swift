import Foundation

/// The JSON payloads of protocol version 2 (docs/PROTOCOL.md). Every payload carries `"v": 2`; a
/// payload with another version, or that fails to decode, is rejected and counted, never applied.
package enum Wire {
    package static let version = 2

    /// `…/presence/<participant>`, retained. Online while the connection lives; the connection's will
    /// replaces it with `"status": "lost"` and the same epoch. An empty payload means offline (clean exit).
    package struct Presence: Encodable, Sendable, Hashable {
        package var v = Wire.version
        package var participant: String
        package var status: Status
        /// Identifies the coordinator's connection, kept across its automatic reconnects (ms since 1970
        /// when the coordinator connected, increasing per participant): a will or a retained message with
        /// an older epoch never overrides a newer one.
        package var epoch: Int64
        package var name: String?
        /// How often the participant sends a ``Heartbeat`` (ms); nil when it sends none. Receivers judge
        /// its silence by this interval, not by their own.
        package var interval: Int64?

        package enum Status: String, Encodable, Sendable { case online, lost }
    }

    /// `…/alive/<participant>`, QoS 0, never retained: "this connection is alive", every `interval` ms.
    package struct Heartbeat: Encodable, Sendable, Hashable {
        package var v = Wire.version
        package var epoch: Int64
        package var interval: Int64
    }

    /// `…/session/<session>/<publisher>`, retained: one participant's copy of the announcement. The copy
    /// with the largest revision is the session's; one with `ended` says the session ended.
    package struct Announcement: Encodable, Sendable, Hashable {
        package var v = Wire.version
        package var session: String
        package var activity: Activity
        package var createdBy: String
        /// ms since 1970.
        package var createdAt: Int64
        /// Increases with every activity change; the highest wins.
        package var revision: HLCTimestamp
        /// Seconds every retained record of the session lives on the broker unless its owner refreshes it.
        package var ttl: Int64
        /// Present (true) on the copy of the participant that ended the session.
        package var ended: Bool?

        /// How long the session's retained records live after their last refresh.
        var lifetime: Duration { .seconds(max(ttl, 1)) }

        package struct Activity: Encodable, Sendable, Hashable {
            /// The activity's `activityIdentifier`.
            package var type: String
            package var metadata: GroupActivityMetadata
            /// The activity value itself, as the app encoded it.
            package var data: JSONValue
        }
    }

    /// `…/s/<session>/member/<participant>`, retained: this participant joined with the connection
    /// `epoch`. An empty payload means it left.
    package struct Member: Encodable, Sendable, Hashable {
        package var v = Wire.version
        package var participant: String
        package var epoch: Int64
    }

    /// `…/s/<session>/state/<key>/<writer>`, retained: the writer's latest value for `key`. Readers keep,
    /// per key, the record with the largest clock.
    package struct StateRecord: Encodable, Sendable, Hashable {
        package var v = Wire.version
        package var key: String
        package var value: JSONValue
        package var clock: HLCTimestamp
    }

    /// The header of an envelope, on `…/s/<session>/all/<sender>` and `…/to/<recipient>/<sender>`: an
    /// application message, or a control message whose type starts with `$`. Its `body` is read apart
    /// (``Wire/decodeEnvelope(_:)``); ``EnvelopeBytes`` writes the whole envelope.
    package struct EnvelopeHeader: Sendable, Hashable {
        package var v = Wire.version
        /// The message type: the Swift type's name for app messages; `$catchup` and `$end` for control.
        package var type: String
        /// The sender's connection epoch.
        package var epoch: Int64
        /// A reliable app message's place in its stream (the sender's broadcasts, or its direct messages
        /// to one recipient: 1, 2, 3… per session and sender epoch); an unreliable one's number among the
        /// sender's unreliable messages; nil for a control message, which is in no stream.
        package var seq: Int64?
        package var reliable: Bool
        /// `"all"` on a broadcast re-sent to one receiver on its direct topic; nil otherwise (the topic says).
        package var stream: String?
    }

    /// `…/welcome/<recipient>/<sender>`, QoS 1, never retained: on a broker without retained messages,
    /// what a newcomer to the group would have read from them, sent by one participant that knows.
    package struct Welcome: Encodable, Sendable, Hashable {
        package var v = Wire.version
        /// The online presence of every participant the sender knows to be online, itself included.
        package var presences: [Presence]
        /// The current announcement of every live session the sender knows.
        package var sessions: [Announcement]
    }

    /// Body of `$catchup`: what a newcomer needs, sent by one existing participant to the newcomer only.
    package struct CatchUp: Encodable, Sendable, Hashable {
        /// The winning record of every key.
        package var states: [StateRecord]
        /// The sender's view of who is active, with their connection epochs.
        package var members: [Member]
        /// True on every part but the last, when the catch-up does not fit one message.
        package var more: Bool?
    }

    /// The writer of every payload: compact, keys sorted, `/` not escaped (docs/PROTOCOL.md).
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    /// The reader of app values (message bodies, activities, shared-state values) as the app's types.
    static let decoder = JSONDecoder()

    package static func encode(_ value: some Encodable) throws(GroupSyncError) -> Data {
        do {
            return try encoder.encode(value)
        } catch {
            throw .encodingFailed(String(describing: error))
        }
    }

    /// Larger payloads are rejected before parsing (10 MiB).
    package static let maximumPayload = 10 << 20

    /// What an MQTT packet holds besides a control message's body: the fixed header, a topic of at most 8
    /// identifiers, the properties and the envelope's header fields.
    static let envelopeAllowance = 2_048

    /// The bytes a message's list may take under the broker's Maximum Packet Size (nil: none set).
    static func budget(maximumPacketSize: Int?) -> Int { maximumPacketSize.map { $0 - envelopeAllowance } ?? maximumPayload }

    /// `items` in as few consecutive groups as fit `budget` encoded bytes each, the first one having
    /// `used` bytes taken already (by what only the first message carries). Always at least one group;
    /// an item above the budget alone makes a group of its own.
    static func groups<Item: Encodable>(_ items: [Item], budget: Int, used: Int) -> [[Item]] {
        var groups: [[Item]] = [[]]
        var size = used
        for item in items {
            let itemSize = ((try? encode(item).count) ?? 0) + 1
            if size + itemSize > budget && !groups[groups.count - 1].isEmpty {
                groups.append([])
                size = 64
            }
            groups[groups.count - 1].append(item)
            size += itemSize
        }
        return groups
    }

    /// A value read from a payload with the rules of docs/PROTOCOL.md ("Decoding rules").
    package protocol Readable {
        /// Builds the value from a parsed JSON value, or says why it is not one.
        init(json: JSONValue) throws(Rejection)
        /// Reads a whole payload.
        static func read(_ data: Data) throws(Rejection) -> Self
    }

    /// A protocol record: a JSON object, read field by field. Reading a whole payload takes the members
    /// of its top-level object without building that object.
    package protocol Record: Readable {
        /// Builds the record from an object's members, or says why they are not one.
        init(fields: Fields) throws(Rejection)
    }

    /// Reads `data` as a `T`; nil when it is rejected (``Readable/read(_:)`` says why).
    package static func decode<T: Readable>(_ type: T.Type, from data: Data) -> T? { try? T.read(data) }

    package static func jsonValue(_ value: some Encodable) throws(GroupSyncError) -> JSONValue {
        let data = try encode(value)
        guard let json = try? JSONParser.parse(data) else { throw .encodingFailed("not strict JSON") }
        return json
    }

    /// Decodes an app value from a ``JSONValue`` with `JSONDecoder`, as it would from the payload.
    package static func value<T: Decodable>(_ type: T.Type, from json: JSONValue) -> T? {
        var text: [UInt8] = []
        JSONWriter.append(json, to: &text)
        return try? decoder.decode(type, from: Data(text))
    }
}
