import Foundation
import Testing

/// Every command that talks to a broker exits within a bound when the broker is gone (killed) or frozen
/// (SIGSTOP): the coordinator's farewell (2 s) and a second for DISCONNECT, on end of input, Ctrl-C,
/// SIGTERM or SIGHUP (the terminal closed), on its own — not by the exit forced 5 s after a signal. What
/// it could not clear is left to the will and the records' expiry.
struct FarewellTests {
    enum Fate: String, Sendable { case killed, frozen }

    enum Stop: Sendable, CustomStringConvertible {
        case endOfInput
        case signal(Int32)

        var description: String {
            switch self {
            case .endOfInput: "EOF"
            case let .signal(number): number == SIGINT ? "SIGINT" : number == SIGTERM ? "SIGTERM" : "SIGHUP"
            }
        }
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var command: [String]
        var stop: Stop
        var fate: Fate
        /// A request written first (the bridge's), and what shows the command is running.
        var request: String? = nil
        var ready: @Sendable (String) -> Bool = { _ in true }

        var testDescription: String { "\(command.joined(separator: " ")), broker \(fate.rawValue), \(stop)" }
    }

    static let join: @Sendable (Stop, Fate) -> Case = { stop, fate in
        Case(command: ["join", "demo.app", "--as", "alice"], stop: stop, fate: fate, ready: { $0.hasPrefix("participants") })
    }
    static let bridge: @Sendable (Stop, Fate) -> Case = { stop, fate in
        Case(
            command: ["bridge", "--as", "bob"], stop: stop, fate: fate,
            request: #"{"id":1,"op":"start","activity":"demo.app","keys":["v"]}"#, ready: { $0.contains(#""id":1"#) })
    }

    static let cases: [Case] = [
        join(.endOfInput, .killed), join(.signal(SIGINT), .frozen), join(.signal(SIGTERM), .killed), join(.signal(SIGHUP), .frozen),
        bridge(.endOfInput, .frozen), bridge(.signal(SIGINT), .killed), bridge(.signal(SIGHUP), .frozen),
        Case(command: ["watch"], stop: .signal(SIGHUP), fate: .frozen),
        Case(command: ["watch"], stop: .signal(SIGINT), fate: .killed),
        Case(command: ["sessions", "--watch"], stop: .signal(SIGHUP), fate: .frozen),
        Case(command: ["sessions", "--watch"], stop: .signal(SIGTERM), fate: .killed),
        Case(command: ["dashboard"], stop: .signal(SIGHUP), fate: .frozen),
        Case(command: ["dashboard"], stop: .signal(SIGINT), fate: .killed),
    ]

    @Test(.needsOwnBroker("kills or freezes it"), arguments: cases) func aCommandExitsWithinItsBoundWhenTheBrokerIsGoneOrFrozen(
        _ test: Case
    ) async throws {
        try await MosquittoBroker.withBroker { broker in
            let group = "farewell-\(UInt32.random(in: 0...UInt32.max))"
            let child = try CLIProcess(test.command + ["--broker", broker.url, "--group", group])
            if let request = test.request { child.send(request) }
            _ = try await child.waitForLine(timeout: timeBound(.seconds(10)), test.ready)
            switch test.fate {
            case .killed: broker.kill()
            case .frozen: broker.pause()
            }
            let stopped = ContinuousClock.now
            switch test.stop {
            case .endOfInput: child.closeInput()
            case let .signal(number): child.signal(number)
            }
            let status = try await child.wait(timeout: timeBound(.seconds(6)))
            let took = ContinuousClock.now - stopped
            #expect(status == 0, "exit status (130: forced after 5 s)")
            // About 3 s alone (the farewell timeout, then DISCONNECT), and up to a second more with the whole
            // suite loading both cores. Under 5 s and not forced, it never waited on the broker.
            #expect(took < timeBound(.seconds(5)), "exited after \(took)")
            broker.resume()
        }
    }
}
