import BrokerSupport
import Foundation
import MQTT
import Testing

/// `groupsync-bench` runs end to end and prints the JSON its users (and BENCHMARKS.md) rely on. Not a
/// timed test: it asserts nothing about speed, only that every documented key is there and a number.
@Suite(.timeLimit(.minutes(timeLimitMinutes(3)))) struct BenchmarkSmokeTests {
    /// Every key BENCHMARKS.md documents, as paths into the JSON object.
    static let requiredKeys =
        [
            "latency.qos0.p50_us", "latency.qos0.p99_us", "latency.qos0.raw_p50_us", "latency.qos0.raw_p99_us",
            "latency.qos1.p50_us", "latency.qos1.p99_us", "latency.qos1.raw_p50_us", "latency.qos1.raw_p99_us",
            "latency.qos1.raw_acked_p50_us", "latency.qos1.raw_acked_p99_us",
            "latency_processes.qos0.p50_us", "latency_processes.qos0.raw_p50_us",
            "latency_processes.qos1.p50_us", "latency_processes.qos1.raw_p50_us",
            "throughput.qos0.msgs_per_s", "throughput.qos0.raw_msgs_per_s", "throughput.qos0.round_ratio_median",
            "throughput.qos1.msgs_per_s", "throughput.qos1.raw_msgs_per_s", "throughput.qos1.round_ratio_median",
            "fanout.p50_ms", "fanout.p99_ms", "fanout.raw_p50_ms", "fanout.raw_p99_ms",
            "late_join.p50_ms", "late_join.messages_per_join", "late_join.raw_p50_ms", "late_join.raw_p99_ms",
            "late_join_no_retain.p50_ms", "late_join_no_retain.answers_per_join", "late_join_no_retain.member_records_per_join",
            "private.qos0_p50_us", "private.clear_qos0_p50_us", "private.qos0_msgs_per_s", "private.clear_qos0_msgs_per_s",
            "private.late_join_p50_ms", "private.clear_late_join_p50_ms", "private.journal_ms", "private.clear_journal_ms",
            "convergence.ms", "convergence.max_changes", "convergence.raw_ms", "convergence.raw_p99_ms",
            "crash_detection_s", "idle.wakeups_per_s", "idle.cpu_s_per_min", "idle.playback_wakeups_per_s",
            "failover.move_p50_ms", "failover.move_max_ms", "failover.delivery_gap_p50_ms", "failover.delivery_gap_max_ms",
            "failover.longest_gap_p50_ms", "failover.longest_gap_max_ms", "failover.left_samples", "failover.lost",
            "failover.duplicated",
            "memory.participants_1000_mb", "memory.sessions_1000_mb",
            "playback.position_spread.p50_ms", "playback.position_spread.p99_ms", "playback.start_spread.p50_ms",
            "playback.start_spread.p99_ms", "playback.command_to_started_ms", "playback.lead_ms", "playback.suspension_ms",
            "playback.round_trip_ms",
            "journal.fanout_10mib_ms", "journal.raw_fanout_10mib_ms", "journal.fanout_mb_per_s", "journal.raw_fanout_mb_per_s",
            "journal.fanout_add_ms", "journal.late_joiner_10mib_ms", "journal.late_joiner_load_ms",
            "journal.receiver_peak_mb", "journal.receiver_baseline_mb", "journal.receiver_growth_mb", "journal.window_mb",
        ] + ratioKeys

    /// Every figure with a raw libmosquitto reference has its ratio to it (GroupSync / raw).
    static let ratioKeys = [
        "latency.qos0.p50_ratio", "latency.qos0.p99_ratio", "latency.qos1.p50_ratio", "latency.qos1.p99_ratio",
        "latency.qos1.raw_acked_p50_ratio", "latency.qos1.raw_acked_p99_ratio",
        "latency_processes.qos0.p50_ratio", "latency_processes.qos0.p99_ratio",
        "latency_processes.qos1.p50_ratio", "latency_processes.qos1.p99_ratio",
        "throughput.qos0.ratio", "throughput.qos1.ratio",
        "fanout.p50_ratio", "fanout.p99_ratio", "fanout.max_ratio",
        "late_join.p50_ratio", "late_join.p99_ratio",
        "convergence.ratio", "convergence.p99_ratio", "convergence.max_ratio",
        "journal.fanout_ratio",
    ]

    /// The bench built next to the test bundle.
    static let benchExecutable = builtProduct("groupsync-bench")

    /// Any JSON value; numbers stay apart from booleans (JSONDecoder does not read a number as Bool).
    enum JSONTree: Decodable {
        case number(Double), string(String), bool(Bool), null, array([JSONTree]), object([String: JSONTree])

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if container.decodeNil() {
                self = .null
            } else if let value = try? container.decode(Bool.self) {
                self = .bool(value)
            } else if let value = try? container.decode(Double.self) {
                self = .number(value)
            } else if let value = try? container.decode(String.self) {
                self = .string(value)
            } else if let value = try? container.decode([JSONTree].self) {
                self = .array(value)
            } else {
                self = .object(try container.decode([String: JSONTree].self))
            }
        }

        func value(at path: String) -> JSONTree? {
            var node: JSONTree? = self
            for key in path.split(separator: ".") {
                guard case let .object(members)? = node else { return nil }
                node = members[String(key)]
            }
            return node
        }
    }

    @Test func quickJSONRunHasEveryKeyAsANumber() async throws {
        let executable = try #require(Self.benchExecutable, "groupsync-bench is not built next to the test bundle")
        // Standard output and error each read to their end by a thread of ChildProcess's.
        let output = LockedValue<[UInt8]>([]), errorOutput = LockedValue<[UInt8]>([])
        let process = try ChildProcess(
            executable, ["--quick", "--json"],
            output: .handler { chunk in output.withLock { $0 += chunk } },
            errors: .handler { chunk in errorOutput.withLock { $0 += chunk } })
        let termination = await process.wait(until: .after(timeBound(.seconds(180))))  // the suite's time limit
        let data = Data(output.withLock { $0 })
        let errors = String(decoding: errorOutput.withLock { $0 }, as: UTF8.self)
        let text = String(decoding: data, as: UTF8.self)
        #expect(
            termination == .exited(0),
            "groupsync-bench --quick --json ended with \(termination.map { "\($0)" } ?? "no exit in time"); stderr:\n\(errors)")

        let json = try JSONDecoder().decode(JSONTree.self, from: data)
        guard case .object = json else {
            Issue.record("standard output is not one JSON object:\n\(text)")
            return
        }
        for key in Self.requiredKeys {
            guard case .number(let value)? = json.value(at: key) else {
                Issue.record("\(key) is missing or not a number (\(String(describing: json.value(at: key))))")
                continue
            }
            #expect(value.isFinite, "\(key) = \(value)")
        }
    }
}
