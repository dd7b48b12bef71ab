import Foundation
import GroupSync

/// One request line of `groupsync bridge` (docs/BRIDGE.md), checked: every field has the right type and
/// every name that becomes a topic level is a valid identifier. Unknown fields are ignored.
struct BridgeRequest: Sendable {
    /// Echoed in the answer: a string or a number, exactly as given.
    let id: JSONValue
    let operation: Operation

    enum Operation: Sendable {
        case ping
        case configure(broker: String?, group: String?, participant: String?, keepAlive: Int?)
        case watch(activity: String)
        /// `playback`: follow the session's media timeline from the join on (`timeline` and `start` events).
        case start(activity: String, metadata: GroupActivityMetadata?, value: JSONValue, keys: [String], playback: Bool)
        /// `timeout`: how long to wait for the announcement; nil for the bridge's `--timeout`.
        case join(activity: String?, session: String?, keys: [String], timeout: Duration?, playback: Bool)
        case playback(PlaybackAction)
        case suspend(reason: String)
        /// `suspension`: the one to end; nil ends every suspension of this bridge.
        case resume(suspension: String?)
        case position
        case leave
        case end
        case set(key: String, value: JSONValue)
        case send(value: JSONValue, to: [String]?)
        /// `name`, `mediaType`: nil for the file's name and the type guessed from its extension.
        case attach(path: String, name: String?, mediaType: String?, metadata: [String: String])
        case attachments
        /// `digest`: the attachment's digest or a prefix of it; `owner`: nil when only one owner's matches.
        case load(digest: String, owner: String?, path: String)
        case detach(digest: String, owner: String?)
    }

    /// What a `playback` request asks of the group's player.
    enum PlaybackAction: Sendable {
        case play
        case pause
        case seek(Double)
        case rate(Double)
        case item(String?, position: Double)
    }

    /// Why a line is not a request; `id` when one could be read.
    struct Invalid: Error, Sendable {
        var id: JSONValue?
        var message: String
    }

    static let operations = [
        "ping", "configure", "watch", "start", "join", "leave", "end", "set", "send", "playback", "suspend", "resume", "position",
        "attach", "attachments", "load", "detach",
    ]

    /// Parses one line (without its newline).
    static func parse(_ line: Data) -> Result<BridgeRequest, Invalid> {
        guard let json = Wire.decode(JSONValue.self, from: line) else {
            return .failure(Invalid(message: "not JSON: \(preview(line))"))
        }
        guard case let .object(object) = json else {
            return .failure(Invalid(message: "a request is a JSON object, e.g. {\"id\":1,\"op\":\"ping\"}"))
        }
        let id: JSONValue
        switch object["id"] {
        case .none:
            return .failure(Invalid(message: "missing \"id\" (a string or a number)"))
        case let .some(value):
            switch value {
            case .string, .int, .double: id = value
            default: return .failure(Invalid(message: "\"id\" must be a string or a number"))
            }
        }
        do throws(Invalid) {
            return .success(BridgeRequest(id: id, operation: try operation(Fields(object: object))))
        } catch {
            return .failure(Invalid(id: id, message: error.message))
        }
    }

    private static func operation(_ fields: Fields) throws(Invalid) -> Operation {
        guard let op = try fields.string("op") else {
            throw Invalid(message: "missing \"op\" (one of \(operations.joined(separator: ", ")))")
        }
        switch op {
        case "ping":
            return .ping
        case "configure":
            let keepAlive = try fields.number("keepalive").map { seconds throws(Invalid) -> Int in
                guard seconds.rounded() == seconds, (5...65_535).contains(seconds) else {
                    throw Invalid(message: "\"keepalive\" must be a whole number of seconds from 5 to 65535")
                }
                return Int(seconds)
            }
            return .configure(
                broker: try fields.string("broker"), group: try fields.identifier("group"),
                participant: try fields.identifier("participant"), keepAlive: keepAlive)
        case "watch":
            return .watch(activity: try fields.required(fields.identifier("activity"), "activity"))
        case "start":
            let activity = try fields.required(fields.identifier("activity"), "activity")
            var metadata: GroupActivityMetadata?
            let title = try fields.string("title"), subtitle = try fields.string("subtitle"), type = try fields.string("type")
            if title != nil || subtitle != nil || type != nil {
                var kind = GroupActivityMetadata.ActivityType.generic
                if let type {
                    guard let known = GroupActivityMetadata.ActivityType(rawValue: type) else {
                        throw Invalid(message: "unknown activity \"type\" '\(type)'")
                    }
                    kind = known
                }
                metadata = GroupActivityMetadata(title: title ?? activity, subtitle: subtitle, type: kind)
            }
            return .start(
                activity: activity, metadata: metadata, value: fields.object["value"] ?? .object([:]),
                keys: try fields.identifiers("keys") ?? [], playback: try fields.bool("playback") ?? false)
        case "join":
            let activity = try fields.identifier("activity"), session = try fields.identifier("session")
            guard activity != nil || session != nil else {
                throw Invalid(message: "join needs \"activity\", \"session\" or both")
            }
            var timeout: Duration?
            if let seconds = try fields.number("timeout") {
                guard seconds >= 0, seconds <= 600 else { throw Invalid(message: "\"timeout\" must be 0 to 600 seconds") }
                timeout = .milliseconds(Int64(seconds * 1_000))
            }
            return .join(
                activity: activity, session: session, keys: try fields.identifiers("keys") ?? [], timeout: timeout,
                playback: try fields.bool("playback") ?? false)
        case "leave":
            return .leave
        case "end":
            return .end
        case "set":
            let key = try fields.required(fields.identifier("key"), "key")
            guard let value = fields.object["value"] else { throw Invalid(message: "missing \"value\" (any JSON, null included)") }
            return .set(key: key, value: value)
        case "send":
            guard let value = fields.object["value"] else { throw Invalid(message: "missing \"value\" (any JSON, null included)") }
            let to = try fields.identifiers("to")
            if to?.isEmpty == true { throw Invalid(message: "\"to\" is empty: leave it out to send to everyone") }
            return .send(value: value, to: to)
        case "playback":
            return .playback(try playbackAction(fields))
        case "suspend":
            return .suspend(reason: try fields.required(fields.identifier("reason"), "reason"))
        case "resume":
            return .resume(suspension: try fields.identifier("suspension"))
        case "position":
            return .position
        case "attach":
            return .attach(
                path: try fields.required(fields.path("path"), "path"), name: try fields.string("name"),
                mediaType: try fields.string("type"), metadata: try fields.strings("metadata") ?? [:])
        case "attachments":
            return .attachments
        case "load":
            return .load(
                digest: try fields.required(fields.digest("digest"), "digest"), owner: try fields.identifier("owner"),
                path: try fields.required(fields.path("path"), "path"))
        case "detach":
            return .detach(digest: try fields.required(fields.digest("digest"), "digest"), owner: try fields.identifier("owner"))
        default:
            throw Invalid(message: "unknown op '\(op)' (one of \(operations.joined(separator: ", ")))")
        }
    }

    private static func playbackAction(_ fields: Fields) throws(Invalid) -> PlaybackAction {
        func position(_ name: String) throws(Invalid) -> Double? {
            guard let value = try fields.number(name) else { return nil }
            guard value.isFinite, value >= 0 else { throw Invalid(message: "\"\(name)\" must be a number of seconds ≥ 0") }
            return value
        }
        let actions = "play, pause, seek, rate, item"
        switch try fields.string("action") {
        case "play": return .play
        case "pause": return .pause
        case "seek": return .seek(try fields.required(position("position"), "position"))
        case "rate":
            let rate = try fields.required(fields.number("rate"), "rate")
            let limit = PlaybackTimeline.maximumRate
            guard rate.isFinite, abs(rate) <= limit else { throw Invalid(message: "\"rate\" must be a number from -\(limit) to \(limit)") }
            return .rate(rate)
        case "item":
            guard fields.object["item"] != nil else { throw Invalid(message: "missing \"item\" (a string, or null for none)") }
            let item = try fields.string("item")
            if let item, item.utf8.count > PlaybackTimeline.maximumItemLength {
                throw Invalid(message: "\"item\" is longer than \(PlaybackTimeline.maximumItemLength) bytes")
            }
            return .item(item, position: try position("position") ?? 0)
        case let other?: throw Invalid(message: "unknown playback \"action\" '\(other.prefix(40))' (one of \(actions))")
        case nil: throw Invalid(message: "missing \"action\" (one of \(actions))")
        }
    }

    /// The start of a line, for error messages.
    static func preview(_ line: Data) -> String {
        let text = String(decoding: line.prefix(60), as: UTF8.self)
        return line.count > 60 ? text + "…" : text
    }

    /// Typed access to a request's fields; a field of the wrong type is an error, a missing one nil.
    private struct Fields {
        let object: [String: JSONValue]

        func string(_ name: String) throws(Invalid) -> String? {
            switch object[name] {
            case .none, .some(.null): return nil
            case let .some(.string(value)): return value
            case .some: throw Invalid(message: "\"\(name)\" must be a string")
            }
        }

        func bool(_ name: String) throws(Invalid) -> Bool? {
            switch object[name] {
            case .none, .some(.null): return nil
            case let .some(.bool(value)): return value
            case .some: throw Invalid(message: "\"\(name)\" must be true or false")
            }
        }

        func identifier(_ name: String) throws(Invalid) -> String? {
            guard let value = try string(name) else { return nil }
            try Self.check(value, name)
            return value
        }

        func identifiers(_ name: String) throws(Invalid) -> [String]? {
            switch object[name] {
            case .none, .some(.null): return nil
            case let .some(.array(values)):
                return try values.map { value throws(Invalid) -> String in
                    guard case let .string(text) = value else { throw Invalid(message: "\"\(name)\" must be an array of strings") }
                    try Self.check(text, name)
                    return text
                }
            case .some: throw Invalid(message: "\"\(name)\" must be an array of strings")
            }
        }

        /// A non-empty file path.
        func path(_ name: String) throws(Invalid) -> String? {
            guard let value = try string(name) else { return nil }
            guard !value.isEmpty else { throw Invalid(message: "\"\(name)\" is empty: give a file's path") }
            return value
        }

        /// An attachment's digest (64 hexadecimal digits), or a prefix of one (at least 4 digits), lowercased.
        func digest(_ name: String) throws(Invalid) -> String? {
            guard let value = try string(name)?.lowercased() else { return nil }
            guard (4...64).contains(value.count), value.allSatisfy(\.isHexDigit) else {
                throw Invalid(message: "\"\(name)\" must be an attachment's digest in hexadecimal (or its first 4 to 64 digits)")
            }
            return value
        }

        /// An object whose values are strings.
        func strings(_ name: String) throws(Invalid) -> [String: String]? {
            switch object[name] {
            case .none, .some(.null): return nil
            case let .some(.object(values)):
                var strings: [String: String] = [:]
                for (key, value) in values {
                    guard case let .string(text) = value else { throw Invalid(message: "\"\(name)\" must be an object of strings") }
                    strings[key] = text
                }
                return strings
            case .some: throw Invalid(message: "\"\(name)\" must be an object of strings")
            }
        }

        func number(_ name: String) throws(Invalid) -> Double? {
            switch object[name] {
            case .none, .some(.null): return nil
            case let .some(.int(value)): return Double(value)
            case let .some(.double(value)): return value
            case .some: throw Invalid(message: "\"\(name)\" must be a number")
            }
        }

        func required<T>(_ value: T?, _ name: String) throws(Invalid) -> T {
            guard let value else { throw Invalid(message: "missing \"\(name)\"") }
            return value
        }

        private static func check(_ value: String, _ name: String) throws(Invalid) {
            guard Identifier.isValid(value) else {
                throw Invalid(message: "invalid \"\(name)\" '\(value.prefix(140))': use 1–128 characters from A–Z a–z 0–9 . _ - : @ ~")
            }
        }
    }
}
