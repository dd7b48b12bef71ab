import GroupSync

/// The one message type of the command-line tools: any JSON value, wrapped. `groupsync bridge` sends what
/// its host gives; `groupsync join`'s `!text` lines send `{"text": …}`; each prints what the other sends.
///
/// It travels as GroupSync type name `BridgeMessage` with the body `{"value": <JSON>}`. A Swift app
/// receives bridge messages (and sends messages bridges receive) by declaring the same type:
///
/// ```swift
/// struct BridgeMessage: Codable, Sendable { var value: JSONValue }
/// for await (message, context) in messenger.messages(of: BridgeMessage.self) { … }
/// ```
struct BridgeMessage: Codable, Sendable, Hashable {
    var value: JSONValue
}
