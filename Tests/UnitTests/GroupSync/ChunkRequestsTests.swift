import Testing

@testable import GroupSync

/// A load's chunk subscriptions: none outlives its request or the load, without a broker.
@Suite struct ChunkRequestsTests {
    @Test func aLiveSubscriptionIsHandedBackWhenGivenUp() {
        var requests = ChunkRequests<String>()
        let kept = requests.arrived(1, "s1")
        let handed = requests.abandon(1, chunk: 0)
        #expect(kept && handed == "s1")
        #expect(!requests.isArriving(0))
    }

    /// Given up before the broker acknowledged it: refused when it arrives, and a new request for its
    /// chunk waits until then (it would share the filter).
    @Test func aSubscriptionGivenUpBeforeItArrivesIsRefused() {
        var requests = ChunkRequests<String>()
        let handed = requests.abandon(1, chunk: 3)
        #expect(handed == nil && requests.isArriving(3))
        let kept = requests.arrived(1, "s1")
        #expect(!kept && !requests.isArriving(3))
    }

    /// A failed subscription never arrives: giving it up leaves nothing waiting for it, in either order.
    @Test func aFailedSubscriptionIsForgotten() {
        var requests = ChunkRequests<String>()
        requests.fail(1)
        let first = requests.abandon(1, chunk: 2)
        #expect(first == nil && !requests.isArriving(2))
        let second = requests.abandon(2, chunk: 4)
        requests.fail(2)
        #expect(second == nil && !requests.isArriving(4))
    }

    @Test func closingHandsBackEveryLiveSubscriptionAndRefusesLaterOnes() {
        var requests = ChunkRequests<String>()
        let kept = [requests.arrived(1, "s1"), requests.arrived(2, "s2")]
        #expect(kept == [true, true])
        let live = Set(requests.close())
        #expect(live == ["s1", "s2"])
        let late = requests.arrived(3, "s3")
        let again = requests.close()
        #expect(!late && again.isEmpty)
    }
}
