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

    struct Memory: Sendable {
        var participantsBytes: Int?
        /// The participants asked for; ``participantsReached`` those the child process got connected.
        var participants: Int
        var participantsReached: Int?
        var sessionsBytes: Int?
        var sessions: Int
        var sessionsReached: Int?
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
    var convergence: Convergence?
    var crash: Crash?
    var memory: Memory?
    var failures: [String] = []
    var notes: [String] = []
}
