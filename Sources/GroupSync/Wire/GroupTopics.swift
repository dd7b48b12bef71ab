import Foundation

/// The topic layout of protocol version 2 for one group (see docs/PROTOCOL.md). Every topic ends with
/// the participant that publishes on it, so that a broker ACL (`pattern … %u`) makes identities
/// unforgeable, and no topic has more than 8 levels.
///
/// The bytes of journal attachments live apart, under `groupsync/v2-chunks/<group>`, so that a reader of
/// the group's tree (`groupsync/v2/<group>/#`: dashboards, `groupsync watch`) never receives them.
package struct GroupTopics: Sendable, Hashable {
    package static let protocolRoot = "groupsync/v2"
    package static let chunkProtocolRoot = "groupsync/v2-chunks"

    package let group: String
    /// `groupsync/v2/<group>`
    package let root: String

    package init(group: String) {
        self.group = group
        self.root = "\(GroupTopics.protocolRoot)/\(group)"
        self.chunkRoot = "\(GroupTopics.chunkProtocolRoot)/\(group)"
    }

    /// `groupsync/v2-chunks/<group>`
    package let chunkRoot: String

    package func presence(_ participant: String) -> String { "\(root)/presence/\(participant)" }
    package var presenceFilter: String { "\(root)/presence/+" }
    package func heartbeat(_ participant: String) -> String { "\(root)/alive/\(participant)" }
    package var heartbeatFilter: String { "\(root)/alive/+" }
    /// `publisher`'s copy of `session`'s announcement.
    package func announcement(_ session: String, by publisher: String) -> String { "\(root)/session/\(session)/\(publisher)" }
    package var announcementFilter: String { "\(root)/session/+/+" }
    /// Where `sender` welcomes `recipient` to the group on a broker without retained messages.
    package func welcome(to recipient: String, from sender: String) -> String { "\(root)/welcome/\(recipient)/\(sender)" }
    package func welcomeFilter(for recipient: String) -> String { "\(root)/welcome/\(recipient)/+" }
    /// Where `observer` (not a participant) asks to be welcomed on a broker without retained messages.
    package func observe(_ observer: String) -> String { "\(root)/observe/\(observer)" }
    package var observeFilter: String { "\(root)/observe/+" }
    package func member(_ session: String, _ participant: String) -> String { "\(root)/s/\(session)/member/\(participant)" }
    package func state(_ session: String, key: String, writer: String) -> String { "\(root)/s/\(session)/state/\(key)/\(writer)" }
    /// `owner`'s journal record of the attachment whose digest (the record's `id`) is `attachment`.
    package func journal(_ session: String, attachment: String, owner: String) -> String {
        "\(root)/s/\(session)/journal/\(attachment)/\(owner)"
    }
    /// Chunk `index` (from 0) of `owner`'s attachment `attachment`: its bytes, exactly.
    package func chunk(_ session: String, attachment: String, index: Int, owner: String) -> String {
        "\(chunkRoot)/\(session)/\(attachment).\(index)/\(owner)"
    }
    /// `groupsync/v2-chunks/<group>/<session>/`: every chunk topic of the session starts with it.
    package func chunkPrefix(_ session: String) -> String { "\(chunkRoot)/\(session)/" }
    package func broadcast(_ session: String, from sender: String) -> String { "\(root)/s/\(session)/all/\(sender)" }
    package func direct(_ session: String, to recipient: String, from sender: String) -> String {
        "\(root)/s/\(session)/to/\(recipient)/\(sender)"
    }

    /// The filters a joined participant subscribes to for `session`: members, state, journal records,
    /// broadcasts, and the direct messages addressed to `participant` only.
    package func sessionFilters(_ session: String, participant: String) -> (shared: [String], broadcast: String) {
        let base = "\(root)/s/\(session)"
        return (["\(base)/member/+", "\(base)/state/+/+", "\(base)/journal/+/+", "\(base)/to/\(participant)/+"], "\(base)/all/+")
    }

    package enum Kind: Sendable, Hashable {
        case presence(participant: String)
        case heartbeat(participant: String)
        case announcement(session: String, publisher: String)
        case welcome(recipient: String, sender: String)
        case observe(observer: String)
        case member(session: String, participant: String)
        case state(session: String, key: String, writer: String)
        case journal(session: String, attachment: String, owner: String)
        case broadcast(session: String, sender: String)
        case direct(session: String, recipient: String, sender: String)
    }

    /// Parses a topic of this group; nil for anything else, including levels that are not valid identifiers.
    /// It runs for every received message: one pass over the topic's bytes, without allocating except for
    /// the identifiers it returns.
    package func parse(_ topic: String) -> Kind? {
        var topic = topic
        return topic.withUTF8 { bytes in
            var root = root
            return root.withUTF8 { root in GroupTopics.parse(bytes, root: root) }
        }
    }

    private static func parse(_ bytes: UnsafeBufferPointer<UInt8>, root: UnsafeBufferPointer<UInt8>) -> Kind? {
        // memcmp: this runs for every received message, and `elementsEqual` walks generic iterators.
        guard bytes.count > root.count + 1, bytes[root.count] == UInt8(ascii: "/"),
            root.isEmpty || memcmp(bytes.baseAddress!, root.baseAddress!, root.count) == 0
        else { return nil }
        // Up to five levels below the root, each a valid identifier (so never empty).
        return withUnsafeTemporaryAllocation(of: Range<Int>.self, capacity: 5) { bounds -> Kind? in
            var count = 0
            var start = root.count + 1
            for index in start...bytes.count where index == bytes.count || bytes[index] == UInt8(ascii: "/") {
                guard count < 5, index > start, index - start <= 128 else { return nil }
                for k in start..<index where !Identifier.isAllowed(bytes[k]) { return nil }
                bounds.initializeElement(at: count, to: start..<index)
                count += 1
                start = index + 1
            }
            func string(_ i: Int) -> String { String(decoding: bytes[bounds[i]], as: UTF8.self) }
            func level(_ i: Int, is literal: StaticString) -> Bool {
                bounds[i].count == literal.utf8CodeUnitCount
                    && memcmp(bytes.baseAddress! + bounds[i].lowerBound, literal.utf8Start, literal.utf8CodeUnitCount) == 0
            }
            switch count {
            case 2 where level(0, is: "presence"): return .presence(participant: string(1))
            case 2 where level(0, is: "alive"): return .heartbeat(participant: string(1))
            case 2 where level(0, is: "observe"): return .observe(observer: string(1))
            case 3 where level(0, is: "session"): return .announcement(session: string(1), publisher: string(2))
            case 3 where level(0, is: "welcome"): return .welcome(recipient: string(1), sender: string(2))
            case 4 where level(0, is: "s") && level(2, is: "member"): return .member(session: string(1), participant: string(3))
            case 4 where level(0, is: "s") && level(2, is: "all"): return .broadcast(session: string(1), sender: string(3))
            case 5 where level(0, is: "s") && level(2, is: "state"):
                return .state(session: string(1), key: string(3), writer: string(4))
            case 5 where level(0, is: "s") && level(2, is: "journal"):
                return .journal(session: string(1), attachment: string(3), owner: string(4))
            case 5 where level(0, is: "s") && level(2, is: "to"):
                return .direct(session: string(1), recipient: string(3), sender: string(4))
            default: return nil
            }
        }
    }
}
