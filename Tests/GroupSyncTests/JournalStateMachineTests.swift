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
            sha256: SHA256.hex(content), name: "n", type: "text/plain", size: Int64(content.count), chunkSize: Int64(chunkSize),
            chunks: chunks, added: HLCTimestamp(time: time, counter: 0, participant: owner))
    }

    static func payload(_ record: Wire.JournalRecord) throws -> Data { try Wire.encode(record) }

    @Test func recordsAreListedInTheOrderTheyWereAddedAndRemovedByAnEmptyPayload() async throws {
        var journal = JournalStateMachine()
        let inbox = Inbox<[JournalAttachment]>()
        _ = journal.addListener(inbox)
        let late = Self.record(Data("second".utf8), owner: "bob", time: 20)
        let early = Self.record(Data("first".utf8), owner: "alice", time: 10)
        journal.onRecord(try Self.payload(late), sha256: late.sha256, owner: "bob")
        journal.onRecord(try Self.payload(early), sha256: early.sha256, owner: "alice")
        #expect(journal.attachments.map(\.owner.id) == ["alice", "bob"])
        journal.onRecord(try Self.payload(early), sha256: early.sha256, owner: "alice")  // a refresh changes nothing
        #expect(journal.removed.isEmpty)
        journal.onRecord(Data(), sha256: late.sha256, owner: "bob")
        #expect(journal.attachments.map(\.owner.id) == ["alice"])
        #expect(journal.removed == [JournalAttachment.ID(owner: Participant(id: "bob"), sha256: late.sha256)])
        journal.end().finishAll()
        var lists: [[String]] = []
        while let list = await inbox.next() { lists.append(list.map(\.owner.id)) }
        #expect(lists == [[], ["bob"], ["alice", "bob"], ["alice"]])
        #expect(journal.attachments.isEmpty)
    }

    /// A record is its owner's and its content's: on another owner's or another digest's topic, or
    /// inconsistent, it is rejected and changes nothing.
    @Test func recordsThatDoNotMatchTheirTopicAreRejected() throws {
        var journal = JournalStateMachine()
        let record = Self.record(Data("content".utf8), owner: "alice")
        journal.onRecord(try Self.payload(record), sha256: record.sha256, owner: "mallory")
        journal.onRecord(try Self.payload(record), sha256: String(repeating: "0", count: 64), owner: "alice")
        var short = record
        short.chunks.removeLast()
        journal.onRecord(try Self.payload(short), sha256: record.sha256, owner: "alice")
        var upper = record
        upper.chunks[0] = upper.chunks[0].uppercased()
        journal.onRecord(try Self.payload(upper), sha256: record.sha256, owner: "alice")
        journal.onRecord(Data(#"{"v":2}"#.utf8), sha256: record.sha256, owner: "alice")
        #expect(journal.rejected == 5 && journal.attachments.isEmpty)
        journal.onRecord(try Self.payload(record), sha256: record.sha256, owner: "alice")
        #expect(journal.rejected == 5 && journal.attachments.count == 1)
    }

    @Test func theLimitsCountEveryonesAttachments() throws {
        var journal = JournalStateMachine()
        let bobs = Self.record(Data(repeating: 1, count: 60), owner: "bob")
        journal.onRecord(try Self.payload(bobs), sha256: bobs.sha256, owner: "bob")
        let limits = GroupSessionJournal.Configuration(maximumAttachmentSize: 50, maximumSessionSize: 100, maximumAttachmentCount: 2)
        #expect(throws: GroupSyncError.journalLimitExceeded(.attachmentSize(size: 51, limit: 50))) {
            try journal.check(adding: 51, sha256: "x", owner: "alice", limits: limits)
        }
        #expect(throws: GroupSyncError.journalLimitExceeded(.sessionSize(total: 101, limit: 100))) {
            try journal.check(adding: 41, sha256: "x", owner: "alice", limits: limits)
        }
        try journal.check(adding: 40, sha256: "x", owner: "alice", limits: limits)
        // Adding bob's own content again replaces it: it counts once.
        try journal.check(adding: 50, sha256: bobs.sha256, owner: "bob", limits: limits)
        let alices = Self.record(Data(repeating: 2, count: 10), owner: "alice")
        journal.onRecord(try Self.payload(alices), sha256: alices.sha256, owner: "alice")
        #expect(throws: GroupSyncError.journalLimitExceeded(.attachmentCount(count: 3, limit: 2))) {
            try journal.check(adding: 1, sha256: "y", owner: "carol", limits: limits)
        }
    }

    /// What `end()` clears: each record and the chunk topics it names.
    @Test func storedTopicsNameEveryChunk() throws {
        var journal = JournalStateMachine()
        let record = Self.record(Data("0123456789".utf8), owner: "alice")
        journal.onRecord(try Self.payload(record), sha256: record.sha256, owner: "alice")
        let topics = GroupTopics(group: "g")
        #expect(
            journal.storedTopics(topics, session: "s") == [
                "groupsync/v2/g/s/s/journal/\(record.sha256)/alice",
                "groupsync/v2-chunks/g/s/\(record.sha256).0/alice",
                "groupsync/v2-chunks/g/s/\(record.sha256).1/alice",
                "groupsync/v2-chunks/g/s/\(record.sha256).2/alice",
            ])
        #expect(
            topics.parse("groupsync/v2/g/s/s/journal/\(record.sha256)/alice")
                == .journal(session: "s", attachment: record.sha256, owner: "alice"))
        #expect(topics.parse("groupsync/v2-chunks/g/s/\(record.sha256).0/alice") == nil, "chunks are not in the group's tree")
    }
}
