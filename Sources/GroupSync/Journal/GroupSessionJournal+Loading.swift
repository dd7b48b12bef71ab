import Foundation
import MQTT

extension GroupSessionJournal {
    /// Loads `attachment` into memory and returns its bytes, verified: each chunk against its digest as it
    /// arrives (a corrupted or forged one is fetched again), the digests ``JournalAttachment/digest`` binds.
    ///
    /// `progress` is called on the loading task (never on the network thread) at the start, after each
    /// verified chunk is handed over (in order: one that arrived early waits for its predecessors) and
    /// after each rejected one. A load survives reconnects and broker restarts: it goes on where it was, with
    /// nothing lost or handed over twice. It fails with ``GroupSyncError/attachmentUnavailable(digest:chunk:)``
    /// after ``Configuration/stallTimeout`` without a chunk — and, where nothing is retained (the owner,
    /// and whoever loaded an attachment, serve it while they are in the session), at once when nobody
    /// active holds it —, ``GroupSyncError/attachmentRemoved(digest:)``
    /// when its owner removes it meanwhile, ``GroupSyncError/attachmentCorrupted(digest:)`` when a chunk
    /// matches its digest but not its record's length, ``GroupSyncError/sessionInvalidated`` when the
    /// session is over for us, and ``GroupSyncError/cancelled`` when its task is cancelled.
    public func load(
        _ attachment: JournalAttachment, progress: (@Sendable (JournalLoadProgress) -> Void)? = nil
    ) async throws(GroupSyncError) -> Data {
        var bytes = Data(capacity: attachment.size)
        try await transfer(attachment, progress: progress) { chunk throws(GroupSyncError) in bytes.append(chunk) }
        serve(.memory(bytes), of: attachment)
        return bytes
    }

    /// Loads `attachment` into the file at `file`, streaming: at most ``Configuration/window`` chunks are
    /// held in memory, whatever the attachment's size. The bytes go to `<file>.partial` first, which
    /// replaces `file` once verified, so `file` never holds unverified bytes; a failed load removes it.
    /// Otherwise as ``load(_:progress:)``.
    public func load(
        _ attachment: JournalAttachment, to file: URL, progress: (@Sendable (JournalLoadProgress) -> Void)? = nil
    ) async throws(GroupSyncError) {
        let partial = file.appendingPathExtension("partial")
        let manager = FileManager.default
        guard manager.createFile(atPath: partial.path, contents: nil), let handle = try? FileHandle(forWritingTo: partial) else {
            throw .file("cannot create \(partial.path)")
        }
        do throws(GroupSyncError) {
            try await transfer(attachment, progress: progress) { chunk throws(GroupSyncError) in
                do {
                    try handle.write(contentsOf: chunk)
                } catch {
                    throw .file("cannot write \(partial.path): \(error.localizedDescription)")
                }
            }
            try? handle.close()
            // rename(2) replaces an existing file atomically.
            guard rename(partial.path, file.path) == 0 else {
                throw GroupSyncError.file("cannot move \(partial.path) to \(file.path): \(String(cString: strerror(errno)))")
            }
            serve(.file(file), of: attachment)  // read as asked for, each chunk checked first
        } catch {
            try? handle.close()
            try? manager.removeItem(at: partial)
            throw error
        }
    }

    /// What the load's loop acts on. Everything it keeps — the transfer machine, the chunk requests, the
    /// server asked — is its own: the network thread, the subscribing tasks and the watchers only post.
    private enum Event: Sendable {
        /// A message on chunk `index`'s topic (whose last level is its publisher).
        case chunk(index: Int, topic: String, Data)
        /// The broker acknowledged the subscription of request `request`, to chunks `chunks`.
        case subscribed(request: Int, MessageHandlerSubscription, chunks: Range<Int>)
        /// The subscription of request `request` was refused or failed (its chunks are retried later).
        case subscribeFailed(request: Int)
        /// Ask for chunk `index` again (after a rejection's backoff, or a subscription that failed).
        case retryDue(index: Int)
        /// The stall deadline the machine named has come (or passed: it may have moved since).
        case stallDue
        /// The attachment's owner removed it.
        case removed
        /// The session is over for us.
        case invalidated
        /// Where nothing is retained: who is active now (the participant asked for the chunks may have left).
        case participants(Set<Participant>)
        /// Where nothing is retained: the answer timeout since the last ask has passed; nothing may have come
        /// from the participant asked (it holds nothing after all, its answers were lost with a connection,
        /// or it does not answer).
        case serverSilent
        case cancelled
    }

    /// The load's loop: requests chunks by subscribing to their retained topics — where nothing is
    /// retained, then asking a holder to publish them (`$chunks`) —, within a window, as
    /// ``TransferStateMachine`` says; verifies them; hands them to `deliver` in order.
    private func transfer(
        _ attachment: JournalAttachment, progress: (@Sendable (JournalLoadProgress) -> Void)?,
        deliver: (Data) throws(GroupSyncError) -> Void
    ) async throws(GroupSyncError) {
        let client = core.context.client
        guard !core.isInvalidated else { throw .sessionInvalidated }
        guard attachment.size <= configuration.maximumAttachmentSize else {
            throw .journalLimitExceeded(.attachmentSize(size: attachment.size, limit: configuration.maximumAttachmentSize))
        }
        guard configuration.window > 0 else { throw .invalidArgument("window must be positive") }
        guard !isRemoved(attachment) else { throw .attachmentRemoved(digest: attachment.digest) }
        let record = attachment.record
        // A private attachment's chunks come sealed: the key is ours, or the attachment is not for us.
        let cipher = core.chunkCipher(for: record)
        if let keyID = record.sealed, cipher == nil { throw .privateSession(keyID: keyID) }
        // Where nothing is retained, the chunks come from a participant that holds them, on its own chunk
        // topics: the owner if it is active, else one that loaded them.
        let servedByHolders = !client.retainAvailable
        if servedByHolders, let held = core.read({ $0.journal.heldAttachment(record.id) }), held.record == record {
            // Ours already (added or loaded here, in this layout): from memory — bytes the app added, or that
            // verified when we loaded them — or from its file, each chunk checked as it is read.
            let chunks = record.chunks.indices.map { held.contentChunk($0) }
            if chunks.allSatisfy({ $0 != nil }) {
                progress?(JournalLoadProgress(completedBytes: 0, totalBytes: attachment.size, rejectedChunks: 0))
                var done = 0
                for case let chunk? in chunks {
                    guard !Task.isCancelled else { throw .cancelled }
                    try deliver(Data(chunk))
                    done += chunk.count
                    progress?(JournalLoadProgress(completedBytes: done, totalBytes: attachment.size, rejectedChunks: 0))
                }
                return
            }
        }
        var server = servedByHolders ? firstServer(of: record.id) : nil
        if servedByHolders, server == nil { throw .attachmentUnavailable(digest: record.id, chunk: 0) }
        let (clock, topics, session) = (core.context.clock, core.topics, core.id)
        var machine = TransferStateMachine(
            .init(
                chunkCount: record.chunks.count, window: configuration.window,
                stallTimeout: configuration.stallTimeout.nanoseconds / 1_000_000),
            now: clock.milliseconds())
        func report(completedChunks: Int) {
            let done = min(completedChunks * Int(record.chunkSize), attachment.size)
            progress?(JournalLoadProgress(completedBytes: done, totalBytes: attachment.size, rejectedChunks: machine.rejected))
        }

        let (events, continuation) = AsyncStream.makeStream(of: Event.self)
        var requests = ChunkRequests<MessageHandlerSubscription>()
        // A discarding group: each request is a child task, and a plain group would keep every finished
        // child until the load ends — memory growing with the attachment's size.
        let failure: GroupSyncError? = await withDiscardingTaskGroup(returning: GroupSyncError?.self) { group in
            // Nothing polls: the journal's list says when the attachment is removed and ends with the
            // session; the stall timer wakes at the machine's deadline.
            let journalList = attachmentUpdates()
            group.addTask { [self] in
                for await _ in journalList where isRemoved(attachment) {
                    continuation.yield(.removed)
                    return
                }
                if !Task.isCancelled { continuation.yield(.invalidated) }
            }
            if servedByHolders {
                let participants = GroupUpdates(core.listen(.participants, keepingNewest: 1)) {
                    if case let .participants(active) = $0 { active } else { nil }
                }
                group.addTask {
                    for await active in participants { continuation.yield(.participants(active)) }
                }
            }
            // A server that sends nothing for a while is given up for the next (or asked again, if it is
            // the only one): the stall timeout still bounds the whole wait.
            let silence = WakeUp()
            silence.onWake { continuation.yield(.serverSilent) }
            defer { silence.cancel() }
            let answerTimeout = max(configuration.stallTimeout / 10, .seconds(1))
            var lastHeard = ContinuousClock.now  // from the server asked: an ask, or a chunk it sent
            func ask(_ chunks: [Int]) {
                guard let to = server, !chunks.isEmpty else { return }
                let limit = Int(Wire.Bounds.chunkRequest.upperBound)
                for (from, count) in Self.runs(of: chunks, atMost: limit) {
                    core.sendControl(.chunks, Wire.ChunkRequest(id: record.id, from: Int64(from), count: Int64(count)), to: to)
                }
                lastHeard = .now
                silence.schedule(after: answerTimeout)
            }
            func move(to next: String?) throws(GroupSyncError) {
                guard let next else { try abandon(.attachmentUnavailable(digest: record.id, chunk: machine.completedChunks)) }
                server = next
                ask(requests.subscribedWanted)
            }
            // The next server after the current one, in the order they are asked (after the last, the first).
            func moveOn() throws(GroupSyncError) {
                let servers = self.servers(of: record.id)
                let current = server.flatMap { servers.firstIndex(of: $0) }
                try move(to: servers.isEmpty ? nil : servers[current.map { ($0 + 1) % servers.count } ?? 0])
            }
            // Chunks from the current server that did not verify, in a row: a few, and it is passed over.
            var rejectedInARow = 0
            let stall = WakeUp()
            stall.onWake { continuation.yield(.stallDue) }
            defer { stall.cancel() }
            func armStall() {
                guard let deadline = machine.stallDeadline else { return }
                stall.schedule(after: .milliseconds(max(deadline &- clock.milliseconds(), 0)))
            }
            // Retries deferred while a request covered their chunks, once none does: asked wherever a
            // request ends.
            func retryUncovered() {
                for index in requests.takeUncovered() { continuation.yield(.retryDue(index: index)) }
            }
            func giveUp(_ index: Int) {
                guard let ended = requests.giveUp(index) else { return }
                ended.unsubscribe()
                retryUncovered()
            }
            func request(_ chunks: Range<Int>) {
                let (request, released) = requests.request(chunks)
                for subscription in released { subscription.unsubscribe() }
                if !released.isEmpty { retryUncovered() }
                // Where a holder serves them, from whichever holder is asked (the loop keeps only its).
                let filters = chunks.map {
                    topics.chunk(session, attachment: record.id, index: $0, owner: servedByHolders ? "+" : record.added.participant)
                }
                let index = Dictionary(uniqueKeysWithValues: zip(filters.map(Self.withoutPublisher), chunks))
                let largest = Int(record.chunkSize) + (cipher == nil ? 0 : AEAD.tagSize)
                group.addTask {
                    do {
                        let subscription = try await client.subscribe(
                            to: filters.map { TopicSubscription($0, qos: .atLeastOnce) },
                            handler: { message in
                                // A cleared chunk (the session ended, the owner removed it) is no chunk, and
                                // where holders serve, nothing larger than a chunk is.
                                guard !message.payload.isEmpty, let index = index[Self.withoutPublisher(message.topic)],
                                    !servedByHolders || message.payload.count <= largest
                                else { return }
                                continuation.yield(.chunk(index: index, topic: message.topic, message.payload))
                            })
                        // Once the stream is finished (the loop is over, or the load cancelled), nobody keeps it.
                        if case .terminated = continuation.yield(.subscribed(request: request, subscription, chunks: chunks)) {
                            subscription.unsubscribe()
                        }
                    } catch {
                        // Refused or failed: ask again in a moment (the stall timeout bounds the attempts).
                        continuation.yield(.subscribeFailed(request: request))
                        try? await Task.sleep(for: .milliseconds(200))
                        for index in chunks { continuation.yield(.retryDue(index: index)) }
                    }
                }
            }
            func perform(_ action: TransferStateMachine.Action) throws(GroupSyncError) {
                // One report per chunk, even when an action hands over several (a chunk that arrived
                // after its successors releases them all).
                var completed = machine.completedChunks - action.count { if case .deliver = $0 { true } else { false } }
                for effect in action {
                    switch effect {
                    case let .unsubscribe(index): giveUp(index)
                    case let .deliver(chunk):
                        try deliver(chunk)
                        completed += 1
                        report(completedChunks: completed)
                    case let .subscribe(chunks): request(chunks)
                    case let .retry(index, delay):
                        group.addTask {
                            try? await Task.sleep(for: delay)
                            continuation.yield(.retryDue(index: index))
                        }
                        report(completedChunks: machine.completedChunks)
                    case .complete: break
                    case let .fail(missing): throw .attachmentUnavailable(digest: record.id, chunk: missing)
                    }
                }
            }

            func abandon(_ failure: GroupSyncError) throws(GroupSyncError) -> Never {
                try perform(machine.cancel())
                throw failure
            }

            var failure: GroupSyncError?
            report(completedChunks: 0)
            var iterator = events.makeAsyncIterator()
            do throws(GroupSyncError) {
                try perform(machine.start())
                armStall()
                while !machine.isOver {
                    // Not one more chunk once cancelled (events already posted still wait in the stream).
                    if Task.isCancelled { try abandon(.cancelled) }
                    // The stream also ends when the task is cancelled.
                    let action: TransferStateMachine.Action
                    let event =
                        await withTaskCancellationHandler {
                            await iterator.next()
                        } onCancel: {
                            continuation.yield(.cancelled)
                        } ?? .cancelled
                    // Consumed: a chunk's bytes, held nowhere else by then, are opened where they are.
                    switch consume event {
                    case .chunk(let index, let topic, var content):
                        // Where holders serve, only the one asked counts.
                        if servedByHolders, server.map({ $0 == Self.publisher(of: topic) }) != true { continue }
                        // The only hash of these bytes: the record's id binds its digests, so verified chunks are
                        // the content (sealed, in a private session: opened once verified). A verified chunk of
                        // another length than the record says, or that does not open, is the owner's error.
                        let verified = index < record.chunks.count && SHA256.hex(content) == record.chunks[index]
                        let length = min(record.chunkSize, record.size - Int64(index) * record.chunkSize)
                        if verified {
                            if let cipher {
                                guard Int64(content.count) == length + Int64(AEAD.tagSize), cipher.open(&content, index: index) else {
                                    try abandon(.attachmentCorrupted(digest: record.id))
                                }
                            } else if Int64(content.count) != length {
                                try abandon(.attachmentCorrupted(digest: record.id))
                            }
                        }
                        action = machine.onChunk(index, content, verified: verified, now: clock.milliseconds())
                        if servedByHolders {
                            rejectedInARow = verified ? 0 : rejectedInARow + 1
                            if verified { lastHeard = .now }
                            if rejectedInARow >= Self.rejectedBeforeMovingOn {
                                rejectedInARow = 0
                                try moveOn()
                            }
                        }
                    case let .subscribed(request, subscription, chunks):
                        guard requests.arrived(request, subscription) else {
                            subscription.unsubscribe()
                            retryUncovered()
                            continue
                        }
                        // Subscribed: what the server publishes now reaches us.
                        if servedByHolders { ask(Array(chunks)) }
                        continue
                    case let .subscribeFailed(request):
                        requests.fail(request)
                        retryUncovered()
                        continue
                    case let .retryDue(index):
                        // Not while an earlier request covers it: it comes again once none does.
                        if requests.deferRetry(index) { continue }
                        action = machine.onRetryDue(index)
                    case .stallDue:
                        action = machine.onTick(now: clock.milliseconds())
                        armStall()
                    case .removed: try abandon(.attachmentRemoved(digest: record.id))
                    case .invalidated: try abandon(.sessionInvalidated)
                    case let .participants(active):
                        guard let current = server, !active.contains(where: { $0.id == current }) else { continue }
                        let next = firstServer(of: record.id)
                        guard current != next else { continue }  // still there after all
                        try move(to: next)
                        continue
                    case .serverSilent:
                        let quiet = lastHeard.duration(to: .now)
                        guard quiet >= answerTimeout, !requests.subscribedWanted.isEmpty else {
                            if quiet < answerTimeout { silence.schedule(after: answerTimeout - quiet) }
                            continue
                        }
                        try moveOn()
                        continue
                    case .cancelled: try abandon(.cancelled)
                    }
                    try perform(action)
                }
            } catch {
                failure = error
            }
            continuation.finish()
            group.cancelAll()
            for subscription in requests.close() { subscription.unsubscribe() }
            // Subscriptions posted before the stream finished but never taken; later ones are dropped by
            // their task (the group waits for them).
            while let event = await iterator.next() {
                if case let .subscribed(_, subscription, _) = event { subscription.unsubscribe() }
            }
            return failure
        }
        if let failure { throw failure }
    }

    /// The participant to ask for the chunks of `digest` where nothing is retained (see
    /// ``JournalStateMachine/servers(of:active:me:)``), nil when nobody active holds them.
    private func firstServer(of digest: String) -> String? { servers(of: digest).first }

    private func servers(of digest: String) -> [String] {
        let me = core.me
        return core.read { machine in machine.journal.servers(of: digest, active: Set(machine.active.map(\.id)), me: me) }
    }

    /// Where nothing is retained, we serve what we loaded while we are joined, and say so (`$have`).
    private func serve(_ bytes: HeldAttachment.Bytes, of attachment: JournalAttachment) {
        guard !core.context.client.retainAvailable,
            let held = HeldAttachment(record: attachment.record, bytes: bytes, cipher: core.chunkCipher(for: attachment.record))
        else { return }
        core.perform {
            $0.onJournal { journal in
                journal.hold(held)
                return .none
            }
        }
        core.sendControl(.have, Wire.Have(id: attachment.digest), to: nil)
    }

    /// Where holders serve: how many chunks in a row from the one asked may fail their digest before the
    /// load asks the next (a holder whose copy went bad, or a hostile one).
    static let rejectedBeforeMovingOn = 3

    /// A topic without its last level (the publisher): a chunk's topic as the load knows it.
    static func withoutPublisher(_ topic: String) -> Substring { topic[..<(topic.lastIndex(of: "/") ?? topic.endIndex)] }

    /// A chunk topic's last level: who published it.
    static func publisher(of topic: String) -> Substring {
        topic[(topic.lastIndex(of: "/").map(topic.index(after:)) ?? topic.startIndex)...]
    }

    /// Sorted `chunks` as runs of consecutive indices, each at most `limit` long: (first, count).
    static func runs(of chunks: [Int], atMost limit: Int) -> [(Int, Int)] {
        var runs: [(Int, Int)] = []
        for chunk in chunks {
            if let (first, count) = runs.last, first + count == chunk, count < limit {
                runs[runs.count - 1].1 += 1
            } else {
                runs.append((chunk, 1))
            }
        }
        return runs
    }

    /// Whether the journal saw `attachment` removed by its owner.
    private func isRemoved(_ attachment: JournalAttachment) -> Bool { core.read { $0.journal.removed.contains(attachment.id) } }
}
