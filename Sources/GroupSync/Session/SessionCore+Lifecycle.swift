import Foundation
import MQTT

extension SessionCore {
    func join() async throws(GroupSyncError) {
        let barrier = Inbox<SessionStateMachine.Update>()
        let caughtUp = Inbox<SessionStateMachine.Update>()
        guard machine.withLock({ $0.onJoinStarted(barrier: barrier, caughtUp: caughtUp) }) else {
            // Joined already, over, or another join() is in progress (and then fails or joins).
            if isJoined { return }
            throw .sessionInvalidated
        }
        var memberPublished = false
        do {
            try await joinSteps(barrier, caughtUp, memberPublished: &memberPublished)
        } catch {
            // A failed, cancelled or interrupted join leaves the session as it was (waiting, or
            // invalidated by a concurrent leave/end): no reading task, no subscription, no member record.
            apply { $0.onJoinAbandoned() }
            stopReading()
            if memberPublished && !isJoined { await context.retained.clear(topics.member(id, me)) }
            throw Task.isCancelled && !state.isInvalidated ? .cancelled : error
        }
        context.report(self, .joined)
    }

    private func joinSteps(
        _ barrier: Inbox<SessionStateMachine.Update>, _ caughtUp: Inbox<SessionStateMachine.Update>, memberPublished: inout Bool
    ) async throws(GroupSyncError) {
        let filters = topics.sessionFilters(id, participant: me)
        let member = try Wire.encode(Wire.Member(participant: me, epoch: context.epoch))
        let (retained, memberTopic) = (context.retained, topics.member(id, me))
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
                    memberTicket = Result { () throws(GroupSyncError) in try retained.enqueue(memberTopic, member) }
                })
        } catch {
            if case let .success(ticket)? = memberTicket { context.client.detach(ticket) }
            throw .connection(error)
        }
        subscription.withLock { $0 = messages }
        guard let memberTicket else { throw .sessionInvalidated }
        let ticket = try memberTicket.get()
        guard !isInvalidated else {  // left or ended while subscribing
            context.client.detach(ticket)
            throw .sessionInvalidated
        }
        do throws(MQTTError) {
            _ = try await context.client.acknowledgement(of: ticket)
        } catch {
            throw .connection(error)
        }
        guard case let .barrier(awaitCatchUp)? = await barrier.next() else { throw .sessionInvalidated }
        if awaitCatchUp {
            await withTimeout(context.catchUpTimeout) { _ = await caughtUp.next() }
        }
        apply { $0.onJoined() }
        guard isJoined else { throw .sessionInvalidated }
    }

    /// Leaves: others see us go at once; our last state stays visible to them.
    func leave() async {
        guard invalidate(.left) else { return }
        await context.retained.clear(topics.member(id, me))
        context.report(self, .left)
    }

    /// Ends the session for everyone and removes every retained message of it from the broker.
    func end() async {
        let (members, stateTopics) = machine.withLock { (Array($0.members.keys), $0.stateTopics) }
        if isJoined {
            // Tell joined participants who ended it, before the announcement disappears.
            _ = try? await sendControl(type: "$end", body: JSONValue.null, to: .all)
        }
        guard invalidate(.ended(by: context.me)) else { return }
        // Every record of the session we know of, and those we own (also from before an earlier leave).
        let records = Set((members + [me]).map { topics.member(id, $0) })
            .union(stateTopics)
            .union(context.retained.topics(under: sessionPrefix))
        await context.retained.clear(topics.announcement(id))
        for topic in records.sorted() { await context.retained.clear(topic) }
        context.report(self, .ended)
    }

    /// The session ended elsewhere: clear what we own of it (under a strict ACL only we can).
    func onEnded(by participant: Participant?) {
        let stateTopics = machine.withLock { $0.stateTopics }
        guard invalidate(.ended(by: participant)) else { return }
        // If we created the session or last changed its activity, it must not come back after a reconnect.
        context.retained.disown(topics.announcement(id))
        context.report(self, .ended)
        // Everything we own of the session: member record and state records, also those written before
        // an earlier leave() of this session.
        let owned = Set(context.retained.topics(under: sessionPrefix) + [topics.member(id, me)])
            .union(stateTopics.filter { $0.hasSuffix("/\(me)") })
        let retained = context.retained
        context.tasks.spawn {
            for topic in owned.sorted() { await retained.clear(topic) }
        }
    }

    /// Marks the session over locally: its sequences end, its topics are no longer read, and it no
    /// longer counts as shared. Returns false if it already was over.
    @discardableResult
    func invalidate(_ reason: GroupSessionState.InvalidationReason) -> Bool {
        var was = GroupSessionState.waiting
        apply { machine in
            was = machine.state
            return machine.invalidate(reason)
        }
        guard !was.isInvalidated else { return false }
        stopReading()
        context.report(self, .invalidated(wasJoined: was == .joined))
        return true
    }

    func stopReading() {
        subscription.withLock { $0?.unsubscribe() }
    }
}
