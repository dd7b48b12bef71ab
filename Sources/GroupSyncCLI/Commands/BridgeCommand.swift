import Foundation
import GroupSync
import MQTT

/// `groupsync bridge`: a session for a host program, over JSON lines on stdin/stdout (docs/BRIDGE.md).
enum BridgeCommand: Command {
    static let name = "bridge"
    static let summary = "bridge a session to a host program over JSON lines (stdin/stdout)"
    static let help = """
        Usage: groupsync bridge [--timeout SEC] [--broker URL] [--group NAME] [--as ID] [--no-retain] [--keepalive SEC]

        For a host program (Node, Electron, React Native, Python…): one JSON request per line on stdin,
        one JSON answer or event per line on stdout, nothing else on stdout (diagnostics go to stderr).
        Requests carry an "id" (string or number) echoed in their answer, {"event":"ok","id":…} or
        {"event":"error","id":…,"message":…}, and are handled one at a time, in order:

          {"id":1,"op":"configure","broker":"mqtt://…","group":"g","participant":"alice"}  (before connecting)
          {"id":2,"op":"start","activity":"com.example.gallery","title":"…","value":{…},"keys":["index"]}
          {"id":3,"op":"join","activity":"com.example.gallery","session":"ID","keys":["index"]}
          {"id":4,"op":"set","key":"index","value":3}
          {"id":5,"op":"send","value":{"text":"hi"},"to":["bob"]}
          {"id":6,"op":"leave"}   {"id":7,"op":"end"}   {"id":8,"op":"watch","activity":"…"}   {"id":9,"op":"ping"}
          {"id":10,"op":"playback","action":"play"}  (also pause, seek + position, rate + rate, item + item;
          "playback":true on start or join follows the media timeline from the join)
          {"id":11,"op":"suspend","reason":"buffering"}   {"id":12,"op":"resume"}   {"id":13,"op":"position"}
          {"id":14,"op":"attach","path":"photo.png"}  (also "name", "type", "metadata")   {"id":15,"op":"attachments"}
          {"id":16,"op":"load","digest":"…","owner":"alice","path":"copy.png"}   {"id":17,"op":"detach","digest":"…"}

        Events: session, state, participants, value, message, gap, timeline, start, journal, progress,
        loaded, rejected, error (see docs/BRIDGE.md). Messages travel as the GroupSync type
        BridgeMessage {"value": <JSON>}. The broker connection is made at the first start, join or
        watch. EOF on stdin (or SIGINT/SIGTERM/SIGHUP) leaves the session and exits.

        \(CommonOptions.help)
        \(CommonOptions.participantHelp)

          --timeout SEC     how long connecting to the broker may take, and how long start and join
                            wait for an announcement (default 10; a join's "timeout" overrides the
                            latter). A connection that times out is the request's error answer; the
                            next start, join or watch tries again

        Options give the defaults that "configure" may override. Lines over 1 MiB are rejected.

        Exit codes: 0 stdin closed, stdout closed, or signal (Ctrl-C, SIGTERM, SIGHUP: at any point, a request
        still waiting ends with an error answer), session left; 1 failure; 2 usage error. Connection problems are
        error answers, not exit codes: the host may configure another broker and retry.
        """

    /// Longer request lines are rejected (and never held in memory).
    static let maximumLineLength = 1 << 20

    static func run(_ arguments: [String]) async throws -> Int32 {
        let args = try Arguments(
            arguments, options: CommonOptions.names.union(["timeout"]), flags: CommonOptions.participantFlags, positionals: 1)
        guard args.positionals.isEmpty else {
            throw UsageError("unexpected argument '\(args.positionals[0])': requests come on stdin")
        }
        let common = try CommonOptions(args, defaultParticipant: CommonOptions.stableParticipant(suffix: "-bridge"))
        let events = BridgeEvents()
        let timeout = Duration.seconds(try args.integer("timeout", default: 10, range: 1...86_400))
        let interruption = Interruption()
        let bridge = Bridge(options: common, events: events, timeout: timeout, interruption: interruption)
        let (stop, stopping) = AsyncStream.makeStream(of: Void.self)
        Signals.onInterrupt {
            interruption.fire()
            stopping.yield()
        }
        let lines = BridgeLineReader.lines(limit: maximumLineLength)
        let worker = Task {
            for await line in lines {
                // After a signal, requests not yet started are dropped.
                if Task.isCancelled { break }
                switch line {
                case let .tooLong(length):
                    events.error("request line of \(length) bytes is longer than the limit of \(maximumLineLength) bytes")
                case let .line(data):
                    let text = data.trimmingWhitespace()
                    if text.isEmpty { continue }
                    switch BridgeRequest.parse(text) {
                    case let .success(request):
                        await bridge.handle(request)
                    case let .failure(invalid):
                        events.error(invalid.message, id: invalid.id)
                    }
                }
            }
            // End of input: every request read was handled.
            stopping.yield()
        }
        for await _ in stop { break }
        // After a signal, a request still running gets 2 s to finish (its waits end when cancelled).
        worker.cancel()
        await withTimeout(.seconds(2)) { await worker.value }
        await bridge.shutdown()
        return 0
    }
}

extension Data {
    /// Without leading and trailing spaces, tabs and carriage returns.
    fileprivate func trimmingWhitespace() -> Data {
        let blank: Set<UInt8> = [0x20, 0x09, 0x0D]
        guard let first = firstIndex(where: { !blank.contains($0) }), let last = lastIndex(where: { !blank.contains($0) }) else {
            return Data()
        }
        return self[first...last]
    }
}
