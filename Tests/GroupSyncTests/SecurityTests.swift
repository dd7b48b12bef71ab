import BrokerSupport
import Foundation
import Testing

@testable import GroupSync
@testable import MQTT

/// The secure configuration: passwords, the example ACL and TLS, as in deploy/mosquitto/mosquitto.secure.conf.
@Suite(.needsOwnBroker("TLS, users and an ACL"), .timeLimit(.minutes(timeLimitMinutes(1)))) struct SecurityTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    static let users = ["alice": "alice-pw", "bob": "bob-pw", "mallory": "mallory-pw"]

    func withSecureBroker(_ body: (MosquittoBroker, TestPKI.Files) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gs-secure-\(UUID())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let pki = try TestPKI.generate(in: directory)
        let acl = try String(contentsOf: SecurityTests.repository.appendingPathComponent("deploy/mosquitto/acl.example"), encoding: .utf8)
        let configuration = MosquittoBroker.Configuration(users: SecurityTests.users, acl: acl, tls: .init(pki))
        try await MosquittoBroker.withBroker(configuration) { broker in try await body(broker, pki) }
    }

    func login(_ broker: MosquittoBroker, _ pki: TestPKI.Files, _ name: String, password: String? = nil, ca: String? = nil) throws
        -> GroupCoordinator.Configuration
    {
        var configuration = try GroupCoordinator.Configuration(
            broker: "mqtts://127.0.0.1:\(broker.port)", group: "secure", participant: name,
            tls: .init(caFile: ca ?? pki.caCert))
        configuration.mqtt.username = name
        configuration.mqtt.password = password ?? SecurityTests.users[name]
        return configuration
    }

    @Test func forgingAnotherParticipantIsRefusedByTheBrokerAndChangesNothing() async throws {
        try await withSecureBroker { broker, pki in
            let alice = try await GroupCoordinator.connect(login(broker, pki, "alice"))
            let bob = try await GroupCoordinator.connect(login(broker, pki, "bob"))
            let a = try await alice.startJoined(Gallery(galleryID: "secure"))
            let b = try await bob.joinSession(a.id, of: Gallery.self)
            try await SharedState(a, key: "index", initialValue: 0).set(1)
            let bobState = try SharedState(b, key: "index", initialValue: 0)
            try await waitUntil("bob at 1") { bobState.value == 1 }
            let bobChats = Collector(GroupSessionMessenger(session: b).messages(of: Chat.self))

            // Mallory is a legitimate user of the broker, trying to act as alice over a raw connection.
            var raw = try MQTTClient.Configuration(url: "mqtts://127.0.0.1:\(broker.port)", tls: .init(caFile: pki.caCert))
            raw.username = "mallory"
            raw.password = SecurityTests.users["mallory"]
            let mallory = try MQTTClient(configuration: raw)
            try await mallory.connect()
            let root = "groupsync/v2/secure"
            let forgeries: [(String, String)] = [
                ("\(root)/presence/alice", #"{"epoch":1,"participant":"alice","status":"lost","v":2}"#),
                (
                    "\(root)/s/\(a.id)/state/index/alice",
                    #"{"clock":{"c":0,"p":"alice","t":99999999999999},"key":"index","v":2,"value":666}"#
                ),
                ("\(root)/s/\(a.id)/all/alice", #"{"body":{"text":"forged"},"epoch":1,"reliable":true,"seq":999,"type":"Chat","v":2}"#),
                (
                    "\(root)/s/\(a.id)/to/bob/alice",
                    #"{"body":{"text":"forged"},"epoch":1,"reliable":true,"seq":1000,"type":"Chat","v":2}"#
                ),
                ("\(root)/s/\(a.id)/member/alice", ""),
            ]
            for (topic, payload) in forgeries {
                await #expect(throws: MQTTError.notAuthorized(topic: topic)) {
                    try await mallory.publish(to: topic, string: payload, qos: .atLeastOnce, retain: true)
                }
            }
            // Nothing changed anywhere: a real message still arrives first, state and presence are intact.
            try await GroupSessionMessenger(session: a).send(Chat(text: "real"))
            try await bobChats.waitForCount(1)
            #expect(bobChats.elements.map(\.message.text) == ["real"])
            #expect(bobState.value == 1)
            #expect(ids(b.activeParticipants) == ["alice", "bob"])
            await mallory.disconnect()
            await alice.close()
            await bob.close()
        }
    }

    @Test func aWrongCAIsATypedErrorAndSoAreWrongCredentials() async throws {
        try await withSecureBroker { broker, pki in
            await #expect {
                _ = try await GroupCoordinator.connect(login(broker, pki, "alice", ca: pki.wrongCACert))
            } throws: { error in
                guard case let .connection(mqtt) = error as? GroupSyncError, case .tls = mqtt else { return false }
                return true
            }
            await #expect {
                _ = try await GroupCoordinator.connect(login(broker, pki, "alice", password: "wrong"))
            } throws: { error in
                guard case let .connection(mqtt) = error as? GroupSyncError, case let .connectionRefused(code, _) = mqtt else {
                    return false
                }
                return code == 134 || code == 135
            }
            // And the right ones work, over TLS end to end.
            let alice = try await GroupCoordinator.connect(login(broker, pki, "alice"))
            #expect(alice.client.isConnected)
            await alice.close()
        }
    }
}
