import Foundation
import GroupSync
import MQTT

/// `groupsync watch`: a readable (or JSON) log of everything that happens in a group.
enum WatchCommand: Command {
    static let name = "watch"
    static let summary = "decode all GroupSync traffic of a group as a readable log"
    static let help = """
        Usage: groupsync watch [--json] [--timeout SEC] [--broker URL] [--group NAME] [--no-retain]

        Subscribes to groupsync/v2/<group>/# as an observer (it never appears as a participant) and prints
        announcements, joins, leaves, crashes (wills), state changes with their clocks, and messages
        (sender, recipients, type, size). Retained messages replayed at start are marked "(retained)".
        Runs until Ctrl-C.

        \(CommonOptions.help)
        \(CommonOptions.observerHelp)
          --json            one JSON object per line: {"time","kind","session","participant","text",…}
          --timeout SEC     how long to wait for the broker (default 10)

        Exit codes: 0 stopped with Ctrl-C, SIGTERM or SIGHUP; 1 timed out; 2 usage error; 3 broker unreachable;
        130 interrupted while connecting.
        """

    static func run(_ arguments: [String]) async throws -> Int32 {
        let args = try Arguments(arguments, options: CommonOptions.names.union(["timeout"]), flags: ["json", "no-retain"])
        let common = try CommonOptions(args)
        let asJSON = args.has("json")
        let timeout = Duration.seconds(try args.integer("timeout", default: 10, range: 1...86_400))
        let interruption = Interruption()
        Signals.onInterrupt { interruption.fire() }
        let topics = GroupTopics(group: common.group)
        let disconnect: @Sendable ((MQTTClient, MQTTSubscription)) async -> Void = { await $0.0.disconnect() }
        let (client, subscription) = try await interruption.race(timeout: timeout, waitingFor: "the broker", discard: disconnect) {
            let client = try await common.connectObserver()
            let subscription = try await client.subscribe(to: [TopicSubscription("\(topics.root)/#", qos: .atLeastOnce)])
            if ObserverWelcome.isNeeded(common, client) {
                // What began before: the participants online welcome this observer (it prints as it comes).
                var welcome = ObserverWelcome(observer: ObserverWelcome.id(of: client))
                try welcome.ask(client, topics: topics, now: SystemWallClock().milliseconds())
            }
            return (client, subscription)
        }
        var view = GroupView(
            group: common.group, observer: ObserverWelcome.isNeeded(common, client) ? ObserverWelcome.id(of: client) : nil,
            keyring: common.keyring)
        let stopper = Task {
            for await _ in interruption.stream() {}
            subscription.unsubscribe()
        }
        defer { stopper.cancel() }
        if !asJSON { Output.line("watching \(view.topics.root)/# on \(CommonOptions.redacted(common.broker)) — Ctrl-C to stop") }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let inputs = ObserverInputs(subscription)
        defer { inputs.cancel() }
        for await input in inputs.stream {
            let events =
                input.map { view.apply($0, now: SystemWallClock().milliseconds()).map { [$0] } ?? [] }
                ?? view.expire(now: SystemWallClock().milliseconds())
            inputs.alarm.arm(at: view.nextExpiry)
            let retained = input?.retain == true
            for event in events { print(event, retained: retained, asJSON: asJSON, formatter: formatter) }
        }
        await client.disconnect()
        return 0
    }

    private static func print(_ event: GroupView.Event, retained: Bool, asJSON: Bool, formatter: ISO8601DateFormatter) {
        let time = formatter.string(from: Date())
        guard asJSON else {
            Output.line("\(time.dropFirst(11).prefix(12))  \(event.text)\(retained ? " (retained)" : "")")
            return
        }
        var object = event.fields
        object["time"] = .string(time)
        object["kind"] = .string(event.kind)
        object["text"] = .string(event.text)
        object["retained"] = .bool(retained)
        if let session = event.session { object["session"] = .string(session) }
        if let participant = event.participant { object["participant"] = .string(participant) }
        Output.json(object)
    }
}
