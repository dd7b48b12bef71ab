import Foundation

/// Encodes an `Encodable` value to exactly the bytes ``Wire/encode(_:)`` (`JSONEncoder`, sorted keys,
/// slashes unescaped) writes — for the common shapes only: objects with ASCII keys (sorted byte-wise, as
/// `JSONEncoder` sorts them), arrays, strings, booleans, integers, finite `Double`/`Float`, null and
/// `Data` (base64). It throws on anything else (`Date`, `URL`, `Decimal`, non-finite numbers, non-ASCII
/// keys, super encoders), and ``encode(_:)`` then uses `JSONEncoder`. Every app
/// message's body is encoded here: Foundation's encoder cost ≈ 11,500 instructions for a one-field struct.
struct JSONBytesEncoder {
    struct Unsupported: Error {}

    /// `value`'s JSON, through this encoder when it can and `JSONEncoder` otherwise (the same bytes).
    static func encode(_ value: some Encodable) throws(GroupSyncError) -> Data {
        if let bytes = try? encodeFast(value) { return Data(bytes) }
        return try Wire.encode(value)
    }

    static func encodeFast(_ value: some Encodable) throws -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        try encodeFast(value, appendingTo: &out)
        return out
    }

    /// Appends `value`'s JSON to `out`; when it throws, `out` may hold part of it.
    static func encodeFast(_ value: some Encodable, appendingTo out: inout [UInt8]) throws {
        let root = Node()
        let context = Context()
        try Self.encode(value, into: root, context)
        // Something could not be represented where no error could be thrown (a super encoder, a nested
        // container under a non-ASCII key): JSONEncoder encodes the whole value instead.
        if context.failed { throw Unsupported() }
        try root.write(to: &out)
    }

    /// Appends `value`'s JSON to `out`, through this encoder when it can and `JSONEncoder` otherwise.
    static func encode(_ value: some Encodable, appendingTo out: inout [UInt8]) throws(GroupSyncError) {
        let start = out.count
        do {
            try encodeFast(value, appendingTo: &out)
        } catch {
            out.removeSubrange(start...)
            out.append(contentsOf: try Wire.encode(value))
        }
    }

    fileprivate static func encode<T: Encodable>(_ value: T, into node: Node, _ context: Context) throws {
        // Metatype comparisons, not dynamic casts: this runs for every nested value.
        if T.self == Data.self {
            node.content = .string((value as! Data).base64EncodedString())
        } else if T.self == Date.self || T.self == URL.self || T.self == Decimal.self {
            throw Unsupported()  // JSONEncoder writes these its own way, not through their Encodable
        } else {
            try value.encode(to: NodeEncoder(node: node, context: context))
        }
    }

    /// Shared by every container of one encoding (single-threaded, like the encoding itself).
    fileprivate final class Context {
        var failed = false
    }
}

private typealias Context = JSONBytesEncoder.Context

/// One JSON value under construction; containers fill it after they were handed out, hence a class.
private final class Node {
    enum Content {
        case unset
        case null
        case bool(Bool)
        /// A number's literal text (an integer, or a floating-point number as JSONEncoder writes it).
        case integer(String)
        case string(String)
        case array([Node])
        /// Members in the order they were set; sorted (and a key set twice keeps its last value) when
        /// written. An array, not a dictionary: most objects have a handful of keys, and hashing each
        /// cost more than the rest of the encoding.
        case object([(key: String, node: Node)])
    }

    var content = Content.unset

    func write(to out: inout [UInt8]) throws {
        switch content {
        case .unset: throw JSONBytesEncoder.Unsupported()  // JSONEncoder reports "did not encode any values"
        case .null: out.append(contentsOf: "null".utf8)
        case let .bool(value): out.append(contentsOf: (value ? "true" : "false").utf8)
        case let .integer(text): out.append(contentsOf: text.utf8)
        case let .string(text): Wire.appendJSONString(text, to: &out)
        case let .array(elements):
            out.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                try element.write(to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case let .object(members):
            out.append(UInt8(ascii: "{"))
            if members.count == 1 {
                try Self.write(members[0], to: &out)
            } else {
                for (position, index) in Self.writingOrder(members).enumerated() {
                    if position > 0 { out.append(UInt8(ascii: ",")) }
                    try Self.write(members[index], to: &out)
                }
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static func write(_ member: (key: String, node: Node), to out: inout [UInt8]) throws {
        Wire.appendJSONString(member.key, to: &out)
        out.append(UInt8(ascii: ":"))
        try member.node.write(to: &out)
    }

    /// Indices of `members` sorted byte-wise by key, as JSONEncoder's `.sortedKeys` orders ASCII keys
    /// (non-ASCII keys are refused), keeping only the last member set under each key (JSONEncoder
    /// overwrites a plain value too; a nested container requested twice is left to JSONEncoder).
    private static func writingOrder(_ members: [(key: String, node: Node)]) -> [Int] {
        let sorted = members.indices.sorted { a, b in
            let (left, right) = (members[a].key.utf8, members[b].key.utf8)
            if left.elementsEqual(right) { return a < b }
            return left.lexicographicallyPrecedes(right)
        }
        var order: [Int] = []
        order.reserveCapacity(sorted.count)
        for index in sorted {
            if let previous = order.last, members[previous].key == members[index].key {
                order[order.count - 1] = index  // a later set of the same key wins
            } else {
                order.append(index)
            }
        }
        return order
    }

    func object() throws -> Node {
        switch content {
        case .unset: content = .object([])
        case .object: break
        default: throw JSONBytesEncoder.Unsupported()
        }
        return self
    }

    func array() throws -> Node {
        switch content {
        case .unset: content = .array([])
        case .array: break
        default: throw JSONBytesEncoder.Unsupported()
        }
        return self
    }

    func set(_ key: String, _ child: Node) throws {
        guard key.utf8.allSatisfy({ $0 < 0x80 }), case var .object(members) = content else { throw JSONBytesEncoder.Unsupported() }
        content = .unset  // drop the reference while mutating, so the array is not copied
        members.append((key, child))
        content = .object(members)
    }

    func append(_ child: Node) {
        guard case var .array(elements) = content else { return }
        content = .unset
        elements.append(child)
        content = .array(elements)
    }

    static func scalar(_ content: Content) -> Node {
        let node = Node()
        node.content = content
        return node
    }
}

private struct NodeEncoder: Encoder {
    let node: Node
    let context: Context
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if (try? node.object()) == nil { context.failed = true }
        return KeyedEncodingContainer(Keyed<Key>(node: node, context: context))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer { Unkeyed(node: node, context: context) }

    func singleValueContainer() -> any SingleValueEncodingContainer { Single(node: node, context: context) }
}

private func integer(_ value: some FixedWidthInteger) -> Node { .scalar(.integer(String(value))) }

/// A finite floating-point number as `JSONEncoder` writes it: Swift's shortest round-trip description
/// without a trailing `.0` (`2`, `0.1`, `1e-07`, `1e+21`, `-0`). Non-finite values are refused (JSONEncoder
/// throws for them too).
private func number<F: BinaryFloatingPoint & LosslessStringConvertible>(_ value: F) throws -> String {
    guard value.isFinite else { throw JSONBytesEncoder.Unsupported() }
    let text = value.description
    return text.hasSuffix(".0") ? String(text.dropLast(2)) : text
}

private struct Single: SingleValueEncodingContainer {
    let node: Node
    let context: Context
    var codingPath: [any CodingKey] { [] }

    private func set(_ content: Node.Content) throws {
        guard case .unset = node.content else { throw JSONBytesEncoder.Unsupported() }
        node.content = content
    }

    mutating func encodeNil() throws { try set(.null) }
    mutating func encode(_ value: Bool) throws { try set(.bool(value)) }
    mutating func encode(_ value: String) throws { try set(.string(value)) }
    mutating func encode(_ value: Double) throws { try set(.integer(try number(value))) }
    mutating func encode(_ value: Float) throws { try set(.integer(try number(value))) }
    mutating func encode(_ value: Int) throws { try set(.integer(String(value))) }
    mutating func encode(_ value: Int8) throws { try set(.integer(String(value))) }
    mutating func encode(_ value: Int16) throws { try set(.integer(String(value))) }
    mutating func encode(_ value: Int32) throws { try set(.integer(String(value))) }
    mutating func encode(_ value: Int64) throws { try set(.integer(String(value))) }
    mutating func encode(_ value: UInt) throws { try set(.integer(String(value))) }
    mutating func encode(_ value: UInt8) throws { try set(.integer(String(value))) }
    mutating func encode(_ value: UInt16) throws { try set(.integer(String(value))) }
    mutating func encode(_ value: UInt32) throws { try set(.integer(String(value))) }
    mutating func encode(_ value: UInt64) throws { try set(.integer(String(value))) }
    mutating func encode<T: Encodable>(_ value: T) throws {
        guard case .unset = node.content else { throw JSONBytesEncoder.Unsupported() }
        try JSONBytesEncoder.encode(value, into: node, context)
    }
}

private struct Keyed<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: Node
    let context: Context
    var codingPath: [any CodingKey] { [] }

    private func put(_ child: Node, _ key: Key) throws { try node.object().set(key.stringValue, child) }

    /// Whether `key` was set already (only asked for nested containers, which JSONEncoder merges).
    private func has(_ key: Key) -> Bool {
        guard case let .object(members) = node.content else { return false }
        let name = key.stringValue
        return members.contains { $0.key == name }
    }

    mutating func encodeNil(forKey key: Key) throws { try put(.scalar(.null), key) }
    mutating func encode(_ value: Bool, forKey key: Key) throws { try put(.scalar(.bool(value)), key) }
    mutating func encode(_ value: String, forKey key: Key) throws { try put(.scalar(.string(value)), key) }
    mutating func encode(_ value: Double, forKey key: Key) throws { try put(.scalar(.integer(number(value))), key) }
    mutating func encode(_ value: Float, forKey key: Key) throws { try put(.scalar(.integer(number(value))), key) }
    mutating func encode(_ value: Int, forKey key: Key) throws { try put(integer(value), key) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { try put(integer(value), key) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { try put(integer(value), key) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { try put(integer(value), key) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { try put(integer(value), key) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { try put(integer(value), key) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { try put(integer(value), key) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { try put(integer(value), key) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { try put(integer(value), key) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { try put(integer(value), key) }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        let child = Node()
        try JSONBytesEncoder.encode(value, into: child, context)
        try put(child, key)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        let child = Node()
        child.content = .object([])
        // JSONEncoder merges into a container requested twice under one key: leave that to it.
        if has(key) || (try? put(child, key)) == nil { context.failed = true }
        return KeyedEncodingContainer(Keyed<NestedKey>(node: child, context: context))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let child = Node()
        child.content = .array([])
        if has(key) || (try? put(child, key)) == nil { context.failed = true }
        return Unkeyed(node: child, context: context)
    }

    mutating func superEncoder() -> any Encoder { unsupportedEncoder() }
    mutating func superEncoder(forKey key: Key) -> any Encoder { unsupportedEncoder() }

    private func unsupportedEncoder() -> any Encoder {
        context.failed = true
        return NodeEncoder(node: Node(), context: context)
    }
}

private struct Unkeyed: UnkeyedEncodingContainer {
    let node: Node
    let context: Context
    var codingPath: [any CodingKey] { [] }

    init(node: Node, context: Context) {
        self.node = node
        self.context = context
        if (try? node.array()) == nil { context.failed = true }
    }

    var count: Int { if case let .array(elements) = node.content { elements.count } else { 0 } }

    mutating func encodeNil() throws { node.append(.scalar(.null)) }
    mutating func encode(_ value: Bool) throws { node.append(.scalar(.bool(value))) }
    mutating func encode(_ value: String) throws { node.append(.scalar(.string(value))) }
    mutating func encode(_ value: Double) throws { node.append(.scalar(.integer(try number(value)))) }
    mutating func encode(_ value: Float) throws { node.append(.scalar(.integer(try number(value)))) }
    mutating func encode(_ value: Int) throws { node.append(integer(value)) }
    mutating func encode(_ value: Int8) throws { node.append(integer(value)) }
    mutating func encode(_ value: Int16) throws { node.append(integer(value)) }
    mutating func encode(_ value: Int32) throws { node.append(integer(value)) }
    mutating func encode(_ value: Int64) throws { node.append(integer(value)) }
    mutating func encode(_ value: UInt) throws { node.append(integer(value)) }
    mutating func encode(_ value: UInt8) throws { node.append(integer(value)) }
    mutating func encode(_ value: UInt16) throws { node.append(integer(value)) }
    mutating func encode(_ value: UInt32) throws { node.append(integer(value)) }
    mutating func encode(_ value: UInt64) throws { node.append(integer(value)) }
    mutating func encode<T: Encodable>(_ value: T) throws {
        let child = Node()
        try JSONBytesEncoder.encode(value, into: child, context)
        node.append(child)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let child = Node()
        child.content = .object([])
        node.append(child)
        return KeyedEncodingContainer(Keyed<NestedKey>(node: child, context: context))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let child = Node()
        node.append(child)
        return Unkeyed(node: child, context: context)
    }

    mutating func superEncoder() -> any Encoder {
        context.failed = true
        return NodeEncoder(node: Node(), context: context)
    }
}
