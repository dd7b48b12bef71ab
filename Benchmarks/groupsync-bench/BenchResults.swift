/// Everything one run measured. Each section is nil when it was not run (`--only`) or failed.
struct BenchResults: Sendable {
    struct Latency: Sendable {
        var p50: Double
        var p99: Double
        var rawP50: Double
        var rawP99: Double
        /// QoS 1 only: raw libmosquitto with each side awaiting its PUBACK before the next message, as a
        /// `.reliable` `send` does (a reference beside the target, not the target's baseline).
        var rawAcknowledged: (p50: Double, p99: Double)?
        /// The same exchanges through `send(Data)` / `messages(of: Data.self)`, and Foundation's encode +
        /// decode of the Codable message alone (µs): the Codable path may cost the Data path plus that
        /// plus 5 µs. Nil for the responder in its own process.
        var data: (p50: Double, p99: Double)? = nil
        var codecMicroseconds: Double? = nil
        /// What the Codable path costs over the Data path (µs): the median over rounds of the difference of
        /// the two p50s of one round, each round running them in turn (the first swapped every round).
        var codableOverData: Double? = nil
        /// The p50 ratio (GroupSync / raw) of each alternating round on its own, as quartiles: a slow phase
        /// of the machine that hits some rounds moves these less than the ratio of the pooled p50s.
        var roundRatios: (q1: Double, median: Double, q3: Double, rounds: Int)
        var payloadBytes: Int
        var samples: Int
    }

    struct Throughput: Sendable {
        /// The median round's rate of each side, in messages per second.
        var rate: Double
        var rawRate: Double
        /// The median round's rate through `send(Data)`.
        var dataRate: Double
        /// The rate ratio (GroupSync / raw) of each alternating round on its own, as quartiles.
        var roundRatios: (q1: Double, median: Double, q3: Double, rounds: Int)
        var sent: Int
        /// The fewest messages received in one round, of `sent`.
        var received: Int
        var rawReceived: Int
        var window: Int
        var payloadBytes: Int
    }

    struct Fanout: Sendable {
        var p50: Double
        var p99: Double
        var max: Double
        var participants: Int
        var samples: Int
        /// The raw libmosquitto floor, measured in the same run, samples alternating (``RawFanout``).
        var rawP50: Double
        var rawP99: Double
        var rawMax: Double
        /// The raw payload: a GroupSync state record's size.
        var payloadBytes: Int
    }

    /// ``RetainlessLateJoinBenchmark``: a join with `--no-retain` participants.
    struct RetainlessLateJoin: Sendable {
        var p50: Double
        var p99: Double
        var participants: Int
        var samples: Int
        /// Messages addressed to the newcomer during one join: each participant present's `$member` and
        /// the catch-up.
        var answersPerJoin: Double
        /// Member records the others publish during one join (none: they answer the newcomer only).
        var memberRecordsPerJoin: Double
        var staleAtReturn: Int
    }

    struct LateJoin: Sendable {
        var p50: Double
        var p99: Double
        var participants: Int
        var samples: Int
        /// `$catchup` messages on `…/to/<newcomer>/…` per join.
        var catchUps: Double
        /// Retained messages the broker replays to the newcomer's subscriptions (member records, state).
        var retainedReplay: Double
        /// Live messages delivered to the newcomer during its join (its own member record, the catch-up).
        var newcomerLive: Double
        /// Messages delivered to the participants already there (the newcomer's member record).
        var others: Double
        /// Joins after which `SharedState.value` did not hold the current value yet.
        var staleAtReturn: Int
        /// The raw libmosquitto floor, measured in the same run, joins alternating (``RawLateJoin``).
        var rawP50: Double
        var rawP99: Double
        /// The raw newcomer's own member record back (before the catch-up, or after it).
        var rawEchoP50: Double
        /// Retained messages the raw newcomer got (should equal ``retainedReplay``).
        var rawRetainedReplay: Double
        /// Sizes of the GroupSync newcomer's member record and of its `$catchup` (of the last join),
        /// which the raw side copies.
        var memberBytes: Int
        var catchUpBytes: Int
        /// Why the raw figures are missing (nil when measured).
        var rawFailure: String?
        var total: Double { retainedReplay + newcomerLive + others }
    }

    struct Convergence: Sendable {
        var p50: Double
        var p99: Double
        var max: Double
        var maxChanges: Int
        var maxRemoteChanges: Int
        var writers: Int
        var bursts: Int
        /// The raw libmosquitto floor, measured the same way in the same run (``RawConvergence``).
        var rawP50: Double
        var rawP99: Double
        var rawMax: Double
        /// The raw payload: a GroupSync state record's size.
        var payloadBytes: Int
    }

    struct Crash: Sendable {
        var p50: Double
        var max: Double
        var samples: Int
        var observers: Int
        var method: String
    }

    /// Broker failover (``FailoverBenchmark``); times in ms, counts summed over the samples.
    struct Failover: Sendable {
        /// SIGKILL of the participant's broker until its presence comes from the next broker.
        var moveP50: Double
        var moveMax: Double
        /// SIGKILL until the peer has the first message sent after the move.
        var deliveryGapP50: Double
        var deliveryGapMax: Double
        /// The longest pause between two consecutive arrivals at the peer, in each sample.
        var longestGapP50: Double
        var longestGapMax: Double
        var samples: Int
        /// Samples in which the peer's `activeParticipants` ever lacked the moving participant.
        var leftSamples: Int
        var sent: Int
        var lost: Int
        var duplicated: Int
        var failedSends: Int
        var sendIntervalMilliseconds: Int
        var keepAlive: Int
    }

    /// Idle sessions (``IdleBenchmark``).
    struct Idle: Sendable {
        var sessions: Int
        var seconds: Double
        var plain: IdleBenchmark.Figures
        var playback: IdleBenchmark.Figures
        var synchronizationInterval: Double
        var longestSynchronizationInterval: Double
    }

    struct Memory: Sendable {
        var participantsBytes: Int?
        /// The participants asked for; ``participantsReached`` those the child process got connected.
        var participants: Int
        var participantsReached: Int?
        var sessionsBytes: Int?
        var sessions: Int
        var sessionsReached: Int?
    }

    /// Coordinated playback (``PlaybackBenchmark``); times in ms.
    struct Playback: Sendable {
        var participants: Int
        var maxSkewSeconds: Double
        var maxDriftPPM: Double
        /// Largest minus smallest expected media time at one real instant (media ms).
        var positionP50: Double
        var positionP99: Double
        var positionMax: Double
        /// Largest minus smallest group time at one real instant: the clocks' share of the position spread.
        var groupTimeP50: Double
        var groupTimeP99: Double
        var positionSamples: Int
        /// Samples left out: taken while a command was on its way and participants held different timelines.
        var transitionSamples: Int
        var positionSeconds: Double
        /// Seeks and rate changes during the position samples.
        var commands: Int
        /// Real-time spread of the start deliveries of one scheduled `play()`.
        var startP50: Double
        var startP99: Double
        var startMax: Double
        var starts: Int
        /// The largest `PlaybackStart.lateness` delivered.
        var maxLateness: Double
        /// Medians: `play()` until the last participant started, and the lead it was scheduled with.
        var commandToStarted: Double
        var lead: Double
        /// `beginSuspension(for: .buffering)` until every participant's timeline is paused: median, max.
        var suspension: Double
        var suspensionMax: Double
        var suspensions: Int
        /// The GroupSync QoS 1 messenger round trip (p50) measured in the same section.
        var roundTrip: Double
        /// A `SharedState.set` by the suspending participant until everyone else has it (median).
        var stateFanout: Double
        /// What a suspension is judged against: a round trip plus the processing of one state record by
        /// everyone (the state fan-out less its one broker trip, half a round trip).
        var suspensionBound: Double { roundTrip + max(stateFanout - roundTrip / 2, 0) }
    }

    /// ``PrivateBenchmark``: each figure in clear and sealed, from the same run.
    struct Private: Sendable {
        /// Writing and reading one message's envelope, µs each.
        struct Envelope: Sendable {
            var clearWrite = 0.0
            var clearRead = 0.0
            var sealedWrite = 0.0
            var sealedRead = 0.0
        }
        var envelope = Envelope()
        /// `send(Data)` QoS 0 one-way latency, p50 (µs).
        var latencyP50 = 0.0
        var sealedLatencyP50 = 0.0
        /// `send(Data)` QoS 0 messages per second (median of the rounds).
        var throughput = 0.0
        var sealedThroughput = 0.0
        /// Late join with `present` participants, p50 (ms).
        var lateJoinP50 = 0.0
        var sealedLateJoinP50 = 0.0
        var present = 0
        /// The journal's fan-out of `journalBytes` to `journalReceivers` (ms, median of the rounds).
        var journal = 0.0
        var sealedJournal = 0.0
        var journalBytes = 0
        var journalReceivers = 0
    }

    /// The shared journal (``JournalBenchmark``); times in ms (medians), sizes in bytes.
    struct Journal: Sendable {
        var receivers: Int
        var chunkSize: Int
        var window: Int
        var fanoutBytes: Int
        var rounds: Int
        /// The start of `add` until the last receiver's `load` returned.
        var fanout = Double.nan
        /// The raw libmosquitto floor (``RawJournal``): the first publish until the last subscriber had every byte.
        var rawFanout = Double.nan
        /// `add` alone; the start of `add` until the last receiver had the attachment listed; one
        /// receiver's `load` from its listing (median over every receiver of every round).
        var add = Double.nan
        var listed = Double.nan
        var load = Double.nan
        /// CPU time of the bench process (all participants, or all raw clients) during a round.
        var cpu = Double.nan
        var rawCPU = Double.nan
        var lateJoinerBytes: Int
        var lateJoinerSamples: Int
        /// A late joiner's `join()` until its load returned; its load alone.
        var lateJoiner = Double.nan
        var lateJoinerLoad = Double.nan
        var receiverBytes: Int
        /// The receiver process loading `receiverBytes` to disk, and loading a tenth of that.
        var receiver = JournalReceiver.Measurement.none
        var receiverSmall = JournalReceiver.Measurement.none
        var windowBytes: Int { window * chunkSize }
        /// MiB/s each receiver got: the attachment's size over the fan-out time.
        var fanoutRate: Double { Double(fanoutBytes) / 1_048_576 / (fanout / 1_000) }
        var rawFanoutRate: Double { Double(fanoutBytes) / 1_048_576 / (rawFanout / 1_000) }
    }

    struct Environment: Sendable {
        var mode: String
        var date: String
        var cpu: String
        var cores: Int
        var mosquitto: String
        var libmosquitto: String
        var swift: String
        var broker: String
        var fileLimit: Int
        var loadBefore: String
        var loadAfter = ""
    }

    var environment: Environment
    var latency: [Int: Latency] = [:]
    /// The same with the responder in a process of its own (``ProcessPingPong``).
    var processLatency: [Int: Latency] = [:]
    var throughput: [Int: Throughput] = [:]
    var fanout: Fanout?
    var lateJoin: LateJoin?
    var retainlessLateJoin: RetainlessLateJoin?
    /// ``RetainlessJournalBenchmark``: the journal's fan-out served by the owner.
    var retainlessJournal: JournalBenchmark.Fanout?
    var `private`: Private?
    var convergence: Convergence?
    var crash: Crash?
    var failover: Failover?
    var memory: Memory?
    var idle: Idle?
    var playback: Playback?
    var journal: Journal?
    var failures: [String] = []
    var notes: [String] = []
}
