import Foundation
import GroupSync
import MQTT

/// The bridge's journal ops (docs/BRIDGE.md, "Journal"): files added to the joined session by path,
/// listed, loaded to a path with progress, removed by their owner. The session's ``GroupSessionJournal``
/// is followed from the join on: a `journal` event whenever its list changes.
extension Bridge {
    /// At most this many `progress` events per second of a load, besides its first and last.
    static let progressInterval: Duration = .milliseconds(100)

    /// Follows the joined session's journal: `journal` events from now on, and the current list now.
    func followJournal() {
        guard let joined = current, joined.journal == nil else { return }
        let session = joined.session
        let journal = GroupSessionJournal(session: session)
        let lists = journal.attachmentUpdates()
        let events = self.events
        current?.journal = journal
        current?.tasks.append(
            Task.detached {
                for await _ in lists { events.journal(of: journal, in: session) }
            })
        events.journal(of: journal, in: session)
    }

    private func requireJournal() throws(Failure) -> (Joined, GroupSessionJournal) {
        let joined = try requireSession()
        guard let journal = joined.journal else { throw Failure("session \(joined.session.id) has no journal") }
        return (joined, journal)
    }

    func attach(path: String, name: String?, mediaType: String?, metadata: [String: String]) async throws(Failure) -> [String: JSONValue] {
        let (joined, journal) = try requireJournal()
        let attachment: JournalAttachment
        do {
            attachment = try await journal.add(
                contentsOf: URL(fileURLWithPath: path), name: name, mediaType: mediaType ?? MediaType.guess(for: path), metadata: metadata)
        } catch {
            throw Failure("could not attach \(path): \(error)")
        }
        // Answers come after the effect: the journal's new list is reported first.
        events.journal(of: journal, in: joined.session)
        return ["session": .string(joined.session.id), "attachment": BridgeEvents.describe(attachment)]
    }

    func attachments() throws(Failure) -> [String: JSONValue] {
        let (joined, journal) = try requireJournal()
        return ["session": .string(joined.session.id), "attachments": .array(journal.attachments.map(BridgeEvents.describe))]
    }

    /// Starts loading an attachment to `path` and answers at once: the load goes on beside the requests
    /// that follow, reported — after the answer — by `progress` events and its `loaded` (or `error`)
    /// event, all carrying the `load` ID of the answer. It ends with the session.
    func load(digest: String, owner: String?, path: String) throws(Failure) -> [String: JSONValue] {
        let (joined, journal) = try requireJournal()
        let attachment = try Bridge.attachment(digest, owner: owner, in: journal, of: joined.session)
        let number = joined.loadCount + 1
        current?.loadCount = number
        let id = "l\(number)"
        let session = joined.session
        let events = self.events
        let about: [String: JSONValue] = ["load": .string(id), "digest": .string(attachment.digest), "owner": .string(attachment.owner.id)]
        let throttle = LockedValue(ProgressThrottle(interval: Bridge.progressInterval))
        let report = { @Sendable (event: String, fields: [String: JSONValue]) in
            events.load(event, about.merging(fields) { $1 }, in: session)
        }
        let (answered, release) = AsyncStream.makeStream(of: Void.self)
        afterAnswer.append(release)
        current?.tasks.append(
            Task.detached {
                for await _ in answered {}  // the answer with the load's ID goes first
                do {
                    try await journal.load(attachment, to: URL(fileURLWithPath: path)) { progress in
                        guard throttle.withLock({ $0.admits(progress) }) else { return }
                        report(
                            "progress",
                            [
                                "done": .int(Int64(progress.completedBytes)), "total": .int(Int64(progress.totalBytes)),
                                "rejected": .int(Int64(progress.rejectedChunks)),
                            ])
                    }
                    report("loaded", ["path": .string(path), "size": .int(Int64(attachment.size))])
                } catch {
                    report("error", ["message": .string("could not load \(attachment.name): \(error)")])
                }
            })
        var answer = about
        answer["session"] = .string(session.id)
        answer["attachment"] = BridgeEvents.describe(attachment)
        answer["path"] = .string(path)
        return answer
    }

    func detach(digest: String, owner: String?) async throws(Failure) -> [String: JSONValue] {
        let (joined, journal) = try requireJournal()
        let attachment = try Bridge.attachment(digest, owner: owner, in: journal, of: joined.session)
        do {
            try await journal.remove(attachment)
        } catch {
            throw Failure("could not remove \(attachment.name): \(error)")
        }
        events.journal(of: journal, in: joined.session)
        return ["session": .string(joined.session.id), "attachment": BridgeEvents.describe(attachment)]
    }

    /// The one attachment of `journal` whose digest starts with `digest`, of `owner` when given.
    private static func attachment(
        _ digest: String, owner: String?, in journal: GroupSessionJournal, of session: GroupSession<AnyGroupActivity>
    ) throws(Failure) -> JournalAttachment {
        let matches = journal.attachments.filter { $0.digest.hasPrefix(digest) && (owner == nil || $0.owner.id == owner) }
        let what = "\(digest.prefix(12))\(digest.count < 64 ? "…" : "")\(owner.map { " of \($0)" } ?? "")"
        guard let first = matches.first else { throw Failure("no attachment \(what) in the journal of session \(session.id)") }
        guard matches.count == 1 else {
            throw Failure("\(matches.count) attachments match \(what): give \"owner\", or more digits of \"digest\"")
        }
        return first
    }
}
