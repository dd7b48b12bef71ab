import Foundation
import GroupSync
import MQTT

/// `groupsync sessions`: the group's live sessions, once or following changes.
enum SessionsCommand: Command {
    static let name = "sessions"
    static let summary = "list the live sessions of a group (--watch to follow changes)"
    static let help = """
        Usage: groupsync sessions [--watch] [--json] [--timeout SEC] [--broker URL] [--group NAME] [--no-retain]

        Lists live sessions: ID, activity, title, active participants, age. As an observer: it never
        appears as a participant. With --watch, prints the list again after every change until Ctrl-C.

        \(CommonOptions.help)
        \(CommonOptions.observerHelp)
          --watch           follow changes
          --timeout SEC     how long to wait for the broker and the group's records (default 10)
          --json            one JSON object per listing: {"sessions":[{"id","activity","title","participants","age_s"}]}

        Exit codes: 0 success (with --watch: stopped with Ctrl-C, SIGTERM or SIGHUP); 1 timed out; 2 usage error;
        3 broker unreachable; 130 interrupted before the listing.
        """

    static func run(_ arguments: [String]) async throws -> Int32 {
        let args = try Arguments(arguments, options: CommonOptions.names.union(["timeout"]), flags: ["watch", "json", "no-retain"])
        let common = try CommonOptions(args)
        let timeout = Duration.seconds(try args.integer("timeout", default: 10, range: 1...86_400))
        let interruption = Interruption()
        Signals.onInterrupt { interruption.fire() }
        let client = try await interruption.race(timeout: timeout, waitingFor: "the broker", discard: CommonOptions.disconnect) {
            try await common.connectObserver()
        }
        do {
            return try await list(client, common: common, timeout: timeout, interruption: interruption, args: args)
        } catch {
            await client.disconnect()
            throw error
        }
    }

    /// Prints the listing once the group's retained records are in (and again after each change with
    /// `--watch`), until done, interrupted or timed out before the listing.
    private static func list(
        _ client: MQTTClient, common: CommonOptions, timeout: Duration, interruption: Interruption, args: Arguments
    ) async throws -> Int32 {
        let observer = ObserverWelcome.id(of: client)
        let welcomed = ObserverWelcome.isNeeded(common, client)
        var view = GroupView(group: common.group, observer: welcomed ? observer : nil, keyring: common.keyring)
        var welcome = ObserverWelcome(observer: observer)
        let topics = view.topics
        let marker = "groupsync-observer/\(client.configuration.clientID)"
        let filters =
            [topics.presenceFilter, topics.announcementFilter, "\(topics.root)/s/+/member/+", marker]
            + (welcomed ? ObserverWelcome.filters(topics, observer: observer) : [])
        let subscription = try await interruption.race(timeout: timeout, waitingFor: "the broker's answer") {
            let subscription = try await client.subscribe(to: filters.map { TopicSubscription($0, qos: .atLeastOnce) })
            // The marker comes back after every retained message: then the snapshot is complete.
            try await client.publish(to: marker, string: "sync")
            return subscription
        }
        // The loop below ends on Ctrl-C, SIGTERM or SIGHUP, and before the listing also after the timeout.
        let outcome = LockedValue<(complete: Bool, timedOut: Bool, interrupted: Bool)>((false, false, false))
        let stopper = Task {
            let timer = Task {
                try await Task.sleep(for: timeout)
                let timedOut = outcome.withLock { outcome in
                    outcome.timedOut = !outcome.complete
                    return outcome.timedOut
                }
                if timedOut { subscription.unsubscribe() }
            }
            for await _ in interruption.stream() {}
            timer.cancel()
            outcome.withLock { $0.interrupted = !Task.isCancelled }
            subscription.unsubscribe()
        }
        defer { stopper.cancel() }
        let inputs = ObserverInputs(subscription)
        defer { inputs.cancel() }
        // Complete once the retained replay is in (the marker came back), and where nothing is retained
        // once the welcome this observer then asks for is (ObserverWelcome).
        for await input in inputs.stream {
            let now = SystemWallClock().milliseconds()
            let complete = outcome.withLock { $0.complete }
            var completes = false
            switch input {
            case let message? where message.topic == marker:
                if welcomed {
                    do { try welcome.ask(client, topics: topics, now: now) } catch { completes = true }
                } else {
                    completes = true
                }
            case let message?:
                let event = view.apply(message, now: now)
                completes = event.map { welcome.onEvent($0, view: view, now: now) } ?? false
                if event != nil && complete { print(view, json: args.has("json")) }
            case nil:
                let expired = !view.expire(now: now).isEmpty
                completes = welcome.onAlarm(now: now)
                if expired && complete { print(view, json: args.has("json")) }
            }
            if completes {
                outcome.withLock { $0.complete = true }
                print(view, json: args.has("json"))
                if !args.has("watch") { break }  // the listing once
            }
            inputs.alarm.arm(at: [view.nextExpiry, welcome.deadline].compactMap { $0 }.min())
        }
        subscription.unsubscribe()
        let (complete, timedOut, interrupted) = outcome.withLock { ($0.complete, $0.timedOut, $0.interrupted) }
        if timedOut {
            throw CommandFailure("timed out after \(timeout.components.seconds) s waiting for the group's records (see --timeout)")
        }
        if interrupted && !complete { throw CommandFailure("interrupted", exitCode: 130) }
        await client.disconnect()
        return 0
    }

    static func print(_ view: GroupView, json: Bool) {
        let now = SystemWallClock().milliseconds()
        let rows = view.sessions.values.sorted { $0.announcement.createdAt < $1.announcement.createdAt }
        if json {
            Output.json([
                "sessions": .array(
                    rows.map { session in
                        .object([
                            "id": .string(session.announcement.session), "activity": .string(session.announcement.activity.type),
                            "title": .string(session.announcement.activity.title),
                            "participants": .array(view.active(session).map(JSONValue.string)),
                            "age_s": .int(max(0, now - session.announcement.createdAt) / 1_000),
                        ])
                    })
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
                    session.announcement.activity.title.padding(toLength: 21, withPad: " ", startingAt: 0),
                    view.active(session).joined(separator: ",").padding(toLength: 21, withPad: " ", startingAt: 0),
                    "\(age)s",
                ].joined(separator: " "))
        }
    }
}
