import Foundation
import GroupSync
import GroupSyncTestSupport
import Synchronization

/// 1b. The latency ping-pong with the responder in a process of its own, GroupSync and raw libmosquitto
/// alike: how two participants on two devices meet, where section 1 puts both in the bench's process.
///
/// The responder is this binary started again with `--responder` (``respond(_:)``): a GroupSync
/// participant that joins the bench's session and sends every ``Ping`` back, or a raw libmosquitto client
/// that publishes every ping back from an application thread, as ``RawPingPong``'s responder does. The
/// pinger stays in the bench. Rounds alternate between the two libraries, as in section 1, and the raw
/// payload is padded to the GroupSync envelope's size. A child reads its standard input and exits when it
/// closes, so that it never outlives the bench; the bench kills it when done.
enum ProcessPingPong {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    static func run(url: String, group: String, qos: Int, warmup: Int, samples: Int, rounds: Int) async throws -> BenchResults.Latency {
        let address = try BrokerAddress(url)
        let mode: GroupSessionMessenger.DeliveryMode = qos == 0 ? .unreliable : .reliable
        let coordinator = try await GroupCoordinator.connect(.init(broker: url, group: group, participant: "x0", presenceHeartbeats: false))
        var children: [ChildProcess] = []
        var rawPinger: RawMosquittoClient?
        var session: GroupSession<AnyGroupActivity>?
        func closeAll() async {
            for child in children { child.signal(SIGKILL) }
            rawPinger?.close()
            await session?.end()  // its retained announcement and member records go with it
            await coordinator.close()
        }
        do {
            let sessionID = try await coordinator.activate(activityIdentifier: SessionCluster.activity, value: .object([:]))
            let joined = try await SessionCluster.findSession(coordinator, id: sessionID)
            session = joined
            try await joined.join()
            children.append(try await startResponder(["gs", url, group, sessionID, String(qos)]))
            try await waitUntil(timeout: .seconds(20), pollEvery: .microseconds(200), "the responder process joined") {
                joined.activeParticipants.count == 2
            }
            let pinger = GroupSessionMessenger(session: joined, deliveryMode: mode)
            _ = try await withTimeLimit(.seconds(30 + Double(warmup) / 100), "process ping-pong warm-up") {
                try await MessengerPingPong.exchanges(pinger, first: 0, count: warmup)
            }
            // The envelope's size with as many digits as the measured pings have, seen on the wire.
            let sniffer = try await WireSniffer.start(url: url, filters: [GroupTopics(group: group).broadcast(sessionID, from: "x0")])
            let sized: Result<Int, any Error>
            do {
                _ = try await withTimeLimit(.seconds(10), "process ping-pong probe") {
                    try await MessengerPingPong.exchanges(pinger, first: warmup + samples / 2, count: 1)
                }
                sized = .success(try await sniffer.next(after: 0).size)
            } catch {
                sized = .failure(error)
            }
            await sniffer.stop()
            let payloadSize = try sized.get()

            // Topics as long as GroupSync's, as in section 1.
            let rawRoot = "\(GroupTopics.protocolRoot)/r\(group.dropFirst())/s/\(sessionID)/all"
            let (rawPing, rawPong) = ("\(rawRoot)/x0", "\(rawRoot)/x1")
            children.append(
                try await startResponder(
                    ["raw", address.host, String(address.port), rawPing, rawPong, String(qos), String(payloadSize)]))
            let raw = try RawMosquittoClient(clientID: "raw-xping-\(group)", handsOver: true)
            rawPinger = raw
            try raw.connect(host: address.host, port: address.port)
            try raw.subscribe(rawPong, qos: Int32(qos))
            @Sendable func rawRound(first: Int, count: Int) throws -> [Double] {
                var payload = [UInt8](repeating: UInt8(ascii: "x"), count: max(payloadSize, 8))
                var samples: [Double] = []
                samples.reserveCapacity(count)
                for sequence in first..<(first + count) {
                    payload.withUnsafeMutableBytes { $0.storeBytes(of: Int64(sequence).littleEndian, as: Int64.self) }
                    let start = MonotonicClock.nanoseconds()
                    try payload.withUnsafeBytes { try raw.publish(rawPing, $0, qos: Int32(qos)) }
                    guard raw.inbox.wait(timeout: .now() + 5) == .success else {
                        throw RawMosquittoClient.Failure.timeout("pong \(sequence)")
                    }
                    let end = MonotonicClock.nanoseconds()
                    let got = raw.lastSequence.load(ordering: .relaxed)
                    guard got == sequence else { throw Failure(description: "raw pong \(got) for ping \(sequence)") }
                    samples.append(MonotonicClock.microseconds(from: start, to: end) / 2)
                }
                return samples
            }
            _ = try await BlockingThread.run("raw-warmup") { Result { try rawRound(first: 0, count: warmup) } }.get()

            var groupSyncSamples: [Double] = []
            var rawSamples: [Double] = []
            var roundRatios: [Double] = []
            let perRound = max(samples / rounds, 1)
            var next = warmup + 1
            for _ in 0..<rounds {
                let first = next
                let rawTimes = try await BlockingThread.run("raw-ping") { Result { try rawRound(first: first, count: perRound) } }.get()
                let groupSyncTimes: [Double]
                do {
                    groupSyncTimes = try await withTimeLimit(.seconds(30 + Double(perRound) / 100), "process ping-pong") {
                        try await MessengerPingPong.exchanges(pinger, first: first, count: perRound)
                    }
                } catch {
                    let ended = children.first?.termination.map { " (the responder process: \($0))" } ?? ""
                    throw Failure(description: "\(error)\(ended)")
                }
                rawSamples += rawTimes
                groupSyncSamples += groupSyncTimes
                roundRatios.append(Percentiles(groupSyncTimes).p50 / Percentiles(rawTimes).p50)
                next += perRound
            }
            await closeAll()
            let measured = Percentiles(groupSyncSamples), baseline = Percentiles(rawSamples)
            let perRoundRatio = Percentiles(roundRatios)
            return .init(
                p50: measured.p50, p99: measured.p99, rawP50: baseline.p50, rawP99: baseline.p99, rawAcknowledged: nil,
                roundRatios: (perRoundRatio.percentile(25), perRoundRatio.p50, perRoundRatio.percentile(75), roundRatios.count),
                payloadBytes: payloadSize, samples: measured.count)
        } catch {
            await closeAll()
            throw error
        }
    }

    /// Starts this binary as a responder and returns once it said `ready` (joined, or subscribed).
    private static func startResponder(_ arguments: [String]) async throws -> ChildProcess {
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        let ready = Atomic<Bool>(false)
        let child = try ChildProcess(
            executable, ["--responder"] + arguments, input: .pipe,
            output: .handler { bytes in
                // One short write of the child's, the only one it makes on standard output.
                if String(decoding: bytes, as: UTF8.self).contains("ready\n") { ready.store(true, ordering: .releasing) }
            },
            errors: .handler { bytes in FileHandle.standardError.write(Data(bytes)) })
        do {
            try await waitUntil(timeout: .seconds(20), pollEvery: .microseconds(200), "responder process \(arguments[0]) ready") {
                ready.load(ordering: .acquiring) || child.termination != nil
            }
            if let ended = child.termination { throw Failure(description: "responder process \(arguments[0]): \(ended)") }
        } catch {
            child.signal(SIGKILL)
            throw error
        }
        return child
    }

    /// The child (`groupsync-bench --responder gs URL GROUP SESSION QOS` or `--responder raw HOST PORT
    /// PING-TOPIC PONG-TOPIC QOS PAYLOAD-BYTES`): answers pings until its standard input closes.
    static func respond(_ arguments: [String]) async -> Int32 {
        let watcher = Thread {
            var byte: UInt8 = 0
            while case let count = read(0, &byte, 1), count > 0 || (count < 0 && errno == EINTR) {}
            _exit(0)  // the bench closed the pipe or ended
        }
        watcher.start()
        do {
            switch arguments.first {
            case "gs" where arguments.count == 5:
                let coordinator = try await GroupCoordinator.connect(
                    .init(
                        broker: arguments[1], group: arguments[2], participant: "x1", presenceHeartbeats: false))
                let session = try await SessionCluster.findSession(coordinator, id: arguments[3])
                try await session.join()
                let messenger = GroupSessionMessenger(session: session, deliveryMode: arguments[4] == "0" ? .unreliable : .reliable)
                let pings = messenger.messages(of: Ping.self)
                FileHandle.standardOutput.write(Data("ready\n".utf8))
                for await (ping, _) in pings { try await messenger.send(ping) }
                return 0  // the session ended
            case "raw" where arguments.count == 7:
                guard let port = Int(arguments[2]), let qos = Int32(arguments[5]), let size = Int(arguments[6]) else { break }
                let client = try RawMosquittoClient(clientID: "raw-xpong-\(getpid())", handsOver: true)
                try client.connect(host: arguments[1], port: port)
                try client.subscribe(arguments[3], qos: qos)
                FileHandle.standardOutput.write(Data("ready\n".utf8))
                let pongTopic = arguments[4]
                try await BlockingThread.run("raw-responder") { () -> Result<Void, any Error> in
                    Result {
                        var payload = [UInt8](repeating: UInt8(ascii: "x"), count: max(size, 8))
                        while true {
                            client.inbox.wait()
                            let sequence = Int64(client.lastSequence.load(ordering: .relaxed)).littleEndian
                            payload.withUnsafeMutableBytes { $0.storeBytes(of: sequence, as: Int64.self) }
                            try payload.withUnsafeBytes { try client.publish(pongTopic, $0, qos: qos) }
                        }
                    }
                }.get()
            default:
                break
            }
        } catch {
            FileHandle.standardError.write(Data("groupsync-bench --responder: \(error)\n".utf8))
            return 1
        }
        FileHandle.standardError.write(Data("groupsync-bench --responder: bad arguments \(arguments)\n".utf8))
        return 2
    }
}
