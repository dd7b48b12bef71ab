// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "GroupSync",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "GroupSync", targets: ["GroupSync"]),
        .library(name: "MQTT", targets: ["MQTT"]),
        .executable(name: "groupsync", targets: ["GroupSyncCLI"]),
        .executable(name: "groupsync-bench", targets: ["groupsync-bench"]),
    ],
    targets: [
        // libmosquitto, exactly as Debian's libmosquitto-dev ships it.
        .systemLibrary(
            name: "CMosquitto",
            pkgConfig: "libmosquitto",
            providers: [.apt(["libmosquitto-dev"]), .brew(["mosquitto"])]
        ),
        // OpenSSL's libcrypto, for SHA-256 (the shared journal's content addresses) and for initializing
        // OpenSSL before libmosquitto does (see `OpenSSLLibrary`): Debian's libssl-dev.
        .systemLibrary(
            name: "CCrypto",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"]), .brew(["openssl"])]
        ),
        // A Swift 6 async MQTT client on top of libmosquitto, and (with `package` access) the repository's
        // one deadline helper, which every other target reaches through it.
        .target(name: "MQTT", dependencies: ["CMosquitto", "CCrypto"]),
        // Starts and stops a real mosquitto broker: what `groupsync demo` needs, shared with the tests and
        // the bench. (It uses the MQTT target's LockedValue: ThreadSanitizer cannot
        // see Synchronization.Mutex on Linux.)
        .target(name: "BrokerSupport", dependencies: ["MQTT"]),
        // What only the tests and the bench use (ChildProcess, TestPKI, Collector, time bounds, file limits).
        // Never a dependency of a shipped product.
        .target(name: "GroupSyncTestSupport", dependencies: ["BrokerSupport", "MQTT"]),
        // SharePlay-style group sessions over MQTT.
        .target(name: "GroupSync", dependencies: ["MQTT", "CCrypto"]),
        // The shipped tool: links BrokerSupport for `groupsync broker` and `demo`, never the test support.
        .executableTarget(name: "GroupSyncCLI", dependencies: ["GroupSync", "MQTT", "BrokerSupport"]),
        .executableTarget(
            name: "groupsync-bench",
            dependencies: ["GroupSync", "MQTT", "BrokerSupport", "GroupSyncTestSupport", "CMosquitto"],
            path: "Benchmarks/groupsync-bench"
        ),
        // The pure logic (state machines, codecs, clocks, topics), without a broker: `swift test --filter UnitTests`.
        .testTarget(name: "UnitTests", dependencies: ["GroupSync", "MQTT", "BrokerSupport", "GroupSyncTestSupport"]),
        .testTarget(name: "MQTTTests", dependencies: ["MQTT", "BrokerSupport", "GroupSyncTestSupport", "CMosquitto"]),
        .testTarget(name: "GroupSyncTests", dependencies: ["GroupSync", "MQTT", "BrokerSupport", "GroupSyncTestSupport"]),
        // Runs the built `groupsync` executable end to end (scripts/test.sh builds it first).
        .testTarget(name: "CLITests", dependencies: ["GroupSync", "MQTT", "BrokerSupport", "GroupSyncTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
