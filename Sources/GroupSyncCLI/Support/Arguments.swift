/// Command-line arguments: `--name value`, `--flag`, `--name=value` and positionals, parsed against the
/// options a command declares so that typos are usage errors (exit 2), not silent defaults.
struct Arguments {
    /// Each value option's values, in the order given.
    private var values: [String: [String]] = [:]
    private(set) var flags: Set<String> = []
    private(set) var positionals: [String] = []
    /// Value options that may be given more than once (the others once at most).
    static let repeatable: Set<String> = ["broker"]

    /// Parses `arguments` for a command with the given value options and flags (names without `--`), and
    /// at most `positionals` arguments that are neither: more is a usage error, never silently ignored;
    /// so is an option given twice, unless it is ``repeatable``.
    init(_ arguments: [String], options: Set<String>, flags allowedFlags: Set<String>, positionals allowed: Int = 0) throws(UsageError) {
        var remaining = arguments[...]
        while let argument = remaining.popFirst() {
            guard argument.hasPrefix("--"), argument.count > 2 else {
                guard positionals.count < allowed else { throw UsageError("unexpected argument '\(argument)'") }
                positionals.append(argument)
                continue
            }
            var name = String(argument.dropFirst(2))
            var inlineValue: String?
            if let equals = name.firstIndex(of: "=") {
                inlineValue = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            if allowedFlags.contains(name) && inlineValue == nil {
                flags.insert(name)
            } else if options.contains(name) {
                guard let value = inlineValue ?? remaining.popFirst() else { throw UsageError("--\(name) needs a value") }
                guard values[name] == nil || Arguments.repeatable.contains(name) else { throw UsageError("--\(name) is given twice") }
                values[name, default: []].append(value)
            } else {
                throw UsageError("unknown option --\(name)")
            }
        }
    }

    /// The option's value (the last one, for a repeatable option).
    func value(_ name: String) -> String? { values[name]?.last }
    /// Every value of a repeatable option, in the order given.
    func allValues(_ name: String) -> [String] { values[name] ?? [] }
    func has(_ flag: String) -> Bool { flags.contains(flag) }

    func integer(_ name: String, default fallback: Int, range: ClosedRange<Int>) throws(UsageError) -> Int {
        guard let text = value(name) else { return fallback }
        guard let number = Int(text), range.contains(number) else {
            throw UsageError("--\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }
}

/// A mistake in how the command was called: printed with the command's usage, exit code 2.
struct UsageError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A failure while running: printed as one line, with its exit code.
struct CommandFailure: Error, CustomStringConvertible {
    let description: String
    let exitCode: Int32
    init(_ description: String, exitCode: Int32 = 1) {
        self.description = description
        self.exitCode = exitCode
    }
}
