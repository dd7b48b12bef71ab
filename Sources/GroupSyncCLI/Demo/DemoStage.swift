import BrokerSupport
import Foundation
import GroupSync
import MQTT

/// What every demo script plays on: the broker, the group, how many participants, the printed
/// timeline, and the participants' connections (all closed by ``closeAll()``, however the script ends).
final class DemoStage: Sendable {
    /// The brokers' URLs: participants are spread across them in turn, each with the others as its
    /// fallbacks.
    let brokers: [String]
    let group: String
    let count: Int
    let timeline: Timeline
    /// False: the participants use no retained messages (`--no-retain`).
    let retainedMessages: Bool
    /// For mqtts:// brokers (`--cafile`, `--cert`, `--key`).
    let tls: MQTTClient.TLS?
    /// For brokers whose URL has none (`--password-file`, `GROUPSYNC_PASSWORD`).
    let password: String?
    /// The participants' keys with `--private`.
    let keyring: GroupKeyring?
    private let connected = LockedValue<[GroupCoordinator]>([])

    init(
        brokers: [String], group: String, count: Int, timeline: Timeline, retainedMessages: Bool = true, tls: MQTTClient.TLS? = nil,
        password: String? = nil, keyring: GroupKeyring? = nil
    ) {
        precondition(!brokers.isEmpty)
        self.brokers = brokers
        self.group = group
        self.count = count
        self.timeline = timeline
        self.retainedMessages = retainedMessages
        self.tls = tls
        self.password = password
        self.keyring = keyring
    }

    /// The broker list of the `index`th participant: the brokers from the `index`th on, round the list.
    func url(forParticipant index: Int) -> String {
        let first = index % brokers.count
        return (brokers[first...] + brokers[..<first]).joined(separator: ",")
    }

    /// Connects participant `name` on `clock`, to the next broker in turn; an unreachable broker is the
    /// command's failure.
    func connect(_ name: String, clock: any WallClock = SystemWallClock()) async throws -> GroupCoordinator {
        let url = url(forParticipant: connected.withLock { $0.count })
        var configuration = try GroupCoordinator.Configuration(broker: url, group: group, participant: name, tls: tls, clock: clock)
        configuration.mqtt.retainedMessages = retainedMessages
        if configuration.mqtt.password == nil, let password { configuration.mqtt.password = password }
        configuration.keyring = keyring
        let coordinator: GroupCoordinator
        do {
            coordinator = try await GroupCoordinator.connect(configuration)
        } catch {
            throw CommonOptions.failure(error, broker: url)
        }
        connected.withLock { $0.append(coordinator) }
        return coordinator
    }

    /// The first of `participants` activates `activity` while every one of them listens for sessions (the
    /// one who activates included); returns the session each received, in order.
    func share<Activity: GroupActivity>(
        _ activity: Activity, among participants: [(name: String, coordinator: GroupCoordinator)]
    ) async throws -> [GroupSession<Activity>] {
        let listeners = participants.map { participant in
            Task { () -> GroupSession<Activity>? in
                for await session in participant.coordinator.sessions(of: Activity.self) { return session }
                return nil
            }
        }
        let sessionID = try await participants[0].coordinator.activate(activity)
        timeline.note(participants[0].name, "activated session \(sessionID) (\(activity.metadata.title))")
        var sessions: [GroupSession<Activity>] = []
        for (participant, listener) in zip(participants, listeners) {
            guard let session = await listener.value else { throw CommandFailure("\(participant.name) got no session") }
            sessions.append(session)
            timeline.note(participant.name, "received the session through sessions()")
        }
        return sessions
    }

    /// Closes every participant the script connected (those it closed already stay closed).
    func closeAll() async {
        // Together: each close is bounded by the farewell timeout, so the demo's end is too.
        await withTaskGroup(of: Void.self) { group in
            for coordinator in connected.withLock({ $0 }) { group.addTask { await coordinator.close() } }
        }
    }

    /// Milliseconds, with `decimals` below 10 ms.
    static func format(_ duration: Duration, decimals: Int = 2) -> String {
        let ms = Double(duration.components.seconds) * 1_000 + Double(duration.components.attoseconds) / 1e15
        return ms < 10 ? String(format: "%.\(decimals)f ms", ms) : String(format: "%.0f ms", ms)
    }
}
