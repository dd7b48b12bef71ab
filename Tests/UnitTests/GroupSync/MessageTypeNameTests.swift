import Foundation
import GroupSync
import Testing

/// The `"type"` of an envelope is part of the wire format: receivers in other processes (and other
/// languages) match on it, so it must stay what `String(describing: T.self)` prints.
@Suite struct MessageTypeNameTests {
    struct Plain: Codable {}
    enum Outer {
        struct Inner: Codable {}
        enum Deeper { struct Leaf: Codable {} }
    }
    struct Box<Content>: Codable where Content: Codable { var content: Content }
    final class Reference: Codable, CustomStringConvertible { var description: String { "not the type name" } }

    @Test func matchesStringDescribing() {
        struct Local: Codable {}
        let names: [(String, String)] = [
            (GroupSessionMessenger.typeName(Plain.self), String(describing: Plain.self)),
            (GroupSessionMessenger.typeName(Outer.Inner.self), String(describing: Outer.Inner.self)),
            (GroupSessionMessenger.typeName(Outer.Deeper.Leaf.self), String(describing: Outer.Deeper.Leaf.self)),
            (GroupSessionMessenger.typeName(Box<Outer.Inner>.self), String(describing: Box<Outer.Inner>.self)),
            (GroupSessionMessenger.typeName(Reference.self), String(describing: Reference.self)),
            (GroupSessionMessenger.typeName(Local.self), String(describing: Local.self)),
            (GroupSessionMessenger.typeName([Int].self), String(describing: [Int].self)),
            (GroupSessionMessenger.typeName([String: Plain].self), String(describing: [String: Plain].self)),
            (GroupSessionMessenger.typeName(Int?.self), String(describing: Int?.self)),
            (GroupSessionMessenger.typeName(Data.self), String(describing: Data.self)),
        ]
        for (name, described) in names { #expect(name == described) }
        #expect(GroupSessionMessenger.typeName(Outer.Deeper.Leaf.self) == "Leaf")
        #expect(GroupSessionMessenger.typeName(Box<Plain>.self) == "Box<Plain>")
    }
}
