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

    /// The list an action hands over, as owners; nil when it hands over none.
    static func published(_ action: JournalStateMachine.Action) -> [String]? {
        guard case let .publish(list, _) = action else { return nil }
        return list.map(\.owner.id)
    }

    @Test func recordsAreListedInTheOrderTheyWereAddedAndRemovedWhenCleared() async throws {
        var journal = JournalStateMachine()
        let inbox = Inbox<[JournalAttachment]>()
        let (id, first) = journal.addListener(inbox)
        #expect(id != nil && Self.published(first) == [], "the current list at once")
        first.perform()
        let late = Self.record(Data("second".utf8), owner: "bob", time: 20)
        let early = Self.record(Data("first".utf8), owner: "alice", time: 10)
        var actions = [journal.onRecord(late, sha256: late.sha256, owner: "bob")]
        actions.append(journal.onRecord(early, sha256: early.sha256, owner: "alice"))
        #expect(actions.map(Self.published) == [["bob"], ["alice", "bob"]])
        #expect(Self.published(journal.onRecord(early, sha256: early.sha256, owner: "alice")) == nil, "a refresh changes nothing")
        #expect(journal.removed.isEmpty)
        actions.append(journal.onRecord(nil, sha256: late.sha256, owner: "bob"))
        #expect(Self.published(actions[2]) == ["alice"])
        #expect(journal.removed == [JournalAttachment.ID(owner: Participant(id: "bob"), sha256: late.sha256)])
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
    /// inconsistent, it is rejected and changes nothing.
    @Test func recordsThatDoNotMatchTheirTopicAreRejected() throws {
        var journal = JournalStateMachine()
        let record = Self.record(Data("content".utf8), owner: "alice")
        var short = record
        short.chunks.removeLast()
        var upper = record
        upper.chunks[0] = upper.chunks[0].uppercased()
        // As the session reads them: decoded by the strict reader first, a payload it refuses is malformed.
        func read(_ payload: Data, sha256: String, owner: String) -> JournalStateMachine.Action {
            guard let decoded = Wire.decode(Wire.JournalRecord.self, from: payload) else { return journal.onMalformedRecord() }
            return journal.onRecord(decoded, sha256: sha256, owner: owner)
        }
        let actions = [
            read(try Wire.encode(record), sha256: record.sha256, owner: "mallory"),
            read(try Wire.encode(record), sha256: String(repeating: "0", count: 64), owner: "alice"),
            read(try Wire.encode(short), sha256: record.sha256, owner: "alice"),
            read(try Wire.encode(upper), sha256: record.sha256, owner: "alice"),
            read(Data(#"{"v":2}"#.utf8), sha256: record.sha256, owner: "alice"),
        ]
        #expect(actions.allSatisfy { if case .rejected = $0 { true } else { false } })
        #expect(journal.rejected == 5 && journal.attachments.isEmpty)
        #expect(Self.published(read(try Wire.encode(record), sha256: record.sha256, owner: "alice")) == ["alice"])
        #expect(journal.rejected == 5 && journal.attachments.count == 1)
    }

    @Test func theLimitsCountEveryonesAttachments() throws {
        var journal = JournalStateMachine()
        let bobs = Self.record(Data(repeating: 1, count: 60), owner: "bob")
        #expect(Self.published(journal.onRecord(bobs, sha256: bobs.sha256, owner: "bob")) == ["bob"])
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
        #expect(
            Self.published(journal.onRecord(alices, sha256: alices.sha256, owner: "alice")) == ["alice", "bob"],
            "added at the same time: by owner")
        #expect(throws: GroupSyncError.journalLimitExceeded(.attachmentCount(count: 3, limit: 2))) {
            try journal.check(adding: 1, sha256: "y", owner: "carol", limits: limits)
        }
    }

    /// What `end()` clears: each record and the chunk topics it names.
    @Test func storedTopicsNameEveryChunk() throws {
        var journal = JournalStateMachine()
        let record = Self.record(Data("0123456789".utf8), owner: "alice")
        #expect(Self.published(journal.onRecord(record, sha256: record.sha256, owner: "alice")) == ["alice"])
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
