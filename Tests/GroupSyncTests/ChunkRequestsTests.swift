import Testing

@testable import GroupSync

/// A load's chunk subscriptions: none outlives its request or the load, without a broker.
@Suite struct ChunkRequestsTests {
    @Test func aLiveSubscriptionIsHandedBackWhenGivenUp() {
        var requests = ChunkRequests<String>()
        #expect(requests.arrived(1, "s1"))
        #expect(requests.abandon(1, chunk: 0) == "s1")
        #expect(!requests.isArriving(0))
    }

    /// Given up before the broker acknowledged it: refused when it arrives, and a new request for its
    /// chunk waits until then (it would share the filter).
    @Test func aSubscriptionGivenUpBeforeItArrivesIsRefused() {
        var requests = ChunkRequests<String>()
        #expect(requests.abandon(1, chunk: 3) == nil)
        #expect(requests.isArriving(3))
        #expect(!requests.arrived(1, "s1"))
        #expect(!requests.isArriving(3))
    }

    /// A failed subscription never arrives: giving it up leaves nothing waiting for it.
    @Test func aFailedSubscriptionIsForgotten() {
        var requests = ChunkRequests<String>()
        requests.fail(1)
        #expect(requests.abandon(1, chunk: 2) == nil)
        #expect(!requests.isArriving(2))
        #expect(requests.abandon(2, chunk: 4) == nil)
        requests.fail(2)
        #expect(!requests.isArriving(4))
    }

    @Test func closingHandsBackEveryLiveSubscriptionAndRefusesLaterOnes() {
        var requests = ChunkRequests<String>()
        #expect(requests.arrived(1, "s1") && requests.arrived(2, "s2"))
        #expect(Set(requests.close()) == ["s1", "s2"])
        #expect(!requests.arrived(3, "s3"))
        #expect(requests.close().isEmpty)
    }
}
