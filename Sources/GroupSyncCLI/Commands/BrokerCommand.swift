import BrokerSupport
import Foundation
import MQTT

/// `groupsync broker`: runs mosquitto in the foreground with the project's tuned configuration.
enum BrokerCommand: Command {
    static let name = "broker"
    static let summary = "run a local mosquitto with GroupSync's tuned configuration"
    static let help = """
        Usage: groupsync broker [--port N] [--bind ADDRESS] [--websockets PORT] [--persist DIR]

        Runs mosquitto in the foreground (Ctrl-C, SIGTERM or SIGHUP stops it) with set_tcp_nodelay true (a QoS 1
        round trip on loopback takes 0.16 ms instead of 88 ms with Nagle), anonymous access, and the
        listeners below. Its log goes to standard error; its configuration file is removed when it stops.

          --port N           MQTT listener port (default 1883)
          --bind ADDRESS     address to listen on (default 127.0.0.1; 0.0.0.0 for the network)
          --websockets PORT  also a websockets listener, for browser dashboards (e.g. 9001)
          --persist DIR      keep retained messages and sessions in DIR across restarts (saved every
                             5 s and on stop; run as root, DIR is handed to mosquitto's own user)

        The websockets listener listens where the MQTT one does: on the interface that holds --bind's
        address (libwebsockets, which serves it, binds to interfaces, not addresses).

        Exit codes: 0 stopped by Ctrl-C, SIGTERM or SIGHUP; otherwise mosquitto's (128 + N when a signal N killed
        it); 2 usage error; 4 mosquitto is not installed (sudo apt-get install mosquitto).
        """

    static func run(_ arguments: [String]) async throws -> Int32 {
        let args = try Arguments(arguments, options: ["port", "bind", "websockets", "persist"], flags: [])
        let port = try args.integer("port", default: 1883, range: 1...65_535)
        let bind = args.value("bind") ?? "127.0.0.1"
        guard let executable = MosquittoBroker.findExecutable() else {
            throw CommandFailure("mosquitto is not installed: sudo apt-get install mosquitto", exitCode: 4)
        }
        // Installed before the configuration is written and mosquitto spawned: a Ctrl-C, SIGTERM or SIGHUP at any
        // point stops mosquitto (at once if it runs, else as soon as it is spawned, or it is never
        // spawned) and the configuration is removed. A signal's default action would kill this process
        // alone, leaving mosquitto running and its configuration behind.
        let child = LockedValue<(pid: pid_t?, stopping: Bool)>((nil, false))
        Signals.onInterrupt(exitAfter: nil) {  // mosquitto may take a while to save its database
            let pid = child.withLock { child in
                child.stopping = true
                return child.pid
            }
            if let pid { stop(pid, child) }
        }
        var lines = [
            "# Written by `groupsync broker`.",
            "listener \(port) \(bind)",
            "protocol mqtt",
            "allow_anonymous true",
            "set_tcp_nodelay true",
            "max_keepalive 65535",
            // stderr: mosquitto block-buffers stdout when it is not a terminal.
            "log_dest stderr",
            "log_type error", "log_type warning", "log_type notice", "log_type information",
        ]
        if let websockets = args.value("websockets") {
            guard let wsPort = Int(websockets), (1...65_535).contains(wsPort) else { throw UsageError("--websockets needs a port") }
            lines += ["listener \(wsPort)\(try websocketsHost(bind))", "protocol websockets"]
        }
        if let directory = args.value("persist") {
            let exists = FileManager.default.fileExists(atPath: directory)
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            try handToBrokerUser(directory, created: !exists)
            lines += [
                "persistence true", "persistence_location \(directory.hasSuffix("/") ? directory : directory + "/")",
                "autosave_interval \(autosaveInterval)",
            ]
        }
        let config = FileManager.default.temporaryDirectory.appendingPathComponent("groupsync-broker-\(getpid()).conf").path
        try lines.joined(separator: "\n").appending("\n").write(toFile: config, atomically: true, encoding: .utf8)
        Output.line(
            "groupsync broker: mosquitto on mqtt://\(bind == "0.0.0.0" ? "127.0.0.1" : bind):\(port) (config \(config)); Ctrl-C to stop")
        defer { try? FileManager.default.removeItem(atPath: config) }
        if child.withLock({ $0.stopping }) { return 0 }
        // A child of ours, started with a clean signal mask and default signal handlers (a bare exec would
        // inherit this process's blocked and ignored signals, and mosquitto would ignore Ctrl-C); our
        // SIGINT and SIGTERM are passed on. Its standard output goes to our standard error, with its log.
        let pid: pid_t
        do {
            pid = try Spawn.process(
                executable, ["-c", config], stdin: .nullDevice, stdout: .descriptor(STDERR_FILENO), stderr: .descriptor(STDERR_FILENO),
                newProcessGroup: false)
        } catch {
            throw CommandFailure("could not start \(executable): \(error)", exitCode: 4)
        }
        // A signal that came while it was being spawned saw no PID: it is passed on now.
        if child.withLock({ child in
            child.pid = pid
            return child.stopping
        }) {
            stop(pid, child)
        }
        let status = await Task.detached { () -> Int32 in
            // Waited for without reaping first: until the PID is forgotten (under the lock every signal
            // is sent under), it cannot be reused, so no signal reaches another process.
            var info = siginfo_t()
            while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) == -1 && errno == EINTR {}
            child.withLock { $0.pid = nil }
            var status: Int32 = 0
            while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
            return status
        }.value
        // Exited: its code (mosquitto exits 0 on SIGINT and SIGTERM); killed by signal N: 128 + N — except
        // by the SIGTERM we passed on, which kills a mosquitto that has not installed its handlers yet.
        if status & 0x7F == 0 { return (status >> 8) & 0xFF }
        return status & 0x7F == SIGTERM && child.withLock({ $0.stopping }) ? 0 : 128 + (status & 0x7F)
    }

    /// Sends mosquitto SIGTERM, and again every 250 ms until it exited: one that comes while it starts
    /// can be lost (it installs its handler before it sets the flag the handler clears). Each signal is
    /// sent under the lock, while the PID is still mosquitto's.
    private static func stop(_ pid: pid_t, _ child: LockedValue<(pid: pid_t?, stopping: Bool)>) {
        func signal() -> Bool {
            child.withLock { child in
                guard child.pid == pid else { return false }
                kill(pid, SIGTERM)
                return true
            }
        }
        guard signal() else { return }
        Task.detached {
            repeat { try? await Task.sleep(for: .milliseconds(250)) } while signal()
        }
    }

    /// The host part of the websockets `listener` line for `bind`: none for every address, else the name
    /// of the interface that holds it. mosquitto 2.0 hands it to libwebsockets, which matches interface
    /// names; given an address, some versions (2.0.11, Debian 12's) listen on every interface instead.
    private static func websocketsHost(_ bind: String) throws(UsageError) -> String {
        if ["0.0.0.0", "::"].contains(bind) { return "" }
        guard let interface = NetworkInterface.name(holding: bind) else {
            throw UsageError(
                "--bind \(bind): with --websockets, give a numeric address that one of this host's interfaces has (the websockets listener binds to interfaces)"
            )
        }
        return " \(interface)"
    }

    /// Seconds between saves of the persistence database: what a SIGKILL (or a power cut) can lose.
    static let autosaveInterval = 5

    /// Run as root, mosquitto drops to its own user (`mosquitto`, or `nobody` where there is none) before
    /// it writes its database: a directory this command made is handed to that user; one that was there
    /// must be that user's already (handing over an existing directory could be `/root`'s or a home's).
    private static func handToBrokerUser(_ directory: String, created: Bool) throws {
        guard geteuid() == 0, let account = getpwnam("mosquitto") ?? getpwnam("nobody") else { return }
        let (uid, gid, name) = (account.pointee.pw_uid, account.pointee.pw_gid, String(cString: account.pointee.pw_name))
        guard created else {
            let owner = (try? FileManager.default.attributesOfItem(atPath: directory)[.ownerAccountID] as? NSNumber)?.uint32Value
            guard owner == uid else {
                throw UsageError(
                    "--persist '\(directory)' is not \(name)'s, the user mosquitto runs as when started by root: "
                        + "give a new directory (it is made for that user) or `chown \(name) '\(directory)'`")
            }
            return
        }
        guard chown(directory, uid, gid) == 0 else {
            throw CommandFailure("cannot hand --persist '\(directory)' to \(name): \(String(cString: strerror(errno)))")
        }
    }
}
