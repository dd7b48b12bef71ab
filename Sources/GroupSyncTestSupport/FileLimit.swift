import Foundation

/// The process's limit of open descriptors (RLIMIT_NOFILE), for tests and benchmarks that open many
/// connections.
public enum FileLimit {
    /// Raises the soft limit to at least `needed` (up to the hard limit). Child processes — mosquitto
    /// among them — inherit it. Returns the soft limit in force afterwards (-1 if it cannot be read).
    @discardableResult
    public static func raise(to needed: Int) -> Int {
        var limit = rlimit()
        #if os(Linux)
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        #else
        let resource = RLIMIT_NOFILE
        #endif
        guard getrlimit(resource, &limit) == 0 else { return -1 }
        if limit.rlim_cur < rlim_t(needed) {
            limit.rlim_cur = min(rlim_t(needed), limit.rlim_max)
            _ = setrlimit(resource, &limit)
            _ = getrlimit(resource, &limit)
        }
        return Int(limit.rlim_cur)
    }
}
