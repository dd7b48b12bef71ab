import Foundation
import MQTT
import Testing

@testable import GroupSync

/// The session's runtime without a broker: what it does with what its machine returns.
@Suite struct SessionCoreTests {
    /// A joined session of `alice` on a client that never connects.
    static func joinedCore() throws -> SessionCore {
        let client = try MQTTClient(configuration: .init())
        let context = SessionContext(
            client: client, topics: GroupTopics(group: "g"), me: Participant(id: "alice"), epoch: 1, clock: SystemWallClock(),
            hlc: LockedValue(HybridLogicalClock(participant: "alice")), outbox: .init(), catchUpTimeout: .seconds(1),
            farewellTimeout: .seconds(2),
            positionInterval: .seconds(60), onRejected: nil, keyring: nil, retained: RetainedRecords(client: client),
            announcers: { _ in [] },
            tasks: BackgroundTasks(),
            report: { _, _ in })
        let core = SessionCore(
            context: context, announcement: SessionStateMachineTests.announcement, presence: ["alice": 1])
        #expect(core.locked.withLock { $0.machine.onJoinStarted(barrier: Inbox(), caughtUp: Inbox()) } == .proceed)
        core.perform { $0.onJoined(acceptingCatchUpsUntil: 0) }
        #expect(core.isJoined)
        return core
    }

    /// Inputs of many threads hand over outside the lock, yet every sequence gets them in the order the
    /// machine applied them: a value sequence sees only ever newer values, and ends on the value the
    /// machine holds.
    @Test func handOversKeepTheMachinesOrderAcrossThreads() async throws {
        let core = try Self.joinedCore()
        let values = core.listen(.values(key: "k"))
        let (writers, writes) = (8, 20_000)
        await withTaskGroup(of: Void.self) { group in
            for writer in 0..<writers {
                group.addTask {
                    for write in 0..<writes {
                        // Clocks interleave across writers: many writes lose, the winners grow.
                        let time = Int64(write * writers + (write % 2 == 0 ? writer : writers - 1 - writer))
                        let record = Wire.StateRecord(
                            key: "k", value: .int(time), clock: HLCTimestamp(time: time, counter: 0, participant: "w\(writer)"))
                        core.perform { $0.onLocalWrite(record, topic: "t\(writer)") }
                    }
                }
            }
        }
        core.invalidate(.left)
        var clocks: [HLCTimestamp] = []
        while let update = await values.next() {
            if case let .value(record?) = update { clocks.append(record.clock) }
        }
        #expect(!clocks.isEmpty)
        #expect(zip(clocks, clocks.dropFirst()).allSatisfy { $0 < $1 }, "only ever newer values")
        #expect(clocks.last == core.read { $0.states["k"]?.clock }, "ends on the value the machine holds")
    }
}
