import BrokerSupport
import Foundation
import Synchronization
import Testing

@testable import GroupSync

/// The queue under every `messages(of:)` sequence: AsyncStream's semantics, without a broker.
@Suite(.timeLimit(.minutes(timeLimitMinutes(1)))) struct InboxTests {
    final class Flag: Sendable {
        let count = Atomic<Int>(0)
        func raise() { count.add(1, ordering: .relaxed) }
        var value: Int { count.load(ordering: .relaxed) }
    }

    @Test func deliversInOrderWhatWasYieldedBeforeAndWhileWaiting() async throws {
        let inbox = Inbox<Int>()
        for value in 0..<300 { inbox.yield(value) }  // crosses the compaction threshold
        var received: [Int] = []
        for _ in 0..<150 { received.append(await inbox.next()!) }
        for value in 300..<600 { inbox.yield(value) }
        let consumer = Task {
            var rest: [Int] = []
            while let value = await inbox.next() { rest.append(value) }
            return rest
        }
        for value in 600..<1000 { inbox.yield(value) }
        inbox.finish()
        received += await consumer.value
        #expect(received == Array(0..<1000))
    }

    @Test func aLimitedInboxKeepsTheNewest() async throws {
        let inbox = Inbox<Int>(keepingNewest: 2)
        for value in 0..<1000 { inbox.yield(value) }
        #expect(await inbox.next() == 998)
        inbox.yield(1000)
        #expect(await inbox.next() == 999)
        #expect(await inbox.next() == 1000)
        let latest = Inbox<Int>(keepingNewest: 1)
        for value in 0..<10 { latest.yield(value) }
        latest.finish()
        #expect(await latest.next() == 9)
        #expect(await latest.next() == nil)
    }

    @Test func finishWakesAWaiterAndRunsTheHandlerOnce() async throws {
        let inbox = Inbox<Int>()
        let ended = Flag()
        inbox.onTermination { ended.raise() }
        let consumer = Task { await inbox.next() }  // waiting in next(), or about to call it
        inbox.finish()
        inbox.finish()
        #expect(await consumer.value == nil)
        inbox.yield(1)  // ignored once ended
        #expect(await inbox.next() == nil)
        #expect(ended.value == 1)
        let late = Flag()
        inbox.onTermination { late.raise() }  // registered after the end: runs at once
        #expect(late.value == 1)
    }

    @Test func cancellingTheConsumerEndsTheInbox() async throws {
        let inbox = Inbox<Int>()
        let ended = Flag()
        inbox.onTermination { ended.raise() }
        let consumer = Task { await inbox.next() }
        consumer.cancel()
        #expect(await consumer.value == nil)
        #expect(ended.value == 1)
        inbox.yield(7)
        #expect(await inbox.next() == nil)
    }

    /// The no-wait path must not keep a cancelled consumer going while the producer keeps up.
    @Test func aCancelledConsumerEndsEvenWhileElementsKeepComing() async throws {
        let inbox = Inbox<Int>(keepingNewest: 1)
        let ended = Flag()
        inbox.onTermination { ended.raise() }
        let received = await Task {
            withUnsafeCurrentTask { $0?.cancel() }
            var count = 0
            inbox.yield(0)
            while await inbox.next() != nil {
                count += 1
                if count == 100 { break }
                inbox.yield(count)
            }
            return count
        }.value
        #expect(received <= 1, "what was buffered when it was cancelled, then the end")
        #expect(ended.value == 1)
    }

    @Test func droppingTheConsumerEndsTheInbox() async throws {
        let inbox = Inbox<Int>()
        let ended = Flag()
        inbox.onTermination { ended.raise() }
        var consumer: Inbox<Int>.Consumer? = Inbox.Consumer(inbox)
        #expect(consumer != nil)
        consumer = nil
        #expect(ended.value == 1)
    }

    @Test func manyElementsAcrossThreadsArriveOnceInOrder() async throws {
        let inbox = Inbox<Int>()
        let count = 50_000
        let producer = Thread {
            for value in 0..<count { inbox.yield(value) }
            inbox.finish()
        }
        producer.start()
        var expected = 0
        while let value = await inbox.next() {
            #expect(value == expected)
            expected += 1
        }
        #expect(expected == count)
    }
}
