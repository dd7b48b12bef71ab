/// Pure rules for MQTT topic names and filters (MQTT 5 §4.7), used before anything reaches the broker.
public enum Topic {
    /// Whether `name` can be published to: non-empty, no wildcards, no NUL, at most 65,535 UTF-8 bytes.
    public static func isValidName(_ name: String) -> Bool {
        let bytes = name.utf8
        guard !bytes.isEmpty, bytes.count <= 65_535 else { return false }
        return !bytes.contains(where: { $0 == UInt8(ascii: "+") || $0 == UInt8(ascii: "#") || $0 == 0 })
    }

    /// Whether `filter` is a well-formed subscription filter: `+` and `#` occupy whole levels and `#` is last.
    public static func isValidFilter(_ filter: String) -> Bool {
        guard !filter.isEmpty, filter.utf8.count <= 65_535, !filter.utf8.contains(0) else { return false }
        let levels = filter.split(separator: "/", omittingEmptySubsequences: false)
        for (index, level) in levels.enumerated() {
            if level.contains("#") && (level != "#" || index != levels.count - 1) { return false }
            if level.contains("+") && level != "+" { return false }
        }
        return true
    }

    /// Whether the topic `name` matches `filter`. Topics starting with `$` match no filter starting with a
    /// wildcard (MQTT 5 §4.7.2).
    public static func matches(_ name: String, filter: String) -> Bool {
        var nameLevels = name.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)[...]
        var filterLevels = filter.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)[...]
        if name.utf8.first == UInt8(ascii: "$"), let first = filterLevels.first,
           first.elementsEqual("+".utf8) || first.elementsEqual("#".utf8) {
            return false
        }
        while let level = filterLevels.popFirst() {
            if level.elementsEqual("#".utf8) { return true }
            guard let nameLevel = nameLevels.popFirst() else { return false }
            if level.elementsEqual("+".utf8) { continue }
            if !level.elementsEqual(nameLevel) { return false }
        }
        return nameLevels.isEmpty
    }
}
