import Foundation
import MQTT

/// The journal of one session as this participant knows it: every attachment's record, from the journal
/// topics' retained and live messages, and the sequences that follow the list. Pure logic: the session
/// feeds it the records it reads (decoded), ``GroupSessionJournal`` what it adds and removes; each input
/// says which sequences get which list, and the caller hands it over.
struct JournalStateMachine {
    enum State {
        /// Following the session's journal topics.
        case following(attachments: [JournalAttachment.ID: JournalAttachment])
        /// The session is over for us: the list is empty and every sequence has ended.
        case over
    }

    /// What the caller does after an input.
    enum Action {
        case none
        /// Hand `list` to these sequences.
        case publish([JournalAttachment], to: [Inbox<[JournalAttachment]>])
        /// End these sequences.
        case finish([Inbox<[JournalAttachment]>])
        /// The record was not one (malformed, inconsistent, or not matching its topic): count and
        /// report it; nothing changed.
        case rejected

        /// Hands the lists over or ends the sequences: outside the caller's lock (a sequence's
        /// termination handler takes it), in the order the machine made them.
        func perform() {
            switch self {
            case let .publish(list, inboxes): for inbox in inboxes { inbox.yield(list) }
            case let .finish(inboxes): for inbox in inboxes { inbox.finish() }
            case .none, .rejected: break
            }
        }
    }

    private(set) var state = State.following(attachments: [:])
    private var listeners = ListenerRegistry<Inbox<[JournalAttachment]>>()
    /// Journal records rejected: malformed, inconsistent, or not matching their topic.
    private(set) var rejected = 0
    /// Attachments removed while we followed the journal (until added again): a load of one fails at once
    /// instead of waiting for chunks that are gone. An attachment not listed yet is not one of them.
    private(set) var removed: Set<JournalAttachment.ID> = []
    /// Where nothing is retained: what we hold, by digest — our own attachments (what the app handed to
    /// `add`) and those we loaded —, which we serve to loaders (`$chunks`) while joined.
    private(set) var held: [String: HeldAttachment] = [:]
    /// Where nothing is retained: who besides the owners holds each listed attachment's bytes (`$have`).
    private(set) var holders: [String: Set<String>] = [:]
    /// The chunks asked of us and not yet handed to the connection, by digest: one serving task per
    /// digest takes them in order (``nextToServe(_:)``). A chunk asked for again before it went out goes
    /// out once: every loader that asked had subscribed before asking, so that one publication reaches all.
    private(set) var serving: [String: Set<Int>] = [:]

    /// The attachments, in the order they were added (by their `added` clock).
    var attachments: [JournalAttachment] {
        guard case let .following(attachments) = state else { return [] }
        return attachments.values.sorted { ($0.added, $0.owner.id) < ($1.added, $1.owner.id) }
    }

    /// The retained topics the journal's records stand on, with the chunk topics they name: what ending
    /// the session clears.
    func storedTopics(_ topics: GroupTopics, session: String) -> [String] {
        guard case let .following(attachments) = state else { return [] }
        return attachments.values.flatMap { attachment in
            JournalStateMachine.topics(of: attachment.record, topics, session: session)
        }
    }

    /// The journal record's topic and its chunks' topics.
    static func topics(of record: Wire.JournalRecord, _ topics: GroupTopics, session: String) -> [String] {
        let owner = record.added.participant
        return [topics.journal(session, attachment: record.id, owner: owner)]
            + record.chunks.indices.map { topics.chunk(session, attachment: record.id, index: $0, owner: owner) }
    }

    /// Throws the limit that adding `size` bytes by `owner` would exceed (an attachment that replaces
    /// the owner's attachment of the same digest counts once).
    func check(adding size: Int, digest: String, owner: String, limits: GroupSessionJournal.Configuration) throws(GroupSyncError) {
        guard size <= limits.maximumAttachmentSize else {
            throw .journalLimitExceeded(.attachmentSize(size: size, limit: limits.maximumAttachmentSize))
        }
        guard case let .following(attachments) = state else { throw .sessionInvalidated }
        let others = attachments.filter { $0.key != JournalAttachment.ID(owner: Participant(id: owner), digest: digest) }
        let total = others.values.reduce(size) { $0 + $1.size }
        guard total <= limits.maximumSessionSize else {
            throw .journalLimitExceeded(.sessionSize(total: total, limit: limits.maximumSessionSize))
        }
        guard others.count + 1 <= limits.maximumAttachmentCount else {
            throw .journalLimitExceeded(.attachmentCount(count: others.count + 1, limit: limits.maximumAttachmentCount))
        }
    }

    // MARK: - Inputs

    /// A record on `owner`'s journal topic of `digest` (nil: the topic was cleared, the attachment
    /// removed). One that is inconsistent or does not match its topic is rejected and changes nothing;
    /// a change gives the new list to every sequence.
    mutating func onRecord(_ record: Wire.JournalRecord?, digest: String, owner: String) -> Action {
        guard case var .following(attachments) = state else { return .none }
        let id = JournalAttachment.ID(owner: Participant(id: owner), digest: digest)
        if let record {
            guard record.matches(attachment: digest, owner: owner) else { return onMalformedRecord() }
            let attachment = JournalAttachment(record: record)
            guard attachments[id] != attachment else { return .none }  // a refresh
            attachments[id] = attachment
            removed.remove(id)
        } else {
            guard attachments.removeValue(forKey: id) != nil else { return .none }
            removed.insert(id)
        }
        state = .following(attachments: attachments)
        if listed(digest) == nil {  // the last attachment of these bytes: nobody asks for them any more
            held[digest] = nil
            holders[digest] = nil
            serving[digest] = nil
        }
        return .publish(self.attachments, to: listeners.all)
    }

    /// Where nothing is retained, we serve `attachment` (``held``) until no attachment of its digest is
    /// listed any more, or the session is over for us.
    mutating func hold(_ attachment: HeldAttachment) {
        guard case .following = state else { return }
        held[attachment.digest] = attachment
    }

    /// We no longer hold `digest` (its file changed or went): we serve it no more.
    mutating func release(_ digest: String) {
        held[digest] = nil
        serving[digest] = nil
    }

    /// What we hold of `digest`, if it is listed.
    func heldAttachment(_ digest: String) -> HeldAttachment? {
        listed(digest) == nil ? nil : held[digest]
    }

    /// Chunks `range` of `digest` are asked of us (we hold it); true when no serving task runs for it yet:
    /// the caller starts one.
    mutating func onChunksAsked(_ digest: String, _ range: Range<Int>) -> Bool {
        let starts = serving[digest] == nil
        serving[digest, default: []].formUnion(range)
        return starts
    }

    /// For the serving task of `digest`: the next chunk to publish, or nil — no chunk left, or the bytes
    /// no longer held — and the task ends.
    mutating func nextToServe(_ digest: String) -> Int? {
        guard held[digest] != nil, let next = serving[digest]?.min() else {
            serving[digest] = nil
            return nil
        }
        serving[digest]?.remove(next)
        return next
    }

    private func listed(_ digest: String) -> JournalAttachment? {
        guard case let .following(attachments) = state else { return nil }
        return attachments.values.first { $0.digest == digest }
    }

    /// `participant` holds the bytes of `digest` (a `$have`, or a catch-up's holders): kept while the
    /// digest is listed.
    mutating func onHave(_ digest: String, from participant: String) {
        guard listed(digest) != nil else { return }
        holders[digest, default: []].insert(participant)
    }

    /// Who can serve `digest`, among `active`, `me` aside: its owners first (by ID), then the other
    /// holders, by rendezvous rank for `me` (so that loaders spread over them).
    func servers(of digest: String, active: Set<String>, me: String) -> [String] {
        guard case let .following(attachments) = state else { return [] }
        let owners = Set(attachments.values.filter { $0.digest == digest }.map(\.owner.id))
        let others = (holders[digest] ?? []).subtracting(owners)
        return owners.filter { active.contains($0) && $0 != me }.sorted()
            + others.filter { active.contains($0) && $0 != me }.sorted {
                SessionStateMachine.rank(me, $0) > SessionStateMachine.rank(me, $1)
            }
    }

    /// For a catch-up by `me`: who holds each listed attachment (`me` among them where it does).
    func listedHolders(me: String) -> [Wire.Holders] {
        var all = holders
        for digest in held.keys { all[digest, default: []].insert(me) }
        return all.filter { listed($0.key) != nil && !$0.value.isEmpty }.sorted { $0.key < $1.key }
            .map { Wire.Holders(id: $0.key, participants: $0.value.sorted()) }
    }

    /// A message on a journal topic that does not decode as a record.
    mutating func onMalformedRecord() -> Action {
        rejected += 1
        return .rejected
    }

    /// A new sequence: it gets the current list at once, then every change.
    mutating func addListener(_ inbox: Inbox<[JournalAttachment]>) -> Action {
        guard case .following = state else { return .finish([inbox]) }
        listeners.add(inbox, id: ObjectIdentifier(inbox))
        return .publish(attachments, to: [inbox])
    }

    /// The sequence of `inbox` ended.
    mutating func removeListener(_ inbox: ObjectIdentifier) { _ = listeners.remove(inbox) }

    /// The session is over for us: the list empties and every sequence ends.
    mutating func end() -> Action {
        guard case .following = state else { return .none }
        state = .over
        held = [:]
        holders = [:]
        serving = [:]
        return .finish(listeners.removeAll())
    }
}
