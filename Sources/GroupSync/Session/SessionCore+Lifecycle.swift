import MQTT

extension SessionCore {
    func join() async throws(GroupSyncError) {
        if let keyID = announcement.activity.sealed { throw .privateSession(keyID: keyID) }  // kept closed: no key for it
        let (barrier, caughtUp) = (Inbox<SessionStateMachine.Update>(), Inbox<SessionStateMachine.Update>())
        switch locked.withLock({ $0.machine.onJoinStarted(barrier: barrier, caughtUp: caughtUp) }) {
        case .proceed: break
        case .joined: return
        case .refused: throw .sessionInvalidated
        }
        var memberPublished = false
        do {
            try await joinSteps(barrier, caughtUp, memberPublished: &memberPublished)
        } catch {
            // A failed, cancelled or interrupted join leaves the session as it was (waiting, or
            // invalidated by a concurrent leave/end): no reading task, no subscription, no member record.
            perform { $0.onJoinAbandoned() }
            stopReading()
            if memberPublished && !isJoined { await context.retained.clear(topics.member(id, me)) }
            throw Task.isCancelled && !state.isInvalidated ? .cancelled : error
        }
        context.report(self, .joined)
        // Our copy of the announcement keeps the session alive while we are in it (the creator has one).
        // Owned now, so that a leave() right after releases it; its acknowledgement is not awaited:
        // join() is done once we hold the session's state.
        let current = announcement
        if !context.retained.keeps(ownCopyTopic), let payload = try? Wire.encode(wireAnnouncement(current)),
            let ticket = try? context.retained.enqueue(ownCopyTopic, payload, lifetime: current.lifetime)
        {
            context.client.detach(ticket)
        }
    }

    private func joinSteps(
        _ barrier: Inbox<SessionStateMachine.Update>, _ caughtUp: Inbox<SessionStateMachine.Update>, memberPublished: inout Bool
    ) async throws(GroupSyncError) {
        let filters = topics.sessionFilters(id, participant: me)
        let member = try Wire.encode(Wire.Member(participant: me, epoch: context.epoch))
        let (retained, memberTopic, lifetime) = (context.retained, topics.member(id, me), lifetime)
        // The session's messages are handled on the connection's network thread, as they are read: one
        // hand-off (to the app's sequences) instead of two. Handling never blocks and never runs app code.
        // Our member record goes out right behind the SUBSCRIBE packets, without waiting for their SUBACK:
        // the broker handles both in order, so its echo — the barrier — still comes after every retained
        // message of the session.
        var memberTicket: Result<MQTTClient.PublishTicket, GroupSyncError>?
        let messages: MessageHandlerSubscription
        do {
            messages = try await context.client.subscribe(
                to: filters.shared.map { TopicSubscription($0, qos: .atLeastOnce) }
                    + [TopicSubscription(filters.broadcast, qos: .atLeastOnce, noLocal: true)],
                handler: { [weak self] message in self?.handle(message) },
                endOfBurst: { [weak self] in self?.releaseHeldValues() },
                whenSent: {
                    memberPublished = true
                    memberTicket = Result { () throws(GroupSyncError) in try retained.enqueue(memberTopic, member, lifetime: lifetime) }
                })
        } catch {
            if case let .success(ticket)? = memberTicket { context.client.detach(ticket) }
            throw GroupSyncError(error)
        }
        locked.withLock { $0.subscription = messages }
        guard let memberTicket else { throw .sessionInvalidated }
        let ticket = try memberTicket.get()
        guard !isInvalidated else {  // left or ended while subscribing
            context.client.detach(ticket)
            throw .sessionInvalidated
        }
        try await acknowledgements(of: [ticket])
        guard case let .barrier(awaitCatchUp)? = await barrier.next() else { throw .sessionInvalidated }
        if awaitCatchUp { await withTimeout(context.catchUpTimeout) { _ = await caughtUp.next() } }
        // Cancelled while waiting: not caught up, so not joined (a timeout without catch-up is joined).
        guard !Task.isCancelled else { throw .cancelled }
        let catchUpsUntil = context.clock.milliseconds() &+ context.catchUpTimeout.nanoseconds / 1_000_000
        perform { $0.onJoined(acceptingCatchUpsUntil: catchUpsUntil) }
        guard isJoined else { throw .sessionInvalidated }
    }

    /// Leaves: others see us go at once. Our last state stays visible to them, and our copy of the
    /// announcement keeps the session announced, for the session's time to live.
    func leave() async {
        guard invalidate(.left) else { return }
        let (retained, member) = (context.retained, topics.member(id, me))
        await withTimeout(context.farewellTimeout) { _ = await retained.clear(member) }
        for topic in ownedRecordTopics + [ownCopyTopic] { context.retained.release(topic) }
        context.report(self, .left)
    }

    /// Ends the session for everyone and removes every retained message of it from the broker: what
    /// the broker's ACL lets us clear now, the rest when its owners see the end (or when it expires).
    /// Every wait on the broker shares one bound, the farewell timeout.
    func end() async {
        let deadline = ContinuousClock.now + context.farewellTimeout
        func left() -> Duration { ContinuousClock.now.duration(to: deadline) }
        // Someone who never joined has not read the session's member and state records: the broker shows them.
        let stored = isJoined ? [] : await withTimeout(left()) { [self] in await storedRecords() } ?? []
        // Every record of the session we know of, and those we own (also from before an earlier leave).
        let records = read { Set(($0.members.keys + [me]).map { topics.member(id, $0) }).union($0.stateTopics) }
            .union(context.announcers(id).filter { $0 != me }.map { topics.announcement(id, by: $0) })
            .union(ownedRecordTopics)
            .union(read { $0.journal.storedTopics(topics, session: id) })
            .union(stored)
        // Tell joined participants who ended it, before the announcement disappears.
        if isJoined, let ticket = try? enqueueControl(.end, JSONValue.null, to: nil) {
            await withTimeout(left()) { [self] in try? await acknowledgements(of: [ticket]) }
        }
        guard invalidate(.ended(by: context.me)) else { return }
        await withTimeout(left()) { [self] in await clear(records) }
        context.report(self, .ended)
    }

    /// The broker's side of ``end()``, once the session is over here: our copy of the announcement says
    /// it ended, then `records` are cleared, then the ended copy if nothing is left.
    private func clear(_ records: Set<String>) async {
        // Our copy says it ended: it outranks every other copy, for followers who never joined too.
        var ended = announcement
        ended.ended = true
        ended.revision = context.hlc.withLock { $0.tick(now: context.clock.milliseconds()) }
        if let payload = try? Wire.encode(wireAnnouncement(ended)) {
            try? await context.retained.publish(ownCopyTopic, payload, lifetime: ended.lifetime, refreshing: false)
        }
        var clearedAll = true
        for topic in records.sorted() where await !context.retained.clear(topic) { clearedAll = false }
        // Nothing else is left on the broker: the ended copy is not needed either.
        if clearedAll { await context.retained.clear(ownCopyTopic) }
    }

    /// The topics of the session's records the broker stores (non-empty retained messages), read from
    /// the replay of a short subscription, with the chunk topics its journal records name; none if the
    /// broker cannot be asked. The broker sends a subscription's retained messages right after its SUBACK
    /// and handles packets in order, so once the SUBACK of a second subscription is back, the replay of
    /// the first is in.
    private func storedRecords() async -> Set<String> {
        let found = LockedValue<Set<String>>([])
        let (client, topics, session) = (context.client, topics, id)
        guard
            let replay = try? await client.subscribe(
                to: [TopicSubscription(sessionPrefix + "#")],
                handler: { message in
                    guard message.retain && !message.payload.isEmpty else { return }
                    var stored = [message.topic]
                    if case let .journal(_, attachment, owner) = topics.parse(message.topic),
                        let record = Wire.decode(Wire.JournalRecord.self, from: message.payload),
                        record.matches(attachment: attachment, owner: owner)
                    {
                        stored = JournalStateMachine.topics(of: record, topics, session: session)
                    }
                    found.withLock { $0.formUnion(stored) }
                })
        else { return [] }
        let barrier = try? await client.subscribe(to: [TopicSubscription(sessionPrefix + "end")], handler: { _ in })
        barrier?.unsubscribe()
        replay.unsubscribe()
        return found.withLock { $0 }
    }

    /// The session ended elsewhere (`.ended`), or nobody kept it alive (`.expired`: its records expired on
    /// the broker, ours with them): clear what we own of it (under a strict ACL only we can).
    func endedElsewhere(_ reason: GroupSessionState.InvalidationReason) {
        if invalidate(reason) { clearOwnRecords() }
    }

    /// Clears our copy of the announcement, member record and state records, also those written before
    /// an earlier leave() of this session; none of them comes back after a reconnect.
    func clearOwnRecords() {
        let stateTopics = read { $0.stateTopics }
        context.report(self, .ended)
        let owned = Set(ownedRecordTopics + [topics.member(id, me), ownCopyTopic])
            .union(stateTopics.filter { $0.hasSuffix("/\(me)") })
        let retained = context.retained
        for topic in owned { retained.disown(topic) }
        context.tasks.spawn { for topic in owned.sorted() { await retained.clear(topic) } }
    }

    /// The retained records of the session we own: under its topics, and its attachments' chunks.
    private var ownedRecordTopics: [String] {
        context.retained.topics(under: sessionPrefix) + context.retained.topics(under: topics.chunkPrefix(id))
    }

    /// Marks the session over locally: its sequences end, its topics are no longer read, and it no
    /// longer counts as shared. Returns false if it already was over.
    @discardableResult
    func invalidate(_ reason: GroupSessionState.InvalidationReason) -> Bool { perform { $0.invalidate(reason) }.invalidatedFrom != nil }

    func stopReading() { locked.withLock { $0.subscription.take() }?.unsubscribe() }
}
