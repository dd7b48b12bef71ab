#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Finds free TCP ports on the loopback interface and probes listeners.
public enum FreePort {
    /// A socket call failed.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        /// The call that failed (`socket`, `bind`, `getsockname`).
        public let operation: String
        /// The `errno` value it left.
        public let code: Int32

        public var description: String {
            "FreePort: \(operation) failed: \(String(cString: strerror(code))) (errno \(code))"
        }
    }

    /// Returns a TCP port on 127.0.0.1 that is free right now.
    ///
    /// Binds a socket to `127.0.0.1:0`, reads the port the kernel chose and
    /// closes the socket. Another process may take the port before it is
    /// used, so callers that launch a server on it should retry with a fresh
    /// port when the bind fails (``MosquittoBroker/start(_:)`` does).
    public static func loopback() throws -> UInt16 {
        let fd = try makeSocket()
        defer { _ = close(fd) }

        var address = loopbackAddress(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0 else { throw Failure(operation: "bind", code: errno) }

        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                getsockname(fd, $0, &length)
            }
        }
        guard named == 0 else { throw Failure(operation: "getsockname", code: errno) }
        return UInt16(bigEndian: address.sin_port)
    }

    /// Whether something accepts TCP connections on `127.0.0.1:port` right now.
    ///
    /// Opens a connection and closes it at once. A listener whose process is
    /// stopped (SIGSTOP) still completes the handshake from its backlog, so
    /// this tells "port open" rather than "server responsive".
    public static func acceptsConnections(on port: UInt16) -> Bool {
        guard let fd = try? makeSocket() else { return false }
        defer { _ = close(fd) }
        var address = loopbackAddress(port: port)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        return result == 0
    }

    /// A TCP socket that is not inherited by child processes: a bound socket
    /// leaking into a concurrently spawned broker would keep its port taken.
    private static func makeSocket() throws -> Int32 {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        if fd >= 0 { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        #endif
        guard fd >= 0 else { throw Failure(operation: "socket", code: errno) }
        return fd
    }

    private static func loopbackAddress(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        #if canImport(Darwin)
        address.sin_len = UInt8(MemoryLayout<sockaddr_in>.size)
        #endif
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr = in_addr(s_addr: in_addr_t(0x7F00_0001).bigEndian)
        return address
    }
}
