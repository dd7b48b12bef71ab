import Foundation

/// The JSON payloads of protocol version 2 (docs/PROTOCOL.md). Every payload carries `"v": 2`; a
/// payload with another version, or that fails to decode, is rejected and counted, never applied.
package enum Wire {
    package static let version = 2

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
