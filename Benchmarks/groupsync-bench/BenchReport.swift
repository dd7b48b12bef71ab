import Foundation

/// Renders ``BenchResults``: the table with targets (PASS/MISS), or one JSON object.
struct BenchReport {
    let results: BenchResults

    struct Row {
        var metric: String
        var groupSync: String
        var raw = ""
        var ratio = ""
        var target = ""
        var verdict: Bool?
    }

    // MARK: - Targets

    /// The bounds the bench judges against (BENCHMARKS.md, "Speed to hold"): ratios to raw libmosquitto
    /// measured in the same run, floors to hold rather than targets to chase.
    enum Bound {
        static let qos0P50 = 1.25, qos0P99 = 1.5
        /// QoS 1 p50 against raw libmosquitto awaiting each PUBACK, as a reliable `send` does.
        static let qos1AcknowledgedP50 = 1.3
        static let throughput = 0.75
        /// What the Codable messenger may cost over `send(Data)` beyond Foundation's encode + decode (µs).
        static let codableOverCodecMicroseconds = 5.0
        /// Fan-out, late join and convergence p50, each against its raw floor.
        static let floorP50 = 1.35
        static let crashSeconds = 1.0
        static let memoryPerParticipantKiB = 380.0
        /// Playback goals (issue 21), absolute: position spread p99 on loopback, start spread p99 (ms).
        static let positionSpreadP99Ms = 1.0
        static let startSpreadP99Ms = 3.0
        /// Journal goals (issue 23): the fan-out against raw, whose receivers make one SHA-256 pass over what
        /// they receive (a journal load hashes each byte once); a receiver's memory growth while loading to
        /// disk, in windows (`window × chunkSize`), whatever the attachment's size.
        static let journalFanout = 2.0
        static let journalGrowthWindows = 8.0
    }

    /// The GroupSync QoS 1 messenger round trip of this run (twice the one-way p50), in ms: the scale to
    /// read convergence against (JSON `convergence.round_trip_ms`).
    var roundTripMilliseconds: Double? {
        results.latency[1].map { 2 * $0.p50 / 1_000 }
    }

    var rows: [Row] {
        var rows: [Row] = []
        for qos in [0, 1] {
            guard let latency = results.latency[qos] else { continue }
            let p50 = latency.p50 / latency.rawP50, p99 = latency.p99 / latency.rawP99
            // QoS 0 is judged against plain raw; QoS 1 against raw awaiting each PUBACK (the reference rows).
            let judged = qos == 0
            rows.append(
                Row(
                    metric: "latency QoS \(qos) p50, one-way (µs)", groupSync: format(latency.p50), raw: format(latency.rawP50),
                    ratio: ratio(p50), target: judged ? "≤ \(Bound.qos0P50)× raw" : "", verdict: judged ? p50 <= Bound.qos0P50 : nil))
            rows.append(
                Row(
                    metric: "latency QoS \(qos) p99, one-way (µs)", groupSync: format(latency.p99), raw: format(latency.rawP99),
                    ratio: ratio(p99), target: judged ? "≤ \(Bound.qos0P99)× raw" : "", verdict: judged ? p99 <= Bound.qos0P99 : nil))
            if let data = latency.data, let codec = latency.codecMicroseconds, let extra = latency.codableOverData {
                rows += referenceRows("send(Data), QoS \(qos)", data, (latency.rawP50, latency.rawP99))
                rows.append(
                    Row(
                        metric: "Codable over Data, QoS \(qos) p50 (µs)", groupSync: format(extra), raw: format(codec),
                        target: "≤ encode+decode (raw col.) + \(format(Bound.codableOverCodecMicroseconds, digits: 0)) µs",
                        verdict: extra <= codec + Bound.codableOverCodecMicroseconds))
            }
            if let acknowledged = latency.rawAcknowledged {
                var reference = referenceRows("reference: raw awaiting PUBACK", (latency.p50, latency.p99), acknowledged)
                let acknowledgedP50 = latency.p50 / acknowledged.p50
                reference[0].target = "≤ \(Bound.qos1AcknowledgedP50)× raw awaiting PUBACK"
                reference[0].verdict = acknowledgedP50 <= Bound.qos1AcknowledgedP50
                rows += reference
            }
        }
        for qos in [0, 1] {
            guard let latency = results.processLatency[qos] else { continue }
            rows += referenceRows(
                "responder in its own process, QoS \(qos)", (latency.p50, latency.p99), (latency.rawP50, latency.rawP99))
        }
        for qos in [0, 1] {
            guard let throughput = results.throughput[qos] else { continue }
            let share = throughput.rate / throughput.rawRate
            rows.append(
                Row(
                    metric: "throughput QoS \(qos), 1→1 (msg/s)", groupSync: format(throughput.rate, digits: 0),
                    raw: format(throughput.rawRate, digits: 0), ratio: ratio(share), target: "≥ \(Bound.throughput)× raw",
                    verdict: share >= Bound.throughput))
            rows.append(
                Row(
                    metric: "throughput QoS \(qos), send(Data) (msg/s)", groupSync: format(throughput.dataRate, digits: 0),
                    raw: format(throughput.rawRate, digits: 0), ratio: ratio(throughput.dataRate / throughput.rawRate)))
        }
        if let fanout = results.fanout {
            rows += percentileRows(
                "fan-out to \(fanout.participants)", (fanout.p50, fanout.p99), raw: (fanout.rawP50, fanout.rawP99))
        }
        if let late = results.lateJoin {
            rows += percentileRows(
                "late join, \(late.participants) present", (late.p50, late.p99), raw: (late.rawP50, late.rawP99))
            rows.append(
                Row(
                    metric: "late join: catch-ups per join", groupSync: format(late.catchUps), target: "1, whatever N (O(1))",
                    verdict: late.catchUps <= 1.0001 && late.catchUps >= 0.9999))
            let perOther = late.others / Double(late.participants)
            rows.append(
                Row(
                    metric: "late join: msgs to each present participant", groupSync: format(perOther), target: "≤ 1 (O(1))",
                    verdict: perOther <= 1.0001))
            rows.append(Row(metric: "late join: MQTT messages per join, all", groupSync: format(late.total, digits: 1)))
        }
        if let late = results.retainlessLateJoin {
            let retained = results.lateJoin.map { "retained: \(format($0.p50)) ms" } ?? ""
            rows.append(
                Row(metric: "late join, \(late.participants) present, --no-retain: p50 (ms)", groupSync: format(late.p50), target: retained)
            )
            rows.append(Row(metric: "late join --no-retain: p99 (ms)", groupSync: format(late.p99)))
            rows.append(
                Row(
                    metric: "late join --no-retain: msgs to the newcomer", groupSync: format(late.answersPerJoin, digits: 1),
                    target: "a $member per participant + catch-up"))
            rows.append(
                Row(
                    metric: "late join --no-retain: member records of others", groupSync: format(late.memberRecordsPerJoin, digits: 1),
                    target: "0 (answers go to the newcomer only)"))
        }
        if let convergence = results.convergence {
            let p50 = convergence.p50 / convergence.rawP50
            rows.append(
                Row(
                    metric: "convergence, \(convergence.writers) writers: p50 (ms)", groupSync: format(convergence.p50),
                    raw: format(convergence.rawP50), ratio: ratio(p50), target: "≤ \(Bound.floorP50)× raw",
                    verdict: p50 <= Bound.floorP50))
            rows.append(
                Row(
                    metric: "convergence: p99 (ms)", groupSync: format(convergence.p99), raw: format(convergence.rawP99),
                    ratio: ratio(convergence.p99 / convergence.rawP99)))
            rows.append(
                Row(
                    metric: "convergence: max visible changes", groupSync: String(convergence.maxChanges), target: "≤ 1",
                    verdict: convergence.maxChanges <= 1))
            rows.append(Row(metric: "convergence: max changes besides own write", groupSync: String(convergence.maxRemoteChanges)))
        }
        if let crash = results.crash {
            rows.append(
                Row(
                    metric: "crash detection, p50 of \(crash.samples) (s)", groupSync: format(crash.p50, digits: 3),
                    target: "≤ \(format(Bound.crashSeconds, digits: 0)) s (max \(format(crash.max, digits: 3)) s)",
                    verdict: crash.max <= Bound.crashSeconds))
        }
        if let idle = results.idle {
            rows += [
                Row(
                    metric: "idle, \(idle.sessions) sessions: wake-ups/s", groupSync: format(idle.plain.wakeupsPerSecond),
                    target: "CPU \(format(idle.plain.cpuSecondsPerMinute, digits: 2)) s/min"),
                Row(
                    metric: "idle, with playback coordinators: wake-ups/s", groupSync: format(idle.playback.wakeupsPerSecond),
                    target: "CPU \(format(idle.playback.cpuSecondsPerMinute, digits: 2)) s/min"),
            ]
        }
        if let failover = results.failover {
            rows += [
                Row(
                    metric: "failover: move, p50 of \(failover.samples) (ms)", groupSync: format(failover.moveP50),
                    target: "< keepalive, \(failover.keepAlive) s: peers keep it (max \(format(failover.moveMax)) ms)",
                    verdict: failover.moveMax < Double(failover.keepAlive) * 1_000),
                Row(
                    metric: "failover: delivery gap at a peer, p50 (ms)", groupSync: format(failover.deliveryGapP50),
                    target: "max \(format(failover.deliveryGapMax)) ms"),
                Row(
                    metric: "failover: longest pause at a peer, p50 (ms)", groupSync: format(failover.longestGapP50),
                    target: "max \(format(failover.longestGapMax)) ms"),
                Row(
                    metric: "failover: samples where a peer saw it leave", groupSync: "\(failover.leftSamples) of \(failover.samples)",
                    target: "0", verdict: failover.leftSamples == 0),
                Row(
                    metric: "failover: reliable msgs lost / duplicated", groupSync: "\(failover.lost) / \(failover.duplicated)",
                    target: "0 / 0", verdict: failover.lost == 0 && failover.duplicated == 0),
            ]
        }
        if let memory = results.memory {
            if let bytes = memory.participantsBytes, let reached = memory.participantsReached {
                let each = Double(bytes) / Double(reached)
                if reached < memory.participants {
                    rows.append(
                        Row(
                            metric: "memory: \(memory.participants) participants in one process", groupSync: "\(reached) ok",
                            target: "all \(memory.participants) connect", verdict: false))
                    rows.append(
                        Row(
                            metric: "memory: \(reached) participants, 1 session (MiB)", groupSync: format(mebibytes(bytes), digits: 1),
                            target: memoryTarget(each), verdict: memoryVerdict(each, of: memory.participants)))
                    rows.append(
                        Row(
                            metric: "memory: \(memory.participants) participants, extrapolated (MiB)",
                            groupSync: format(mebibytes(Int(each * Double(memory.participants))), digits: 1)))
                } else {
                    rows.append(
                        Row(
                            metric: "memory: \(memory.participants) participants, 1 session (MiB)",
                            groupSync: format(mebibytes(bytes), digits: 1),
                            target: memoryTarget(each), verdict: memoryVerdict(each, of: memory.participants)))
                }
            }
            if let bytes = memory.sessionsBytes, let reached = memory.sessionsReached {
                rows.append(
                    Row(
                        metric: "memory: 1 participant, \(reached) sessions (MiB)", groupSync: format(mebibytes(bytes), digits: 1),
                        target: "\(format(Double(bytes) / 1_024 / Double(reached), digits: 0)) KiB each"))
            }
        }
        if let playback = results.playback {
            rows.append(
                Row(
                    metric: "playback: position spread p50 (ms)", groupSync: format(playback.positionP50, digits: 3)))
            rows.append(
                Row(
                    metric: "playback: position spread p99 (ms)", groupSync: format(playback.positionP99, digits: 3),
                    target: "≤ \(format(Bound.positionSpreadP99Ms, digits: 0)) ms",
                    verdict: playback.positionP99 <= Bound.positionSpreadP99Ms))
            rows.append(Row(metric: "playback: start spread p50 (ms)", groupSync: format(playback.startP50, digits: 3)))
            rows.append(
                Row(
                    metric: "playback: start spread p99 (ms)", groupSync: format(playback.startP99, digits: 3),
                    target: "≤ \(format(Bound.startSpreadP99Ms, digits: 0)) ms", verdict: playback.startP99 <= Bound.startSpreadP99Ms))
            rows.append(
                Row(
                    metric: "playback: play() until all started (ms)", groupSync: format(playback.commandToStarted),
                    target: "lead \(format(playback.lead)) ms"))
            rows.append(
                Row(
                    metric: "playback: suspension until all paused (ms)", groupSync: format(playback.suspension),
                    target: "≤ round trip \(format(playback.roundTrip)) + processing = \(format(playback.suspensionBound)) ms",
                    verdict: playback.suspension <= playback.suspensionBound))
        }
        if let journal = results.journal {
            rows += journalRows(journal)
        }
        if let fanout = results.retainlessJournal, let journal = results.journal {
            rows.append(
                Row(
                    metric:
                        "journal --no-retain: \(mebibytes(journal.fanoutBytes, digits: 0)) MiB to \(journal.receivers), all loaded (ms)",
                    groupSync: format(fanout.groupSync), raw: format(fanout.raw), ratio: ratio(fanout.groupSync / fanout.raw),
                    target: "retained: \(format(journal.fanout)) ms; served by the owner"))
        }
        if let sealed = results.private {
            // The "raw" column holds the figure in clear: the ratio is sealed / in clear.
            func row(_ metric: String, _ clear: Double, _ value: Double, bound: Double, higherIsBetter: Bool = false) -> Row {
                let cost = higherIsBetter ? clear / value : value / clear
                return Row(
                    metric: metric, groupSync: format(value), raw: format(clear), ratio: ratio(value / clear),
                    target: "cost ≤ \(format(bound))× in clear", verdict: cost <= bound)
            }
            rows.append(
                Row(
                    metric: "private: write + read an envelope (µs), sealed vs clear",
                    groupSync: "\(format(sealed.envelope.sealedWrite, digits: 2)) + \(format(sealed.envelope.sealedRead, digits: 2))",
                    raw: "\(format(sealed.envelope.clearWrite, digits: 2)) + \(format(sealed.envelope.clearRead, digits: 2))"))
            rows.append(row("private: send(Data) QoS 0 p50 (µs), sealed vs clear", sealed.latencyP50, sealed.sealedLatencyP50, bound: 1.10))
            rows.append(
                row(
                    "private: send(Data) QoS 0 throughput (msg/s)", sealed.throughput, sealed.sealedThroughput, bound: 1.10,
                    higherIsBetter: true))
            rows.append(
                row("private: late join, \(sealed.present) present, p50 (ms)", sealed.lateJoinP50, sealed.sealedLateJoinP50, bound: 1.10))
            rows.append(
                row(
                    "private: journal, \(mebibytes(sealed.journalBytes, digits: 0)) MiB to \(sealed.journalReceivers) (ms)", sealed.journal,
                    sealed.sealedJournal, bound: 1.15))
        }
        return rows
    }

    private func journalRows(_ journal: BenchResults.Journal) -> [Row] {
        let fanout = journal.fanout / journal.rawFanout
        let (receiver, small) = (journal.receiver, journal.receiverSmall)
        // Bounded by the window, not by the size: ten times the bytes may cost at most one window more.
        let growthBound = small.growthBytes + journal.windowBytes
        return [
            Row(
                metric: "journal: \(mebibytes(journal.fanoutBytes, digits: 0)) MiB to \(journal.receivers), all loaded (ms)",
                groupSync: format(journal.fanout), raw: format(journal.rawFanout), ratio: ratio(fanout),
                target: "≤ \(format(Bound.journalFanout, digits: 0))× raw (raw hashes once)", verdict: fanout <= Bound.journalFanout),
            Row(
                metric: "journal: of which add (ms)", groupSync: format(journal.add),
                target: "listed at all \(format(journal.listed)) ms, a load \(format(journal.load)) ms"),
            Row(
                metric: "journal: to each receiver (MiB/s)", groupSync: format(journal.fanoutRate), raw: format(journal.rawFanoutRate),
                ratio: ratio(journal.fanoutRate / journal.rawFanoutRate)),
            Row(
                metric: "journal: late joiner, join + load \(mebibytes(journal.lateJoinerBytes, digits: 0)) MiB (ms)",
                groupSync: format(journal.lateJoiner), target: "load alone \(format(journal.lateJoinerLoad)) ms"),
            Row(
                metric: "journal: receiver growth, \(mebibytes(journal.receiverBytes, digits: 0)) MiB to disk (MiB)",
                groupSync: mebibytes(receiver.growthBytes, digits: 1),
                target:
                    "≤ \(mebibytes(small.growthBytes, digits: 1)) at \(mebibytes(journal.receiverBytes / 10, digits: 0)) MiB + a window (\(mebibytes(journal.windowBytes, digits: 0)) MiB)",
                verdict: receiver.growthBytes <= growthBound),
        ]
    }

    // MARK: - Table

    func table() -> String {
        let environment = results.environment
        var lines: [String] = []
        lines.append("GroupSync benchmark (\(environment.mode)) — \(environment.date)")
        lines.append(
            "\(environment.cpu), \(environment.cores) cores · mosquitto \(environment.mosquitto) · libmosquitto \(environment.libmosquitto) · Swift \(environment.swift)"
        )
        lines.append(
            "broker: \(environment.broker) · RLIMIT_NOFILE \(environment.fileLimit) · load average \(environment.loadBefore) before, \(environment.loadAfter) after"
        )
        lines.append("")
        let header = Row(metric: "metric", groupSync: "GroupSync", raw: "raw libmosq", ratio: "ratio", target: "target", verdict: nil)
        let all = [header] + rows
        let widths = [
            all.map(\.metric.count).max()!, all.map(\.groupSync.count).max()!, all.map(\.raw.count).max()!,
            all.map(\.ratio.count).max()!, all.map(\.target.count).max()!,
        ]
        func render(_ row: Row, verdict: String) -> String {
            [
                row.metric.padding(toLength: widths[0], withPad: " ", startingAt: 0),
                String(repeating: " ", count: widths[1] - row.groupSync.count) + row.groupSync,
                String(repeating: " ", count: widths[2] - row.raw.count) + row.raw,
                String(repeating: " ", count: widths[3] - row.ratio.count) + row.ratio,
                row.target.padding(toLength: widths[4], withPad: " ", startingAt: 0),
                verdict,
            ].joined(separator: "  ")
        }
        lines.append(render(header, verdict: "result"))
        lines.append(widths.map { String(repeating: "-", count: $0) }.joined(separator: "  ") + "  ------")
        for row in rows {
            lines.append(render(row, verdict: row.verdict.map { $0 ? "PASS" : "MISS" } ?? ""))
        }
        lines.append("")
        lines += details().map { "  " + $0 }
        if !results.failures.isEmpty {
            lines.append("")
            lines += results.failures.map { "FAILED: \($0)" }
        }
        return lines.joined(separator: "\n")
    }

    /// How each figure was obtained, under the table.
    func details() -> [String] {
        var lines: [String] = []
        for qos in [0, 1] {
            guard let latency = results.latency[qos] else { continue }
            lines.append(
                "latency QoS \(qos): \(latency.samples) ping-pongs per side, \(latency.payloadBytes)-byte payloads on both (the GroupSync envelope); "
                    + "p50 ratio of each of the \(latency.roundRatios.rounds) rounds alone: \(spread(latency.roundRatios))")
            if latency.rawAcknowledged != nil {
                lines.append(
                    "latency QoS 1 reference: raw libmosquitto whose every publish also awaits its PUBACK, as GroupSync's send does (the QoS 1 p50 bound is against it)"
                )
            }
        }
        for qos in [0, 1] {
            guard let latency = results.processLatency[qos] else { continue }
            lines.append(
                "latency QoS \(qos), responder in its own process (this binary, `--responder`; GroupSync and raw alike): \(latency.samples) ping-pongs per side, "
                    + "\(latency.payloadBytes)-byte payloads; p50 ratio of each of the \(latency.roundRatios.rounds) rounds alone: \(spread(latency.roundRatios))"
            )
        }
        for qos in [0, 1] {
            guard let throughput = results.throughput[qos] else { continue }
            lines.append(
                "throughput QoS \(qos): \(throughput.roundRatios.rounds) rounds of \(throughput.sent) messages of \(throughput.payloadBytes) bytes per side, window \(throughput.window) in flight; "
                    + "fewest received in a round \(throughput.received) (GroupSync), \(throughput.rawReceived) (raw); "
                    + "rate ratio of each round alone: \(spread(throughput.roundRatios))")
        }
        if let fanout = results.fanout {
            lines.append(
                "fan-out: \(fanout.samples) changes, \(fanout.participants) coordinators/connections in one session; max \(format(fanout.max)) ms; "
                    + "raw: \(fanout.participants) libmosquitto clients, each subscribed (QoS 1) to one topic as long as the state topic "
                    + "(the publisher too); one publishes a retained QoS 1 message of \(fanout.payloadBytes) bytes (a state record's size); "
                    + "timed from the publish call until the last of the other \(fanout.participants - 1) clients' callbacks has it (no "
                    + "hand-over to an app thread); samples alternate with GroupSync's; max \(format(fanout.rawMax)) ms")
        }
        if let late = results.lateJoin {
            lines.append(
                "late join: \(late.samples) fresh participants; per join the newcomer got \(format(late.retainedReplay, digits: 0)) retained + "
                    + "\(format(late.newcomerLive, digits: 1)) live (own member record, catch-up), the \(late.participants) present got "
                    + "\(format(late.others, digits: 1)) in all; \(late.staleAtReturn) join(s) returned before holding the current value")
            if let failure = late.rawFailure {
                lines.append("late join, raw: not measured: \(failure)")
            } else {
                lines.append(
                    "late join, raw: \(late.participants) libmosquitto clients subscribed (QoS 1) to member/+, holding copies of the "
                        + "\(format(late.retainedReplay, digits: 0)) retained records; per join a fresh client subscribes (member/+, state/+/+, "
                        + "to/<me>/+; all/+ no-local) and publishes its \(late.memberBytes)-byte member record without awaiting the "
                        + "SUBACK, the responder GroupSync picked answers from its callback with \(late.catchUpBytes) bytes (a $catchup's "
                        + "size); timed until the newcomer's callback has its record back and the catch-up (no hand-over to an app "
                        + "thread); own record back at p50 \(format(late.rawEchoP50)) ms; it got \(format(late.rawRetainedReplay, digits: 1)) "
                        + "retained; joins alternate with GroupSync's")
            }
        }
        if let convergence = results.convergence {
            lines.append(
                "convergence: \(convergence.bursts) bursts of \(convergence.writers) simultaneous writes; max \(format(convergence.max)) ms; "
                    + "raw: \(convergence.writers) libmosquitto clients, each subscribed (QoS 1) to all \(convergence.writers) topics (own "
                    + "included), publish one retained QoS 1 message of \(convergence.payloadBytes) bytes (a state record's size) each "
                    + "from \(convergence.writers) threads released together; timed from the last publish call until every client's "
                    + "callback has all \(convergence.writers) (no hand-over to an app thread); bursts alternate with GroupSync's; "
                    + "max \(format(convergence.rawMax)) ms")
        }
        if let crash = results.crash {
            lines.append("crash: \(crash.method); \(crash.observers) observers")
        }
        if let failover = results.failover {
            lines.append(
                "failover: \(failover.samples) samples, each on a fresh pair of mosquittos of its own (whatever --broker says) bridged "
                    + "both ways (groupsync/#, QoS 1); a participant given both URLs, the killed broker first, sends a reliable "
                    + "message to everyone every \(failover.sendIntervalMilliseconds) ms (each send awaited) to a peer on the second; "
                    + "move: SIGKILL of the first broker until the participant's presence, published again once it is connected, "
                    + "reaches a plain subscriber on the second; delivery gap: SIGKILL until the peer's messages(of:) has the first "
                    + "message sent after the move; \(failover.sent) messages sent, \(failover.failedSends) sends failed")
        }
        if let playback = results.playback {
            lines.append(
                "playback: \(playback.participants) participants, each with its own connection and a clock off by up to "
                    + "±\(format(playback.maxSkewSeconds, digits: 0)) s and drifting by up to ±\(format(playback.maxDriftPPM, digits: 0)) ppm; "
                    + "position spread: \(playback.positionSamples) samples 10 ms apart over \(format(playback.positionSeconds, digits: 0)) s "
                    + "of playback with \(playback.commands) seeks and rate changes, max \(format(playback.positionMax, digits: 3)) ms, "
                    + "\(playback.transitionSamples) more taken while a command was on its way (participants on different timelines) left out; "
                    + "start spread: \(playback.starts) scheduled play()s, max \(format(playback.startMax, digits: 3)) ms, largest lateness "
                    + "\(format(playback.maxLateness, digits: 3)) ms; suspension: median of \(playback.suspensions), max "
                    + "\(format(playback.suspensionMax)) ms; round trip: GroupSync messenger QoS 1, p50; processing: a SharedState.set "
                    + "by the suspending participant until the others' valueUpdates() have it, \(format(playback.stateFanout)) ms (median), "
                    + "less half a round trip; group-time spread (the clocks alone, without the rate) p50 "
                    + "\(format(playback.groupTimeP50, digits: 3)) ms, p99 \(format(playback.groupTimeP99, digits: 3)) ms")
        }
        if let journal = results.journal {
            lines.append(
                "journal: \(journal.receivers) receivers and an owner, each a coordinator with its own connection; \(journal.rounds) rounds "
                    + "of \(journal.fanoutBytes) random bytes (a new attachment each, removed after), chunks of \(journal.chunkSize) bytes, "
                    + "window \(journal.window); timed from the start of add until the last receiver's load (into memory) returned; "
                    + "raw: one libmosquitto publisher, the same bytes in the same chunks at QoS 1 (\(journal.window) in flight) to "
                    + "\(journal.receivers) subscribers (QoS 1, not retained), each checking every chunk's SHA-256, until the last callback "
                    + "had verified every byte; rounds alternate; "
                    + "late joiner: \(journal.lateJoinerSamples) fresh owners each add \(journal.lateJoinerBytes) bytes, leave and close, "
                    + "then a fresh participant joins and loads it (connect not timed); CPU of the bench process per round "
                    + "\(format(journal.cpu)) ms (GroupSync), \(format(journal.rawCPU)) ms (raw)")
            for (size, child) in [(journal.receiverBytes / 10, journal.receiverSmall), (journal.receiverBytes, journal.receiver)] {
                lines.append(
                    "journal receiver: a child process (this binary, `--journal-child`) loads \(size) bytes to a file in "
                        + "\(format(child.loadMilliseconds)) ms; resident \(mebibytes(child.baselineBytes, digits: 1)) MiB once joined, "
                        + "peak \(mebibytes(child.peakBytes, digits: 1)) MiB"
                        + (child.peakReset ? " (peak reset after the baseline)" : " (peak not reset: includes joining)"))
            }
        }
        lines += results.notes
        return lines
    }

    // MARK: - JSON

    func json() -> String {
        var root: [String: Any] = [:]
        let environment = results.environment
        root["mode"] = environment.mode
        root["environment"] =
            [
                "date": environment.date, "cpu": environment.cpu, "cores": environment.cores, "mosquitto": environment.mosquitto,
                "libmosquitto": environment.libmosquitto, "swift": environment.swift, "broker": environment.broker,
                "file_limit": environment.fileLimit, "load_before": environment.loadBefore, "load_after": environment.loadAfter,
            ] as [String: Any]
        var latency: [String: Any] = [:]
        for (qos, value) in results.latency {
            var entry: [String: Any] = [
                "p50_us": number(value.p50), "p99_us": number(value.p99), "raw_p50_us": number(value.rawP50),
                "raw_p99_us": number(value.rawP99), "p50_ratio": number(value.p50 / value.rawP50),
                "p99_ratio": number(value.p99 / value.rawP99), "payload_bytes": value.payloadBytes, "samples": value.samples,
            ]
            entry["round_p50_ratio_median"] = number(value.roundRatios.median)
            entry["round_p50_ratio_q1"] = number(value.roundRatios.q1)
            entry["round_p50_ratio_q3"] = number(value.roundRatios.q3)
            entry["rounds"] = value.roundRatios.rounds
            if let data = value.data, let codec = value.codecMicroseconds, let extra = value.codableOverData {
                entry["data_p50_us"] = number(data.p50)
                entry["data_p99_us"] = number(data.p99)
                entry["codec_us"] = number(codec)
                entry["codable_over_data_p50_us"] = number(extra)
            }
            if let acknowledged = value.rawAcknowledged {
                entry["raw_acked_p50_us"] = number(acknowledged.p50)
                entry["raw_acked_p99_us"] = number(acknowledged.p99)
                entry["raw_acked_p50_ratio"] = number(value.p50 / acknowledged.p50)
                entry["raw_acked_p99_ratio"] = number(value.p99 / acknowledged.p99)
            }
            latency["qos\(qos)"] = entry
        }
        if !latency.isEmpty { root["latency"] = latency }
        var processLatency: [String: Any] = [:]
        for (qos, value) in results.processLatency {
            processLatency["qos\(qos)"] =
                [
                    "p50_us": number(value.p50), "p99_us": number(value.p99), "raw_p50_us": number(value.rawP50),
                    "raw_p99_us": number(value.rawP99), "p50_ratio": number(value.p50 / value.rawP50),
                    "p99_ratio": number(value.p99 / value.rawP99), "payload_bytes": value.payloadBytes, "samples": value.samples,
                    "round_p50_ratio_median": number(value.roundRatios.median), "round_p50_ratio_q1": number(value.roundRatios.q1),
                    "round_p50_ratio_q3": number(value.roundRatios.q3), "rounds": value.roundRatios.rounds,
                ] as [String: Any]
        }
        if !processLatency.isEmpty { root["latency_processes"] = processLatency }
        var throughput: [String: Any] = [:]
        for (qos, value) in results.throughput {
            throughput["qos\(qos)"] =
                [
                    "msgs_per_s": number(value.rate, digits: 0), "raw_msgs_per_s": number(value.rawRate, digits: 0),
                    "data_msgs_per_s": number(value.dataRate, digits: 0),
                    "ratio": number(value.rate / value.rawRate), "window": value.window, "sent": value.sent,
                    "received": value.received, "raw_received": value.rawReceived, "payload_bytes": value.payloadBytes,
                    "round_ratio_median": number(value.roundRatios.median), "round_ratio_q1": number(value.roundRatios.q1),
                    "round_ratio_q3": number(value.roundRatios.q3), "rounds": value.roundRatios.rounds,
                ] as [String: Any]
        }
        if !throughput.isEmpty { root["throughput"] = throughput }
        if let fanout = results.fanout {
            root["fanout"] =
                [
                    "p50_ms": number(fanout.p50), "p99_ms": number(fanout.p99), "max_ms": number(fanout.max),
                    "participants": fanout.participants, "samples": fanout.samples,
                    "raw_p50_ms": number(fanout.rawP50), "raw_p99_ms": number(fanout.rawP99), "raw_max_ms": number(fanout.rawMax),
                    "p50_ratio": number(fanout.p50 / fanout.rawP50), "p99_ratio": number(fanout.p99 / fanout.rawP99),
                    "max_ratio": number(fanout.max / fanout.rawMax),
                    "payload_bytes": fanout.payloadBytes,
                ] as [String: Any]
        }
        if let late = results.lateJoin {
            root["late_join"] =
                [
                    "p50_ms": number(late.p50), "p99_ms": number(late.p99), "messages_per_join": number(late.total),
                    "catchups_per_join": number(late.catchUps), "retained_replay_per_join": number(late.retainedReplay),
                    "newcomer_live_messages_per_join": number(late.newcomerLive), "others_messages_per_join": number(late.others),
                    "participants": late.participants, "samples": late.samples, "stale_at_return": late.staleAtReturn,
                    "raw_p50_ms": number(late.rawP50), "raw_p99_ms": number(late.rawP99),
                    "p50_ratio": number(late.p50 / late.rawP50), "p99_ratio": number(late.p99 / late.rawP99),
                    "member_record_bytes": late.memberBytes, "catchup_bytes": late.catchUpBytes,
                ] as [String: Any]
        }
        if let sealed = results.private {
            root["private"] =
                [
                    "qos0_p50_us": number(sealed.sealedLatencyP50), "clear_qos0_p50_us": number(sealed.latencyP50),
                    "qos0_msgs_per_s": number(sealed.sealedThroughput), "clear_qos0_msgs_per_s": number(sealed.throughput),
                    "late_join_p50_ms": number(sealed.sealedLateJoinP50), "clear_late_join_p50_ms": number(sealed.lateJoinP50),
                    "journal_ms": number(sealed.sealedJournal), "clear_journal_ms": number(sealed.journal),
                ] as [String: Any]
        }
        if let late = results.retainlessLateJoin {
            root["late_join_no_retain"] =
                [
                    "p50_ms": number(late.p50), "p99_ms": number(late.p99), "participants": late.participants,
                    "samples": late.samples, "answers_per_join": number(late.answersPerJoin),
                    "member_records_per_join": number(late.memberRecordsPerJoin),
                    "stale_at_return": late.staleAtReturn,
                ] as [String: Any]
        }
        if let convergence = results.convergence {
            var object: [String: Any] = [
                "ms": number(convergence.p50), "p99_ms": number(convergence.p99), "max_ms": number(convergence.max),
                "max_changes": convergence.maxChanges, "max_remote_changes": convergence.maxRemoteChanges,
                "writers": convergence.writers, "bursts": convergence.bursts,
                "raw_ms": number(convergence.rawP50), "raw_p99_ms": number(convergence.rawP99), "raw_max_ms": number(convergence.rawMax),
                "ratio": number(convergence.p50 / convergence.rawP50), "p99_ratio": number(convergence.p99 / convergence.rawP99),
                "max_ratio": number(convergence.max / convergence.rawMax), "payload_bytes": convergence.payloadBytes,
            ]
            if let bound = roundTripMilliseconds { object["round_trip_ms"] = number(bound) }
            root["convergence"] = object
        }
        if let crash = results.crash {
            root["crash_detection_s"] = number(crash.p50, digits: 4)
            root["crash_detection"] =
                [
                    "p50_s": number(crash.p50, digits: 4), "max_s": number(crash.max, digits: 4), "samples": crash.samples,
                    "observers": crash.observers, "method": crash.method,
                ] as [String: Any]
        }
        if let idle = results.idle {
            root["idle"] =
                [
                    "sessions": idle.sessions, "seconds": number(idle.seconds),
                    "wakeups_per_s": number(idle.plain.wakeupsPerSecond), "cpu_s_per_min": number(idle.plain.cpuSecondsPerMinute),
                    "playback_wakeups_per_s": number(idle.playback.wakeupsPerSecond),
                    "playback_cpu_s_per_min": number(idle.playback.cpuSecondsPerMinute),
                    "synchronization_interval_s": number(idle.synchronizationInterval),
                    "longest_synchronization_interval_s": number(idle.longestSynchronizationInterval),
                ] as [String: Any]
        }
        if let failover = results.failover {
            root["failover"] =
                [
                    "move_p50_ms": number(failover.moveP50), "move_max_ms": number(failover.moveMax),
                    "delivery_gap_p50_ms": number(failover.deliveryGapP50), "delivery_gap_max_ms": number(failover.deliveryGapMax),
                    "longest_gap_p50_ms": number(failover.longestGapP50), "longest_gap_max_ms": number(failover.longestGapMax),
                    "samples": failover.samples, "left_samples": failover.leftSamples, "sent": failover.sent,
                    "lost": failover.lost, "duplicated": failover.duplicated, "failed_sends": failover.failedSends,
                    "send_interval_ms": failover.sendIntervalMilliseconds, "keepalive_s": failover.keepAlive,
                ] as [String: Any]
        }
        if let memory = results.memory {
            // `participants_1000_mb` is for `participants` (1,000; 100 with --quick). When fewer could be
            // held in one process, it is extrapolated linearly from those (`participants_extrapolated`).
            var object: [String: Any] = ["participants": memory.participants, "sessions": memory.sessions, "unit": "MiB"]
            if let bytes = memory.participantsBytes, let reached = memory.participantsReached {
                let each = Double(bytes) / Double(reached)
                object["participants_1000_mb"] = number(each * Double(memory.participants) / 1_048_576, digits: 1)
                object["participants_measured_mb"] = number(mebibytes(bytes), digits: 1)
                object["participants_reached"] = reached
                object["participants_extrapolated"] = reached < memory.participants
                object["per_participant_kb"] = number(each / 1_024, digits: 1)
            }
            if let bytes = memory.sessionsBytes, let reached = memory.sessionsReached {
                let each = Double(bytes) / Double(reached)
                object["sessions_1000_mb"] = number(each * Double(memory.sessions) / 1_048_576, digits: 1)
                object["sessions_reached"] = reached
                object["per_session_kb"] = number(each / 1_024, digits: 1)
            }
            root["memory"] = object
        }
        if let playback = results.playback {
            root["playback"] =
                [
                    "position_spread": [
                        "p50_ms": number(playback.positionP50, digits: 4), "p99_ms": number(playback.positionP99, digits: 4),
                        "max_ms": number(playback.positionMax, digits: 4), "samples": playback.positionSamples,
                        "transition_samples": playback.transitionSamples, "seconds": number(playback.positionSeconds),
                        "commands": playback.commands,
                        "group_time_p50_ms": number(playback.groupTimeP50, digits: 4),
                        "group_time_p99_ms": number(playback.groupTimeP99, digits: 4),
                    ] as [String: Any],
                    "start_spread": [
                        "p50_ms": number(playback.startP50, digits: 4), "p99_ms": number(playback.startP99, digits: 4),
                        "max_ms": number(playback.startMax, digits: 4), "starts": playback.starts,
                        "max_lateness_ms": number(playback.maxLateness, digits: 4),
                    ] as [String: Any],
                    "command_to_started_ms": number(playback.commandToStarted), "lead_ms": number(playback.lead),
                    "suspension_ms": number(playback.suspension), "suspension_max_ms": number(playback.suspensionMax),
                    "suspensions": playback.suspensions, "round_trip_ms": number(playback.roundTrip),
                    "state_fanout_ms": number(playback.stateFanout), "suspension_bound_ms": number(playback.suspensionBound),
                    "participants": playback.participants, "max_skew_s": number(playback.maxSkewSeconds),
                    "max_drift_ppm": number(playback.maxDriftPPM),
                ] as [String: Any]
        }
        if let journal = results.journal {
            let (receiver, small) = (journal.receiver, journal.receiverSmall)
            root["journal"] =
                [
                    "fanout_10mib_ms": number(journal.fanout), "raw_fanout_10mib_ms": number(journal.rawFanout),
                    "fanout_ratio": number(journal.fanout / journal.rawFanout),
                    "fanout_mb_per_s": number(journal.fanoutRate), "raw_fanout_mb_per_s": number(journal.rawFanoutRate),
                    "fanout_add_ms": number(journal.add), "fanout_listed_ms": number(journal.listed),
                    "fanout_load_ms": number(journal.load), "fanout_cpu_ms": number(journal.cpu),
                    "raw_fanout_cpu_ms": number(journal.rawCPU), "fanout_bytes": journal.fanoutBytes,
                    "receivers": journal.receivers, "rounds": journal.rounds, "chunk_bytes": journal.chunkSize,
                    "window": journal.window,
                    "late_joiner_10mib_ms": number(journal.lateJoiner), "late_joiner_load_ms": number(journal.lateJoinerLoad),
                    "late_joiner_bytes": journal.lateJoinerBytes, "late_joiner_samples": journal.lateJoinerSamples,
                    "receiver_peak_mb": number(mebibytes(receiver.peakBytes)),
                    "receiver_baseline_mb": number(mebibytes(receiver.baselineBytes)),
                    "receiver_growth_mb": number(mebibytes(receiver.growthBytes)), "receiver_peak_reset": receiver.peakReset,
                    "receiver_load_ms": number(receiver.loadMilliseconds), "receiver_bytes": journal.receiverBytes,
                    "receiver_small_growth_mb": number(mebibytes(small.growthBytes)),
                    "receiver_small_bytes": journal.receiverBytes / 10,
                    "window_mb": number(mebibytes(journal.windowBytes)),
                ] as [String: Any]
        }
        if let fanout = results.retainlessJournal {
            root["journal_no_retain"] =
                [
                    "fanout_10mib_ms": number(fanout.groupSync), "raw_fanout_10mib_ms": number(fanout.raw),
                    "fanout_ratio": number(fanout.groupSync / fanout.raw), "fanout_add_ms": number(fanout.add),
                    "fanout_listed_ms": number(fanout.listed), "fanout_load_ms": number(fanout.load),
                    "fanout_cpu_ms": number(fanout.cpu), "raw_fanout_cpu_ms": number(fanout.rawCPU),
                ] as [String: Any]
        }
        var targets: [String: Any] = [:]
        for row in rows {
            guard let verdict = row.verdict else { continue }
            targets[row.metric] = verdict ? "PASS" : "MISS"
        }
        root["targets"] = targets
        root["failures"] = results.failures
        let data = (try? JSONSerialization.data(withJSONObject: root, options: [.prettyPrinted, .sortedKeys])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    // MARK: - Formatting

    private func number(_ value: Double, digits: Int = 3) -> Any {
        guard value.isFinite else { return NSNull() }
        let scale = pow(10, Double(digits))
        return (value * scale).rounded() / scale
    }

    private func mebibytes(_ bytes: Int) -> Double { Double(bytes) / 1_048_576 }

    private func mebibytes(_ bytes: Int, digits: Int) -> String { format(mebibytes(bytes), digits: digits) }

    private func format(_ value: Double, digits: Int? = nil) -> String {
        guard value.isFinite else { return "n/a" }
        let places = digits ?? (abs(value) >= 100 ? 0 : abs(value) >= 10 ? 1 : 2)
        return String(format: "%.\(places)f", value)
    }

    /// A p50 row, judged against its raw floor (``Bound/floorP50``), and a p99 row beside its own.
    /// The memory bound holds for a full run's 1,000 participants; with fewer, each one's share of the
    /// process's fixed cost is larger, so a smaller run shows the figure without a verdict.
    private func memoryVerdict(_ bytesEach: Double, of participants: Int) -> Bool? {
        participants >= 1_000 ? bytesEach / 1_024 <= Bound.memoryPerParticipantKiB : nil
    }

    private func memoryTarget(_ bytesEach: Double) -> String {
        "\(format(bytesEach / 1_024, digits: 0)) KiB each (bound ≈ \(format(Bound.memoryPerParticipantKiB, digits: 0)) at 1,000)"
    }

    /// `median R, quartiles A–B` of per-round ratios.
    private func spread(_ ratios: (q1: Double, median: Double, q3: Double, rounds: Int)) -> String {
        "median \(ratio(ratios.median)), quartiles \(ratio(ratios.q1))–\(ratio(ratios.q3))"
    }

    /// Two rows beside a target, with no verdict of their own: GroupSync's p50 and p99 (µs) against
    /// another baseline's.
    private func referenceRows(
        _ label: String, _ groupSync: (p50: Double, p99: Double), _ baseline: (p50: Double, p99: Double)
    ) -> [Row] {
        [("p50", groupSync.p50, baseline.p50), ("p99", groupSync.p99, baseline.p99)].map { name, value, base in
            Row(metric: "  \(label), \(name)", groupSync: format(value), raw: format(base), ratio: ratio(value / base))
        }
    }

    private func percentileRows(_ name: String, _ ms: (p50: Double, p99: Double), raw: (p50: Double, p99: Double)) -> [Row] {
        [
            Row(
                metric: "\(name): p50 (ms)", groupSync: format(ms.p50), raw: format(raw.p50), ratio: ratio(ms.p50 / raw.p50),
                target: "≤ \(Bound.floorP50)× raw", verdict: ms.p50 / raw.p50 <= Bound.floorP50),
            Row(metric: "\(name): p99 (ms)", groupSync: format(ms.p99), raw: format(raw.p99), ratio: ratio(ms.p99 / raw.p99)),
        ]
    }

    private func ratio(_ value: Double) -> String {
        value.isFinite ? String(format: "%.2f×", value) : "n/a"
    }
}
