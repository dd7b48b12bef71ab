import Testing

@testable import GroupSync

/// A load's chunk subscriptions: none outlives its request or the load, without a broker.
@Suite struct ChunkRequestsTests {
    /// A request for several chunks is unsubscribed once the last of them is given up, not before.
    @Test func aRequestIsHandedBackWhenItsLastChunkIsGivenUp() {
        var requests = ChunkRequests<String>()
        let (request, released) = requests.request(0..<3)
        let kept = requests.arrived(request, "s1")
        #expect(released.isEmpty && kept)
        let first = [requests.giveUp(0), requests.giveUp(2)]
        #expect(first == [nil, nil] && requests.isCovered(0), "chunk 1 is still wanted: the filters stay")
        let last = requests.giveUp(1)
        #expect(last == "s1" && !requests.isCovered(0) && !requests.isCovered(1))
        let again = requests.giveUp(1)
        #expect(again == nil)
    }

    /// Given up before the broker acknowledged it: refused when it arrives, and a new request for one of
    /// its chunks waits until then (it would share the filter).
    @Test func aRequestGivenUpBeforeItArrivesIsRefused() {
        var requests = ChunkRequests<String>()
        let (request, _) = requests.request(3..<4)
        let handed = requests.giveUp(3)
        #expect(handed == nil && requests.isCovered(3))
        let kept = requests.arrived(request, "s1")
        #expect(!kept && !requests.isCovered(3))
    }

    /// Asking again for a chunk gives it up from its earlier request.
    @Test func askingAgainReleasesTheEarlierRequest() {
        var requests = ChunkRequests<String>()
        let (first, _) = requests.request(5..<6)
        let kept = requests.arrived(first, "s1")
        #expect(kept)
        let (_, released) = requests.request(5..<6)
        #expect(released == ["s1"])
    }

    /// A failed subscription never arrives: it covers nothing, and giving up its chunks hands nothing back.
    @Test func aFailedRequestIsForgotten() {
        var requests = ChunkRequests<String>()
        let (request, _) = requests.request(2..<4)
        requests.fail(request)
        #expect(!requests.isCovered(2))
        let handed = [requests.giveUp(2), requests.giveUp(3)]
        #expect(handed == [nil, nil])
    }

    /// A retry for a chunk that a request still covers waits, and is handed back once the last request
    /// covering it ends: given up entirely, refused on arrival, or failed. Nothing polls.
    @Test func aDeferredRetryIsHandedBackWhenNoRequestCoversItsChunk() {
        var requests = ChunkRequests<String>()
        let (wide, _) = requests.request(0..<4)
        let (narrow, _) = requests.request(6..<7)
        let kept = requests.arrived(wide, "s1")
        let one = requests.giveUp(1)
        #expect(kept && one == nil, "chunks 0, 2 and 3 are still wanted from it")
        let deferred = [requests.deferRetry(1), requests.deferRetry(6), requests.deferRetry(5)]
        #expect(deferred == [true, true, false], "1 and 6 covered; nothing covers 5: its retry goes ahead")
        let none = requests.takeUncovered()
        let others = [requests.giveUp(0), requests.giveUp(2)]
        let stillNone = requests.takeUncovered()
        #expect(none.isEmpty && others == [nil, nil] && stillNone.isEmpty)
        let last = requests.giveUp(3)
        let wideEnded = requests.takeUncovered()
        #expect(last == "s1" && wideEnded == [1], "the wide request ended")
        requests.fail(narrow)
        let (failed, again) = (requests.takeUncovered(), requests.takeUncovered())
        #expect(failed == [6] && again.isEmpty, "handed back once")
    }

    @Test func closingHandsBackEveryLiveSubscriptionAndRefusesLaterOnes() {
        var requests = ChunkRequests<String>()
        let (one, _) = requests.request(0..<1)
        let (two, _) = requests.request(1..<2)
        let (three, _) = requests.request(2..<3)
        let kept = [requests.arrived(one, "s1"), requests.arrived(two, "s2")]
        #expect(kept == [true, true])
        let live = Set(requests.close())
        #expect(live == ["s1", "s2"])
        let late = requests.arrived(three, "s3")
        let again = requests.close()
        #expect(!late && again.isEmpty)
    }
}
