import BrokerSupport
import Foundation
import GroupSyncTestSupport
import MQTT
import Testing

/// The `groupsync` executable, run as a user would.
@Suite(.timeLimit(.minutes(timeLimitMinutes(2)))) struct CommandTests {
    @Test func demoConvergesAndSaysSo() async throws {
        let result = try await runCLI(["demo"], timeout: .seconds(60))
        // The whole timeline and verdict when it fails: which of the four checks said no, and when.
        #expect(result.status == 0, "\(result.errors)\n\(result.output.joined(separator: "\n"))")
        #expect(result.output.contains { $0.contains("converged:") && $0.contains("yes") })
        #expect(result.output.contains { $0.contains("result:") && $0.contains("PASS") })
        #expect(result.output.contains { $0.contains("joined late") })
        #expect(result.output.contains { $0.contains("shared photo:") && $0.contains("opened it") && $0.contains("every chunk verified") })
    }

    /// Whether a demo run passed, or — where timings are not judged (``judgesTimings``: the playback
    /// demo's verdict holds its spreads to fixed bounds, 10 ms and 5 ms) — ran to its verdict.
    static func demoSucceeded(_ result: (status: Int32, output: [String], errors: [String])) -> Bool {
        result.status == 0 || (!judgesTimings && result.status == 1 && result.output.contains { $0.contains("result:") })
    }

    /// Runs a demo to its end. A playback verdict that failed on its bounds alone (the script ran to its
    /// verdict; a spread beyond 10 or 5 ms) is run once more: the suite loads both cores with other tests'
    /// processes, and one start timer they held up says nothing of the demo; two verdicts in a row do.
    static func runDemo(_ arguments: [String]) async throws -> (status: Int32, output: [String], errors: [String]) {
        let result = try await runCLI(arguments, timeout: .seconds(60))
        guard judgesTimings, result.status == 1, result.output.contains(where: { $0.contains("result:") && $0.contains("FAIL") }) else {
            return result
        }
        return try await runCLI(arguments, timeout: .seconds(60))
    }

    /// Watching together on skewed clocks: the verdict prints the measured spreads and passes.
    @Test func playbackDemoStartsEveryoneTogether() async throws {
        let result = try await Self.runDemo(["demo", "--playback"])
        #expect(Self.demoSucceeded(result), "\(result.errors)\n\(result.output.joined(separator: "\n"))")
        #expect(result.output.contains { $0.contains("start spread:") && $0.contains("play") && $0.contains("buffering over") })
        #expect(result.output.contains { $0.contains("position spread:") && $0.contains("p50") })
        #expect(result.output.contains { $0.contains("joined late; started") })
        #expect(result.output.contains { $0.contains("result:") && ($0.contains("PASS") || !judgesTimings) })
        let help = try await runCLI(["help", "demo"])
        #expect(help.output.contains { $0.contains("--playback") })

        // Like the gallery, it stops on a signal mid-script: its participants leave, its broker stops.
        let demo = try CLIProcess(["demo", "--playback"])
        let banner = try await demo.waitForLine { $0.contains("private mosquitto on mqtt://") }
        let url = try #require(banner.split(separator: " ").first { $0.hasPrefix("mqtt://") })
        _ = try await demo.waitForLine { $0.contains("joined; active") }
        demo.signal(SIGINT)
        let status = try await withTimeLimit(timeBound(.seconds(10)), "the demo stops") { try await demo.wait() }
        #expect(status == 130 || status == 0, "interrupted, or done before the signal came")
        let client = try MQTTClient(configuration: .init(url: String(url)))
        await #expect(throws: MQTTError.self, "its private broker stopped") { try await client.connect() }
    }

    /// Across two bridged brokers, without retained messages (as on a cluster whose nodes keep separate
    /// retained stores): the participants are spread across both, and every scene passes; the session's
    /// records leave with its end.
    @Test(.needsOwnBroker("two bridged brokers"), arguments: [[], ["--playback"]])
    func theDemoSpreadsAcrossBrokersWithoutRetainedMessages(_ extra: [String]) async throws {
        try await MosquittoBroker.withBridgedBrokers { a, b in
            let group = "spread-\(UInt32.random(in: 0...UInt32.max))"
            let result = try await Self.runDemo(
                ["demo", "--broker", a.url, "--broker", b.url, "--no-retain", "--participants", "4", "--group", group] + extra)
            #expect(Self.demoSucceeded(result), "\(result.errors)\n\(result.output.joined(separator: "\n"))")
            #expect(result.output.contains { $0.contains("participants spread across them") })
            #expect(result.output.contains { $0.contains("ended the session") })
            let probe = try MQTTClient(configuration: .init(url: b.url))
            try await probe.connect()
            let retained = Collector(try await probe.subscribe(to: [TopicSubscription("groupsync/v2/\(group)/#")]))
            try await probe.publish(to: "groupsync/v2/\(group)/marker", string: "m")
            try await waitUntil("the marker") { retained.elements.contains { $0.topic.hasSuffix("/marker") } }
            #expect(retained.elements.filter { !$0.topic.hasSuffix("/marker") }.isEmpty, "\(retained.elements.map(\.topic))")
            await probe.disconnect()
        }
    }

    /// A usage error is one line saying what is wrong and one saying where to read more, exit status 2:
    /// invalid ports and unreadable TLS files too, found before connecting, in the CLI's words.
    @Test func aUsageErrorIsTwoLinesAndExitsWithTwo() async throws {
        let cases: [(arguments: [String], says: String, command: String?)] =
            [
                (["join"], "give exactly one ACTIVITY-ID", "join"),
                (["nope"], "unknown command 'nope'", nil),
                (["--version", "extra"], "unexpected argument 'extra'", nil),
                (["dashboard", "stray"], "stray", "dashboard"),
                (["sessions", "--broker", "mqtt://127.0.0.1:99999"], "port 99999", "sessions"),
                (["sessions", "--broker", "mqtt://127.0.0.1:0"], "port 0", "sessions"),
                (["sessions", "--broker", "mqtts://127.0.0.1", "--cafile", "/nonexistent/ca.pem"], "cannot read --cafile", "sessions"),
                (["join", "a.b", "--cert", "/nonexistent/c.pem", "--key", "/nonexistent/k.pem"], "cannot read --cert", "join"),
                (["sessions", "--broker", "mqtt://127.0.0.1", "--cafile", "/etc/hostname"], "--cafile is for mqtts://", "sessions"),
            ] + (geteuid() == 0 ? [(["broker", "--persist", "/tmp"], "is not", "broker")] : [])
        for (arguments, says, command) in cases {
            let result = try await runCLI(arguments)
            #expect(result.status == 2, "\(arguments)")
            #expect(result.errors.count == 2 && result.errors.first?.contains(says) == true, "\(arguments): \(result.errors)")
            #expect(result.errors.last == "see 'groupsync help\(command.map { " " + $0 } ?? "")'", "\(arguments)")
            #expect(!result.errors.joined().contains("MQTT configuration"), "the library's words: \(result.errors)")
        }
    }

    @Test func usageErrorsExitWithTwo() async throws {
        #expect(try await runCLI([]).status == 2)
        #expect(try await runCLI(["nope"]).status == 2)
        #expect(try await runCLI(["demo", "--participants", "1"]).status == 2)
        #expect(try await runCLI(["join"]).status == 2)
        let help = try await runCLI(["join", "--help"])
        #expect(help.status == 0 && help.output.contains { $0.contains("Usage: groupsync join") })
    }

    @Test func versionHelpAndUsageErrors() async throws {
        let version = try await runCLI(["--version"])
        #expect(version.status == 0 && version.output.first?.hasPrefix("groupsync ") == true)
        #expect(version.output.first?.contains("groupsync/v2") == true)
        let help = try await runCLI(["help", "join"])
        #expect(help.status == 0 && help.output.first?.hasPrefix("Usage: groupsync join") == true)
        #expect(try await runCLI(["help", "nope"]).status == 2)
        for arguments in [["help"], ["--help"], ["-h"]] {
            let usage = try await runCLI(arguments)
            #expect(usage.status == 0 && usage.output.contains { $0.hasPrefix("Usage: groupsync <command>") }, "\(arguments)")
        }
        for arguments in [["help", "join", "extra"], ["--help", "x"], ["-h", "join"], ["help", "nope", "extra"]] {
            let result = try await runCLI(arguments)
            #expect(result.status == 2 && result.output.isEmpty, "\(arguments): \(result.output.prefix(2))")
            #expect(result.errors.first?.contains("unexpected argument") == true, "\(arguments): \(result.errors.prefix(2))")
        }
        // Unexpected arguments and URLs that cannot name a broker are usage errors, not unreachable brokers.
        for arguments in [
            ["sessions", "extra"], ["join", "com.example.a", "com.example.b"], ["watch", "x"],
            ["sessions", "--broker", "http://127.0.0.1:1883"], ["sessions", "--broker", "127.0.0.1:1883"],
            ["join", "com.example.a", "--broker", "mqtt://127.0.0.1:1883/path"], ["sessions", "--group", "a", "--group", "b"],
            ["demo", "--broker", "http://127.0.0.1:1883"], ["demo", "--broker", "127.0.0.1:1883"], ["demo", "--cafile", "ca.pem"],
        ] {
            let result = try await runCLI(arguments)
            #expect(result.status == 2, "\(arguments): \(result.errors)")
        }
    }

    /// `mqtts://` from the command line: the CA (and a client certificate) by flags or environment, the
    /// password from a file or the environment; a wrong CA is refused.
    @Test(.needsOwnBroker("TLS and passwords")) func tlsAndPasswordsFromTheCommandLine() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gs-cli-tls-\(UUID())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let pki = try TestPKI.generate(in: directory)
        let passwordFile = directory + "/password"
        try "alice-pw\n".write(toFile: passwordFile, atomically: true, encoding: .utf8)
        let configuration = MosquittoBroker.Configuration(users: ["alice": "alice-pw"], tls: .init(pki))
        try await MosquittoBroker.withBroker(configuration) { broker in
            let url = "mqtts://alice@127.0.0.1:\(broker.port)"
            let byFlags = try await runCLI(["sessions", "--json", "--broker", url, "--cafile", pki.caCert, "--password-file", passwordFile])
            #expect(byFlags.status == 0, "\(byFlags.errors)")
            let byEnvironment = try await runCLI(
                ["sessions", "--json", "--broker", url],
                environment: [
                    "GROUPSYNC_CAFILE": pki.caCert, "GROUPSYNC_PASSWORD": "alice-pw", "GROUPSYNC_CERT": pki.clientCert,
                    "GROUPSYNC_KEY": pki.clientKey,
                ])
            #expect(byEnvironment.status == 0, "\(byEnvironment.errors)")
            let wrongCA = try await runCLI(["sessions", "--broker", url, "--cafile", pki.wrongCACert, "--password-file", passwordFile])
            #expect(wrongCA.status == 3 && wrongCA.errors.first?.contains("TLS handshake") == true, "\(wrongCA.errors)")
            // The wrong scheme for the port: a plain CONNECT to a TLS listener, and the other way round.
            let plain = try await runCLI(["sessions", "--broker", "mqtt://127.0.0.1:\(broker.port)"])
            #expect(plain.status == 3 && plain.errors.first?.contains("closed the connection before answering") == true, "\(plain.errors)")
            // The demo takes the same options for the broker it is given.
            let demo = try await runCLI(
                ["demo", "--broker", url, "--cafile", pki.caCert, "--password-file", passwordFile], timeout: .seconds(60))
            #expect(demo.status == 0, "\(demo.errors)\n\(demo.output.joined(separator: "\n"))")
            // Without --cafile the system's trust store decides: it does not know the test CA, until the
            // CA is installed into a trust directory (OpenSSL's $SSL_CERT_DIR stands for /etc/ssl/certs).
            let untrusted = try await runCLI(["sessions", "--broker", url, "--password-file", passwordFile])
            #expect(untrusted.status == 3, "\(untrusted.errors)")
            let trusted = try await runCLI(
                ["sessions", "--json", "--broker", url, "--password-file", passwordFile],
                environment: ["SSL_CERT_DIR": try pki.trustDirectory()])
            #expect(trusted.status == 0, "\(trusted.errors)")
        }
        // A broker that requires a client certificate: refused without one (exit 3), accepted with the
        // test CA's client certificate and key, by flags or by environment; a certificate without its
        // key is a usage error; without --cafile the system's trust store checks the broker.
        let requiring = MosquittoBroker.Configuration(tls: .init(pki, requireClientCertificate: true))
        try await MosquittoBroker.withBroker(requiring) { broker in
            let common = ["sessions", "--json", "--broker", broker.url, "--cafile", pki.caCert]
            let withoutCertificate = try await runCLI(common)
            #expect(withoutCertificate.status == 3, "\(withoutCertificate.errors)")
            let byFlags = try await runCLI(common + ["--cert", pki.clientCert, "--key", pki.clientKey])
            #expect(byFlags.status == 0, "\(byFlags.errors)")
            let byEnvironment = try await runCLI(common, environment: ["GROUPSYNC_CERT": pki.clientCert, "GROUPSYNC_KEY": pki.clientKey])
            #expect(byEnvironment.status == 0, "\(byEnvironment.errors)")
            let withoutKey = try await runCLI(common + ["--cert", pki.clientCert])
            #expect(withoutKey.status == 2, "\(withoutKey.errors)")
            let withoutCA = try await runCLI(["sessions", "--broker", broker.url, "--cert", pki.clientCert, "--key", pki.clientKey])
            #expect(withoutCA.status == 3, "the system's trust store does not know the test CA: \(withoutCA.errors)")
            let systemCA = try await runCLI(
                ["sessions", "--json", "--broker", broker.url, "--cert", pki.clientCert, "--key", pki.clientKey],
                environment: ["SSL_CERT_DIR": try pki.trustDirectory()])
            #expect(systemCA.status == 0, "\(systemCA.errors)")
            // join's state key has an option of its own: --key is the certificate's key there too.
            let join = try CLIProcess([
                "join", "com.example.board", "--state-key", "page", "--broker", broker.url, "--cafile", pki.caCert, "--cert",
                pki.clientCert, "--key", pki.clientKey,
            ])
            _ = try await join.waitForLine { $0.hasPrefix("session ") }
            join.send("3")
            _ = try await join.waitForLine { $0 == "state page 3" }
            join.closeInput()
            #expect(try await join.wait() == 0, "\(join.errors)")
        }
    }

    /// No password ever appears in what the CLI prints: not for a broker it cannot reach, not for one that
    /// refuses the login, not for a URL it cannot use.
    @Test(.needsOwnBroker("users with passwords")) func passwordsAreNeverPrinted() async throws {
        try await MosquittoBroker.withBroker(.init(users: ["alice": "right"])) { broker in
            let refused = try await runCLI(["sessions", "--broker", broker.url.replacingOccurrences(of: "://", with: "://alice:s3cret@")])
            #expect(refused.status == 3)
            #expect(refused.errors.joined().contains("alice:***@"))
            let closed = try ClosedPort()
            let unreachable = try await runCLI(["sessions", "--broker", "mqtt://alice:s3cret@127.0.0.1:\(closed.port)"])
            #expect(unreachable.status == 3)
            let invalid = try await runCLI(["sessions", "--broker", "mqtt://alice:s3cret@127.0.0.1:1883/x"])
            #expect(invalid.status == 2)
            for result in [refused, unreachable, invalid] {
                #expect(!(result.output + result.errors).joined().contains("s3cret"), "\(result.errors)")
            }

            // A password from --password-file or GROUPSYNC_PASSWORD, refused: not in the messages, nor in
            // libmosquitto's debug log of the CONNECT.
            let directory = try ScratchDirectory("gs-cli-password")
            defer { directory.remove() }
            let passwordFile = try directory.write(Data("s3cret\n".utf8), as: "password")
            let user = broker.url.replacingOccurrences(of: "://", with: "://alice@")
            let debug = ["GROUPSYNC_MQTT_DEBUG": "1"]
            let runs: [(arguments: [String], environment: [String: String])] = [
                (["sessions", "--broker", user, "--password-file", passwordFile], debug),
                (["sessions", "--broker", user], debug.merging(["GROUPSYNC_PASSWORD": "s3cret"]) { $1 }),
                (["join", "com.example.board", "--broker", user, "--password-file", passwordFile], debug),
                (["bridge", "--broker", user], debug.merging(["GROUPSYNC_PASSWORD": "s3cret"]) { $1 }),
                (["demo", "--broker", user, "--password-file", passwordFile], debug),
            ]
            for (arguments, environment) in runs {
                let isBridge = arguments[0] == "bridge"
                let result = try await runCLI(
                    arguments, input: isBridge ? #"{"id":1,"op":"watch","activity":"com.example.board"}"# : nil, environment: environment)
                let everything = (result.output + result.errors).joined(separator: "\n")
                // The bridge answers the refusal on stdout and exits 0 at the end of its input.
                #expect(result.status == (isBridge ? 0 : 3), "\(arguments[0]): \(result.errors.suffix(3))")
                #expect(everything.contains("alice@") && everything.contains("ot authorized"), "\(arguments[0]) was refused")
                #expect(result.errors.contains { $0.contains("sending CONNECT") }, "\(arguments[0]) logged its CONNECT")
                #expect(!everything.contains("s3cret"), "\(arguments[0])")
            }
        }
    }

    @Test func anUnreachableBrokerIsOneReadableLine() async throws {
        let closed = try ClosedPort()
        let result = try await runCLI(["sessions", "--broker", closed.url])
        #expect(result.status == 3)
        #expect(result.errors.count == 1)
        #expect(result.errors.first?.contains(closed.url) == true)
        #expect(result.errors.first?.contains("nothing listens") == true && result.errors.first?.contains("groupsync broker") == true)
    }

    /// `mqtts://` at a broker that speaks plain MQTT: the handshake fails, and the message says which
    /// scheme the port may want.
    @Test func aTLSURLAtAPlainBrokerSaysSo() async throws {
        try await MosquittoBroker.withBroker { broker in
            let result = try await runCLI(["sessions", "--broker", "mqtts://127.0.0.1:\(broker.port)"])
            #expect(result.status == 3 && result.errors.count == 1, "\(result.errors)")
            #expect(result.errors.first?.contains("TLS handshake") == true && result.errors.first?.contains("mqtt://") == true)
        }
    }

    /// `--timeout` bounds the whole wait for a broker that takes the connection but never answers, past
    /// the keepalive (5 s) after which one connection attempt gives up.
    @Test func theTimeoutBoundsTheWaitForABrokerThatNeverAnswers() async throws {
        let silent = try ClosedPort(listening: true)
        let start = ContinuousClock.now
        let result = try await runCLI(["sessions", "--broker", silent.url, "--timeout", "7"], timeout: .seconds(20))
        let took = ContinuousClock.now - start
        #expect(
            result.status == 1 && result.errors.first?.contains("timed out after 7 s waiting for the broker") == true, "\(result.errors)")
        #expect(took >= .seconds(7) && took < timeBound(.seconds(10)), "\(took)")
    }

    /// Several brokers, by repeating `--broker` or in a comma list: a broker that is down is passed over.
    @Test func aListOfBrokersFromTheCommandLine() async throws {
        let closed = try ClosedPort()
        try await MosquittoBroker.withBroker { broker in
            let down = broker.url(port: closed.port)
            for arguments in [["--broker", down, "--broker", broker.url], ["--broker", "\(down),\(broker.url)"]] {
                let result = try await runCLI(["sessions", "--json"] + arguments)
                #expect(result.status == 0, "\(arguments): \(result.errors)")
            }
        }
        let none = try await runCLI(["sessions", "--broker", closed.url, "--broker", closed.url])
        #expect(none.status == 3 && none.errors.count == 1, "\(none.errors)")
    }

    /// `groupsync broker` stops on Ctrl-C (SIGINT) and SIGTERM, exits 0 and leaves no configuration file.
    /// mosquitto's log comes on standard error as it is written; standard output holds only the banner.
    @Test(arguments: [SIGINT, SIGTERM, SIGHUP])
    func theBrokerStopsOnASignal(_ number: Int32) async throws {
        let port = try FreePort.loopback()
        let broker = try CLIProcess(["broker", "--port", "\(port)"])
        let banner = try await broker.waitForLine { $0.hasPrefix("groupsync broker: mosquitto on") }
        let config = String(try #require(banner.split(separator: " ").first { $0.hasSuffix(".conf);") }).dropLast(2))
        #expect(FileManager.default.fileExists(atPath: config))
        try await waitUntil(timeout: .seconds(5), "mosquitto accepts connections") {
            let client = try MQTTClient(configuration: .init(url: "mqtt://127.0.0.1:\(port)"))
            guard (try? await client.connect()) != nil else { return false }
            await client.disconnect()
            return true
        }
        // While it runs, not in a burst at its exit.
        try await waitUntil(timeout: .seconds(5), "mosquitto's log on stderr (have: \(broker.errors.suffix(5)))") {
            broker.errors.contains { $0.contains("Opening ipv4 listen socket on port \(port)") }
                && broker.errors.contains { $0.contains("mosquitto version") && $0.contains("running") }
        }
        broker.signal(number)
        #expect(try await withTimeLimit(timeBound(.seconds(5)), "the broker stops") { try await broker.wait() } == 0)
        #expect(broker.output == [banner], "stdout holds the banner only: \(broker.output)")
        #expect(!FileManager.default.fileExists(atPath: config), "its configuration is removed")
        #expect(Self.processes(withArgument: config).isEmpty, "no mosquitto is left running")
    }

    /// `groupsync broker --persist DIR` persists, run as root (when mosquitto drops to its own user, which
    /// must be able to write DIR) or not (as `nobody`, when the tests run as root): a retained message and
    /// the queue of a QoS 1 subscription whose session lives on survive a stop and a start, and a SIGKILL
    /// once the database was saved.
    @Test(arguments: [(SIGTERM, false), (SIGKILL, false), (SIGTERM, true)])
    func aPersistentBrokerKeepsRetainedMessagesAndQueues(_ stop: Int32, asNobody: Bool) async throws {
        let root = geteuid() == 0
        guard root || !asNobody else { return }  // not root: the first cases run as this user already
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("gs-persist-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        if asNobody {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            #expect(chown(directory, 65_534, 65_534) == 0)
        }
        /// `groupsync broker` on `port` persisting in `directory`, as this user or as `nobody`.
        func startBroker(_ port: UInt16) throws -> CLIProcess {
            let arguments = ["broker", "--port", "\(port)", "--persist", directory]
            guard asNobody else { return try CLIProcess(arguments) }
            return try CLIProcess(
                ["--reuid=65534", "--regid=65534", "--clear-groups", groupsyncExecutable] + arguments, executable: "/usr/bin/setpriv")
        }
        let port = try FreePort.loopback()
        let url = "mqtt://127.0.0.1:\(port)"
        /// A client of a session that outlives its connections, connected once mosquitto is up, and the
        /// messages of its subscription to `filter` — made before it connects, to take what the broker
        /// queued for the session, which comes right after CONNACK.
        @Sendable func client(_ id: String, subscribedTo filter: String? = nil) async throws -> (MQTTClient, Collector<MQTTMessage>?) {
            var persistent = try MQTTClient.Configuration(url: url, clientID: id)
            persistent.cleanStart = false
            persistent.sessionExpiry = 600
            let configuration = persistent
            let connected = LockedValue<(MQTTClient, Collector<MQTTMessage>?)?>(nil)
            try await waitUntil(timeout: timeBound(.seconds(10)), "mosquitto accepts connections") {
                let client = try MQTTClient(configuration: configuration)  // a failed connect stops its client
                var messages: Collector<MQTTMessage>?
                if let filter { messages = Collector(try await client.subscribe(to: [TopicSubscription(filter, qos: .atLeastOnce)])) }
                guard (try? await client.connect()) != nil else { return false }
                connected.withLock { $0 = (client, messages) }
                return true
            }
            return try #require(connected.withLock { $0 })
        }
        var broker = try startBroker(port)
        let (queue, _) = try await client("queue", subscribedTo: "q/#")
        await queue.disconnect()  // the session, its subscription and what it queues live on
        let (publisher, _) = try await client("publisher")
        try await publisher.publish(to: "r/kept", string: "kept", qos: .atLeastOnce, retain: true)
        try await publisher.publish(to: "q/1", string: "queued", qos: .atLeastOnce)
        await publisher.disconnect()
        let database = directory + "/mosquitto.db"
        if stop == SIGKILL {
            let published = Date()
            try await waitUntil(timeout: .seconds(15), "the database is saved") {
                let modified = try? FileManager.default.attributesOfItem(atPath: database)[.modificationDate] as? Date
                return modified.map { $0 > published } ?? false
            }
            // What a crash or a power cut does: the broker gets no chance to save.
            let config = FileManager.default.temporaryDirectory.appendingPathComponent("groupsync-broker-\(broker.pid).conf").path
            for pid in Self.processes(withArgument: config) { kill(pid, SIGKILL) }
        } else {
            broker.signal(stop)
        }
        _ = try await broker.wait(timeout: timeBound(.seconds(10)))
        #expect(FileManager.default.fileExists(atPath: database), "the database is in \(directory)")
        broker = try startBroker(port)
        let (reader, _) = try await client("reader")
        let kept = Collector(try await reader.subscribe(to: [TopicSubscription("r/#")]))
        try await waitUntil("the retained message is back (broker: \(broker.errors.suffix(8)))") { kept.elements.count == 1 }
        #expect(kept.elements.first?.string == "kept" && kept.elements.first?.retain == true)
        let (back, subscribed) = try await client("queue", subscribedTo: "q/#")
        let queued = try #require(subscribed)
        try await waitUntil("the queued message is delivered (broker: \(broker.errors.suffix(8)))") { queued.elements.count == 1 }
        #expect(queued.elements.first?.string == "queued")
        await reader.disconnect()
        await back.disconnect()
        broker.signal(SIGTERM)
        #expect(try await broker.wait(timeout: timeBound(.seconds(10))) == 0, "\(broker.errors.suffix(5))")
        #expect(!broker.errors.contains { $0.contains("Permission denied") || $0.contains("unable to open") }, "\(broker.errors)")
    }

    /// A signal that comes just after the banner — while mosquitto is being spawned — still stops it:
    /// `groupsync broker` exits 0, and neither mosquitto nor its configuration is left behind.
    @Test(arguments: [SIGINT, SIGTERM])
    func theBrokerStopsOnASignalWhileStarting(_ number: Int32) async throws {
        let broker = try CLIProcess(["broker", "--port", "\(try FreePort.loopback())"])
        let banner = try await broker.waitForLine { $0.hasPrefix("groupsync broker: mosquitto on") }
        broker.signal(number)
        let config = String(try #require(banner.split(separator: " ").first { $0.hasSuffix(".conf);") }).dropLast(2))
        #expect(try await withTimeLimit(timeBound(.seconds(5)), "the broker stops") { try await broker.wait() } == 0)
        #expect(!FileManager.default.fileExists(atPath: config), "its configuration is removed")
        #expect(Self.processes(withArgument: config).isEmpty, "no mosquitto is left running")
    }

    /// The PIDs of the running processes (this user's, as /proc shows them) with `argument` on their
    /// command line.
    static func processes(withArgument argument: String) -> [Int32] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { entry -> Int32? in
            guard let pid = Int32(entry), let data = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline") else { return nil }
            return data.split(separator: 0).contains { String(decoding: $0, as: UTF8.self) == argument } ? pid : nil
        }
    }

    /// The demo stops on Ctrl-C or SIGTERM: against a broker that never answers it exits 130 at once (or
    /// 1 after `--timeout`), and interrupted at any point its private mosquitto stops with it.
    @Test(.needsOwnBroker("freezes it")) func theDemoStopsOnASignalOrTimeout() async throws {
        try await MosquittoBroker.withBroker { broker in
            broker.pause()
            defer { broker.resume() }
            let late = try await runCLI(["demo", "--broker", broker.url, "--timeout", "1"], timeout: .seconds(10))
            #expect(late.status == 1 && late.errors.contains { $0.contains("timed out") }, "\(late.errors)")
            for number in [SIGINT, SIGTERM] {
                let waiting = try CLIProcess(["demo", "--broker", broker.url], environment: ["GROUPSYNC_MQTT_DEBUG": "1"])
                try await waitUntil("its CONNECT is sent") { waiting.errors.contains { $0.contains("sending CONNECT") } }
                waiting.signal(number)
                #expect(try await withTimeLimit(timeBound(.seconds(5)), "the demo stops") { try await waiting.wait() } == 130)
            }
        }
        for number in [SIGINT, SIGTERM] {
            let demo = try CLIProcess(["demo"])
            let banner = try await demo.waitForLine { $0.contains("private mosquitto on mqtt://") }
            let url = try #require(banner.split(separator: " ").first { $0.hasPrefix("mqtt://") })
            demo.signal(number)
            let status = try await withTimeLimit(timeBound(.seconds(10)), "the demo stops") { try await demo.wait() }
            #expect(status == 130 || status == 0, "interrupted, or done before the signal came")
            let client = try MQTTClient(configuration: .init(url: String(url)))
            await #expect(throws: MQTTError.self, "its private broker stopped") { try await client.connect() }
        }
    }

    /// `--websockets` listens where the MQTT listener does: on loopback by default, never on every
    /// interface (as mosquitto 2.0.11 does when given an address for a websockets listener).
    @Test func theWebsocketsListenerBindsLikeTheMQTTOne() async throws {
        let (port, websockets) = (try FreePort.loopback(), try FreePort.loopback())
        let broker = try CLIProcess(["broker", "--port", "\(port)", "--websockets", "\(websockets)"])
        _ = try await broker.waitForLine { $0.hasPrefix("groupsync broker: mosquitto on") }
        try await waitUntil(timeout: .seconds(5), "the websockets port listens") { !Self.listeningAddresses(port: websockets).isEmpty }
        let addresses = Self.listeningAddresses(port: websockets)
        // 127.0.0.1 in /proc/net/tcp, and as ::ffff:127.0.0.1 or ::1 in /proc/net/tcp6.
        let loopback: Set<String> = ["0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"]
        #expect(addresses.isSubset(of: loopback), "listening on \(addresses)")
        broker.signal(SIGTERM)
        #expect(try await withTimeLimit(timeBound(.seconds(5)), "the broker stops") { try await broker.wait() } == 0)
    }

    /// The local addresses (hex, as /proc/net/tcp and tcp6 write them) of the sockets listening on `port`.
    static func listeningAddresses(port: UInt16) -> Set<String> {
        var found: Set<String> = []
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            guard let text = try? String(contentsOfFile: table, encoding: .utf8) else { continue }
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ")
                guard fields.count > 3, fields[3] == "0A" else { continue }  // LISTEN
                let local = fields[1].split(separator: ":")
                if local.count == 2, UInt16(local[1], radix: 16) == port { found.insert(String(local[0])) }
            }
        }
        return found
    }

    /// `join --session` and `end` for a session nobody announced give up after `--timeout`, and Ctrl-C or
    /// SIGTERM ends the wait at once (exit 130).
    @Test(arguments: [["join", "com.example.board", "--session", "nosuchsession"], ["end", "nosuchsession"]])
    func waitingForASessionEndsOnTimeoutOrSignal(_ command: [String]) async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = broker.unique("waits")
            let common = ["--broker", broker.url, "--group", group]
            let late = try CLIProcess(command + ["--timeout", "1"] + common)
            #expect(try await withTimeLimit(timeBound(.seconds(5)), "\(command[0]) gives up") { try await late.wait() } == 1)
            #expect(late.errors.contains { $0.contains("timed out") && $0.contains("session nosuchsession") }, "\(late.errors)")
            // The command's participant says it is online once connected: from then on it waits for the session.
            let probe = try MQTTClient(configuration: .init(url: broker.url))
            try await probe.connect()
            let presence = Collector(try await probe.subscribe(to: [TopicSubscription("groupsync/v2/\(group)/presence/+")]))
            for (index, number) in [SIGINT, SIGTERM].enumerated() {
                let participant = "waiter\(index)"
                let waiting = try CLIProcess(command + ["--as", participant] + common)
                try await waitUntil("\(participant) is online") {
                    presence.elements.contains { $0.topic.hasSuffix("/\(participant)") && $0.string?.contains("online") == true }
                }
                waiting.signal(number)
                #expect(try await withTimeLimit(timeBound(.seconds(5)), "\(command[0]) stops") { try await waiting.wait() } == 130)
            }
            await probe.disconnect()
        }
    }

    /// `sessions` waits for the group's retained records (until its own marker message comes back) no
    /// longer than `--timeout`, and Ctrl-C or SIGTERM ends that wait at once (exit 130). The broker's ACL
    /// lets it publish its marker but never delivers it, so it waits for good.
    @Test(.needsOwnBroker("an ACL")) func waitingForTheGroupsRecordsEndsOnTimeoutOrSignal() async throws {
        let acl = "topic readwrite groupsync/#\ntopic write groupsync-observer/#\n"
        try await MosquittoBroker.withBroker(.init(acl: acl)) { broker in
            let common = ["sessions", "--broker", broker.url, "--group", broker.unique("records")]
            let debug = ["GROUPSYNC_MQTT_DEBUG": "1"]
            let late = try await runCLI(common + ["--timeout", "1"], environment: debug)
            #expect(
                late.status == 1 && late.errors.contains { $0.contains("timed out") && $0.contains("the group's records") },
                "\(late.errors.suffix(3))")
            for number in [SIGINT, SIGTERM] {
                let waiting = try CLIProcess(common, environment: debug)
                // libmosquitto logs the broker's PUBACK of the marker: from then on it waits for the records.
                try await waitUntil("the marker is acknowledged (stderr: \(waiting.errors.suffix(3)))") {
                    waiting.errors.contains { $0.contains("received PUBACK") }
                }
                waiting.signal(number)
                #expect(try await withTimeLimit(timeBound(.seconds(5)), "sessions stops") { try await waiting.wait() } == 130)
                #expect(waiting.output.isEmpty, "no listing: \(waiting.output)")
            }
        }
    }

    /// Against a frozen broker (it takes the TCP connection and never answers), every command that
    /// connects gives up after `--timeout`, and Ctrl-C or SIGTERM ends its wait at once. Either way the
    /// attempt is stopped before the command exits (its DISCONNECT is sent): no libmosquitto or TLS work
    /// runs on its network thread while the process runs its exit handlers.
    @Test(
        .needsOwnBroker("freezes it"),
        arguments: [["sessions"], ["watch"], ["dashboard"], ["join", "com.example.board"], ["end", "somesession"]])
    func commandsGiveUpOnAFrozenBroker(_ command: [String]) async throws {
        try await MosquittoBroker.withBroker { broker in
            broker.pause()
            defer { broker.resume() }
            let common = ["--broker", broker.url, "--group", "frozen"]
            let debug = ["GROUPSYNC_MQTT_DEBUG": "1"]
            let late = try await runCLI(command + ["--timeout", "1"] + common, environment: debug, timeout: .seconds(10))
            #expect(late.status == 1 && late.errors.contains { $0.contains("timed out") }, "\(late.errors.suffix(3))")
            #expect(late.errors.contains { $0.contains("sending DISCONNECT") }, "the attempt was stopped: \(late.errors.suffix(3))")
            for number in [SIGINT, SIGTERM] {
                // libmosquitto's log says when the CONNECT went out: the signal handling is in place by then.
                let waiting = try CLIProcess(command + ["--timeout", "60"] + common, environment: debug)
                try await waitUntil("its CONNECT is sent") { waiting.errors.contains { $0.contains("sending CONNECT") } }
                waiting.signal(number)
                #expect(try await withTimeLimit(timeBound(.seconds(5)), "\(command) stops") { try await waiting.wait() } == 130)
                #expect(waiting.errors.contains { $0.contains("sending DISCONNECT") }, "the attempt was stopped")
            }
        }
    }

    /// `groupsync end` ends a session from the shell: its participants see it end and leave, and nothing
    /// of it stays on the broker. Without `--as`, `join` is the same participant on every run.
    @Test func endFromTheShellAndStableParticipantIDs() async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = broker.unique("shell")
            let common = ["--broker", broker.url, "--group", group]
            var ids: [String] = []
            for _ in 0..<2 {
                let run = try CLIProcess(["join", "com.example.board"] + common)
                let line = try await run.waitForLine { $0.hasPrefix("participants ") }
                ids.append(String(line.dropFirst("participants ".count)))
                run.closeInput()
                #expect(try await run.wait() == 0)
            }
            #expect(ids[0] == ids[1] && ids[0].contains("@"), "\(ids)")

            let alice = try CLIProcess(["join", "com.example.board", "--as", "alice"] + common)
            let session = String(try await alice.waitForLine { $0.hasPrefix("session ") }.split(separator: " ")[1])
            let bob = try CLIProcess(["join", "com.example.board", "--as", "bob", "--session", session] + common)
            _ = try await alice.waitForLine { $0 == "participants alice,bob" }
            let end = try await runCLI(["end", session] + common)
            #expect(end.status == 0 && end.output == ["ended \(session)"], "\(end.errors)")
            for join in [alice, bob] {
                _ = try await join.waitForLine { $0.hasPrefix("ended ") }
                #expect(try await join.wait() == 0)
            }
            // What the broker stores: everything a fresh subscriber gets before its own marker comes back.
            @Sendable func stored(_ session: String) async throws -> [String] {
                let probe = try MQTTClient(configuration: .init(url: broker.url))
                try await probe.connect()
                let seen = Collector(try await probe.subscribe(to: [TopicSubscription("groupsync/v2/\(group)/#")]))
                try await probe.publish(to: "groupsync/v2/\(group)/marker", string: "m")
                try await waitUntil("the marker") { seen.elements.contains { $0.topic == "groupsync/v2/\(group)/marker" } }
                await probe.disconnect()
                return seen.elements.filter { $0.retain && $0.topic.contains(session) }.map(\.topic)
            }
            #expect(try await stored(session).isEmpty, "nothing of the session is stored")

            // A session everyone left keeps its records (no longer kept, until they expire); `end` from the
            // shell, by someone who never joined, removes them too.
            let carol = try CLIProcess(["join", "com.example.board", "--as", "carol", "--title", "left"] + common)
            let left = String(try await carol.waitForLine { $0.hasPrefix("session ") }.split(separator: " ")[1])
            carol.send("{\"index\":3}\n")
            _ = try await carol.waitForLine { $0.hasPrefix("state value") }
            carol.closeInput()
            #expect(try await carol.wait() == 0)
            #expect(try await stored(left).contains { $0.contains("/state/") }, "the state record stays after the leave")
            let ended = try await runCLI(["end", left] + common)
            #expect(ended.status == 0, "\(ended.errors)")
            let leftovers = try await stored(left)
            #expect(leftovers.isEmpty, "\(leftovers)")
            let missing = try await runCLI(["end", "nosuchsession", "--timeout", "1"] + common)
            #expect(missing.status == 1)
        }
    }

    /// `join`'s journal: `!attach` adds a file that another participant, joining later, sees and loads.
    @Test func joinAttachesAndALaterJoinerLoads() async throws {
        try await MosquittoBroker.withBroker { broker in
            let directory = try ScratchDirectory("gs-join-journal")
            defer { directory.remove() }
            let photo = Data((0..<(150 << 10)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 11) })
            let path = try directory.write(photo, as: "tower.jpg")
            let common = ["--broker", broker.url, "--group", broker.unique("attach")]

            let alice = try CLIProcess(["join", "com.example.board", "--as", "alice"] + common)
            let session = String(try await alice.waitForLine { $0.hasPrefix("session ") }.split(separator: " ")[1])
            let bob = try CLIProcess(["join", "com.example.board", "--as", "bob", "--session", session] + common)
            _ = try await alice.waitForLine { $0 == "participants alice,bob" }
            alice.send("!attach \(path)")
            let attached = try await alice.waitForLine { $0.hasPrefix("attached ") }
            let fields = attached.split(separator: " ").map(String.init)
            #expect(fields.count == 7 && fields[1] == "1" && fields[2] == "alice", "\(attached)")
            #expect(Array(fields.dropFirst(4)) == ["\(photo.count)", "image/jpeg", "tower.jpg"], "\(attached)")
            let digest = fields[3]
            _ = try await bob.waitForLine { $0 == "attachment + alice \(digest) \(photo.count) image/jpeg tower.jpg" }

            // carol joins after the photo was added: it is listed, and she loads it by its number.
            let carol = try CLIProcess(["join", "com.example.board", "--as", "carol", "--session", session] + common)
            _ = try await carol.waitForLine { $0 == "attachment + alice \(digest) \(photo.count) image/jpeg tower.jpg" }
            carol.send("!attachments")
            _ = try await carol.waitForLine { $0 == "attachment 1 alice \(digest) \(photo.count) image/jpeg tower.jpg" }
            let copy = directory.path("copy.jpg")
            carol.send("!load 1 \(copy)")
            _ = try await carol.waitForLine { $0 == "loaded \(digest) \(photo.count) bytes to \(copy) (every chunk verified)" }
            #expect(carol.output.contains { $0 == "loading \(digest.prefix(12)) 0/\(photo.count) bytes" }, "the first progress line")
            #expect(try Data(contentsOf: URL(fileURLWithPath: copy)) == photo)
            carol.send("!load ffff \(copy)")
            try await waitUntil("carol's error") { carol.errors.contains { $0.contains("no attachment ffff") } }

            for join in [carol, bob, alice] {
                join.closeInput()
                #expect(try await join.wait() == 0)
            }
        }
    }

    @Test(.needsOwnBroker("reads its log to see a client connect")) func joinSessionsAndWatchAgree() async throws {
        try await MosquittoBroker.withBroker { broker in
            let common = ["--broker", broker.url, "--group", "cli"]
            let watch = try CLIProcess(["watch", "--json"] + common)
            try await waitUntil("watch subscribed") { broker.logText.contains("New client connected") }
            let alice = try CLIProcess(["join", "com.example.board", "--as", "alice"] + common)
            let session = try await alice.waitForLine { $0.hasPrefix("session ") }
            let sessionID = session.split(separator: " ")[1]
            let bob = try CLIProcess(["join", "com.example.board", "--as", "bob", "--session", String(sessionID)] + common)
            _ = try await alice.waitForLine { $0 == "participants alice,bob" }
            bob.send(#"{"page": 3}"#)
            _ = try await alice.waitForLine { $0 == #"state value {"page":3}"# }
            alice.send("!hello bob")
            _ = try await bob.waitForLine { $0 == #"message alice {"text":"hello bob"}"# }

            let listing = try await runCLI(["sessions", "--json"] + common)
            #expect(listing.status == 0)
            let object = try JSONSerialization.jsonObject(with: Data(listing.output.joined().utf8)) as? [String: Any]
            let sessions = object?["sessions"] as? [[String: Any]]
            #expect(sessions?.count == 1)
            #expect(sessions?.first?["participants"] as? [String] == ["alice", "bob"])
            #expect(sessions?.first?["activity"] as? String == "com.example.board")

            bob.closeInput()  // EOF: leaves cleanly
            #expect(try await bob.wait() == 0)
            _ = try await alice.waitForLine { $0 == "participants alice" }
            alice.signal(SIGINT)
            #expect(try await alice.wait() == 0)

            let kinds = watch.output.compactMap { line -> String? in
                (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["kind"] as? String
            }
            for kind in ["online", "announce", "join", "state", "message", "leave", "offline"] {
                #expect(kinds.contains(kind), "watch shows \(kind)")
            }
            watch.signal(SIGINT)
            #expect(try await watch.wait() == 0)
        }
    }
}
