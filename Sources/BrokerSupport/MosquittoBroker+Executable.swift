extension MosquittoBroker {
    /// Where mosquitto is looked for besides `PATH` (Debian installs it in /usr/sbin).
    static let searchDirectories = ["/usr/sbin", "/usr/local/sbin", "/opt/homebrew/sbin"]

    /// The path of the `mosquitto` broker executable, or nil when it is not installed.
    public static func findExecutable() -> String? {
        try? locate("mosquitto", extraDirectories: searchDirectories)
    }
}
