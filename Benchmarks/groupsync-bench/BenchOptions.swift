/// The command line of `groupsync-bench`.
struct BenchOptions: Sendable {
    struct UsageError: Error, CustomStringConvertible {
        let description: String
    }

    enum Mode: String, Sendable {
        case full, quick, smoke
    }

    enum Section: String, Sendable, CaseIterable {
        case latency, latencyProcesses = "latency-processes", throughput, fanout, lateJoin = "late-join", convergence, crash, failover,
            memory, playback, journal, idle, `private`
    }

    static let help = """
        Usage: groupsync-bench [--quick | --smoke] [--json] [--broker URL] [--only SECTION[,SECTION…]]

        Measures GroupSync against raw libmosquitto on one broker (its own mosquitto on a free loopback
        port, started with set_tcp_nodelay true, unless --broker is given) and prints a table with the
        targets, PASS or MISS:

          latency      one-way messenger latency (half a ping-pong), QoS 0 and 1, p50/p99, vs raw
          latency-processes  the same with the responder in a process of its own (both libraries)
          throughput   messages/s from one sender to one receiver, QoS 0 and 1, vs raw (same window)
          fanout       one shared-state change until the last of 100 participants has it, p50/p99, vs raw
          late-join    join() with 100 present until the current value is held; messages per join
          convergence  10 participants write one key at once: time to agree, changes seen
          crash        a SIGKILLed `groupsync join` process until everyone dropped it
          failover     a participant on two bridged mosquittos (its own, whatever --broker says) while
                       the first is SIGKILLed: move time, delivery gap at a peer, losses
          memory       resident size of 1,000 participants in one session, and of one in 1,000 sessions
          playback     10 participants with skewed, drifting clocks follow one PlaybackCoordinator:
                       position spread, start spread, play() until started, suspension
          idle         100 joined sessions in this process doing nothing, then with a playback
                       coordinator each (once their clock exchanges have backed off): wake-ups per
                       second and CPU per minute over 15 s each (--quick: 10 sessions, 2 s, unsettled)
          private      the same with sealed sessions (a keyring) and without, in the same run: send(Data)
                       QoS 0 p50 and throughput, late join with 100 present, the journal's fan-out
          journal      a 10 MiB attachment until 10 joined participants loaded it, vs raw; a late
                       joiner loading 10 MiB after its owner left; a receiver's peak memory while
                       loading 100 MiB (and 10 MiB) to disk, in a process of its own.
                       --quick: 4 MiB, 4 MiB, 20 MiB (and 2 MiB)

          --quick        fewer samples, 20 participants instead of 100, 100 for memory
                         (under a minute in a release build)
          --smoke        a handful of samples of everything: checks that it all runs (seconds)
          --json         print one JSON object on standard output instead of the table (progress
                         goes to standard error either way)
          --broker URL   use this broker (mqtt://host:port) instead of starting mosquitto
          --only LIST    run only these sections (comma-separated names from the list above), e.g.
                         `--only latency` to profile one path under valgrind --tool=callgrind
          --window N     publishes in flight in the throughput test, both sides (default 64)
          --participants N  size of the fan-out/late-join session (default 100; 20 with --quick)
          --help         this text

        Build and run: swift build -c release    (also builds groupsync, the crash test's child process)
                       swift run -c release groupsync-bench
        Results and what each figure means: BENCHMARKS.md; lasting findings: docs/FINDINGS.md.
        Exit status: 0 measured (whatever PASS/MISS says), 1 a measurement failed, 2 usage error.
        """

    var mode = Mode.full
    var json = false
    var help = false
    var broker: String?
    var sections = Set(Section.allCases)
    var window = 64
    var participantsOverride: Int?
    /// Internal: run one memory scenario in this (child) process and print its RSS increase.
    var memoryChild: MemoryBenchmark.Kind?
    var memoryChildCount = 0
    var cleanExit = false
    /// Internal: load one journal attachment to a file in this (child) process and print its memory.
    var journalChild: JournalReceiver.Request?

    init(_ arguments: [String]) throws {
        var index = 0
        func value(_ name: String) throws -> String {
            index += 1
            guard index < arguments.count else { throw UsageError(description: "\(name) needs a value") }
            return arguments[index]
        }
        while index < arguments.count {
            let argument = arguments[index]
            switch argument {
            case "--quick": mode = .quick
            case "--smoke": mode = .smoke
            case "--json": json = true
            case "--help", "-h": help = true
            case "--broker": broker = try value(argument)
            case "--only":
                var chosen = Set<Section>()
                for name in try value(argument).split(separator: ",") {
                    guard let section = Section(rawValue: String(name)) else {
                        throw UsageError(
                            description: "unknown section '\(name)'; one of \(Section.allCases.map(\.rawValue).joined(separator: ", "))")
                    }
                    chosen.insert(section)
                }
                sections = chosen
            case "--window":
                guard let number = Int(try value(argument)), number >= 1 else {
                    throw UsageError(description: "--window needs a positive number")
                }
                window = number
            case "--participants":
                guard let number = Int(try value(argument)), number >= 2 else {
                    throw UsageError(description: "--participants needs a number ≥ 2")
                }
                participantsOverride = number
            case "--memory-child":
                guard let kind = MemoryBenchmark.Kind(rawValue: try value(argument)) else {
                    throw UsageError(description: "bad --memory-child")
                }
                memoryChild = kind
            case "--count":
                guard let number = Int(try value(argument)), number >= 1 else {
                    throw UsageError(description: "--count needs a positive number")
                }
                memoryChildCount = number
            case "--clean-exit": cleanExit = true
            case "--journal-child":
                guard let request = JournalReceiver.Request(argument: try value(argument)) else {
                    throw UsageError(description: "bad --journal-child")
                }
                journalChild = request
            default:
                throw UsageError(description: "unknown argument '\(argument)' (see --help)")
            }
            index += 1
        }
    }

    private func pick<T>(_ full: T, _ quick: T, _ smoke: T) -> T {
        switch mode {
        case .full: return full
        case .quick: return quick
        case .smoke: return smoke
        }
    }

    var latencyWarmup: Int { pick(2_000, 300, 20) }
    var latencySamples: Int { pick(20_000, 3_000, 40) }
    var latencyRounds: Int { pick(20, 6, 1) }
    var processLatencyWarmup: Int { pick(1_000, 200, 20) }
    var processLatencySamples: Int { pick(10_000, 1_500, 40) }
    var processLatencyRounds: Int { pick(10, 3, 1) }
    var throughputWarmup: Int { pick(5_000, 1_000, 50) }
    var throughputMessages: Int { pick(15_000, 5_000, 200) }
    var throughputRounds: Int { pick(11, 3, 1) }
    var fanoutParticipants: Int { participantsOverride ?? pick(100, 20, 5) }
    var fanoutWarmup: Int { pick(20, 5, 1) }
    var fanoutSamples: Int { pick(300, 50, 5) }
    var lateJoinSamples: Int { pick(50, 10, 2) }
    var convergenceWriters: Int { pick(10, 10, 4) }
    var convergenceBursts: Int { pick(50, 10, 2) }
    var crashSamples: Int { pick(3, 1, 1) }
    var failoverSamples: Int { pick(20, 5, 1) }
    var memoryParticipants: Int { pick(1_000, 100, 10) }
    var memorySessions: Int { pick(1_000, 100, 10) }
    var journal: JournalBenchmark.Plan {
        .init(
            receivers: pick(10, 10, 3), fanoutBytes: pick(10 << 20, 4 << 20, 1 << 20), rounds: pick(5, 3, 1),
            lateJoinerBytes: pick(10 << 20, 4 << 20, 1 << 20), lateJoinerSamples: pick(3, 2, 1),
            receiverBytes: pick(100 << 20, 20 << 20, 4 << 20))
    }
    var playback: PlaybackBenchmark.Plan {
        .init(
            participants: pick(10, 10, 4), playSeconds: pick(30, 5, 1),
            commandEvery: pick(.milliseconds(1_500), .seconds(1), .milliseconds(400)),
            starts: pick(50, 10, 2), suspensions: pick(20, 5, 1), roundTrips: pick(2_000, 500, 20))
    }
}
