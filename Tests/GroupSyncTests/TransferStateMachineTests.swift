import Foundation
import Testing

@testable import GroupSync

/// One load's window, order, rejections and stalls, without a broker.
@Suite struct TransferStateMachineTests {
    static func machine(chunks: Int, window: Int = 3, stall: Int64 = 1_000) -> TransferStateMachine {
        TransferStateMachine(.init(chunkCount: chunks, window: window, stallTimeout: stall), now: 0)
    }

    static func chunk(_ index: Int) -> Data { Data([UInt8(index)]) }

    @Test func theFirstWindowIsRequestedAtOnce() {
        var machine = Self.machine(chunks: 10)
        #expect(machine.start().subscribe == [0, 1, 2])
        var small = Self.machine(chunks: 2, window: 8)
        #expect(small.start().subscribe == [0, 1])
    }

    @Test func anEmptyAttachmentIsDoneAtTheStart() {
        var machine = Self.machine(chunks: 0)
        let action = machine.start()
        #expect(action.done && action.subscribe.isEmpty)
    }

    /// Chunks are handed over in order, each once; one ahead of its turn waits, and the window moves
    /// only as the first missing chunk comes in, so at most `window` chunks are ever held.
    @Test func chunksAreHandedOverInOrderAndTheWindowSlides() {
        var machine = Self.machine(chunks: 5)
        _ = machine.start()
        let early = machine.onChunk(2, Self.chunk(2), verified: true, now: 1)
        #expect(early.deliver.isEmpty && early.unsubscribe == [2] && early.subscribe.isEmpty, "2 waits for 0 and 1")
        let first = machine.onChunk(0, Self.chunk(0), verified: true, now: 2)
        #expect(first.deliver == [Self.chunk(0)] && first.subscribe == [3])
        let second = machine.onChunk(1, Self.chunk(1), verified: true, now: 3)
        #expect(second.deliver == [Self.chunk(1), Self.chunk(2)] && second.subscribe == [4])
        #expect(machine.completedChunks == 3)
        #expect(machine.onChunk(1, Self.chunk(1), verified: true, now: 4) == .init(), "a duplicate is ignored")
        _ = machine.onChunk(3, Self.chunk(3), verified: true, now: 5)
        let last = machine.onChunk(4, Self.chunk(4), verified: true, now: 6)
        #expect(last.deliver == [Self.chunk(4)] && last.done)
        #expect(machine.onChunk(4, Self.chunk(4), verified: true, now: 7) == .init(), "nothing after the end")
    }

    /// A chunk that fails its digest is given up and asked for again after a backoff that grows.
    @Test func aRejectedChunkIsRequestedAgainAfterABackoff() {
        var machine = Self.machine(chunks: 2)
        _ = machine.start()
        let rejected = machine.onChunk(0, Self.chunk(9), verified: false, now: 1)
        #expect(rejected.unsubscribe == [0] && rejected.deliver.isEmpty && rejected.retry?.index == 0)
        #expect(rejected.retry?.after == .milliseconds(50))
        #expect(machine.onRetryDue(0).subscribe == [0])
        #expect(machine.onChunk(0, Self.chunk(9), verified: false, now: 2).retry?.after == .milliseconds(100))
        #expect(machine.rejected == 2)
        #expect(machine.onChunk(0, Self.chunk(0), verified: true, now: 3).deliver == [Self.chunk(0)])
        #expect(machine.onRetryDue(0) == .init(), "a retry for a chunk already in asks for nothing")
    }

    /// No chunk for the stall timeout fails the load with the first chunk still missing; progress
    /// resets the timer.
    @Test func aLoadWithoutProgressFails() {
        var machine = Self.machine(chunks: 4, window: 2, stall: 1_000)
        _ = machine.start()
        #expect(machine.onTick(now: 900) == .init())
        _ = machine.onChunk(0, Self.chunk(0), verified: true, now: 900)
        #expect(machine.onTick(now: 1_800) == .init(), "progress at 900 moved the deadline")
        let failed = machine.onTick(now: 1_900)
        #expect(failed.failedAt == 1 && failed.unsubscribe == [1, 2])
        #expect(machine.onChunk(1, Self.chunk(1), verified: true, now: 2_000) == .init())
    }

    @Test func cancellingGivesUpEveryRequest() {
        var machine = Self.machine(chunks: 4)
        _ = machine.start()
        _ = machine.onChunk(1, Self.chunk(1), verified: true, now: 1)
        #expect(machine.cancel().unsubscribe == [0, 2])
        #expect(machine.cancel() == .init())
    }
}
