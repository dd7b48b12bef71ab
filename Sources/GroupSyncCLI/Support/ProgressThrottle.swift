import GroupSync

/// Which of a load's progress reports to show: the first, the last (all bytes done), and in between at
/// most one per `interval`, so that a fast load does not flood its reader and a slow one still moves.
struct ProgressThrottle: Sendable {
    let interval: Duration
    private var lastShown: ContinuousClock.Instant?

    init(interval: Duration) {
        self.interval = interval
    }

    /// Whether to show `progress`, received at `now`; records it as shown when so.
    mutating func admits(_ progress: JournalLoadProgress, at now: ContinuousClock.Instant = .now) -> Bool {
        let due = lastShown.map { now - $0 >= interval } ?? true
        guard due || progress.completedBytes == progress.totalBytes else { return false }
        lastShown = now
        return true
    }
}
