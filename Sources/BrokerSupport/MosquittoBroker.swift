import Foundation
import MQTT
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A real `mosquitto` broker process listening on 127.0.0.1, for tests, demos
/// and benchmarks.
///
/// Each broker gets a fresh temporary ``directory`` holding its generated
/// `mosquitto.conf`, its password and ACL files, its persistence database and
/// its log (`broker.log`, readable through ``logText``).
///
/// ```swift
/// let broker = try await MosquittoBroker.start()
/// // connect a client to broker.url ...
/// await broker.stop()
/// ```
///
/// A broker is never left running behind the process that started it:
/// ``stop()`` or `deinit` end it, an `atexit` handler kills every broker still
/// alive when the process exits, and a tiny watchdog process (`/bin/sh`)
/// kills the broker when the test process dies abruptly (crash, SIGKILL), as
/// it then notices its pipe from the test process closing.
///
/// The tests' `withBroker` (in GroupSyncTestSupport) may instead hand out a value standing for a broker
/// someone else started (``external``); this module never reads the environment variable that names it.
public final class MosquittoBroker: Sendable {
    /// Why a broker could not be started or restarted.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        /// What went wrong.
        public let message: String
        /// The last lines of the broker's log (or of a tool's output), if any.
        public let log: String

        package init(_ message: String, log: String = "") {
            self.message = message
            self.log = log
        }

        public var description: String {
            log.isEmpty ? message : "\(message)\n--- broker log (last lines) ---\n\(log)"
        }
    }

    /// The configuration the broker was started with.
    public let configuration: Configuration
    /// The broker's private temporary directory (removed when the broker is deinitialized).
    public let directory: String
    /// Path of the `mosquitto` executable that is run.
    public let executable: String
    /// The broker someone else started that this value stands for, if any: then no process is run,
    /// and ``directory`` and ``executable`` are empty.
    public let external: ExternalBroker?
    /// Random letters and digits that ``unique(_:)`` appends.
    private let nameSuffix = String((0..<8).map { _ in "abcdefghijklmnopqrstuvwxyz0123456789".randomElement()! })
    /// Every name ``unique(_:)`` returned, for the cleanup of an ``external`` broker.
    package let uniqueNames = LockedValue<[String]>([])
    /// The operations called on an ``external`` broker that need a process of our own.
    package let refused = LockedValue<[String]>([])

    /// The broker process and its watchdog (`package`: the test support pauses, kills and restarts it).
    package let state: LockedValue<State>

    /// A launched broker process and its watchdog.
    package struct Child: Sendable {
        package let pid: pid_t
        let watchdogPID: pid_t
        /// Write end of the watchdog's stdin pipe; the watchdog kills the broker on EOF.
        let watchdogFD: Int32
        package var paused = false
    }

    package struct State: Sendable {
        var port: UInt16
        package var child: Child?
        var lastPID: pid_t = 0
        var lastExit: String?
    }

    package enum LaunchOutcome {
        case ready
        case exited(String)
    }

    private init(configuration: Configuration, directory: String, executable: String, port: UInt16) {
        self.configuration = configuration
        self.directory = directory
        self.executable = executable
        self.external = nil
        self.state = LockedValue(State(port: port))
    }

    package init(external: ExternalBroker) {
        self.configuration = .init()
        self.directory = ""
        self.executable = ""
        self.external = external
        self.state = LockedValue(State(port: external.port))
    }

    deinit {
        state.withLock { state in
            if let child = state.child {
                sendSignal(child.pid, SIGKILL)
                _ = Self.reap(&state, pid: child.pid, blocking: true)
            }
        }
        if external == nil {
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    // MARK: - Properties

    /// The port of the main listener (kept across ``restart()``).
    public var port: UInt16 {
        state.withLock { $0.port }
    }

    /// `mqtt://127.0.0.1:PORT`, or `mqtts://127.0.0.1:PORT` when the main listener uses TLS; for an
    /// ``external`` broker, its URL as given (with its credentials).
    public var url: String {
        external?.url ?? "\(configuration.tls == nil ? "mqtt" : "mqtts")://127.0.0.1:\(port)"
    }

    /// The host clients connect to: 127.0.0.1, or the ``external`` broker's.
    public var host: String {
        external?.host ?? "127.0.0.1"
    }

    /// ``url`` with `port` in place of the broker's, on 127.0.0.1: a broker URL with the same scheme and
    /// credentials (a list of brokers takes one set) where nothing needs to listen.
    public func url(port other: UInt16) -> String {
        guard var components = URLComponents(string: url) else { return url }
        components.host = "127.0.0.1"
        components.port = Int(other)
        return components.string ?? url
    }

    /// `name` with a suffix of random letters and digits chosen for this broker value: a group or
    /// topic name no other test uses, so that tests sharing one ``external`` broker, in one run or
    /// in the next, do not see each other's messages or retained records.
    /// On an ``external`` broker, `withBroker` clears the retained records left under
    /// `groupsync/v2/NAME/` for every name returned here, once its body is done.
    public func unique(_ name: String) -> String {
        let unique = "\(name)-\(nameSuffix)"
        uniqueNames.withLock { names in
            if !names.contains(unique) { names.append(unique) }
        }
        return unique
    }

    /// The WebSockets listener's port, if ``Configuration/websocketsPort`` was set.
    public var websocketsPort: UInt16? {
        configuration.websocketsPort
    }

    /// `ws://127.0.0.1:PORT` for the WebSockets listener, if any.
    public var websocketsURL: String? {
        websocketsPort.map { "ws://127.0.0.1:\($0)" }
    }

    /// The PID of the broker process: the current one, or the last one
    /// launched once it has stopped.
    public var pid: Int32 {
        requireOwnProcess("pid")
        return state.withLock { $0.child?.pid ?? $0.lastPID }
    }

    /// Whether the broker process is alive (it may be paused).
    public var isRunning: Bool {
        requireOwnProcess("isRunning")
        return state.withLock { state in
            guard let pid = state.child?.pid else { return false }
            return !Self.reap(&state, pid: pid, blocking: false)
        }
    }

    /// How the last broker process ended (`exit status N` or `killed by signal N`), if it has.
    public var lastExit: String? {
        requireOwnProcess("lastExit")
        return state.withLock { $0.lastExit }
    }

    /// Path of the generated `mosquitto.conf`.
    public var configFile: String {
        requireOwnProcess("configFile")
        return "\(directory)/mosquitto.conf"
    }

    /// Path of the broker's log, `broker.log` in ``directory``; appended to across restarts.
    public var logFile: String {
        requireOwnProcess("logFile")
        return "\(directory)/broker.log"
    }

    /// The broker's log so far (every launch, including the one before a restart).
    public var logText: String {
        requireOwnProcess("logText")
        guard let data = FileManager.default.contents(atPath: logFile) else { return "" }
        return String(decoding: data, as: UTF8.self)
    }

    // MARK: - Starting

    /// Starts a broker and returns once it accepts TCP connections.
    ///
    /// Writes the configuration into a fresh temporary directory, launches
    /// `mosquitto -c <file>` and polls (deadline 10 s) until the process has
    /// logged that it is running and a TCP connection to 127.0.0.1:``port``
    /// (and to the WebSockets port, if any) succeeds. When the port was picked
    /// automatically and mosquitto exits during startup (typically because
    /// another process took the port meanwhile), it retries on another free
    /// port, up to 5 times.
    ///
    /// - Throws: ``Failure`` (with the tail of the broker's log) when mosquitto
    ///   is not installed, exits during startup, or does not accept connections
    ///   in time; `CancellationError` if the task is cancelled while waiting.
    public static func start(_ configuration: Configuration = .init()) async throws -> MosquittoBroker {
        let executable = try locate("mosquitto", extraDirectories: searchDirectories)
        let directory = try makeTemporaryDirectory()
        do {
            try configuration.writeSupportFiles(in: directory)
        } catch {
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
        // From here on the broker's deinit removes the directory.
        let broker = MosquittoBroker(
            configuration: configuration, directory: directory, executable: executable,
            port: try configuration.port ?? FreePort.loopback())

        let attempts = configuration.port == nil ? 5 : 1
        for attempt in 1...attempts {
            if attempt > 1 {
                let port = try FreePort.loopback()
                broker.state.withLock { $0.port = port }
            }
            try broker.writeConfigFile()
            switch try await broker.launchAndWait(until: .after(.seconds(10))) {
            case .ready:
                return broker
            case .exited(let how) where attempt == attempts:
                throw Failure(
                    "mosquitto exited during startup on port \(broker.port) (\(how))", log: broker.logTail())
            case .exited:
                continue
            }
        }
        fatalError("unreachable: the last attempt returns or throws")
    }

    // MARK: - Controlling

    /// Stops the broker gracefully: SIGTERM (mosquitto then saves its
    /// persistence database), waits up to 5 s for it to exit, then SIGKILL.
    /// A paused broker is resumed so that it can handle SIGTERM. Does nothing
    /// if the broker is not running.
    public func stop() async {
        requireOwnProcess("stop()")
        let pid: pid_t? = state.withLock { state in
            guard let child = state.child, !Self.reap(&state, pid: child.pid, blocking: false) else {
                return nil
            }
            sendSignal(child.pid, SIGTERM)
            if child.paused {
                sendSignal(child.pid, SIGCONT)
                state.child?.paused = false
            }
            return child.pid
        }
        guard let pid else { return }

        let deadline = Deadline.after(.seconds(5))
        while !deadline.hasPassed {
            if state.withLock({ Self.reap(&$0, pid: pid, blocking: false) }) {
                return
            }
            do {
                try await Task.sleep(for: .milliseconds(5))
            } catch {
                break  // Cancelled: do not wait any longer.
            }
        }
        state.withLock { state in
            guard state.child?.pid == pid else { return }
            sendSignal(pid, SIGKILL)
            _ = Self.reap(&state, pid: pid, blocking: true)
        }
    }

    /// Kills the broker with SIGKILL, like a crash, and returns once it has
    /// exited. Mosquitto gets no chance to save its persistence database.
    public func kill() {
        requireOwnProcess("kill()")
        state.withLock { state in
            guard let child = state.child else { return }
            sendSignal(child.pid, SIGKILL)
            _ = Self.reap(&state, pid: child.pid, blocking: true)
        }
    }

    /// The last `lines` lines of the broker's log.
    public func logTail(lines: Int = 40) -> String {
        logText.split(separator: "\n", omittingEmptySubsequences: false).suffix(lines).joined(separator: "\n")
    }

    // MARK: - Launching

    private func writeConfigFile() throws {
        let text = configuration.render(port: port, directory: directory)
        try Data(text.utf8).write(to: URL(fileURLWithPath: configFile))
    }

    /// Launches mosquitto with the current config file and polls until it is
    /// ready or has exited. Throws when `deadline` passes first (after killing it).
    package func launchAndWait(until deadline: Deadline) async throws -> LaunchOutcome {
        if external != nil {
            requireOwnProcess("launching mosquitto")
            throw Failure("the external broker of \(ExternalBroker.environmentVariable) cannot be launched")
        }
        let logOffset = logSize()
        let (pid, port) = try state.withLock { state in
            try launch(&state)
            return (state.child!.pid, state.port)
        }
        let launched = ContinuousClock.now
        while true {
            if state.withLock({ Self.reap(&$0, pid: pid, blocking: false) }) {
                return .exited(lastExit ?? "exited")
            }
            // Mosquitto 2 logs "mosquitto version X running" once all its listeners
            // are open. Waiting for it first keeps us from taking another process
            // listening on the port for our broker. Brokers that do not log it are
            // accepted on the TCP probe alone after a second.
            if log(since: logOffset).contains(" running") || launched.duration(to: .now) > .seconds(1),
                FreePort.acceptsConnections(on: port),
                configuration.websocketsPort.map(FreePort.acceptsConnections(on:)) ?? true,
                !state.withLock({ Self.reap(&$0, pid: pid, blocking: false) })
            {
                return .ready
            }
            if deadline.hasPassed {
                kill()
                throw Failure(
                    "mosquitto did not accept connections on 127.0.0.1:\(port) in time", log: logTail())
            }
            do {
                try await Task.sleep(for: .milliseconds(5))
            } catch {
                kill()
                throw error
            }
        }
    }

    private func logSize() -> UInt64 {
        guard let handle = FileHandle(forReadingAtPath: logFile) else { return 0 }
        defer { try? handle.close() }
        return (try? handle.seekToEnd()) ?? 0
    }

    /// The log written after byte `offset`.
    private func log(since offset: UInt64) -> String {
        guard let handle = FileHandle(forReadingAtPath: logFile) else { return "" }
        defer { try? handle.close() }
        guard (try? handle.seek(toOffset: offset)) != nil, let data = try? handle.readToEnd() else { return "" }
        return String(decoding: data, as: UTF8.self)
    }

    /// Spawns mosquitto and its watchdog; called with the lock held.
    private func launch(_ state: inout State) throws {
        if let child = state.child, !Self.reap(&state, pid: child.pid, blocking: false) {
            throw Failure("mosquitto is already running (pid \(child.pid))")
        }
        let pid = try spawn(executable, ["-c", configFile], stdin: nil, output: logFile)

        // The watchdog holds one end of a pipe whose other end only this process
        // holds (close-on-exec, so no other child inherits it): when this process
        // dies, however it dies, `read` returns and the watchdog kills the broker.
        let watchdog: pid_t
        let watchdogFD: Int32
        do {
            let (readEnd, writeEnd): (Int32, Int32)
            do {
                (readEnd, writeEnd) = try Spawn.makePipe()
            } catch {
                throw Failure(error.message)
            }
            do {
                defer { _ = close(readEnd) }
                watchdog = try spawn(
                    "/bin/sh",
                    ["-c", "read -r _; kill -KILL \(pid) 2>/dev/null", "mosquitto-watchdog"],
                    stdin: readEnd, output: nil)
            } catch {
                _ = close(writeEnd)
                throw error
            }
            watchdogFD = writeEnd
        } catch {
            sendSignal(pid, SIGKILL)
            var status: Int32 = 0
            _ = waitpid(pid, &status, 0)
            throw error
        }
        state.child = Child(pid: pid, watchdogPID: watchdog, watchdogFD: watchdogFD)
        state.lastPID = pid
        state.lastExit = nil
        Registry.add(broker: pid, watchdog: watchdog)
    }

    /// Reaps the broker `pid` if it has exited (waiting for it if `blocking`).
    /// Returns `true` when that process is gone (or is no longer the current one).
    package static func reap(_ state: inout State, pid: pid_t, blocking: Bool) -> Bool {
        guard let child = state.child, child.pid == pid else { return true }
        var status: Int32 = 0
        var result: pid_t
        repeat {
            result = waitpid(pid, &status, blocking ? 0 : WNOHANG)
        } while result == -1 && errno == EINTR
        if result == 0 { return false }
        record(&state, child: child, status: result == pid ? status : nil)
        return true
    }

    /// Records that `child` has exited and disposes of its watchdog.
    package static func record(_ state: inout State, child: Child, status: Int32?) {
        Registry.remove(broker: child.pid)
        sendSignal(child.watchdogPID, SIGKILL)
        var watchdogStatus: Int32 = 0
        while waitpid(child.watchdogPID, &watchdogStatus, 0) == -1 && errno == EINTR {}
        _ = close(child.watchdogFD)
        state.child = nil
        state.lastExit = status.map(describe) ?? "exit status unavailable"
    }

    /// `exit status N` or `killed by signal N`, from a `waitpid` status.
    static func describe(_ status: Int32) -> String {
        let signal = status & 0x7F
        return signal == 0 ? "exit status \((status >> 8) & 0xFF)" : "killed by signal \(signal)"
    }

    // MARK: - Helpers

    /// Finds the executable `name` in `PATH`, then in `extraDirectories`.
    public static func locate(_ name: String, extraDirectories: [String]) throws -> String {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let directories = path.split(separator: ":").map(String.init) + extraDirectories
        for directory in directories where !directory.isEmpty {
            let candidate = "\(directory)/\(name)"
            if access(candidate, X_OK) == 0 {
                return candidate
            }
        }
        throw Failure(
            "\(name) not found in PATH nor in \(extraDirectories.joined(separator: ", ")): install the broker "
                + "(Debian/Ubuntu: `apt-get install mosquitto`, macOS: `brew install mosquitto`)")
    }

    private static func makeTemporaryDirectory() throws -> String {
        var base = FileManager.default.temporaryDirectory.path
        while base.count > 1 && base.hasSuffix("/") { base.removeLast() }
        var template = Array("\(base)/mosquitto-broker.XXXXXX".utf8CString)
        let created = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) != nil }
        guard created else {
            throw Failure("mkdtemp in \(base) failed: \(String(cString: strerror(errno)))")
        }
        return template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    /// Every live broker and its watchdog, killed by an `atexit` handler.
    private enum Registry {
        static let children = LockedValue<[pid_t: pid_t]>([:])

        static let installAtExit: Void = {
            atexit {
                // Best effort: if another thread holds the lock while the process
                // exits, the watchdogs still kill the brokers.
                MosquittoBroker.Registry.children.withLockIfAvailable { children in
                    for (broker, watchdog) in children {
                        sendSignal(watchdog, SIGKILL)
                        sendSignal(broker, SIGKILL)
                    }
                    children.removeAll()
                }
            }
        }()

        static func add(broker: pid_t, watchdog: pid_t) {
            installAtExit
            children.withLock { $0[broker] = watchdog }
        }

        static func remove(broker: pid_t) {
            _ = children.withLock { $0.removeValue(forKey: broker) }
        }
    }
}

/// `kill(2)`; a free function because `MosquittoBroker.kill()` shadows it inside the class.
package func sendSignal(_ pid: pid_t, _ signal: Int32) {
    guard pid > 0 else { return }
    _ = kill(pid, signal)
}

/// Spawns `path` with `arguments` in its own process group (see ``Spawn``). Standard input comes from
/// `stdin` (or /dev/null); standard output and error are appended to `output` (or go to /dev/null).
private func spawn(_ path: String, _ arguments: [String], stdin: Int32?, output: String?) throws -> pid_t {
    do {
        return try Spawn.process(
            path, arguments,
            stdin: stdin.map { .descriptor($0) } ?? .nullDevice,
            stdout: output.map { .appending(toFile: $0) } ?? .nullDevice,
            stderr: .standardOutput,
            newProcessGroup: true)
    } catch {
        throw MosquittoBroker.Failure(error.message)
    }
}
