import Foundation
import GroupSync

/// `groupsync join`: joins (or starts) a session and follows it from the terminal.
enum JoinCommand: Command {
    static let name = "join"
    static let summary = "join or start a session; stdin lines set the shared value or send messages"
    static let help = """
        Usage: groupsync join ACTIVITY-ID [--session ID] [--state-key NAME] [--title TEXT] [--timeout SEC] \\
                              [--broker URL] [--group NAME] [--as ID] [--no-retain]

        Joins the session with --session ID, else the first live session of ACTIVITY-ID, else starts
        one. Prints one line per event:
          session <id> <activity-id> joined
          participants <id>,<id>,…
          state <key> <json>
          message <sender> <json>
          attachment +|- <owner> <digest> <size> <type> <name>   (added to or removed from the journal)
          ended <by>
        Each line on stdin that is JSON sets the shared value under --state-key (default "value"); a line
        starting with "!" sends the rest as a message {"text": …} to everyone, except the journal's:
        \(JoinJournal.help)
        Messages travel as the type BridgeMessage (docs/BRIDGE.md): `join` and `bridge` read each other's.
        EOF or Ctrl-C leaves the session cleanly.

        \(CommonOptions.help)
        \(CommonOptions.participantHelp)
          --session ID      join this session (wait for it to be announced)
          --state-key NAME  the shared state key the lines on stdin set and `state` lines show
                            (default value)
          --title TEXT      title when starting a new session
          --timeout SEC     how long to wait for the broker, the session and the join (default 30)

        Exit codes: 0 left cleanly or the session ended; 1 failure (a timeout included); 2 usage error;
        3 broker unreachable; 130 interrupted (Ctrl-C, SIGTERM, SIGHUP) before the session was joined.
        """

    static func run(_ arguments: [String]) async throws -> Int32 {
        let args = try Arguments(
            arguments, options: CommonOptions.names.union(["session", "state-key", "title", "timeout"]),
            flags: CommonOptions.participantFlags,
            positionals: 1)
        guard args.positionals.count == 1, let activityID = args.positionals.first else {
            throw UsageError("give exactly one ACTIVITY-ID")
        }
        guard Identifier.isValid(activityID) else { throw UsageError("invalid ACTIVITY-ID '\(activityID)'") }
        let common = try CommonOptions(args)
        let timeout = Duration.seconds(try args.integer("timeout", default: 30, range: 1...86_400))
        // Installed first: a Ctrl-C while connecting, waiting for the session or joining ends that wait.
        let done = AsyncStream<Void>.makeStream()
        let interruption = Interruption()
        Signals.onInterrupt {
            interruption.fire()
            done.continuation.yield()
        }
        let key = args.value("state-key") ?? "value"
        guard Identifier.isValid(key) else { throw UsageError("invalid --state-key '\(key)'") }
        let coordinator = try await interruption.race(timeout: timeout, waitingFor: "the broker", discard: CommonOptions.close) {
            try await common.connect()
        }
        let sessionID = args.value("session")
        let session: GroupSession<AnyGroupActivity>
        do {
            session = try await interruption.race(timeout: timeout, waitingFor: sessionID.map { "session \($0)" } ?? "a session") {
                try await findOrStart(coordinator, activityID: activityID, sessionID: sessionID, title: args.value("title"))
            }
            try await interruption.race(timeout: timeout, waitingFor: "the join of session \(session.id)") {
                do {
                    try await session.join()
                } catch {
                    throw CommandFailure("could not join session \(session.id): \(error)")
                }
            }
        } catch {
            await coordinator.close()
            throw error
        }
        Output.line("session \(session.id) \(activityID) joined")
        let state = try SharedState(session, key: key, initialValue: JSONValue.null)
        let messenger = GroupSessionMessenger(session: session)
        let journal = JoinJournal(GroupSessionJournal(session: session))
        // Both sequences start with the current value: those two come first, the state before the
        // participants, so that every run prints its start alike; then each sequence is followed.
        var values = state.valueUpdates().makeAsyncIterator()
        let participantUpdates = session.activeParticipantUpdates().makeAsyncIterator()
        if let value = await values.next() { Output.line("state \(key) \(json(value))") }
        if let participants = await participantUpdates.next() { Output.line(Self.participantsLine(participants)) }
        let followers = [
            journal.follow(),
            Task {
                while let participants = await participantUpdates.next() { Output.line(Self.participantsLine(participants)) }
            },
            Task { [values] in
                var values = values
                while let value = await values.next() { Output.line("state \(key) \(json(value))") }
            },
            Task {
                for await (message, context) in messenger.messages(of: BridgeMessage.self) {
                    Output.line("message \(context.source.id) \(json(message.value))")
                }
            },
        ]
        let ended = Task {
            for await value in session.stateUpdates() {
                if case let .invalidated(reason) = value {
                    if case let .ended(by) = reason { Output.line("ended \(by?.id ?? "-")") }
                    done.continuation.yield()
                }
            }
        }
        let input = Task.detached {
            while let line = readLine() {
                let trimmed = line.trimmingCharacters(in: .whitespaces)
                if trimmed.isEmpty { continue }
                if await journal.handle(trimmed) { continue }
                do {
                    if trimmed.hasPrefix("!") {
                        try await messenger.send(BridgeMessage(value: .object(["text": .string(String(trimmed.dropFirst()))])))
                    } else if let value = Wire.decode(JSONValue.self, from: Data(trimmed.utf8)) {
                        try await state.set(value)
                    } else {
                        Output.error("not JSON (prefix a message with !): \(trimmed)")
                    }
                } catch {
                    Output.error("\(error)")
                }
            }
            done.continuation.yield()
        }
        for await _ in done.stream { break }
        input.cancel()
        ended.cancel()
        journal.cancelLoads()
        for follower in followers { follower.cancel() }
        await coordinator.close()  // leaves the session, within the farewell timeout
        return 0
    }

    static func findOrStart(
        _ coordinator: GroupCoordinator, activityID: String, sessionID: String?, title: String?
    ) async throws -> GroupSession<AnyGroupActivity> {
        if let sessionID {
            for await session in coordinator.sessions(activityIdentifier: activityID) where session.id == sessionID { return session }
            throw CommandFailure("the coordinator closed before session \(sessionID) was announced")
        }
        // After connect() the coordinator knows every live session the broker has.
        if let live = coordinator.currentSessions(activityIdentifier: activityID).first { return live }
        let id = try await coordinator.activate(
            activityIdentifier: activityID, value: .object([:]), metadata: .init(title: title ?? activityID))
        for await session in coordinator.sessions(activityIdentifier: activityID) where session.id == id { return session }
        throw CommandFailure("session \(id) was not delivered")
    }

    static func participantsLine(_ participants: Set<Participant>) -> String {
        "participants \(participants.map(\.id).sorted().joined(separator: ","))"
    }

    static func json(_ value: JSONValue?) -> String {
        guard let value, let data = try? Wire.encode(value) else { return "null" }
        return String(decoding: data, as: UTF8.self)
    }
}
