import Foundation
import GroupSync
import GroupSyncTestSupport

/// N participants in one process — N coordinators, N broker connections — all joined to one session, as
/// `groupsync demo` drives them. Optionally each holds a `SharedState<Int>` under ``stateKey`` whose
/// `valueUpdates()` a ``ValueWatcher`` consumes.
final class SessionCluster: Sendable {
    static let activity = "com.example.bench"
    static let stateKey = "value"

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    let url: String
    let group: String
    let sessionID: String
    let members: [ClusterMember]
    let hub: ArrivalHub

    private init(url: String, group: String, sessionID: String, members: [ClusterMember], hub: ArrivalHub) {
        self.url = url
        self.group = group
        self.sessionID = sessionID
        self.members = members
        self.hub = hub
    }

    var topics: GroupTopics { GroupTopics(group: group) }

    /// Connects `count` coordinators (`connectWidth` at a time), has the first one activate a session,
    /// and joins everyone (`joinWidth` at a time; 1 joins one after the other, so that every newcomer is
    /// caught up by an already joined participant). `clock` gives participant `index` its wall clock.
    static func make(
        url: String, group: String, prefix: String, count: Int, sharedState: Bool,
        connectWidth: Int = 16, joinWidth: Int = 1, catchUpTimeout: Duration = .seconds(1), retainedMessages: Bool = true,
        keyring: GroupKeyring? = nil, clock: @escaping @Sendable (Int) -> any WallClock = { _ in SystemWallClock() }
    ) async throws -> SessionCluster {
        let coordinators = try await Parallel.map(count, width: connectWidth) { index in
            try await GroupCoordinator.connect(
                SessionCluster.configuration(
                    url: url, group: group, participant: "\(prefix)\(index)", clock: clock(index), catchUpTimeout: catchUpTimeout,
                    retainedMessages: retainedMessages, keyring: keyring))
        }
        let sessionID = try await coordinators[0].activate(activityIdentifier: activity, value: .object([:]))
        let sessions = try await Parallel.map(count, width: connectWidth) { index in
            try await findSession(coordinators[index], id: sessionID)
        }
        _ = try await Parallel.map(count, width: joinWidth) { index in
            try await sessions[index].join()
        }
        let hub = ArrivalHub()
        var members: [ClusterMember] = []
        for index in 0..<count {
            var state: SharedState<Int>?
            var watcher: ValueWatcher?
            if sharedState {
                let shared = try SharedState(sessions[index], key: stateKey, initialValue: 0)
                state = shared
                watcher = ValueWatcher(index: index, values: shared.valueUpdates(), hub: hub)
            }
            members.append(
                ClusterMember(
                    index: index, name: "\(prefix)\(index)", coordinator: coordinators[index], session: sessions[index],
                    state: state, watcher: watcher))
        }
        let cluster = SessionCluster(url: url, group: group, sessionID: sessionID, members: members, hub: hub)
        if sharedState {
            let members = members
            // Every watcher got its first value (the caught-up one) before anything is measured.
            try await waitUntil(timeout: .seconds(10), pollEvery: .microseconds(200), "every participant's valueUpdates() started") {
                members.allSatisfy { ($0.watcher?.count ?? 0) > 0 }
            }
        }
        return cluster
    }

    /// A participant of the bench: 100 coordinators in one process would measure their heartbeats (4,000
    /// deliveries a second) along with the messages, so they send none.
    static func configuration(
        url: String, group: String, participant: String, clock: any WallClock = SystemWallClock(),
        catchUpTimeout: Duration = .seconds(1), retainedMessages: Bool = true, keyring: GroupKeyring? = nil
    ) throws -> GroupCoordinator.Configuration {
        var configuration = try GroupCoordinator.Configuration(
            broker: url, group: group, participant: participant, clock: clock, catchUpTimeout: catchUpTimeout,
            presenceHeartbeats: false)
        configuration.mqtt.retainedMessages = retainedMessages
        configuration.keyring = keyring
        return configuration
    }

    /// The session `id` as `coordinator` sees it, once announced to it.
    static func findSession(
        _ coordinator: GroupCoordinator, id: String, activity: String = SessionCluster.activity
    ) async throws -> GroupSession<AnyGroupActivity> {
        if let known = coordinator.currentSessions(activityIdentifier: activity).first(where: { $0.id == id }) {
            return known
        }
        return try await withTimeLimit(.seconds(10), "session \(id) announced to \(coordinator.localParticipant.id)") {
            for await session in coordinator.sessions(activityIdentifier: activity) where session.id == id {
                return session
            }
            throw Failure(description: "coordinator closed before session \(id) arrived")
        }
    }

    /// The size of `member`'s state record, as retained on the broker (read by a plain MQTT client that
    /// subscribes to that one topic and asks for the retained copy): what a raw floor pads its payload to.
    /// The root of the raw floors' topics: as long as this session's state topics up to the key
    /// (groupsync/v2/<group>/s/<session>/state/<key>), with the group's first letter changed so that no
    /// GroupSync participant receives them. Append `/<writer>` or `/<anything as long>`.
    var rawStateRoot: String {
        "\(GroupTopics.protocolRoot)/r\(group.dropFirst())/s/\(sessionID)/state/\(SessionCluster.stateKey)"
    }

    func stateRecordSize(of member: ClusterMember) async throws -> Int {
        let topic = topics.state(sessionID, key: SessionCluster.stateKey, writer: member.name)
        let sniffer = try await WireSniffer.start(url: url, filters: [topic], replayRetained: true)
        let size: Result<Int, any Error>
        do {
            size = .success(try await sniffer.next(after: 0).size)
        } catch {
            size = .failure(error)
        }
        await sniffer.stop()
        return try size.get()
    }

    /// Ends the session (clearing its retained messages from the broker) if `end`, then closes every
    /// coordinator.
    func close(end: Bool = true) async {
        for member in members { member.watcher?.stop() }
        if end { await members[0].session.end() }
        let members = self.members
        _ = try? await Parallel.map(members.count, width: 32) { index in
            await members[index].coordinator.close()
        }
    }
}
