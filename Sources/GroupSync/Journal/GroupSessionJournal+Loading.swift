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
    /// after ``Configuration/stallTimeout`` without a chunk, ``GroupSyncError/attachmentRemoved(digest:)``
    /// when its owner removes it meanwhile, ``GroupSyncError/attachmentCorrupted(digest:)`` when a chunk
    /// matches its digest but not its record's length, ``GroupSyncError/sessionInvalidated`` when the
    /// session is over for us, and ``GroupSyncError/cancelled`` when its task is cancelled.
    public func load(
        _ attachment: JournalAttachment, progress: (@Sendable (JournalLoadProgress) -> Void)? = nil
    ) async throws(GroupSyncError) -> Data {
        var bytes = Data(capacity: attachment.size)
        try await transfer(attachment, progress: progress) { chunk throws(GroupSyncError) in bytes.append(chunk) }
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
        } catch {
            try? handle.close()
            try? manager.removeItem(at: partial)
            throw error
        }
    }

    private enum Event: Sendable {
        /// A message on chunk `index`'s topic.
        case chunk(index: Int, Data)
        /// Ask for chunk `index` again (after a rejection's backoff, or a subscription that failed).
        case retryDue(index: Int)
        /// The stall deadline the machine named has come (or passed: it may have moved since).
        case stallDue
        /// The attachment's owner removed it.
        case removed
        /// The session is over for us.
        case invalidated
        case cancelled
    }

    /// The load's loop: requests chunks by subscribing to their retained topics, within a window, as
    /// ``TransferStateMachine`` says; verifies them; hands them to `deliver` in order.
    private func transfer(
        _ attachment: JournalAttachment, progress: (@Sendable (JournalLoadProgress) -> Void)?,
        deliver: (Data) throws(GroupSyncError) -> Void
    ) async throws(GroupSyncError) {
        let client = core.context.client
        guard client.retainAvailable else { throw .journalNeedsRetainedMessages }
        guard !core.isInvalidated else { throw .sessionInvalidated }
        guard attachment.size <= configuration.maximumAttachmentSize else {
            throw .journalLimitExceeded(.attachmentSize(size: attachment.size, limit: configuration.maximumAttachmentSize))
        }
        guard configuration.window > 0 else { throw .invalidArgument("window must be positive") }
        guard !isRemoved(attachment) else { throw .attachmentRemoved(digest: attachment.digest) }
        let record = attachment.record
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
        let requests = LockedValue(ChunkRequests<MessageHandlerSubscription>())
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
            let stall = WakeUp()
            stall.onWake { continuation.yield(.stallDue) }
            defer { stall.cancel() }
            func armStall() {
                guard let deadline = machine.stallDeadline else { return }
                stall.schedule(after: .milliseconds(max(deadline &- clock.milliseconds(), 0)))
            }
            func giveUp(_ index: Int) { requests.withLock { $0.giveUp(index) }?.unsubscribe() }
            func request(_ chunks: Range<Int>) {
                let (request, released) = requests.withLock { $0.request(chunks) }
                for subscription in released { subscription.unsubscribe() }
                let filters = chunks.map { topics.chunk(session, attachment: record.id, index: $0, owner: record.added.participant) }
                let index = Dictionary(uniqueKeysWithValues: zip(filters, chunks))
                group.addTask {
                    do {
                        let subscription = try await client.subscribe(
                            to: filters.map { TopicSubscription($0, qos: .atLeastOnce) },
                            handler: { message in
                                // A cleared chunk (the session ended, the owner removed it) is no chunk.
                                if !message.payload.isEmpty, let index = index[message.topic] {
                                    continuation.yield(.chunk(index: index, message.payload))
                                }
                            })
                        if !requests.withLock({ $0.arrived(request, subscription) }) { subscription.unsubscribe() }
                    } catch {
                        // Refused or failed: ask again in a moment (the stall timeout bounds the attempts).
                        requests.withLock { $0.fail(request) }
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
                    // The stream also ends when the task is cancelled.
                    let action: TransferStateMachine.Action
                    let event =
                        await withTaskCancellationHandler {
                            await iterator.next()
                        } onCancel: {
                            continuation.yield(.cancelled)
                        } ?? .cancelled
                    switch event {
                    case let .chunk(index, data):
                        // The only hash of these bytes: the record's id binds its digests, so verified chunks are
                        // the content. A verified chunk of another length than the record says is the owner's error.
                        let verified = index < record.chunks.count && SHA256.hex(data) == record.chunks[index]
                        if verified, Int64(data.count) != min(record.chunkSize, record.size - Int64(index) * record.chunkSize) {
                            try abandon(.attachmentCorrupted(digest: record.id))
                        }
                        action = machine.onChunk(index, data, verified: verified, now: clock.milliseconds())
                    case let .retryDue(index):
                        if requests.withLock({ $0.isCovered(index) }) {  // not yet: an earlier request still covers it
                            group.addTask {
                                try? await Task.sleep(for: .milliseconds(20))
                                continuation.yield(.retryDue(index: index))
                            }
                            continue
                        }
                        action = machine.onRetryDue(index)
                    case .stallDue:
                        action = machine.onTick(now: clock.milliseconds())
                        armStall()
                    case .removed: try abandon(.attachmentRemoved(digest: record.id))
                    case .invalidated: try abandon(.sessionInvalidated)
                    case .cancelled: try abandon(.cancelled)
                    }
                    try perform(action)
                }
            } catch {
                failure = error
            }
            continuation.finish()
            group.cancelAll()
            for subscription in requests.withLock({ $0.close() }) { subscription.unsubscribe() }
            return failure
        }
        // Requests still on their way when the loop ended were dropped as they arrived (the group waited
        // for them); none is left.
        if let failure { throw failure }
    }

    /// Whether the journal saw `attachment` removed by its owner.
    private func isRemoved(_ attachment: JournalAttachment) -> Bool { core.read { $0.journal.removed.contains(attachment.id) } }
}
