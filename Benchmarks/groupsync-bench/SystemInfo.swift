import CMosquitto
import Foundation

/// What the machine and the process are: CPU, versions, resident memory, file descriptor limits.
enum SystemInfo {
    /// Resident set size of this process in bytes (second field of /proc/self/statm, in pages).
    static func residentBytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// Raises the soft RLIMIT_NOFILE to at least `needed` (up to the hard limit). Child processes —
    /// mosquitto among them — inherit it. Returns the soft limit in force afterwards.
    @discardableResult
    static func raiseFileLimit(to needed: Int) -> Int {
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

    static var cpuModel: String {
        guard let text = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8) else { return "unknown" }
        for line in text.split(separator: "\n") where line.hasPrefix("model name") {
            if let colon = line.firstIndex(of: ":") {
                return line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
        }
        return "unknown"
    }

    /// The first three fields of /proc/loadavg: how busy the machine was (the bench shares it).
    static var loadAverage: String {
        guard let text = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8) else { return "?" }
        return text.split(separator: " ").prefix(3).joined(separator: " ")
    }

    static var cores: Int { ProcessInfo.processInfo.activeProcessorCount }

    static var libmosquittoVersion: String {
        var major: Int32 = 0, minor: Int32 = 0, revision: Int32 = 0
        mosquitto_lib_version(&major, &minor, &revision)
        return "\(major).\(minor).\(revision)"
    }

    /// The first line of `mosquitto -h` ("mosquitto version 2.0.11").
    static func brokerVersion(executable: String?) -> String {
        guard let executable else { return "external broker" }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["-h"]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return "unknown" }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let first = String(decoding: data, as: UTF8.self).split(separator: "\n").first.map(String.init) ?? "unknown"
        return first.replacingOccurrences(of: "mosquitto version ", with: "")
    }

    /// The compiler's language version, as precisely as `#if compiler` tells.
    static var swiftVersion: String {
        #if compiler(>=6.4)
        return "≥ 6.4"
        #elseif compiler(>=6.3.1)
        return "6.3.1"
        #elseif compiler(>=6.3)
        return "6.3"
        #elseif compiler(>=6.2)
        return "6.2"
        #else
        return "< 6.2"
        #endif
    }

    static var date: String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withFullDate]
        return formatter.string(from: Date())
    }
}
