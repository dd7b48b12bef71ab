import Foundation
import MQTT

/// Line-oriented standard output and error, safe from any task; each line is written whole.
enum Output {
    private static let lock = LockedValue(())

    static func line(_ text: String) {
        lock.withLock { _ in FileHandle.standardOutput.write(Data((text + "\n").utf8)) }
    }

    static func error(_ text: String) {
        lock.withLock { _ in FileHandle.standardError.write(Data((text + "\n").utf8)) }
    }

    /// One JSON object per line, keys sorted.
    static func json(_ object: [String: Any]) {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) else {
            return
        }
        line(String(decoding: data, as: UTF8.self))
    }
}
