import Foundation
import MQTT

/// Presence: who is online, by connection epoch; our own record, heartbeats and expiry.
extension GroupCoordinator {
    /// Network thread: a presence record (an empty payload: cleared, a clean exit).
    func onPresenceMessage(_ participant: String, _ message: MQTTMessage) {
        var presence: Wire.Presence?
        if !message.payload.isEmpty {
            guard let decoded = Wire.decode(Wire.Presence.self, from: message.payload) else { return countRejection() }
            presence = decoded
        }
        if participant == localParticipant.id {
            if message.retain {
                replay.withLock { $0?.ownPresence = true }
            } else if presence?.epoch == epoch, presence?.status == .online {
                presenceEcho.withLock { $0 }?.yield(())  // our own publish coming back live
            }
        }
        switch state.withLock({ $0.machine.onPresence(participant, presence, now: .now) }) {
        case .none: break
        case .rejected: countRejection()
        case let .changed(participant, epoch): forwardPresence([(participant, epoch)])
        case .republishOwn: tasks.spawn { try? await self.publishPresence() }
        }
    }

    /// Tells every session of presence changes: participant → epoch of its live connection (nil: gone).
    private func forwardPresence(_ changes: [(String, Int64?)]) {
        guard !changes.isEmpty else { return }
        let cores = state.withLock { Array($0.cores.values) }
        for (participant, epoch) in changes {
            for core in cores { core.onPresence(participant, epoch: epoch) }
        }
    }

    /// Publishes our presence every keepalive / 2 and expires participants not heard of for 1.5 ×
    /// keepalive, while connected.
    func startHeartbeats() {
        let keepAlive = Duration.seconds(configuration.mqtt.keepAlive)
        tasks.add(
            Task { [self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: keepAlive / 2)
                    // Not once close() began: a heartbeat after the goodbye would bring us back for a while.
                    guard client.isConnected, !state.withLock({ $0.machine.isClosed }), let payload = try? Wire.encode(onlinePresence)
                    else { continue }
                    _ = try? await client.publish(to: topics.presence(localParticipant.id), payload: payload, qos: .atMostOnce)
                }
            })
        tasks.add(
            Task { [self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: .milliseconds(250))
                    guard client.isConnected else { continue }
                    // Silent for 1.5 × keepalive less two checks: gone within 1.5 × keepalive of its last heartbeat.
                    let gone = state.withLock { $0.machine.expireSilent(now: .now, timeout: keepAlive * 3 / 2 - .milliseconds(500)) }
                    forwardPresence(gone.map { ($0, nil) })
                }
            })
    }

    private var onlinePresence: Wire.Presence {
        Wire.Presence(participant: localParticipant.id, status: .online, epoch: epoch, name: configuration.displayName)
    }

    private func publishPresence() async throws(GroupSyncError) {
        try await retained.publish(topics.presence(localParticipant.id), try Wire.encode(onlinePresence))
    }

    /// Publishes our presence and waits (at most 5 s) until it comes back: every retained presence and
    /// announcement the broker delivered on (re)subscribing is in by then.
    func publishPresenceAndAwaitEcho() async throws(GroupSyncError) {
        let echo = Inbox<Void>()
        presenceEcho.withLock { $0 = echo }
        defer { presenceEcho.withLock { $0 = nil } }
        try await publishPresence()
        await withTimeout(.seconds(5)) { _ = await echo.next() }
    }
}
