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

    /// A size field of /proc/self/status (`VmHWM`, `VmRSS`: kB there) in bytes.
    static func statusBytes(_ field: String) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(field + ":") {
            return line.split(separator: " ").dropFirst().first.flatMap { Int($0) }.map { $0 * 1_024 }
        }
        return nil
    }

    /// The peak resident size of this process (`VmHWM`), in bytes.
    static func peakResidentBytes() -> Int? { statusBytes("VmHWM") }

    /// Resets the peak resident size to the current one (writes `5` to /proc/self/clear_refs); false if
    /// the kernel refused.
    static func resetPeakResident() -> Bool {
        guard let handle = FileHandle(forWritingAtPath: "/proc/self/clear_refs") else { return false }
        defer { try? handle.close() }
        return (try? handle.write(contentsOf: Data("5".utf8))) != nil
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
