/// Waits until `condition` holds — what every screen of the demo shows —, looking again every
/// `pollEvery`: the demo reports how long the group took to agree, so it looks as often as that needs.
/// Fails the demo with a ``CommandFailure`` naming `what` once `timeout` has passed.
func waitUntil(
    timeout: Duration = .seconds(5), pollEvery: Duration = .milliseconds(5), _ what: String,
    _ condition: @Sendable () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while try await !condition() {
        guard ContinuousClock.now < deadline else {
            throw CommandFailure("the demo went wrong: \(what) did not happen within \(timeout)")
        }
        try await Task.sleep(for: pollEvery)
    }
}
