/// The keys of a private group (``GroupCoordinator/Configuration/keyring``). The first key seals what
/// this participant sends; every key opens what it receives. To rotate, put the new key first and keep
/// the old ones while anything sealed with them still matters; a key dropped from every keyring opens
/// nothing more here (what it sealed stays readable to whoever kept it).
public struct GroupKeyring: Sendable, Hashable {
    /// The keys, the sealing one first.
    public let keys: [GroupKey]

    /// Throws ``GroupSyncError/invalidArgument(_:)`` for no keys, or two with one ID.
    public init(_ keys: [GroupKey]) throws(GroupSyncError) {
        guard !keys.isEmpty else { throw .invalidArgument("a keyring needs at least one key") }
        guard Set(keys.map(\.id)).count == keys.count else { throw .invalidArgument("two keys of the keyring share an ID") }
        self.keys = keys
    }

    /// The key that seals.
    public var sealingKey: GroupKey { keys[0] }

    /// The key named `id`, nil when this keyring does not have it.
    func key(id: String) -> GroupKey? { keys.first { $0.id == id } }
}
