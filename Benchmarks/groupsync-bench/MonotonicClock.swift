#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Nanoseconds on `CLOCK_MONOTONIC`: one clock for every timestamp of the bench, GroupSync and raw
/// libmosquitto alike, cheap enough (a vDSO call, ~20 ns) to take per message.
enum MonotonicClock {
    static func nanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// Microseconds between two readings.
    static func microseconds(from start: UInt64, to end: UInt64) -> Double {
        Double(end &- start) / 1_000
    }

    /// Milliseconds between two readings.
    static func milliseconds(from start: UInt64, to end: UInt64) -> Double {
        Double(end &- start) / 1_000_000
    }
}
