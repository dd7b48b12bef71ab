import CMosquitto
import Foundation

/// What wakes the network thread out of `poll()` when another thread leaves it work: a packet its caller
/// did not write itself, a subscription change, a stop request. An `eventfd` on Linux (one descriptor), a
/// non-blocking pipe elsewhere.
///
/// libmosquitto has a wake-up of its own for `mosquitto_loop`'s `select()` — a socket pair that every
/// queued packet writes one byte to — but its read end is not in `mosquitto.h`, so this loop cannot wait
/// on it. Nobody drains that pair, then: once full, libmosquitto's writes to it fail, which it ignores.
///
/// Sendable: both descriptors are immutable; they are read and written only with system calls, which
/// are thread-safe, and closed in `deinit`, when no thread can use them any more.
final class WakeChannel: Sendable {
    /// The descriptor to poll for reading.
    let descriptor: Int32
    private let writeEnd: Int32

    init() throws(MQTTError) {
        #if os(Linux)
        let event = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard event >= 0 else { throw WakeChannel.error() }
        (descriptor, writeEnd) = (event, event)
        #else
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { throw WakeChannel.error() }
        for end in ends {
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
        (descriptor, writeEnd) = (ends[0], ends[1])
        #endif
    }

    deinit {
        close(descriptor)
        if writeEnd != descriptor { close(writeEnd) }
    }

    /// Makes the next (or the current) `poll()` of ``descriptor`` return. Signals before the network
    /// thread drains collapse into one wake-up.
    func signal() {
        var one: UInt64 = 1
        _ = write(writeEnd, &one, MemoryLayout<UInt64>.size)
    }

    /// Empties the channel, on the network thread after its `poll()` saw it readable.
    func drain() {
        var buffer: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        while read(descriptor, &buffer, MemoryLayout.size(ofValue: buffer)) > 0 {}
    }

    private static func error() -> MQTTError {
        errno == EMFILE || errno == ENFILE
            ? .tooManyOpenDescriptors : .library(code: Int(errno), message: String(cString: strerror(errno)))
    }
}
