import BrokerSupport
import Foundation
import GroupSync
import MQTT

/// `groupsync demo`: the article's gallery, scripted — swipes, a simultaneous swipe conflict, a photo
/// added to the session's journal, a late joiner who opens it and a participant killed without leaving —
/// with a timeline and a verdict; with `--playback`,
/// watching together on skewed clocks instead (``PlaybackDemo``).
enum DemoCommand: Command {
    static let name = "demo"
    static let summary = "run the gallery demo on a private broker and print a verdict"
    static let help = """
        Usage: groupsync demo [--playback] [--participants N] [--timeout SEC] [--broker URL]… [--no-retain]
                              [--private] [--secret-file F] [--group NAME]

        N participants (default 3) share one gallery index. Scripted: swipes, a simultaneous swipe by two
        participants, a photo added to the session's journal, a late joiner who opens it, and one
        participant killed without leaving. Prints a timeline (who did what, what each saw, latencies)
        and a verdict. Without retained messages the late joiner loads the photo from those who hold it.

        --playback: N participants watch together instead, with clocks off by up to ±10 minutes and
        drifting up to ±100 ppm: play, seek, a rate change, a buffering suspension and its release, a late
        joiner. The verdict prints the start spread (real time across participants, for each start) and
        the position spread (at one real instant); PASS when under 10 ms and 5 ms.

          --participants N  3 to 20 (default 3)
          --timeout SEC     give up when the whole script takes longer (default 60)
          --broker URL      use this broker instead of starting a private mosquitto. Repeated (or a
                            comma list), for brokers that share the group's topics (bridged, or nodes
                            of a cluster), each with its credentials: the participants are spread
                            across them in turn, each with the others as its fallbacks
          --no-retain       the participants use no retained messages (see `groupsync help join`)
          --private         the group is private: its sessions are sealed end to end with a key made for
                            this run (or the keys of --secret-file, else $GROUPSYNC_SECRET; see
                            `groupsync help join`)
          --group NAME      group name (default: demo-<random>)
          --password-file F, --cafile F, --cert F, --key F
                            with --broker: the password and TLS files, as for every other command
                            (see `groupsync help join`)

        Ctrl-C, SIGTERM or SIGHUP stops the demo at any point: its participants leave and the private mosquitto
        stops.

        Exit codes: 0 everything converged, the photo arrived intact and the crash was detected
        (--playback: within the bounds); 1 otherwise (a timeout included);
        2 usage error; 3 broker unreachable; 4 mosquitto not installed (sudo apt-get install mosquitto);
        130 interrupted.
        """

    static func run(_ arguments: [String]) async throws -> Int32 {
        let args = try Arguments(
            arguments, options: ["participants", "broker", "group", "timeout", "password-file", "cafile", "cert", "key", "secret-file"],
            flags: ["playback", "no-retain", "private"])
        let count = try args.integer("participants", default: 3, range: 3...20)
        let timeout = Duration.seconds(try args.integer("timeout", default: 60, range: 1...3_600))
        let group = args.value("group") ?? "demo-\(String(UInt32.random(in: 0...UInt32.max), radix: 36))"
        // Given brokers are checked, and their credentials read, as every other command does: a URL that
        // cannot be a broker is a usage error (exit 2).
        let common = args.allValues("broker").isEmpty ? nil : try CommonOptions(args)
        if common == nil, let stray = ["password-file", "cafile", "cert", "key"].first(where: { args.value($0) != nil }) {
            throw UsageError("--\(stray) is for a broker given with --broker (the private mosquitto needs none)")
        }
        let keyring = try Self.keyring(args)
        let interruption = Interruption()
        // No forced exit: the private mosquitto is this process's to stop (the stop is bounded).
        Signals.onInterrupt(exitAfter: nil) { interruption.fire() }
        var broker: MosquittoBroker?
        let urls: [String]
        let given = args.allValues("broker").flatMap(MQTTClient.Configuration.urls(inList:))
        if !given.isEmpty {
            urls = given
        } else {
            // Not raced: the start is bounded (10 s), and a broker once started is this command's to stop.
            do {
                broker = try await MosquittoBroker.start()
            } catch {
                throw CommandFailure("could not start mosquitto: \(error)", exitCode: 4)
            }
            urls = [broker!.url]
        }
        let timeline = Timeline()
        let using = urls.map(CommonOptions.redacted).joined(separator: " and ")
        timeline.note(
            "broker",
            broker.map { "private mosquitto on \($0.url) (set_tcp_nodelay true)" }
                ?? (urls.count > 1 ? "using \(using), participants spread across them in turn" : "using \(using)"))
        let retainedMessages = !args.has("no-retain")
        if !retainedMessages { timeline.note("broker", "no retained messages: sessions found through welcomes and catch-ups") }
        if let keyring { timeline.note("private", "sessions sealed end to end with group key \(keyring.sealingKey.id)") }
        let stage = DemoStage(
            brokers: urls, group: group, count: count, timeline: timeline, retainedMessages: retainedMessages, tls: common?.tls,
            password: common?.password, keyring: keyring)
        let scenario: any DemoScript = args.has("playback") ? PlaybackDemo(stage: stage) : Scenario(stage: stage)
        let outcome: Result<Bool, any Error>
        do {
            outcome = .success(
                try await interruption.race(timeout: timeout, waitingFor: "the demo to finish") { try await scenario.run() })
        } catch {
            outcome = .failure(error)
        }
        // Interrupted or timed out, the script is left where it was: its participants leave now.
        await stage.closeAll()
        await broker?.stop()
        switch outcome {
        case let .success(verdict):
            return verdict ? 0 : 1
        case let .failure(failure as CommandFailure):
            throw failure
        case let .failure(error):
            throw CommandFailure("demo failed: \(error)")
        }
    }

    /// The participants' keys: those of `--secret-file` (private without `--private`); with `--private`,
    /// those of `$GROUPSYNC_SECRET`, else a key made for this run; nil for a group that is not private.
    private static func keyring(_ args: Arguments) throws -> GroupKeyring? {
        if let file = args.value("secret-file") {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
                throw UsageError("cannot read --secret-file '\(file)'")
            }
            return try CommonOptions.keyring(text, from: "--secret-file '\(file)'")
        }
        guard args.has("private") else { return nil }
        if let text = ProcessInfo.processInfo.environment["GROUPSYNC_SECRET"] {
            return try CommonOptions.keyring(text, from: "$GROUPSYNC_SECRET")
        }
        return try GroupKeyring([try GroupKey.random(id: "demo")])
    }
}
