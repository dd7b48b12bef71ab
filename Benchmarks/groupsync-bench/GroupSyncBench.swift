import Foundation
import GroupSyncTestSupport

/// `groupsync-bench`: starts (or uses) a broker, runs the selected measurements in order, prints the
/// table or the JSON.
enum GroupSyncBench {
    static func main(_ arguments: [String]) async -> Int32 {
        RawMosquittoClient.initializeLibrary()
        if arguments.first == "--responder" {  // internal: the child of the latency-processes section
            return await ProcessPingPong.respond(Array(arguments.dropFirst()))
        }
        let options: BenchOptions
        do {
            options = try BenchOptions(arguments)
        } catch {
            FileHandle.standardError.write(Data("groupsync-bench: \(error)\n".utf8))
            return 2
        }
        if options.help {
            print(BenchOptions.help)
            return 0
        }
        if let request = options.journalChild, let url = options.broker {
            return await JournalReceiver.child(request, url: url)
        }
        if let kind = options.memoryChild, let url = options.broker {
            FileLimit.raise(to: 5 * options.memoryChildCount + 256)
            return await MemoryBenchmark.child(kind: kind, count: options.memoryChildCount, url: url, cleanExit: options.cleanExit)
        }

        // Each coordinator holds a socket, libmosquitto's socket pair and its loop's eventfd: 4 descriptors,
        // in this process and in the memory child; mosquitto (a child of this process) inherits the limit.
        // Beside the fan-out/late-join cluster, as many raw libmosquitto clients (3 each) are connected at a
        // time: the fan-out's floor, then late join's present clients.
        let participants = max(options.memoryParticipants, 2 * options.fanoutParticipants + options.lateJoinSamples)
        let fileLimit = FileLimit.raise(to: 4 * participants + 1_024)

        var broker: MosquittoBroker?
        let url: String
        if let given = options.broker {
            url = given
        } else {
            do {
                // No connection limit; QoS 1 queues deep enough that the throughput test loses nothing at
                // the broker (its default, 1,000 queued per client, drops what a slower receiver cannot
                // take yet: the receive rate would then be measured over fewer messages).
                broker = try await MosquittoBroker.start(.init(extraLines: ["max_connections -1", "max_queued_messages 100000"]))
            } catch {
                FileHandle.standardError.write(Data("groupsync-bench: could not start mosquitto: \(error)\n".utf8))
                return 2
            }
            url = broker!.url
        }
        Log.progress("broker \(url)\(broker == nil ? " (given)" : " (private mosquitto, set_tcp_nodelay true)")")

        var results = BenchResults(
            environment: .init(
                mode: options.mode.rawValue, date: SystemInfo.date, cpu: SystemInfo.cpuModel, cores: SystemInfo.cores,
                mosquitto: SystemInfo.brokerVersion(executable: broker?.executable), libmosquitto: SystemInfo.libmosquittoVersion,
                swift: SystemInfo.swiftVersion, broker: broker == nil ? url : "private mosquitto on \(url)", fileLimit: fileLimit,
                loadBefore: SystemInfo.loadAverage))
        let run = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        await measure(options, url: url, run: run, into: &results)
        results.environment.loadAfter = SystemInfo.loadAverage
        await broker?.stop()

        let report = BenchReport(results: results)
        print(options.json ? report.json() : report.table())
        return results.failures.isEmpty ? 0 : 1
    }

    /// Runs one measurement; a failure is logged and recorded, and the bench goes on with the next one.
    private static func section<T: Sendable>(_ name: String, _ failures: inout [String], _ body: () async throws -> T) async -> T? {
        Log.progress("\(name)…")
        do {
            return try await body()
        } catch {
            Log.progress("\(name) failed: \(error)")
            failures.append("\(name): \(error)")
            return nil
        }
    }

    private static func measure(_ options: BenchOptions, url: String, run: String, into results: inout BenchResults) async {
        var failures: [String] = []
        defer { results.failures += failures }
        let sections = options.sections
        if sections.contains(.latency) {
            for qos in [0, 1] {
                results.latency[qos] = await section("latency QoS \(qos)", &failures) {
                    try await LatencyBenchmark.run(
                        url: url, group: "bl\(qos)-\(run)", qos: qos, warmup: options.latencyWarmup,
                        samples: options.latencySamples, rounds: options.latencyRounds)
                }
            }
        }
        if sections.contains(.latencyProcesses) {
            for qos in [0, 1] {
                results.processLatency[qos] = await section("latency QoS \(qos), responder in its own process", &failures) {
                    try await ProcessPingPong.run(
                        url: url, group: "bx\(qos)-\(run)", qos: qos, warmup: options.processLatencyWarmup,
                        samples: options.processLatencySamples, rounds: options.processLatencyRounds)
                }
            }
        }
        if sections.contains(.throughput) {
            for qos in [0, 1] {
                results.throughput[qos] = await section("throughput QoS \(qos)", &failures) {
                    try await ThroughputBenchmark.run(
                        url: url, group: "bt\(qos)-\(run)", qos: qos, warmup: options.throughputWarmup,
                        count: options.throughputMessages, window: options.window, rounds: options.throughputRounds)
                }
            }
        }
        if sections.contains(.fanout) || sections.contains(.lateJoin) {
            let cluster = await section("\(options.fanoutParticipants) participants joining", &failures) {
                try await SessionCluster.make(
                    url: url, group: "bf-\(run)", prefix: "f", count: options.fanoutParticipants, sharedState: true)
            }
            if let cluster {
                var current = 0
                if sections.contains(.fanout) {
                    let outcome = await section("fan-out", &failures) {
                        try await FanoutBenchmark.run(
                            cluster: cluster, warmup: options.fanoutWarmup, samples: options.fanoutSamples, firstValue: 1)
                    }
                    results.fanout = outcome?.0
                    current = outcome?.lastValue ?? 0
                }
                if sections.contains(.lateJoin) {
                    let expected = current
                    results.lateJoin = await section("late join", &failures) {
                        var current = expected
                        if current == 0 {
                            current = 7
                            cluster.hub.expect(current, from: Set(cluster.members.map(\.index)))
                            try await cluster.members[0].state!.set(current)
                            _ = try await cluster.hub.wait(timeout: .seconds(10))
                        }
                        return try await LateJoinBenchmark.run(cluster: cluster, samples: options.lateJoinSamples, expected: current)
                    }
                    if let failure = results.lateJoin?.rawFailure { failures.append("late join (raw libmosquitto): \(failure)") }
                }
                await cluster.close()
            }
        }
        if sections.contains(.lateJoin) {
            results.retainlessLateJoin = await section("late join without retained messages", &failures) {
                try await RetainlessLateJoinBenchmark.run(
                    url: url, group: "bn-\(run)", present: options.fanoutParticipants, samples: options.lateJoinSamples)
            }
        }
        if sections.contains(.convergence) || sections.contains(.crash) {
            let cluster = await section("\(options.convergenceWriters) participants joining", &failures) {
                try await SessionCluster.make(
                    url: url, group: "bc-\(run)", prefix: "c", count: options.convergenceWriters, sharedState: true)
            }
            if let cluster {
                if sections.contains(.convergence) {
                    results.convergence = await section("convergence", &failures) {
                        try await ConvergenceBenchmark.run(
                            cluster: cluster, bursts: options.convergenceBursts, firstValue: 1_000_000)
                    }
                }
                if sections.contains(.crash) {
                    results.crash = await section("crash detection", &failures) {
                        let executable = CrashDetectionBenchmark.groupsyncExecutable
                        if executable == nil {
                            Log.progress("no groupsync executable next to this one: simulating the crash in-process")
                        }
                        return try await CrashDetectionBenchmark.run(
                            cluster: cluster, samples: options.crashSamples, executable: executable)
                    }
                }
                await cluster.close()
            }
        }
        if sections.contains(.failover) {
            results.failover = await section("failover (two bridged mosquittos of its own per sample)", &failures) {
                try await FailoverBenchmark.run(samples: options.failoverSamples, run: run)
            }
        }
        if sections.contains(.playback) {
            results.playback = await section("playback", &failures) {
                try await PlaybackBenchmark.run(url: url, group: "bp-\(run)", plan: options.playback)
            }
        }
        if sections.contains(.journal) {
            let plan = options.journal
            results.journal = await section(
                "journal (\(plan.fanoutBytes >> 20) MiB to \(plan.receivers), late joiner \(plan.lateJoinerBytes >> 20) MiB, "
                    + "receiver memory \(plan.receiverBytes >> 20) MiB)", &failures
            ) {
                try await JournalBenchmark.run(url: url, group: "bj-\(run)", plan: plan)
            }
            results.retainlessJournal = await section(
                "journal without retained messages (\(plan.fanoutBytes >> 20) MiB to \(plan.receivers))", &failures
            ) {
                try await RetainlessJournalBenchmark.run(url: url, group: "bk-\(run)", plan: plan)
            }
        }
        if sections.contains(.private) {
            results.private = await section("private sessions, sealed and in clear", &failures) {
                try await PrivateBenchmark.run(url: url, group: "bp-\(run)", options: options)
            }
        }
        if sections.contains(.idle) {
            let (count, seconds) = options.mode == .full ? (100, 15.0) : (10, 2.0)
            results.idle = await section("idle (\(count) sessions)", &failures) {
                try await IdleBenchmark.run(url: url, group: "bi-\(run)", sessions: count, seconds: seconds, settled: options.mode == .full)
            }
        }
        if sections.contains(.memory) {
            Log.progress("memory (\(options.memoryParticipants) participants, \(options.memorySessions) sessions)…")
            let (memory, errors) = await MemoryBenchmark.run(
                url: url, participants: options.memoryParticipants, sessions: options.memorySessions,
                cleanExit: options.broker != nil)
            results.memory = memory
            failures += errors
        }
    }
}
