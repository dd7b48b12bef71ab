import BrokerSupport
import Foundation
// Every file of this target sees the test support (Collector, TestPKI, timeBound, …) through this import.
@_exported import GroupSyncTestSupport
import Synchronization
import Testing

@testable import GroupSync
@testable import MQTT

struct Gallery: GroupActivity {
    static let activityIdentifier = "com.example.gallery"
    var galleryID: String
    var metadata: GroupActivityMetadata { .init(title: "Gallery \(galleryID)", type: .exploreTogether) }
}

struct Whiteboard: GroupActivity {
    static let activityIdentifier = "com.example.whiteboard"
    var name: String
}

struct GalleryState: Codable, Sendable, Equatable {
    var index: Int
}

struct Chat: Codable, Sendable, Equatable {
    var text: String
}

/// A group of coordinators on one broker, closed at the end.
final class Group: Sendable {
    let broker: MosquittoBroker
    let name: String
    private let joined = LockedValue<[GroupCoordinator]>([])
    /// Every coordinator connected so far, in order.
    var coordinators: [GroupCoordinator] { joined.withLock { $0 } }

    init(_ broker: MosquittoBroker, name: String? = nil) {
        self.broker = broker
        self.name = name ?? broker.unique("g")
    }

    func join(
        _ participant: String, clock: any WallClock = SystemWallClock(),
        _ adjust: (inout GroupCoordinator.Configuration) -> Void = { _ in }
    ) async throws -> GroupCoordinator {
        var configuration = try GroupCoordinator.Configuration(
            broker: broker.url, group: name, participant: participant, clock: clock, catchUpTimeout: .seconds(2))
        configuration.mqtt.reconnect = Backoff(initial: .milliseconds(20), maximum: .milliseconds(300))
        adjust(&configuration)
        let coordinator = try await GroupCoordinator.connect(configuration)
        joined.withLock { $0.append(coordinator) }
        return coordinator
    }

    /// ``join(_:clock:_:)`` where the broker's retained messages are used, or (false) treated as absent.
    func join(_ participant: String, retainedMessages: Bool) async throws -> GroupCoordinator {
        try await join(participant) { $0.mqtt.retainedMessages = retainedMessages }
    }

    /// alice activates `activity` and joins; bob joins the same session.
    func pair<A: GroupActivity>(_ activity: A) async throws -> (GroupCoordinator, GroupCoordinator, GroupSession<A>, GroupSession<A>) {
        let alice = try await join("alice")
        let bob = try await join("bob")
        let a = try await alice.startJoined(activity)
        let b = try await bob.joinSession(a.id, of: A.self)
        return (alice, bob, a, b)
    }

    /// Connects one coordinator per name; the first activates `activity` and joins, the others join the
    /// same session. Returns the joined sessions in the order of `names`.
    func joinOneSession<A: GroupActivity>(_ names: [String], _ activity: A) async throws -> [GroupSession<A>] {
        var coordinators: [GroupCoordinator] = []
        for name in names { coordinators.append(try await join(name)) }
        let first = try await coordinators[0].startJoined(activity)
        var sessions = [first]
        for coordinator in coordinators.dropFirst() { sessions.append(try await coordinator.joinSession(first.id, of: A.self)) }
        return sessions
    }

    func closeAll() async {
        for coordinator in coordinators { await coordinator.close() }
    }
}

extension GroupCoordinator {
    /// The first session of `A` this coordinator receives.
    func firstSession<A: GroupActivity>(of type: A.Type, timeout: Duration = .seconds(5)) async throws -> GroupSession<A> {
        let sessions = Collector(self.sessions(of: A.self))
        defer { sessions.cancel() }
        try await sessions.waitForCount(1, timeout: timeout)
        return sessions.elements[0]
    }

    /// Activates `activity` and returns the joined session as received through `sessions()`.
    func startJoined<A: GroupActivity>(_ activity: A) async throws -> GroupSession<A> {
        let sessions = Collector(self.sessions(of: A.self))
        defer { sessions.cancel() }
        let id = try await activate(activity)
        try await waitUntil("own session arrives") { sessions.elements.contains { $0.id == id } }
        let session = sessions.elements.first { $0.id == id }!
        try await session.join()
        return session
    }

    /// Joins the session with `id` once it arrives.
    func joinSession<A: GroupActivity>(_ id: String, of type: A.Type) async throws -> GroupSession<A> {
        let sessions = Collector(self.sessions(of: A.self))
        defer { sessions.cancel() }
        try await waitUntil("session \(id) arrives") { sessions.elements.contains { $0.id == id } }
        let session = sessions.elements.first { $0.id == id }!
        try await session.join()
        return session
    }

    func dropConnection() { client.connection.closeSocketAbruptly() }
}

func ids(_ participants: Set<Participant>) -> Set<String> { Set(participants.map(\.id)) }

/// `waitUntil`, recording `diagnosis` (what the test saw instead) as an issue when the deadline passes.
func waitUntil(
    timeout: Duration = .seconds(5), pollEvery: Duration = .milliseconds(5), _ description: String,
    _ condition: @Sendable () async throws -> Bool, else diagnosis: () async throws -> String
) async throws {
    do {
        try await GroupSyncTestSupport.waitUntil(timeout: timeout, pollEvery: pollEvery, description, condition)
    } catch let error as DeadlineExceeded {
        Issue.record(Comment(rawValue: try await diagnosis()))
        throw error
    }
}

/// A raw MQTT client (not GroupSync) subscribed to `filters`.
func rawSubscriber(
    _ broker: MosquittoBroker, _ filters: String..., user: String? = nil, password: String? = nil
) async throws -> (MQTTClient, Collector<MQTTMessage>) {
    var configuration = try MQTTClient.Configuration(url: broker.url)
    if let user {  // else the URL's credentials, which an external broker may need
        configuration.username = user
        configuration.password = password
    }
    let client = try MQTTClient(configuration: configuration)
    try await client.connect()
    let messages = Collector(try await client.subscribe(to: filters.map { TopicSubscription($0) }))
    return (client, messages)
}

/// The topics the broker stores retained under `root`: what a fresh subscriber receives flagged retained
/// before its own `marker` (a topic the user may publish to) comes back; live messages that arrive
/// meanwhile (a heartbeat) are not flagged.
func retainedTopics(
    _ broker: MosquittoBroker, under root: String, marker: String? = nil, user: String? = nil, password: String? = nil
) async throws -> [String] {
    let marker = marker ?? "\(root)/marker"
    let (probe, seen) = try await rawSubscriber(broker, "\(root)/#", user: user, password: password)
    try await probe.publish(to: marker, string: "m")
    try await waitUntil("the probe's marker") { seen.elements.contains { $0.topic == marker } }
    await probe.disconnect()
    return seen.elements.prefix { $0.topic != marker }.filter(\.retain).map(\.topic)
}

extension Trait where Self == ConditionTrait {
    /// Skips the test when the suite runs against an external broker (`GROUPSYNC_TEST_BROKER`, see
    /// ``ExternalBroker``): it needs a mosquitto of its own, because of `why` ("restarts it").
    static func needsOwnBroker(_ why: String) -> Self {
        .disabled(if: ExternalBroker.isConfigured, Comment(rawValue: ExternalBroker.skipReason(why)))
    }

    /// For a test that spreads its clients over two brokers sharing the group's topics
    /// (``MosquittoBroker/withBridgedBrokers(isolation:_:)``): skipped against one external broker, run
    /// against two (`GROUPSYNC_TEST_BROKER=URL1,URL2`).
    static var needsTwoBrokers: Self {
        .disabled(
            if: ExternalBroker.isConfigured && !ExternalBroker.isPairConfigured,
            Comment(rawValue: "needs two brokers that share the group's topics: GROUPSYNC_TEST_BROKER=URL1,URL2, or none"))
    }
}

/// What `session`'s stream receiver holds, per sender and stream, and whether its connection is up: for
/// the failure message of a test whose messages stopped arriving.
func receiverState(_ session: GroupSession<some GroupActivity>) -> String {
    let streams = session.core.read { machine -> String in
        guard case let .joined(joined) = machine.phase else { return "not joined: \(machine.state)" }
        return joined.receiver.senders.sorted { $0.key < $1.key }.map { sender, followed in
            "\(sender)@\(followed.epoch) "
                + followed.streams.sorted { "\($0.key)" < "\($1.key)" }.map { kind, stream in
                    let request = stream.request.map { "asked through \($0.through), due \($0.due)" } ?? "nothing asked"
                    return "\(kind): cursor \(stream.cursor.map(String.init) ?? "unknown"), \(stream.held.count) held, "
                        + "stated \(stream.stated), \(request)"
                }.joined(separator: "; ")
        }.joined(separator: " | ")
    }
    return "\(session.localParticipant.id) (connected \(session.core.context.client.isConnected)): \(streams)"
}
