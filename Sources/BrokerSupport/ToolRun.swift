/// Runs a command-line tool (openssl, mosquitto_passwd) to completion, with its standard output and
/// error captured together for the error message.
struct ToolRun {
    /// The exit status, or the number of the signal that killed the tool (-1 if unknown): 0 on success.
    let status: Int32
    let output: String

    init(_ tool: String, _ arguments: [String]) throws {
        let run = try ChildProcess.run(tool, arguments)
        switch run.termination {
        case .exited(let status), .signalled(let status): self.status = status
        case .unknown: status = -1
        }
        output = String(decoding: run.output, as: UTF8.self)
    }
}
