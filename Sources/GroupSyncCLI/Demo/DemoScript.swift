import BrokerSupport
import Foundation
import GroupSync
import MQTT

/// A script `groupsync demo` runs: true when its verdict passes.
protocol DemoScript: Sendable {
    var stage: DemoStage { get }
    func run() async throws -> Bool
}

extension DemoScript {
    var timeline: Timeline { stage.timeline }
}
