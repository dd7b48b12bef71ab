import Foundation
import GroupSync
import MQTT

/// `groupsync watch`: a readable (or JSON) log of everything that happens in a group.
enum WatchCommand: Command {
    static let name = "watch"
    static let summary = "decode all GroupSync traffic of a group as a readable log"
    static let help = """
        Usage: groupsync watch [--json] [--broker URL] [--group NAME]

        Subscribes to groupsync/v2/<group>/# as an observer (it never appears as a participant) and prints
        announcements, joins, leaves, crashes (wills), state changes with their clocks, and messages
        (sender, recipients, type, size). Retained messages replayed at start are marked "(retained)".
        Runs until Ctrl-C.

        \(CommonOptions.help)
          --json            one JSON object per line: {"time","kind","session","participant","text",…}

        Exit codes: 0 stopped with Ctrl-C; 2 usage error; 3 broker unreachable.
        """

    static func run(_ arguments: [String]) async throws -> Int32 {
        let args = try Arguments(arguments, options: CommonOptions.names, flags: ["json"])
        let common = try CommonOptions(args)
        let asJSON = args.has("json")
        let client = try await common.connectObserver()
        var view = GroupView(group: common.group)
        let subscription = try await client.subscribe(to: [TopicSubscription("\(view.topics.root)/#", qos: .atLeastOnce)])
        Signals.onInterrupt { subscription.unsubscribe() }
        if !asJSON { Output.line("watching \(view.topics.root)/# on \(CommonOptions.redacted(common.broker)) — Ctrl-C to stop") }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        for await message in subscription {
            guard let event = view.apply(message) else { continue }
            let time = formatter.string(from: Date())
            if asJSON {
                var object = event.fields
                object["time"] = time
                object["kind"] = event.kind
                object["text"] = event.text
                object["retained"] = message.retain
                if let session = event.session { object["session"] = session }
                if let participant = event.participant { object["participant"] = participant }
                Output.json(object)
            } else {
                Output.line("\(time.dropFirst(11).prefix(12))  \(event.text)\(message.retain ? " (retained)" : "")")
            }
        }
        await client.disconnect()
        return 0
    }
}
