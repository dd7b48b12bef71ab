import Foundation
import GroupSync
import GroupSyncTestSupport

/// 10. The shared journal (issue 23), in a session of `receivers + 1` participants (one owner):
///
/// - *Fan-out*: the owner `add`s an attachment of random bytes; every receiver, iterating its journal's
///   `attachments`, `load`s it into memory as soon as it is listed. Timed from the start of `add` until
///   the last receiver's `load` returned (each chunk verified against its SHA-256). Each round a new
///   attachment, removed by its owner afterwards. Alternating with it, the raw libmosquitto floor
///   (``RawJournal``): the same bytes in the same chunks, QoS 1, from one publisher to as many subscribers,
///   each of which hashes what it receives once.
/// - *Late joiner*: a fresh participant joins, `add`s an attachment, leaves and closes; then another
///   fresh participant connects (not timed), joins and loads it: `join()` until the load returned.
/// - *Receiver memory*: the owner adds a large attachment; a child process (``JournalReceiver``) loads
///   it to a file with `load(_:to:)` and reports its resident size once joined and its peak while
///   loading. The same at a tenth of the size: bounded by the window, ten times the bytes cost no more
///   than one window more.
/// - *CPU*: this process's CPU time (every participant's threads, or every raw client's) per round.
enum JournalBenchmark {
    struct Plan: Sendable {
        var receivers: Int
        var fanoutBytes: Int
        var rounds: Int
        var lateJoinerBytes: Int
        var lateJoinerSamples: Int
        var receiverBytes: Int
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    static func run(url: String, group: String, plan: Plan) async throws -> BenchResults.Journal {
        let cluster = try await SessionCluster.make(url: url, group: group, prefix: "j", count: plan.receivers + 1, sharedState: false)
        let outcome: Result<BenchResults.Journal, any Error>
        do {
            outcome = .success(try await measure(cluster, plan: plan))
        } catch {
            outcome = .failure(error)
        }
        // Ending the session clears every retained message of it, the attachments' chunks included.
        await cluster.close()
        return try outcome.get()
    }

    private static func measure(_ cluster: SessionCluster, plan: Plan) async throws -> BenchResults.Journal {
        let owner = GroupSessionJournal(session: cluster.members[0].session)
        let configuration = owner.configuration
        var result = BenchResults.Journal(
            receivers: plan.receivers, chunkSize: configuration.chunkSize, window: configuration.window,
            fanoutBytes: plan.fanoutBytes, rounds: plan.rounds,
            lateJoinerBytes: plan.lateJoinerBytes, lateJoinerSamples: plan.lateJoinerSamples, receiverBytes: plan.receiverBytes)

        let fanout = try await fanout(cluster, owner: owner, plan: plan)
        (result.fanout, result.rawFanout, result.cpu, result.rawCPU) = (fanout.groupSync, fanout.raw, fanout.cpu, fanout.rawCPU)
        (result.add, result.listed, result.load) = (fanout.add, fanout.listed, fanout.load)

        // Late joiner, after the owner left.
        var joins: [Double] = []
        var loads: [Double] = []
        for sample in 0..<plan.lateJoinerSamples {
            let (join, load) = try await lateJoiner(cluster, data: try randomData(plan.lateJoinerBytes), sample: sample)
            Log.progress("journal late joiner \(sample + 1): join + load \(format(join + load)) ms (load \(format(load)) ms)")
            joins.append(join + load)
            loads.append(load)
        }
        result.lateJoiner = Percentiles(joins).p50
        result.lateJoinerLoad = Percentiles(loads).p50

        // Receiver memory, in a process of its own: at a tenth of the size, then at the size.
        var measured: [JournalReceiver.Measurement] = []
        for (index, size) in [plan.receiverBytes / 10, plan.receiverBytes].enumerated() {
            let attachment = try await owner.add(try randomData(size), name: "memory-\(index)")
            let child = try await JournalReceiver.spawn(
                url: cluster.url, group: cluster.group, session: cluster.sessionID, name: attachment.name, size: size)
            try await owner.remove(attachment)
            Log.progress(
                "journal receiver: \(mebibytes(size)) MiB loaded to disk in \(format(child.loadMilliseconds)) ms, "
                    + "resident \(mebibytes(child.baselineBytes)) MiB before, peak \(mebibytes(child.peakBytes)) MiB")
            measured.append(child)
        }
        result.receiverSmall = measured[0]
        result.receiver = measured[1]
        return result
    }

    /// Medians of the fan-out rounds (ms): GroupSync's and the raw floor's, alternating.
    struct Fanout: Sendable {
        var groupSync: Double
        var raw: Double
        var add: Double
        var listed: Double
        var load: Double
        var cpu: Double
        var rawCPU: Double
    }

    /// `plan.rounds` fan-out rounds of `plan.fanoutBytes` from `owner` to the other members of
    /// `cluster`, each followed by a raw round of the same bytes.
    static func fanout(_ cluster: SessionCluster, owner: GroupSessionJournal, plan: Plan) async throws -> Fanout {
        let configuration = owner.configuration
        let address = try BrokerAddress(cluster.url)
        let rawRoot = "groupsync/v2-chunks/r\(cluster.group.dropFirst())/\(cluster.sessionID)/raw"
        let raw = try await BlockingThread.run("raw-journal-connect") {
            Result {
                try RawJournal(
                    host: address.host, port: address.port, root: rawRoot, receivers: plan.receivers,
                    chunkSize: configuration.chunkSize, window: configuration.window)
            }
        }.get()
        var rounds: [Round] = []
        var rawTimes: [Double] = []
        var rawCPUs: [Double] = []
        do {
            for index in 0..<plan.rounds {
                let data = try randomData(plan.fanoutBytes)
                let round = try await fanoutRound(cluster, owner: owner, data: data, name: "fanout-\(index)")
                let rawCPU = processCPUMilliseconds()
                let rawTime = try await BlockingThread.run("raw-journal") { Result { try raw.round(data) } }.get()
                rawCPUs.append(processCPUMilliseconds() - rawCPU)
                Log.progress(
                    "journal fan-out round \(index + 1): \(format(round.total)) ms (add \(format(round.add)) ms, CPU "
                        + "\(format(round.cpu)) ms), raw \(format(rawTime)) ms (CPU \(format(rawCPUs.last!)) ms)")
                rounds.append(round)
                rawTimes.append(rawTime)
            }
        } catch {
            await BlockingThread.run("raw-journal-close") { raw.close() }
            throw error
        }
        await BlockingThread.run("raw-journal-close") { raw.close() }
        return Fanout(
            groupSync: Percentiles(rounds.map(\.total)).p50, raw: Percentiles(rawTimes).p50, add: Percentiles(rounds.map(\.add)).p50,
            listed: Percentiles(rounds.map(\.listed)).p50, load: Percentiles(rounds.flatMap(\.loads)).p50,
            cpu: Percentiles(rounds.map(\.cpu)).p50, rawCPU: Percentiles(rawCPUs).p50)
    }

    /// One GroupSync fan-out round; times in ms from the start of `add`.
    struct Round: Sendable {
        var total: Double
        var add: Double
        /// Until the last receiver had the attachment listed.
        var listed: Double
        /// Each receiver's load alone (from its listing until its load returned).
        var loads: [Double]
        /// CPU time of this process (every participant, all threads) during the round.
        var cpu: Double
    }

    static func fanoutRound(_ cluster: SessionCluster, owner: GroupSessionJournal, data: Data, name: String) async throws -> Round {
        let receivers = cluster.members.dropFirst().map { GroupSessionJournal(session: $0.session) }
        // Listening before the add starts: each sequence yields the current list, then every change.
        let updates = receivers.map { $0.attachmentUpdates() }
        let size = data.count
        return try await withThrowingTaskGroup(of: (listed: UInt64, loaded: UInt64).self) { group in
            for (journal, attachments) in zip(receivers, updates) {
                group.addTask {
                    let attachment = try await firstAttachment(named: name, in: attachments)
                    let listed = MonotonicClock.nanoseconds()
                    let bytes = try await journal.load(attachment)
                    let loaded = MonotonicClock.nanoseconds()
                    guard bytes.count == size else { throw Failure(description: "\(name): loaded \(bytes.count) bytes of \(size)") }
                    return (listed, loaded)
                }
            }
            let cpu = processCPUMilliseconds()
            let start = MonotonicClock.nanoseconds()
            let attachment: JournalAttachment
            do {
                attachment = try await withTimeLimit(.seconds(120), "\(name) added") { try await owner.add(data, name: name) }
            } catch {
                group.cancelAll()
                throw error
            }
            let added = MonotonicClock.nanoseconds()
            var ends: [(listed: UInt64, loaded: UInt64)] = []
            while let end = try await group.next() { ends.append(end) }
            let cpuUsed = processCPUMilliseconds() - cpu
            try await owner.remove(attachment)
            return Round(
                total: MonotonicClock.milliseconds(from: start, to: ends.map(\.loaded).max()!),
                add: MonotonicClock.milliseconds(from: start, to: added),
                listed: MonotonicClock.milliseconds(from: start, to: ends.map(\.listed).max()!),
                loads: ends.map { MonotonicClock.milliseconds(from: $0.listed, to: $0.loaded) }, cpu: cpuUsed)
        }
    }

    /// A fresh owner joins, adds `data`, leaves and closes; a fresh newcomer connects, then joins and loads
    /// it. Returns the newcomer's `join()` and load times (ms).
    private static func lateJoiner(_ cluster: SessionCluster, data: Data, sample: Int) async throws -> (join: Double, load: Double) {
        let name = "late-\(sample)"
        let ownerCoordinator = try await GroupCoordinator.connect(
            .init(broker: cluster.url, group: cluster.group, participant: "jo\(sample)"))
        do {
            let session = try await SessionCluster.findSession(ownerCoordinator, id: cluster.sessionID)
            try await session.join()
            _ = try await withTimeLimit(.seconds(120), "\(name) added") {
                try await GroupSessionJournal(session: session).add(data, name: name)
            }
            await session.leave()
        } catch {
            await ownerCoordinator.close()
            throw error
        }
        await ownerCoordinator.close()

        let coordinator = try await GroupCoordinator.connect(.init(broker: cluster.url, group: cluster.group, participant: "jn\(sample)"))
        let outcome: Result<(Double, Double), any Error>
        do {
            let session = try await SessionCluster.findSession(coordinator, id: cluster.sessionID)
            let journal = GroupSessionJournal(session: session)
            let start = MonotonicClock.nanoseconds()
            try await session.join()
            let attachment = try await firstAttachment(named: name, in: journal.attachmentUpdates())
            let joined = MonotonicClock.nanoseconds()
            let bytes = try await withTimeLimit(.seconds(120), "\(name) loaded") { try await journal.load(attachment) }
            let loaded = MonotonicClock.nanoseconds()
            guard bytes.count == data.count else { throw Failure(description: "\(name): loaded \(bytes.count) bytes of \(data.count)") }
            await session.leave()
            outcome = .success(
                (MonotonicClock.milliseconds(from: start, to: joined), MonotonicClock.milliseconds(from: joined, to: loaded)))
        } catch {
            outcome = .failure(error)
        }
        await coordinator.close()
        return try outcome.get()
    }

    /// The first attachment named `name` that `attachments` lists (within 60 s).
    static func firstAttachment(named name: String, in attachments: GroupUpdates<[JournalAttachment]>) async throws -> JournalAttachment {
        try await withTimeLimit(.seconds(60), "attachment \(name) listed") {
            for await list in attachments {
                if let found = list.first(where: { $0.name == name }) { return found }
            }
            throw Failure(description: "the journal's attachments ended before \(name) was listed")
        }
    }

    /// `count` random bytes from /dev/urandom, different every call: each attachment is a new one.
    static func randomData(_ count: Int) throws -> Data {
        guard let source = FileHandle(forReadingAtPath: "/dev/urandom") else { throw Failure(description: "cannot open /dev/urandom") }
        defer { try? source.close() }
        var data = Data()
        while data.count < count {
            guard let more = try source.read(upToCount: count - data.count), !more.isEmpty else {
                throw Failure(description: "/dev/urandom gave no more bytes")
            }
            data.append(more)
        }
        return data
    }

    /// User and system CPU time of this process so far (all threads), in ms.
    static func processCPUMilliseconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        func ms(_ time: timeval) -> Double { Double(time.tv_sec) * 1_000 + Double(time.tv_usec) / 1_000 }
        return ms(usage.ru_utime) + ms(usage.ru_stime)
    }

    private static func format(_ value: Double) -> String { String(format: "%.1f", value) }
    private static func mebibytes(_ bytes: Int) -> String { String(format: "%.1f", Double(bytes) / 1_048_576) }
}
