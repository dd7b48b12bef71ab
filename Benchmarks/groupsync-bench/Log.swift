import Foundation

/// Progress lines on standard error, so that `--json` leaves standard output to the JSON alone.
enum Log {
    private static let start = MonotonicClock.nanoseconds()

    static func progress(_ message: String) {
        let origin = start
        let seconds = Double(MonotonicClock.nanoseconds() - origin) / 1e9
        FileHandle.standardError.write(Data((String(format: "[%7.2f s] ", seconds) + message + "\n").utf8))
    }
}
