import Testing

@testable import GroupSync

/// The entries a participant keeps per member of its group stay small: a thousand members make a
/// thousand of each (the memory bench holds a thousand participants in one session).
struct CompactStorageTests {
    @Test func perMemberEntriesKeepTheirSize() {
        #expect(MemoryLayout<SessionStateMachine.Peer>.stride == 16)
        #expect(MemoryLayout<CoordinatorStateMachine.Connection>.stride == 24)
    }

    @Test func aPackedOptionalHoldsNilZeroAndItsLargestValue() {
        var value = PackedOptional<Int32>(wrappedValue: nil)
        #expect(value.wrappedValue == nil)
        value.wrappedValue = 0
        #expect(value.wrappedValue == 0)
        value.wrappedValue = Int64(Int32.max)
        #expect(value.wrappedValue == Int64(Int32.max))
        value.wrappedValue = nil
        #expect(value.wrappedValue == nil)
    }

    @Test func aCompactInstantKeepsItsInstantToTheNanosecond() {
        let now = ContinuousClock.now
        for instant in [now, now + .nanoseconds(1), now - .seconds(86_400 * 365), now + .seconds(86_400 * 365)] {
            #expect(CompactInstant(wrappedValue: instant).wrappedValue == instant)
        }
    }

    @Test func aPeerIsActiveWhenItJoinedWithItsLiveConnection() {
        #expect(!SessionStateMachine.Peer(joined: 5).isActive)
        #expect(!SessionStateMachine.Peer(joined: 5, online: 6).isActive)
        #expect(SessionStateMachine.Peer(joined: 5, online: 5).isActive)
        #expect(SessionStateMachine.Peer().isEmpty && !SessionStateMachine.Peer(online: 0).isEmpty)
    }
}
