/// An optional number that is never negative — a connection epoch, a heartbeat interval — stored in
/// `Storage` alone, where `Int64?` takes 16 bytes in a struct: a negative value stands for none. For the
/// tables a participant keeps per member of its group, a thousand entries in a group of a thousand.
/// Values are range-checked where they are read (docs/PROTOCOL.md, "Ranges"), so one that is negative
/// or does not fit `Storage` is a bug: it traps.
@propertyWrapper
struct PackedOptional<Storage: FixedWidthInteger & SignedInteger & Sendable>: Hashable, Sendable {
    private var raw: Storage

    init(wrappedValue: Int64?) { raw = PackedOptional.pack(wrappedValue) }

    var wrappedValue: Int64? {
        get { raw < 0 ? nil : Int64(raw) }
        set { raw = PackedOptional.pack(newValue) }
    }

    private static func pack(_ value: Int64?) -> Storage {
        guard let value else { return -1 }
        precondition(value >= 0, "a packed optional holds no negative value")
        return Storage(value)
    }
}
