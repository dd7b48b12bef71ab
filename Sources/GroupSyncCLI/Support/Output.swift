import Foundation
import GroupSync
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

    /// One JSON object per line, written as the wire writes it (keys sorted, slashes unescaped).
    static func json(_ object: [String: JSONValue]) {
        guard let data = try? Wire.encode(JSONValue.object(object)) else { return }
        line(String(decoding: data, as: UTF8.self))
    }
}
