import BrokerSupport
import Foundation

/// `groupsync broker`: runs mosquitto in the foreground with the project's tuned configuration.
enum BrokerCommand: Command {
    static let name = "broker"
    static let summary = "run a local mosquitto with GroupSync's tuned configuration"
    static let help = """
        Usage: groupsync broker [--port N] [--bind ADDRESS] [--websockets PORT] [--persist DIR]

        Runs mosquitto in the foreground (Ctrl-C stops it) with set_tcp_nodelay true (a QoS 1 round trip
        on loopback takes 0.16 ms instead of 88 ms with Nagle), anonymous access, and the listeners below.

          --port N           MQTT listener port (default 1883)
          --bind ADDRESS     address to listen on (default 127.0.0.1; 0.0.0.0 for the network)
          --websockets PORT  also a websockets listener, for browser dashboards (e.g. 9001)
          --persist DIR      keep retained messages and sessions in DIR across restarts

        Exit codes: those of mosquitto; 2 usage error; 4 mosquitto is not installed
        (sudo apt-get install mosquitto).
        """

    static func run(_ arguments: [String]) async throws -> Int32 {
        let args = try Arguments(arguments, options: ["port", "bind", "websockets", "persist"], flags: [])
        let port = try args.integer("port", default: 1883, range: 1...65_535)
        let bind = args.value("bind") ?? "127.0.0.1"
        guard let executable = MosquittoBroker.findExecutable() else {
            throw CommandFailure("mosquitto is not installed: sudo apt-get install mosquitto", exitCode: 4)
        }
        var lines = [
            "# Written by `groupsync broker`.",
            "listener \(port) \(bind)",
            "protocol mqtt",
            "allow_anonymous true",
            "set_tcp_nodelay true",
            "max_keepalive 65535",
            "log_dest stdout",
            "log_type error", "log_type warning", "log_type notice", "log_type information",
        ]
        if let websockets = args.value("websockets") {
            guard let wsPort = Int(websockets), (1...65_535).contains(wsPort) else { throw UsageError("--websockets needs a port") }
            lines += ["listener \(wsPort) \(bind)", "protocol websockets"]
        }
        if let directory = args.value("persist") {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            lines += ["persistence true", "persistence_location \(directory.hasSuffix("/") ? directory : directory + "/")"]
        }
        let config = FileManager.default.temporaryDirectory.appendingPathComponent("groupsync-broker-\(getpid()).conf").path
        try lines.joined(separator: "\n").appending("\n").write(toFile: config, atomically: true, encoding: .utf8)
        Output.line(
            "groupsync broker: mosquitto on mqtt://\(bind == "0.0.0.0" ? "127.0.0.1" : bind):\(port) (config \(config)); Ctrl-C to stop")
        // Replace this process with mosquitto: signals, exit code and output are its own.
        var argv: [UnsafeMutablePointer<CChar>?] = [executable, "-c", config].map { (text: String) in strdup(text) }
        argv.append(nil)
        execv(executable, argv)
        throw CommandFailure("could not start \(executable): \(String(cString: strerror(errno)))", exitCode: 4)
    }
}
