import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The one `posix_spawn` routine of the repository: ``MosquittoBroker`` starts the broker and its
/// watchdog through it, the test support's `ChildProcess` every other child.
///
/// A spawned process inherits only its three standard descriptors (nothing else of this process, whose
/// other descriptors may be pipes of concurrently spawned children), starts with an empty signal mask
/// and default handlers for the usual termination signals (the thread calling this may block or ignore
/// some), and gets the environment it is given.
public enum Spawn {
    /// Why a process or a pipe could not be made.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public let message: String

        public var description: String { message }
    }

    /// What one of the spawned process's standard descriptors is connected to.
    public enum Redirect: Sendable {
        /// `/dev/null`.
        case nullDevice
        /// A duplicate of this descriptor of the calling process (which stays open here: the caller
        /// closes it once the process is spawned).
        case descriptor(Int32)
        /// The file at this path, created if needed (mode 0644) and appended to.
        case appending(toFile: String)
        /// For standard error only: wherever standard output goes.
        case standardOutput
    }

    /// Spawns `path` with `arguments` and returns its PID.
    ///
    /// - Parameters:
    ///   - environment: The child's environment; nil for this process's.
    ///   - newProcessGroup: Whether the child leads a process group of its own (then a terminal's ^C,
    ///     sent to the foreground group, does not reach it).
    /// - Throws: ``Failure`` when `posix_spawn` fails (the executable is missing, say).
    public static func process(
        _ path: String, _ arguments: [String], environment: [String: String]? = nil,
        stdin: Redirect, stdout: Redirect, stderr: Redirect, newProcessGroup: Bool
    ) throws(Failure) -> pid_t {
        #if canImport(Darwin)
        var actions: posix_spawn_file_actions_t?
        var attributes: posix_spawnattr_t?
        #else
        var actions = posix_spawn_file_actions_t()
        var attributes = posix_spawnattr_t()
        #endif
        guard posix_spawn_file_actions_init(&actions) == 0 else {
            throw Failure(message: "posix_spawn_file_actions_init failed")
        }
        defer { posix_spawn_file_actions_destroy(&actions) }
        guard posix_spawnattr_init(&attributes) == 0 else {
            throw Failure(message: "posix_spawnattr_init failed")
        }
        defer { posix_spawnattr_destroy(&attributes) }

        // In this order: standard error may be a duplicate of standard output.
        for (descriptor, redirect) in [(STDIN_FILENO, stdin), (STDOUT_FILENO, stdout), (STDERR_FILENO, stderr)] {
            switch redirect {
            case .nullDevice:
                let mode = descriptor == STDIN_FILENO ? O_RDONLY : O_WRONLY
                posix_spawn_file_actions_addopen(&actions, descriptor, "/dev/null", mode, 0)
            case .descriptor(let source):
                posix_spawn_file_actions_adddup2(&actions, source, descriptor)
            case .appending(let file):
                posix_spawn_file_actions_addopen(&actions, descriptor, file, O_WRONLY | O_CREAT | O_APPEND, 0o644)
            case .standardOutput:
                posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, descriptor)
            }
        }
        // Inherit nothing else: a child holding the write end of another child's stdin would keep that
        // child from ever seeing end-of-file.
        closeInheritedDescriptors(&actions)

        var flags = Int32(POSIX_SPAWN_SETSIGMASK) | Int32(POSIX_SPAWN_SETSIGDEF)
        if newProcessGroup {
            flags |= Int32(POSIX_SPAWN_SETPGROUP)
            posix_spawnattr_setpgroup(&attributes, 0)
        }
        posix_spawnattr_setflags(&attributes, Int16(flags))
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2, SIGCHLD] {
            sigaddset(&defaults, signal)
        }
        posix_spawnattr_setsigdefault(&attributes, &defaults)

        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
        let environment: [UnsafeMutablePointer<CChar>?] =
            (environment ?? ProcessInfo.processInfo.environment).map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            environment.forEach { free($0) }
        }

        var pid: pid_t = 0
        let result = posix_spawn(&pid, path, &actions, &attributes, argv, environment)
        guard result == 0 else {
            throw Failure(message: "cannot launch \(path): \(String(cString: strerror(result)))")
        }
        return pid
    }

    /// A connected pair of descriptors used as a pipe (either end may be read or written), both
    /// close-on-exec from the start, so that no process spawned meanwhile inherits them. On Linux a
    /// socket pair gets that atomically (`pipe2` is not exported to Swift); elsewhere `pipe` and `fcntl`.
    public static func makePipe() throws(Failure) -> (Int32, Int32) {
        var fds: [Int32] = [-1, -1]
        #if canImport(Glibc)
        let piped = socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds)
        #else
        let piped = pipe(&fds)
        if piped == 0 {
            _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
            _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
        }
        #endif
        guard piped == 0 else { throw Failure(message: "pipe failed: \(String(cString: strerror(errno)))") }
        return (fds[0], fds[1])
    }

    /// Makes the spawned process close every descriptor above standard error. glibc 2.34+ has
    /// `posix_spawn_file_actions_addclosefrom_np` (looked up at run time: Swift's Glibc module does not
    /// declare it); elsewhere every descriptor open now is marked close-on-exec, which only affects exec.
    private static func closeInheritedDescriptors(_ actions: inout posix_spawn_file_actions_t) {
        typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
        if let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") {
            let addCloseFrom = unsafeBitCast(symbol, to: AddCloseFrom.self)
            if addCloseFrom(&actions, 3) == 0 { return }
        }
        guard let descriptors = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return }
        for descriptor in descriptors.compactMap({ Int32($0) }) where descriptor > STDERR_FILENO {
            let flags = fcntl(descriptor, F_GETFD)
            if flags >= 0 { _ = fcntl(descriptor, F_SETFD, flags | FD_CLOEXEC) }
        }
    }
}
