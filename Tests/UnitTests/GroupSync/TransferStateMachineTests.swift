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
        #expect(machine.start() == [.subscribe(0..<3)])
        var small = Self.machine(chunks: 2, window: 8)
        #expect(small.start() == [.subscribe(0..<2)])
    }

    /// Past the first window, chunks are requested once half the window is free, together; the last
    /// ones of the attachment as soon as they fit, however few.
    @Test func theWindowIsRefilledInHalves() {
        var machine = Self.machine(chunks: 14, window: 8)
        #expect(machine.start() == [.subscribe(0..<8)])
        for index in 0..<3 {
            #expect(
                machine.onChunk(index, Self.chunk(index), verified: true, now: 1) == [.unsubscribe(index), .deliver(Self.chunk(index))])
        }
        #expect(
            machine.onChunk(3, Self.chunk(3), verified: true, now: 1) == [.unsubscribe(3), .deliver(Self.chunk(3)), .subscribe(8..<12)])
        #expect(machine.onChunk(4, Self.chunk(4), verified: true, now: 1) == [.unsubscribe(4), .deliver(Self.chunk(4))], "one free")
        #expect(
            machine.onChunk(5, Self.chunk(5), verified: true, now: 1) == [.unsubscribe(5), .deliver(Self.chunk(5)), .subscribe(12..<14)])
        #expect(machine.onChunk(6, Self.chunk(6), verified: true, now: 1) == [.unsubscribe(6), .deliver(Self.chunk(6))], "all requested")
    }

    @Test func anEmptyAttachmentIsCompleteAtTheStart() {
        var machine = Self.machine(chunks: 0)
        #expect(machine.start() == [.complete])
        #expect(machine.isOver)
    }

    /// Chunks are handed over in order, each once; one ahead of its turn waits, and the window moves
    /// only as the first missing chunk comes in, so at most `window` chunks are ever held.
    @Test func chunksAreHandedOverInOrderAndTheWindowSlides() {
        var machine = Self.machine(chunks: 5)
        #expect(machine.start() == [.subscribe(0..<3)])
        #expect(machine.onChunk(2, Self.chunk(2), verified: true, now: 1) == [.unsubscribe(2)], "2 waits for 0 and 1")
        #expect(machine.onChunk(0, Self.chunk(0), verified: true, now: 2) == [.unsubscribe(0), .deliver(Self.chunk(0)), .subscribe(3..<4)])
        #expect(
            machine.onChunk(1, Self.chunk(1), verified: true, now: 3)
                == [.unsubscribe(1), .deliver(Self.chunk(1)), .deliver(Self.chunk(2)), .subscribe(4..<5)])
        #expect(machine.completedChunks == 3)
        #expect(machine.onChunk(1, Self.chunk(1), verified: true, now: 4) == [], "a duplicate is ignored")
        #expect(machine.onChunk(3, Self.chunk(3), verified: true, now: 5) == [.unsubscribe(3), .deliver(Self.chunk(3))])
        #expect(machine.onChunk(4, Self.chunk(4), verified: true, now: 6) == [.unsubscribe(4), .deliver(Self.chunk(4)), .complete])
        #expect(machine.isOver)
        #expect(machine.onChunk(4, Self.chunk(4), verified: true, now: 7) == [], "nothing after the end")
    }

    /// A chunk that fails its digest is given up and asked for again after a backoff that grows.
    @Test func aRejectedChunkIsRequestedAgainAfterABackoff() {
        var machine = Self.machine(chunks: 2)
        #expect(machine.start() == [.subscribe(0..<2)])
        #expect(machine.onChunk(0, Self.chunk(9), verified: false, now: 1) == [.unsubscribe(0), .retry(0, after: .milliseconds(50))])
        #expect(machine.onRetryDue(0) == [.subscribe(0..<1)])
        #expect(machine.onChunk(0, Self.chunk(9), verified: false, now: 2) == [.unsubscribe(0), .retry(0, after: .milliseconds(100))])
        #expect(machine.rejected == 2)
        #expect(machine.onChunk(0, Self.chunk(0), verified: true, now: 3) == [.unsubscribe(0), .deliver(Self.chunk(0))])
        #expect(machine.onRetryDue(0) == [], "a retry for a chunk already in asks for nothing")
    }

    /// No chunk for the stall timeout fails the load with the first chunk still missing; progress
    /// moves the deadline.
    @Test func aLoadWithoutProgressFails() {
        var machine = Self.machine(chunks: 4, window: 2, stall: 1_000)
        #expect(machine.start() == [.subscribe(0..<2)])
        #expect(machine.stallDeadline == 1_000)
        #expect(machine.onTick(now: 900) == [])
        #expect(
            machine.onChunk(0, Self.chunk(0), verified: true, now: 900) == [.unsubscribe(0), .deliver(Self.chunk(0)), .subscribe(2..<3)])
        #expect(machine.stallDeadline == 1_900)
        #expect(machine.onTick(now: 1_800) == [], "progress at 900 moved the deadline")
        #expect(machine.onTick(now: 1_900) == [.unsubscribe(1), .unsubscribe(2), .fail(missing: 1)])
        #expect(machine.isOver && machine.stallDeadline == nil)
        #expect(machine.onChunk(1, Self.chunk(1), verified: true, now: 2_000) == [])
    }

    @Test func cancellingGivesUpEveryRequest() {
        var machine = Self.machine(chunks: 4)
        #expect(machine.start() == [.subscribe(0..<3)])
        #expect(machine.onChunk(1, Self.chunk(1), verified: true, now: 1) == [.unsubscribe(1)])
        #expect(machine.cancel() == [.unsubscribe(0), .unsubscribe(2)])
        #expect(machine.cancel() == [])
    }
}
