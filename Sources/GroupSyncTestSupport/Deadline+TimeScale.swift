import Foundation

/// How many times slower the suite runs than it would plainly: `GROUPSYNC_TIME_SCALE` (at least 1), set
/// when it runs under a sanitizer that slows everything down several times (`scripts/test-tsan.sh` sets
/// 4). 1 for the plain run, which checks the real bounds.
public let timeScale: Double = {
    guard let text = ProcessInfo.processInfo.environment["GROUPSYNC_TIME_SCALE"], let scale = Double(text), scale >= 1 else {
        return 1
    }
    return scale
}()

/// Whether the run judges the timings that only a machine running the suite plainly keeps (a timer's
/// precision to milliseconds, as the playback demo's verdict and start spreads do): not under a
/// sanitizer, where a timer can also wait a tenth of a second for a thread of the cooperative pool.
public let judgesTimings = timeScale == 1

/// A time bound a test asserts (a guarantee such as "a killed participant disappears within 1 s"),
/// stretched by ``timeScale``.
public func timeBound(_ duration: Duration) -> Duration {
    duration * timeScale
}

/// A suite's time limit in whole minutes (`.timeLimit(.minutes(timeLimitMinutes(1)))`), stretched by
/// ``timeScale`` like the bounds its tests assert: the limit stops a hang, and instrumented, a test that
/// starts with the whole suite in parallel can take most of a plain minute's worth several times over.
public func timeLimitMinutes(_ minutes: Int) -> Int {
    Int((Double(minutes) * timeScale).rounded(.up))
}
