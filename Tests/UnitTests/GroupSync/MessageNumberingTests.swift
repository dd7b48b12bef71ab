import Testing

@testable import GroupSync

/// When a sender states its streams' position: after each burst of reliable messages, 1, 3, 9 and 27
/// intervals after its last message, and not again until the next one.
@Suite struct MessageNumberingTests {
    @Test func thePositionIsStatedAfterEachBurstOnItsSchedule() {
        var numbering = MessageNumbering(positionInterval: .seconds(1))
        let start = ContinuousClock.now
        #expect(numbering.nextPositionDue == nil, "nothing sent: nothing to state")
        #expect(numbering.numberedReliable(at: start) == start + .seconds(1))
        // The burst goes on: counted from its end.
        #expect(numbering.numberedReliable(at: start + .milliseconds(500)) == start + .milliseconds(1_500))
        let end = start + .milliseconds(500)
        var stated: [Duration] = []
        var early: [Bool] = []
        var now = start
        while let due = numbering.nextPositionDue {
            early.append(numbering.isPositionDue(at: due - .milliseconds(1)))
            now = due
            if numbering.isPositionDue(at: now) { stated.append(now - end) }
        }
        #expect(stated == [.seconds(1), .seconds(3), .seconds(9), .seconds(27)])
        #expect(early == [false, false, false, false])
        let later = numbering.isPositionDue(at: now + .seconds(1_000))
        #expect(!later, "then nothing until the next burst")
    }

    @Test func aLateWakeUpStatesThePositionOnceForEveryTimePassed() {
        var numbering = MessageNumbering(positionInterval: .seconds(1))
        let start = ContinuousClock.now
        #expect(numbering.numberedReliable(at: start) == start + .seconds(1))
        let due = numbering.isPositionDue(at: start + .seconds(10))
        #expect(due, "1, 3 and 9 passed: stated once")
        #expect(numbering.nextPositionDue == start + .seconds(27))
    }
}
