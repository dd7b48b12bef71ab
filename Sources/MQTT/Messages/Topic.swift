/// Pure rules for MQTT topic names and filters (MQTT 5 §4.7), used before anything reaches the broker.
public enum Topic {
    /// Whether `name` can be published to: non-empty, no wildcards, no NUL, at most 65,535 UTF-8 bytes.
    public static func isValidName(_ name: String) -> Bool {
        var name = name  // `withUTF8` needs a variable; a native string is not copied
        return name.withUTF8 { bytes in
            // A plain loop over the buffer: every publish runs this.
            guard !bytes.isEmpty, bytes.count <= 65_535 else { return false }
            for byte in bytes where byte == UInt8(ascii: "+") || byte == UInt8(ascii: "#") || byte == 0 { return false }
            return true
        }
    }

    /// Whether `filter` is a well-formed subscription filter: `+` and `#` occupy whole levels and `#` is last.
    public static func isValidFilter(_ filter: String) -> Bool {
        guard !filter.isEmpty, filter.utf8.count <= 65_535, !filter.utf8.contains(0) else { return false }
        let levels = filter.split(separator: "/", omittingEmptySubsequences: false)
        for (index, level) in levels.enumerated() {
            // Byte searches: `contains` with a string argument is Foundation's, a bridged `NSString` search.
            if level.utf8.contains(UInt8(ascii: "#")) && (level != "#" || index != levels.count - 1) { return false }
            if level.utf8.contains(UInt8(ascii: "+")) && level != "+" { return false }
        }
        return true
    }

    /// Whether the topic `name` matches `filter`. Topics starting with `$` match no filter starting with a
    /// wildcard (MQTT 5 §4.7.2). Walks both strings' UTF-8 once, without allocating: it runs for every
    /// received message against every subscription.
    public static func matches(_ name: String, filter: String) -> Bool {
        var name = name
        var filter = filter
        return name.withUTF8 { nameBytes in
            filter.withUTF8 { filterBytes in matches(nameBytes, filterBytes) }
        }
    }

    static func matches(_ name: UnsafeBufferPointer<UInt8>, _ filter: UnsafeBufferPointer<UInt8>) -> Bool {
        let slash = UInt8(ascii: "/"), plus = UInt8(ascii: "+"), hash = UInt8(ascii: "#")
        if name.first == UInt8(ascii: "$") && (filter.first == plus || filter.first == hash) { return false }
        var n = 0, f = 0
        while f < filter.count {
            if filter[f] == hash { return true }  // `#` is always a whole, last level
            if filter[f] == plus {
                // Skip one level of the name (possibly empty).
                while n < name.count && name[n] != slash { n += 1 }
                f += 1
            } else {
                // Compare one literal level.
                while f < filter.count && filter[f] != slash {
                    guard n < name.count, name[n] == filter[f] else { return false }
                    n += 1
                    f += 1
                }
                if n < name.count && name[n] != slash { return false }
            }
            // Both at the end of a level: either both end, or both continue after a `/`.
            if f == filter.count { return n == name.count }
            f += 1  // past the filter's `/`
            if n == name.count {
                // The name ended: only a trailing `#` (which also matches the parent level) can follow.
                return filter.count - f == 1 && filter[f] == hash
            }
            n += 1  // past the name's `/`
        }
        return n == name.count
    }
}
