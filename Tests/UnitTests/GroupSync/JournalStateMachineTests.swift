import Foundation
import Testing

@testable import GroupSync
@testable import MQTT

/// The journal's list as records come and go, its checks of records against their topics, and its
/// limits, without a broker.
@Suite struct JournalStateMachineTests {
    static func record(_ content: Data, owner: String, time: Int64 = 1, chunkSize: Int = 4) -> Wire.JournalRecord {
        let chunks = stride(from: 0, to: content.count, by: chunkSize).map {
            SHA256.hex(content[$0..<min($0 + chunkSize, content.count)])
        }
        return Wire.JournalRecord(
            id: SHA256.hex(ofDigests: chunks), name: "n", type: "text/plain", size: Int64(content.count), chunkSize: Int64(chunkSize),
            chunks: chunks, added: HLCTimestamp(time: time, counter: 0, participant: owner))
    }

    /// The list an action hands over, as owners; nil when it hands over none.
    static func published(_ action: JournalStateMachine.Action) -> [String]? {
        guard case let .publish(list, _) = action else { return nil }
        return list.map(\.owner.id)
    }

    @Test func recordsAreListedInTheOrderTheyWereAddedAndRemovedWhenCleared() async throws {
        var journal = JournalStateMachine()
        let inbox = Inbox<[JournalAttachment]>()
        let first = journal.addListener(inbox)
        #expect(Self.published(first) == [], "the current list at once")
        first.perform()
        let late = Self.record(Data("second".utf8), owner: "bob", time: 20)
        let early = Self.record(Data("first".utf8), owner: "alice", time: 10)
        var actions = [journal.onRecord(late, digest: late.id, owner: "bob")]
        actions.append(journal.onRecord(early, digest: early.id, owner: "alice"))
        #expect(actions.map(Self.published) == [["bob"], ["alice", "bob"]])
        #expect(Self.published(journal.onRecord(early, digest: early.id, owner: "alice")) == nil, "a refresh changes nothing")
        #expect(journal.removed.isEmpty)
        actions.append(journal.onRecord(nil, digest: late.id, owner: "bob"))
        #expect(Self.published(actions[2]) == ["alice"])
        #expect(journal.removed == [JournalAttachment.ID(owner: Participant(id: "bob"), digest: late.id)])
        for action in actions { action.perform() }
        let end = journal.end()
        guard case let .finish(ended) = end else {
            Issue.record("end() finishes the sequences: \(end)")
            return
        }
        #expect(ended.count == 1)
        end.perform()
        var lists: [[String]] = []
        while let list = await inbox.next() { lists.append(list.map(\.owner.id)) }
        #expect(lists == [[], ["bob"], ["alice", "bob"], ["alice"]])
        #expect(journal.attachments.isEmpty)
    }

    /// A record is its owner's and its content's: on another owner's or another digest's topic, or
    /// inconsistent — its chunk digests not those its id is the digest of included — it is rejected and
    /// changes nothing.
    @Test func recordsThatDoNotMatchTheirTopicAreRejected() throws {
        var journal = JournalStateMachine()
        let record = Self.record(Data("content".utf8), owner: "alice")
        var short = record
        short.chunks.removeLast()
        var upper = record
        upper.chunks[0] = upper.chunks[0].uppercased()
        var swapped = record  // well formed, as many as the size needs, but not the chunks the id binds
        swapped.chunks.swapAt(0, 1)
        // As the session reads them: decoded by the strict reader first, a payload it refuses is malformed.
        func read(_ payload: Data, digest: String, owner: String) -> JournalStateMachine.Action {
            guard let decoded = Wire.decode(Wire.JournalRecord.self, from: payload) else { return journal.onMalformedRecord() }
            return journal.onRecord(decoded, digest: digest, owner: owner)
        }
        let actions = [
            read(try Wire.encode(record), digest: record.id, owner: "mallory"),
            read(try Wire.encode(record), digest: String(repeating: "0", count: 64), owner: "alice"),
            read(try Wire.encode(short), digest: record.id, owner: "alice"),
            read(try Wire.encode(upper), digest: record.id, owner: "alice"),
            read(try Wire.encode(swapped), digest: record.id, owner: "alice"),
            read(Data(#"{"v":2}"#.utf8), digest: record.id, owner: "alice"),
        ]
        #expect(actions.allSatisfy { if case .rejected = $0 { true } else { false } })
        #expect(journal.rejected == 6 && journal.attachments.isEmpty)
        #expect(Self.published(read(try Wire.encode(record), digest: record.id, owner: "alice")) == ["alice"])
        #expect(journal.rejected == 6 && journal.attachments.count == 1)
    }

    /// The strict reader checks a record's id against its chunk digests: one that differs is inconsistent
    /// (`wrong-shape`) whatever the topic says; an empty attachment's id is the SHA-256 of nothing.
    @Test func aRecordsIDIsTheDigestOfItsChunkDigests() throws {
        let record = Self.record(Data("0123456789".utf8), owner: "alice")
        #expect(record.chunks.count == 3 && record.id == SHA256.hex(ofDigests: record.chunks))
        #expect(try Wire.JournalRecord.read(try Wire.encode(record)) == record)
        var other = record
        other.id = SHA256.hex(Data("0123456789".utf8))  // the content's SHA-256 is not its id
        #expect(throws: Wire.Rejection.wrongShape) { try Wire.JournalRecord.read(try Wire.encode(other)) }
        other = record
        other.chunks[2] = SHA256.hex(Data("98".utf8))  // another last chunk
        #expect(throws: Wire.Rejection.wrongShape) { try Wire.JournalRecord.read(try Wire.encode(other)) }
        let empty = Self.record(Data(), owner: "alice")
        #expect(empty.chunks.isEmpty && empty.id == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(try Wire.JournalRecord.read(try Wire.encode(empty)) == empty)
    }

    @Test func theLimitsCountEveryonesAttachments() throws {
        var journal = JournalStateMachine()
        let bobs = Self.record(Data(repeating: 1, count: 60), owner: "bob")
        #expect(Self.published(journal.onRecord(bobs, digest: bobs.id, owner: "bob")) == ["bob"])
        let limits = GroupSessionJournal.Configuration(maximumAttachmentSize: 50, maximumSessionSize: 100, maximumAttachmentCount: 2)
        #expect(throws: GroupSyncError.journalLimitExceeded(.attachmentSize(size: 51, limit: 50))) {
            try journal.check(adding: 51, digest: "x", owner: "alice", limits: limits)
        }
        #expect(throws: GroupSyncError.journalLimitExceeded(.sessionSize(total: 101, limit: 100))) {
            try journal.check(adding: 41, digest: "x", owner: "alice", limits: limits)
        }
        try journal.check(adding: 40, digest: "x", owner: "alice", limits: limits)
        // Adding bob's own content again replaces it: it counts once.
        try journal.check(adding: 50, digest: bobs.id, owner: "bob", limits: limits)
        let alices = Self.record(Data(repeating: 2, count: 10), owner: "alice")
        #expect(
            Self.published(journal.onRecord(alices, digest: alices.id, owner: "alice")) == ["alice", "bob"],
            "added at the same time: by owner")
        #expect(throws: GroupSyncError.journalLimitExceeded(.attachmentCount(count: 3, limit: 2))) {
            try journal.check(adding: 1, digest: "y", owner: "carol", limits: limits)
        }
    }

    /// What `end()` clears: each record and the chunk topics it names.
    @Test func storedTopicsNameEveryChunk() throws {
        var journal = JournalStateMachine()
        let record = Self.record(Data("0123456789".utf8), owner: "alice")
        #expect(Self.published(journal.onRecord(record, digest: record.id, owner: "alice")) == ["alice"])
        let topics = GroupTopics(group: "g")
        #expect(
            journal.storedTopics(topics, session: "s") == [
                "groupsync/v2/g/s/s/journal/\(record.id)/alice",
                "groupsync/v2-chunks/g/s/\(record.id).0/alice",
                "groupsync/v2-chunks/g/s/\(record.id).1/alice",
                "groupsync/v2-chunks/g/s/\(record.id).2/alice",
            ])
        #expect(
            topics.parse("groupsync/v2/g/s/s/journal/\(record.id)/alice")
                == .journal(session: "s", attachment: record.id, owner: "alice"))
        #expect(topics.parse("groupsync/v2-chunks/g/s/\(record.id).0/alice") == nil, "chunks are not in the group's tree")
    }

    /// Where nothing is retained: an attachment is served by its active owners first, then by the active
    /// holders in rendezvous order for the loader; holders of bytes nobody lists any more are forgotten,
    /// and so are the bytes held.
    @Test func holdersServeInOrderAndAreForgottenWithTheirAttachment() throws {
        var journal = JournalStateMachine()
        let content = Data("shared bytes".utf8)
        let record = Self.record(content, owner: "alice")
        journal.onHave(record.id, from: "bob")
        #expect(journal.holders.isEmpty, "a $have of nothing listed is not kept")
        #expect(Self.published(journal.onRecord(record, digest: record.id, owner: "alice")) == ["alice"])
        for holder in ["bob", "carol", "dave"] { journal.onHave(record.id, from: holder) }
        let active: Set<String> = ["alice", "bob", "carol", "dave", "erin"]
        #expect(journal.servers(of: record.id, active: active, me: "erin").first == "alice", "the owner first")
        let holders = ["bob", "carol", "dave"].sorted { SessionStateMachine.rank("erin", $0) > SessionStateMachine.rank("erin", $1) }
        #expect(journal.servers(of: record.id, active: active, me: "erin") == ["alice"] + holders)
        #expect(journal.servers(of: record.id, active: ["bob", "erin"], me: "erin") == ["bob"], "only the active ones")
        #expect(journal.servers(of: record.id, active: ["erin"], me: "erin").isEmpty)

        journal.hold(try #require(HeldAttachment(record: record, bytes: .memory(content))))
        #expect(journal.heldAttachment(record.id)?.bytes == .memory(content))
        #expect(HeldAttachment(record: record, bytes: .memory(content.dropLast())) == nil, "bytes of another length than the record's")
        #expect(journal.listedHolders(me: "erin") == [Wire.Holders(id: record.id, participants: ["bob", "carol", "dave", "erin"])])
        #expect(Self.published(journal.onRecord(nil, digest: record.id, owner: "alice")) == [])
        #expect(journal.holders.isEmpty && journal.heldAttachment(record.id) == nil && journal.listedHolders(me: "erin").isEmpty)
    }

    /// What a holder serves is read in the layout it added or loaded the attachment by, whatever another
    /// record of the same digest claims; a file is read chunk by chunk and served only while each chunk
    /// still matches its digest.
    @Test func aHeldAttachmentIsServedInItsOwnLayoutWhileItMatches() throws {
        let content = Data((0..<40).map { UInt8($0) })
        let record = Self.record(content, owner: "alice", chunkSize: 10)
        // The same digests under a larger layout: consistent, and listed beside the real one.
        var claim = record
        (claim.chunkSize, claim.size, claim.added) = (20, 80, HLCTimestamp(time: 2, counter: 0, participant: "mallory"))
        #expect(claim.isConsistent)
        var journal = JournalStateMachine()
        #expect(Self.published(journal.onRecord(claim, digest: claim.id, owner: "mallory")) == ["mallory"])
        #expect(Self.published(journal.onRecord(record, digest: record.id, owner: "alice"))?.sorted() == ["alice", "mallory"])
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("held-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: file) }
        try content.write(to: file)
        journal.hold(try #require(HeldAttachment(record: record, bytes: .file(file))))
        let held = try #require(journal.heldAttachment(record.id))
        #expect(held.record == record)
        #expect((0..<4).map { held.wireChunk($0) } == (0..<4).map { content[($0 * 10)..<($0 * 10 + 10)] })
        #expect(held.wireChunk(4) == nil)
        var changed = content
        changed[15] ^= 0xff
        try changed.write(to: file)
        #expect(held.wireChunk(1) == nil && held.wireChunk(0) == content[0..<10], "a changed chunk is not served")
        try content.prefix(25).write(to: file)
        #expect(held.wireChunk(3) == nil, "nor one cut short")
    }
}
