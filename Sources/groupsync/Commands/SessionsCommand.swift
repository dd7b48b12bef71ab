import Foundation
import GroupSync
import MQTT

/// `groupsync sessions`: the group's live sessions, once or following changes.
enum SessionsCommand: Command {
    static let name = "sessions"
    static let summary = "list the live sessions of a group (--watch to follow changes)"
    static let help = """
        Usage: groupsync sessions [--watch] [--json] [--broker URL] [--group NAME]

        Lists live sessions: ID, activity, title, active participants, age. As an observer: it never
        appears as a participant. With --watch, prints the list again after every change until Ctrl-C.

        \(CommonOptions.help)
          --watch           follow changes
          --json            one JSON object per listing: {"sessions":[{"id","activity","title","participants","age_s"}]}

        Exit codes: 0 success; 2 usage error; 3 broker unreachable.
        """

    static func run(_ arguments: [String]) async throws -> Int32 {
        let args = try Arguments(arguments, options: CommonOptions.names, flags: ["watch", "json"])
        let common = try CommonOptions(args)
        let client = try await common.connectObserver()
        var view = GroupView(group: common.group)
        let marker = "groupsync-observer/\(client.configuration.clientID)"
        let subscription = try await client.subscribe(to: [
            TopicSubscription(view.topics.presenceFilter, qos: .atLeastOnce),
            TopicSubscription(view.topics.announcementFilter, qos: .atLeastOnce),
            TopicSubscription("\(view.topics.root)/s/+/member/+", qos: .atLeastOnce),
            TopicSubscription(marker, qos: .atLeastOnce),
        ])
        // The marker comes back after every retained message: then the snapshot is complete.
        try await client.publish(to: marker, string: "sync")
        Signals.onInterrupt { subscription.unsubscribe() }
        var complete = false
        for await message in subscription {
            if message.topic == marker {
                complete = true
                print(view, json: args.has("json"))
                if !args.has("watch") { break }
                continue
            }
            if view.apply(message) != nil && complete { print(view, json: args.has("json")) }
        }
        subscription.unsubscribe()
        await client.disconnect()
        return 0
    }

    static func print(_ view: GroupView, json: Bool) {
        let now = Int64(Date().timeIntervalSince1970 * 1_000)
        let rows = view.sessions.values.sorted { $0.announcement.createdAt < $1.announcement.createdAt }
        if json {
            Output.json([
                "sessions": rows.map { session -> [String: Any] in
                    [
                        "id": session.announcement.session, "activity": session.announcement.activity.type,
                        "title": session.announcement.activity.metadata.title, "participants": view.active(session),
                        "age_s": max(0, now - session.announcement.createdAt) / 1_000,
                    ]
                }
            ])
            return
        }
        if rows.isEmpty {
            Output.line("no live sessions in group \(view.topics.group)")
            return
        }
        Output.line("SESSION           ACTIVITY                  TITLE                 PARTICIPANTS          AGE")
        for session in rows {
            let age = max(0, now - session.announcement.createdAt) / 1_000
            Output.line(
                [
                    session.announcement.session.padding(toLength: 17, withPad: " ", startingAt: 0),
                    session.announcement.activity.type.padding(toLength: 25, withPad: " ", startingAt: 0),
                    session.announcement.activity.metadata.title.padding(toLength: 21, withPad: " ", startingAt: 0),
                    view.active(session).joined(separator: ",").padding(toLength: 21, withPad: " ", startingAt: 0),
                    "\(age)s",
                ].joined(separator: " "))
        }
    }
}
