import Foundation

/// Records that every participant receives many of (state records, member records, presences) are read
/// through ``JSONValue/parseFast(_:)`` first, and only through `JSONDecoder` when that gives up or the
/// shape is not the usual one. Each `init?(fastJSON:)` accepts exactly what the record's `Decodable`
/// conformance accepts from the same object (unknown keys ignored, every required key present with its
/// type); when in doubt it returns nil and `JSONDecoder` decides.
protocol FastDecodable {
    init?(fastJSON: JSONValue)
}

extension Wire {
    /// ``decodeVersioned(_:from:)`` through the fast path when `T` has one.
    static func decodeFast<T: Decodable & Versioned & FastDecodable>(_ type: T.Type, from data: Data) -> T? {
        if data.count <= maximumPayload, let json = JSONValue.parseFast(data), let value = T(fastJSON: json) {
            return value.v == version ? value : nil
        }
        return decodeVersioned(type, from: data)
    }

    /// A member record straight from its bytes — no JSON tree — when it is the usual flat object of
    /// plain strings and integers (any key order, whitespace, unknown keys with any value). A newcomer reads
    /// one per participant present from the retained replay, and every participant present reads the
    /// newcomer's: through the tree each cost ~10,000 instructions.
    static func decodeMember(_ data: Data) -> Member? { decodeDirect(data) { $0.readMemberObject() } }

    /// A presence record straight from its bytes when it has the usual shape (a plain ASCII name or
    /// none). Every coordinator reads every other one's presence, and with heartbeats that is N² records
    /// per interval: through the JSON tree each cost ~16,700 instructions.
    static func decodePresence(_ data: Data) -> Presence? { decodeDirect(data) { $0.readPresence() } }

    /// A state record straight from its bytes — the clock flat, only the value through the JSON tree —
    /// when it has the usual shape. Every participant reads every write of every other participant.
    static func decodeStateRecord(_ data: Data) -> StateRecord? { decodeDirect(data) { $0.readStateRecord() } }

    /// `read` takes one object from the whole payload (nothing but whitespace after it); where it gives
    /// up, ``decodeFast(_:from:)`` decides.
    private static func decodeDirect<T: Decodable & Versioned & FastDecodable>(
        _ data: Data, _ read: (inout JSONByteReader) -> T?
    ) -> T? {
        if data.count <= maximumPayload, let value = data.withUnsafeBytes({ bytes -> T? in
            var reader = JSONByteReader(bytes: bytes)
            guard let value = read(&reader) else { return nil }
            reader.skipWhitespace()
            return reader.isAtEnd ? value : nil
        }) {
            return value.v == version ? value : nil
        }
        return decodeFast(T.self, from: data)
    }

    /// ``decodeVersioned(_:from:)`` through ``JSONValue/parseFast(_:)`` and ``JSONValueDecoder`` where they
    /// can, for larger payloads without a hand-written reader (a `$catchup` lists every member and state).
    static func decodeVersionedFast<T: Decodable & Versioned>(_ type: T.Type, from data: Data) -> T? {
        guard data.count <= maximumPayload, let value = JSONBytesDecoder.decode(type, from: data), value.v == version else { return nil }
        return value
    }
}

extension Wire {
    /// A `$catchup` body located by the envelope scanner, through the hand-written readers; nil where
    /// they give up (then ``decodeVersionedFast(_:from:)`` decodes the whole envelope). A catch-up lists
    /// every member: through `JSONValueDecoder` it cost ~35,000 instructions per member.
    static func decodeCatchUpBody(_ payload: Data, body: Range<Int>) -> CatchUp? {
        let slice = payload[body]
        if let catchUp = slice.withUnsafeBytes({ bytes -> CatchUp? in
            var reader = JSONByteReader(bytes: bytes)
            return reader.readCatchUp()
        }) {
            return catchUp
        }
        guard let json = JSONValue.parseFast(slice) else { return nil }
        return CatchUp(fastJSON: json)
    }

    /// A `$catchup` body as ``encode(_:)`` writes it, byte for byte, with the member list written by hand
    /// (it names every participant; through the generic encoders it cost ~11,000 instructions per
    /// member, on the responder, between the newcomer's member record and its catch-up).
    static func encodeCatchUp(_ catchUp: CatchUp) throws(GroupSyncError) -> Data {
        var out: [UInt8] = []
        out.reserveCapacity(64 + catchUp.members.count * 48)
        out.append(contentsOf: #"{"members":["#.utf8)
        for (index, member) in catchUp.members.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: #"{"epoch":"#.utf8)
            appendInteger(member.epoch, to: &out)
            out.append(contentsOf: #","participant":"#.utf8)
            appendJSONString(member.participant, to: &out)
            out.append(contentsOf: #","v":"#.utf8)
            appendInteger(Int64(member.v), to: &out)
            out.append(UInt8(ascii: "}"))
        }
        out.append(contentsOf: #"],"states":["#.utf8)
        for (index, state) in catchUp.states.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            guard let record = try? JSONBytesEncoder.encodeFast(state) else { return try encode(catchUp) }
            out.append(contentsOf: record)
        }
        out.append(contentsOf: "]}".utf8)
        return Data(out)
    }
}

extension JSONValue {
    fileprivate var int64: Int64? { if case let .int(value) = self { value } else { nil } }
    fileprivate var text: String? { if case let .string(value) = self { value } else { nil } }
    fileprivate var fields: [String: JSONValue]? { if case let .object(value) = self { value } else { nil } }
}

extension HLCTimestamp: FastDecodable {
    init?(fastJSON json: JSONValue) {
        guard let fields = json.fields, let time = fields["t"]?.int64, let counter = fields["c"]?.int64,
              let participant = fields["p"]?.text else { return nil }
        self.init(time: time, counter: counter, participant: participant)
    }
}

extension Wire.StateRecord: FastDecodable {
    init?(fastJSON json: JSONValue) {
        guard let fields = json.fields, let v = fields["v"]?.int64.flatMap({ Int(exactly: $0) }), let key = fields["key"]?.text,
              let value = fields["value"], let clock = fields["clock"].flatMap(HLCTimestamp.init(fastJSON:)) else { return nil }
        self.init(v: v, key: key, value: value, clock: clock)
    }
}

extension Wire.Member: FastDecodable {
    init?(fastJSON json: JSONValue) {
        guard let fields = json.fields, let v = fields["v"]?.int64.flatMap({ Int(exactly: $0) }),
              let participant = fields["participant"]?.text, let epoch = fields["epoch"]?.int64 else { return nil }
        self.init(v: v, participant: participant, epoch: epoch)
    }
}

extension Wire.Presence: FastDecodable {
    init?(fastJSON json: JSONValue) {
        guard let fields = json.fields, let v = fields["v"]?.int64.flatMap({ Int(exactly: $0) }),
              let participant = fields["participant"]?.text, let status = fields["status"]?.text.flatMap(Status.init(rawValue:)),
              let epoch = fields["epoch"]?.int64 else { return nil }
        let name: String?
        switch fields["name"] {
        case nil, .null?: name = nil
        case let .string(value)?: name = value
        default: return nil
        }
        self.init(v: v, participant: participant, status: status, epoch: epoch, name: name)
    }
}

extension Wire.CatchUp: FastDecodable {
    init?(fastJSON json: JSONValue) {
        guard let fields = json.fields, case let .array(states)? = fields["states"], case let .array(members)? = fields["members"]
        else { return nil }
        var records: [Wire.StateRecord] = []
        records.reserveCapacity(states.count)
        for state in states {
            guard let record = Wire.StateRecord(fastJSON: state) else { return nil }
            records.append(record)
        }
        var list: [Wire.Member] = []
        list.reserveCapacity(members.count)
        for member in members {
            guard let entry = Wire.Member(fastJSON: member) else { return nil }
            list.append(entry)
        }
        self.init(states: records, members: list)
    }
}

extension JSONByteReader {
    /// `{"members":[<flat member>…],"states":[<record>…]}` in either order, other keys skipped; each state
    /// record through the JSON tree (there are few). Nil for anything unusual.
    mutating func readCatchUp() -> Wire.CatchUp? {
        var members: [Wire.Member]?, states: [Wire.StateRecord]?
        let parsed = readObject { reader, key in
            if JSONByteReader.key(key, is: "members") {
                guard members == nil, let list = reader.readArray({ $0.readMemberObject() }) else { return false }
                members = list
            } else if JSONByteReader.key(key, is: "states") {
                guard states == nil, let list = reader.readArray({ reader -> Wire.StateRecord? in
                    guard let value = reader.parseValue(depth: 1) else { return nil }
                    return Wire.StateRecord(fastJSON: value)
                }) else { return false }
                states = list
            } else {
                // Parsed, not skipped: `skipValue` is loose (numbers, escapes, depth), and what
                // JSONDecoder would reject must not be accepted here.
                return reader.parseValue(depth: 1) != nil
            }
            return true
        }
        skipWhitespace()
        guard parsed, isAtEnd, let members, let states else { return nil }
        return Wire.CatchUp(states: states, members: members)
    }

    private mutating func readArray<Element>(_ element: (inout JSONByteReader) -> Element?) -> [Element]? {
        guard take(UInt8(ascii: "[")) else { return nil }
        var list: [Element] = []
        skipWhitespace()
        if take(UInt8(ascii: "]")) { return list }
        repeat {
            skipWhitespace()
            guard let next = element(&self) else { return nil }
            list.append(next)
            skipWhitespace()
        } while take(UInt8(ascii: ","))
        return take(UInt8(ascii: "]")) ? list : nil
    }

    /// `{"epoch":<int>,"participant":"<plain>","v":<int>}` in any order, with anything under other keys;
    /// nil for duplicates, escapes or non-integers. Leaves the reader after its closing brace.
    mutating func readMemberObject() -> Wire.Member? {
        var v: Int64?, epoch: Int64?, participant: String?
        let parsed = readObject { reader, key in
            switch MemberKey(key) {
            case .v:
                guard v == nil, let value = reader.readInteger() else { return false }
                v = value
            case .epoch:
                guard epoch == nil, let value = reader.readInteger() else { return false }
                epoch = value
            case .participant:
                guard participant == nil, let value = reader.readPlainStringBytes() else { return false }
                participant = String(decoding: value, as: UTF8.self)
            case .other:
                return reader.parseValue(depth: 1) != nil  // strict, unlike `skipValue`
            }
            return true
        }
        guard parsed, let v, let epoch, let participant, let version = Int(exactly: v) else { return nil }
        return Wire.Member(v: version, participant: participant, epoch: epoch)
    }

    /// `{"clock":{"c":<int>,"p":"<plain>","t":<int>},"key":"<plain>","v":<int>,"value":<any>}` in any
    /// order, other keys parsed strictly and ignored; nil for duplicates or escapes in the strings.
    mutating func readStateRecord() -> Wire.StateRecord? {
        var v: Int64?, key: String?, value: JSONValue?, clock: HLCTimestamp?
        let parsed = readObject { reader, name in
            if JSONByteReader.key(name, is: "value") {
                guard value == nil, let parsed = reader.parseValue(depth: 1) else { return false }
                value = parsed
            } else if JSONByteReader.key(name, is: "key") {
                guard key == nil, let text = reader.readPlainStringBytes() else { return false }
                key = String(decoding: text, as: UTF8.self)
            } else if JSONByteReader.key(name, is: "clock") {
                guard clock == nil, let parsed = reader.readClock() else { return false }
                clock = parsed
            } else if JSONByteReader.key(name, is: "v") {
                guard v == nil, let number = reader.readInteger() else { return false }
                v = number
            } else {
                return reader.parseValue(depth: 1) != nil
            }
            return true
        }
        guard parsed, let v, let key, let value, let clock, let version = Int(exactly: v) else { return nil }
        return Wire.StateRecord(v: version, key: key, value: value, clock: clock)
    }

    /// `{"epoch":<int>,"name":"<plain>"|null,"participant":"<plain>","status":"online"|"lost","v":<int>}`
    /// in any order, `name` optional, other keys parsed strictly and ignored.
    mutating func readPresence() -> Wire.Presence? {
        var v: Int64?, epoch: Int64?, participant: String?, status: Wire.Presence.Status?
        var name: String?, nameSeen = false
        let parsed = readObject { reader, key in
            if JSONByteReader.key(key, is: "participant") {
                guard participant == nil, let text = reader.readPlainStringBytes() else { return false }
                participant = String(decoding: text, as: UTF8.self)
            } else if JSONByteReader.key(key, is: "status") {
                guard status == nil, let text = reader.readPlainStringBytes(),
                      let value = Wire.Presence.Status(rawValue: String(decoding: text, as: UTF8.self)) else { return false }
                status = value
            } else if JSONByteReader.key(key, is: "epoch") {
                guard epoch == nil, let number = reader.readInteger() else { return false }
                epoch = number
            } else if JSONByteReader.key(key, is: "name") {
                guard !nameSeen else { return false }
                nameSeen = true
                if reader.current == UInt8(ascii: "n") {
                    guard reader.matchLiteral("null") else { return false }
                } else {
                    guard let text = reader.readPlainStringBytes() else { return false }
                    name = String(decoding: text, as: UTF8.self)
                }
            } else if JSONByteReader.key(key, is: "v") {
                guard v == nil, let number = reader.readInteger() else { return false }
                v = number
            } else {
                return reader.parseValue(depth: 1) != nil
            }
            return true
        }
        guard parsed, let v, let epoch, let participant, let status, let version = Int(exactly: v) else { return nil }
        return Wire.Presence(v: version, participant: participant, status: status, epoch: epoch, name: name)
    }

    private mutating func readClock() -> HLCTimestamp? {
        var time: Int64?, counter: Int64?, participant: String?
        let parsed = readObject { reader, name in
            if JSONByteReader.key(name, is: "t") {
                guard time == nil, let number = reader.readInteger() else { return false }
                time = number
            } else if JSONByteReader.key(name, is: "c") {
                guard counter == nil, let number = reader.readInteger() else { return false }
                counter = number
            } else if JSONByteReader.key(name, is: "p") {
                guard participant == nil, let text = reader.readPlainStringBytes() else { return false }
                participant = String(decoding: text, as: UTF8.self)
            } else {
                return reader.parseValue(depth: 2) != nil
            }
            return true
        }
        guard parsed, let time, let counter, let participant else { return nil }
        return HLCTimestamp(time: time, counter: counter, participant: participant)
    }

    private enum MemberKey {
        case v, epoch, participant, other

        init(_ key: UnsafeRawBufferPointer) {
            func `is`(_ literal: StaticString) -> Bool { JSONByteReader.key(key, is: literal) }
            switch key.count {
            case 1 where `is`("v"): self = .v
            case 5 where `is`("epoch"): self = .epoch
            case 11 where `is`("participant"): self = .participant
            default: self = .other
            }
        }
    }
}
