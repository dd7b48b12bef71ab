import Foundation

/// A time bound a test asserts (a guarantee such as "a killed participant disappears within 1 s"),
/// stretched by `GROUPSYNC_TIME_SCALE` when the suite runs under a sanitizer that slows everything down
/// several times (`scripts/test-tsan.sh` sets 4). The plain run checks the real bounds.
public func timeBound(_ duration: Duration) -> Duration {
    guard let text = ProcessInfo.processInfo.environment["GROUPSYNC_TIME_SCALE"], let scale = Double(text), scale >= 1 else {
        return duration
    }
    return duration * scale
}
