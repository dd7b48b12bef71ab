/// The topic layout of protocol version 1 for one group (see docs/PROTOCOL.md). Every topic a
/// participant publishes ends with its own participant ID, so that a broker ACL (`pattern … %u`) can make
/// identities unforgeable.
public struct GroupTopics: Sendable, Hashable {
    public static let protocolRoot = "groupsync/v1"

    public let group: String
    /// `groupsync/v1/<group>`
    public let root: String

    public init(group: String) {
        self.group = group
        self.root = "\(GroupTopics.protocolRoot)/\(group)"
    }

    public func presence(_ participant: String) -> String { "\(root)/presence/\(participant)" }
    public var presenceFilter: String { "\(root)/presence/+" }
    public func announcement(_ session: String) -> String { "\(root)/session/\(session)" }
    public var announcementFilter: String { "\(root)/session/+" }
    public func member(_ session: String, _ participant: String) -> String { "\(root)/s/\(session)/member/\(participant)" }
    public func state(_ session: String, key: String, writer: String) -> String { "\(root)/s/\(session)/state/\(key)/\(writer)" }
    public func broadcast(_ session: String, from sender: String) -> String { "\(root)/s/\(session)/msg/all/\(sender)" }
    public func direct(_ session: String, to recipient: String, from sender: String) -> String {
        "\(root)/s/\(session)/msg/to/\(recipient)/\(sender)"
    }

    /// The filters a joined participant subscribes to for `session`: members, state, broadcasts, and the
    /// direct messages addressed to `participant` only.
    public func sessionFilters(_ session: String, participant: String) -> (shared: [String], broadcast: String) {
        let base = "\(root)/s/\(session)"
        return ([ "\(base)/member/+", "\(base)/state/+/+", "\(base)/msg/to/\(participant)/+"], "\(base)/msg/all/+")
    }

    /// What a topic of this group is.
    public enum Kind: Sendable, Hashable {
        case presence(participant: String)
        case announcement(session: String)
        case member(session: String, participant: String)
        case state(session: String, key: String, writer: String)
        case broadcast(session: String, sender: String)
        case direct(session: String, recipient: String, sender: String)
    }

    /// Parses a topic of this group; nil for anything else, including levels that are not valid identifiers.
    /// It runs for every received message: it walks the topic's bytes once and copies only the levels it
    /// returns.
    public func parse(_ topic: String) -> Kind? {
        let bytes = topic.utf8
        let rootCount = root.utf8.count
        guard bytes.count > rootCount + 1, bytes.starts(with: root.utf8) else { return nil }
        let afterRoot = bytes.index(bytes.startIndex, offsetBy: rootCount)
        guard bytes[afterRoot] == UInt8(ascii: "/") else { return nil }
        // At most six levels below the root; each must be a valid identifier (so never empty).
        var levels: [Substring] = []
        levels.reserveCapacity(6)
        var start = bytes.index(after: afterRoot)
        var cursor = start
        while true {
            if cursor == bytes.endIndex || bytes[cursor] == UInt8(ascii: "/") {
                let level = topic[start..<cursor]
                guard levels.count < 6, Identifier.isValid(level) else { return nil }
                levels.append(level)
                if cursor == bytes.endIndex { break }
                start = bytes.index(after: cursor)
            }
            cursor = bytes.index(after: cursor)
        }
        switch (levels.count, levels[0]) {
        case (2, "presence"): return .presence(participant: String(levels[1]))
        case (2, "session"): return .announcement(session: String(levels[1]))
        default: break
        }
        guard levels.count >= 4, levels[0] == "s" else { return nil }
        let session = String(levels[1])
        switch (levels.count, levels[2], levels[3]) {
        case (4, "member", _): return .member(session: session, participant: String(levels[3]))
        case (5, "state", _): return .state(session: session, key: String(levels[3]), writer: String(levels[4]))
        case (5, "msg", "all"): return .broadcast(session: session, sender: String(levels[4]))
        case (6, "msg", "to"): return .direct(session: session, recipient: String(levels[4]), sender: String(levels[5]))
        default: return nil
        }
    }
}
