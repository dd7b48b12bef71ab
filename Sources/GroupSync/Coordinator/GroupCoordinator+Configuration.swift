import Foundation
import MQTT

extension GroupCoordinator {
    /// How to reach the broker and who we are.
    public struct Configuration: Sendable {
        /// The broker connection. Its client ID is derived from the participant unless set explicitly.
        public var mqtt: MQTTClient.Configuration
        public var group: String
        public var participant: String
        public var displayName: String?
        /// Where wall-clock time comes from (inject a skewed one in tests).
        public var clock: any WallClock
        /// How long `join()` waits for a catch-up from an existing participant.
        public var catchUpTimeout: Duration
        /// How long ``GroupSession/leave()``, ``GroupSession/end()`` and ``GroupCoordinator/close()`` wait
        /// for the broker to take what they publish and clear (each call at most this long): a broker that
        /// is gone, unreachable or frozen does not hold them up. What they could not clear is left to the
        /// records' expiry, and presence to the will. Default: 2 s.
        public var farewellTimeout: Duration = .seconds(2)
        /// Called for every message rejected as malformed, forged or stale (they are also counted in
        /// ``GroupCoordinator/rejectedMessageCount``), from a task of its own (never from the network
        /// thread, so in no guaranteed order). By default rejections are logged to standard error when the
        /// environment variable `GROUPSYNC_LOG_REJECTED` is set.
        public var onRejected: (@Sendable (_ topic: String, _ payloadSize: Int) -> Void)?
        /// Publish our presence every keepalive / 2 (not retained) and drop a participant not heard of
        /// for 1.5 × keepalive. This is what makes a frozen or cut-off participant disappear within
        /// 1.5 × keepalive: brokers check keepalives coarsely (mosquitto 2.0.11 every ~5 s, so ~11 s for
        /// a keepalive of 5). It costs one small message per participant and interval, delivered to
        /// everyone in the group: turn it off for very large groups and rely on the broker's wills.
        public var presenceHeartbeats: Bool
        /// How long the broker keeps this participant's presence (online while it is connected and
        /// refreshes it, or the `lost` left by its will) after its last publish. A participant that
        /// crashes and never returns disappears from the broker after this. At least a second.
        public var presenceTimeToLive: Duration
        /// How many reliable messages, and how many bytes of them, each session keeps to re-send to a
        /// receiver that missed them (the broker lost them). A message that has left the outbox reaches
        /// such a receiver as a ``GroupSessionMessenger/Gap``. Defaults: 1,000 messages, 8 MiB.
        public var outboxLimits: (messages: Int, bytes: Int) {
            get { (outbox.maximumCount, outbox.maximumBytes) }
            set { outbox = OutboxStateMachine.Configuration(maximumCount: max(newValue.messages, 0), maximumBytes: max(newValue.bytes, 0)) }
        }
        var outbox = OutboxStateMachine.Configuration()
        /// Makes the group private (nil, the default: it is not). Every session this participant starts
        /// is sealed with the keyring's first key (AES-256-GCM, a key per session derived with HKDF-SHA256);
        /// what it receives is opened with whichever key it was sealed with. Sealed: app message bodies,
        /// shared state values, the activity, and the journal's names, media types, metadata and bytes. In
        /// clear: topics, participant IDs, epochs, sequence numbers, clocks, message types, state keys,
        /// lifetimes and sizes (PROTOCOL.md, Private sessions). A sealed payload that does not open — another key, moved
        /// to another topic or sender, changed — is rejected and counted, never delivered.
        public var keyring: GroupKeyring?

        /// - Parameters:
        ///   - broker: `mqtt://[user[:password]@]host[:port]` (or `mqtts://`, checked against the system's
        ///     trust store unless `tls` names a CA or a client certificate); a comma list
        ///     (`mqtt://a:1883,mqtt://b:1883`) names brokers that share the group's topics — bridged, or
        ///     nodes of a cluster — and the participant moves to the next when its broker fails, keeping its
        ///     identity, epoch and sessions (see ``MQTTClient/Configuration/fallbacks``).
        ///   - keepAlive: seconds; a frozen participant disappears after 1.5 × this (minimum 5).
        public init(
            broker: String = "mqtt://127.0.0.1:1883", group: String, participant: String, displayName: String? = nil,
            tls: MQTTClient.TLS? = nil, keepAlive: Int = 5, clock: any WallClock = SystemWallClock(),
            catchUpTimeout: Duration = .seconds(1), presenceHeartbeats: Bool = true, presenceTimeToLive: Duration = .seconds(3600)
        ) throws(GroupSyncError) {
            self.mqtt = try GroupSyncError.overConnection { () throws(MQTTError) in
                var mqtt = try MQTTClient.Configuration(url: broker, clientID: "", tls: tls)
                mqtt.keepAlive = keepAlive
                // The broker keeps our subscriptions and queues reliable messages for us while we
                // reconnect (it must persist them to survive its own restart); close() ends it.
                mqtt.cleanStart = false
                mqtt.sessionExpiry = 120
                // GroupSync never subscribes at QoS 2, the case that needs MQTTClient's wide default
                // window. A wide window makes mosquitto walk long in-flight lists per acknowledgement
                // when many participants share a process: libmosquitto's own 20.
                mqtt.receiveMaximum = 20
                return mqtt
            }
            self.group = group
            self.participant = participant
            self.displayName = displayName
            self.clock = clock
            self.catchUpTimeout = catchUpTimeout
            self.presenceHeartbeats = presenceHeartbeats
            self.presenceTimeToLive = presenceTimeToLive
            if getenv("GROUPSYNC_LOG_REJECTED") != nil {  // one variable, not a copy of the environment
                onRejected = { topic, size in
                    try? FileHandle.standardError.write(contentsOf: Data("groupsync: rejected \(size) bytes on \(topic)\n".utf8))
                }
            }
        }
    }
}
