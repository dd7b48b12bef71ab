import Foundation

/// Runs a command-line tool (openssl, mosquitto_passwd) to completion, with its standard output and
/// error captured together for the error message.
struct ToolRun {
    let status: Int32
    let output: String

    init(_ tool: String, _ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        status = process.terminationStatus
    }
}
