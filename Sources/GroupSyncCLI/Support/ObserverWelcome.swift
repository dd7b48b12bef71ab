import Foundation
import GroupSync
import MQTT

/// An observer's welcome on a broker without retained messages (PROTOCOL.md, "Observers"): it asks
/// with an `observe` record, and what it would have read from retained messages comes as a welcome
/// (presences and sessions) and, for each session, a catch-up (members and state) addressed to it.
///
/// Complete when a whole welcome came (its last part) and a whole catch-up for each session it listed,
/// or once the catch-up timeout passed since the request or the last welcome part: nobody answers in an
/// empty group, and a session that nobody online is joined to has nobody to answer for it.
struct ObserverWelcome {
    /// The protocol's catch-up timeout (ms): an answer is sent at once.
    static let timeout: Int64 = 1_000

    /// The ID the observer asks as (``id(of:)``).
    let observer: String
    /// When to stop waiting (wall clock, ms); nil until asked, and once complete.
    private(set) var deadline: Int64?
    private var welcomed = false
    /// The sessions a catch-up came for (it may come before the welcome that lists the session).
    private var caughtUp: Set<String> = []

    init(observer: String) { self.observer = observer }

    /// The ID an observer asks as: its MQTT username, which a broker ACL matches (`%u`: PROTOCOL.md,
    /// "Identity and access control"), or without one its client ID.
    static func id(of client: MQTTClient) -> String {
        client.configuration.username.flatMap { Identifier.isValid($0) ? $0 : nil } ?? client.configuration.clientID
    }

    /// Whether an observer of this connection asks to be welcomed: with `--no-retain`, or when the broker
    /// keeps no retained messages.
    static func isNeeded(_ common: CommonOptions, _ client: MQTTClient) -> Bool {
        !common.retainedMessages || !client.retainAvailable
    }

    /// The filters an observer subscribes to besides its own: its welcomes and the catch-ups sent to it.
    static func filters(_ topics: GroupTopics, observer: String) -> [String] {
        [topics.welcomeFilter(for: observer), "\(topics.root)/s/+/to/\(observer)/+"]
    }

    /// Hands the request to the connection (without waiting for the broker: a connection that is down
    /// sends it once back) and starts the wait at `now` (wall clock, ms).
    mutating func ask(_ client: MQTTClient, topics: GroupTopics, now: Int64) throws(MQTTError) {
        let payload = (try? Wire.encode(Wire.Observe())) ?? Data()
        client.detach(try client.enqueuePublish(to: topics.observe(observer), payload: payload, qos: .atLeastOnce))
        deadline = now &+ ObserverWelcome.timeout
    }

    var isWaiting: Bool { deadline != nil }

    /// Takes in an event of the observer's view at `now`; returns true when the wait just completed.
    mutating func onEvent(_ event: GroupView.Event, view: GroupView, now: Int64) -> Bool {
        guard deadline != nil else { return false }
        switch event.kind {
        case "welcome":
            welcomed = welcomed || event.fields["more"] == nil
            deadline = now &+ ObserverWelcome.timeout
        case "catch-up" where event.fields["to"] == .string(observer) && event.fields["more"] == nil:
            if let session = event.session { caughtUp.insert(session) }
        default: return false
        }
        return finish(if: welcomed && view.sessions.keys.allSatisfy(caughtUp.contains))
    }

    /// The wait's deadline may have passed at `now`: returns true when the wait just completed.
    mutating func onAlarm(now: Int64) -> Bool {
        guard let deadline else { return false }
        return finish(if: now >= deadline)
    }

    private mutating func finish(if done: Bool) -> Bool {
        if done { deadline = nil }
        return done
    }
}
