#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A loopback TCP port where nothing listens, held for as long as this value lives: a connection to it
/// is refused, and no broker started meanwhile by another test can take it (a port found free and let go,
/// as `FreePort.loopback()` does, can be). The socket is bound without `SO_REUSEADDR`, never listens
/// (unless told to: see ``init(listening:)``), and is closed on `deinit`.
public final class ClosedPort: Sendable {
    /// A socket call failed: `operation`, with `errno` `code`.
    public struct Failure: Error, Sendable {
        public let operation: String
        public let code: Int32
    }

    public let port: UInt16
    private let descriptor: Int32

    /// With `listening`, the kernel takes connections (into its backlog) that nobody ever accepts or
    /// answers: a broker that never sends CONNACK.
    public init(listening: Bool = false) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(operation: "socket", code: errno) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else {
            let code = errno
            close(fd)
            throw Failure(operation: "bind", code: code)
        }
        if listening && listen(fd, 16) != 0 {
            let code = errno
            close(fd)
            throw Failure(operation: "listen", code: code)
        }
        descriptor = fd
        port = UInt16(bigEndian: address.sin_port)
    }

    /// `mqtt://127.0.0.1:PORT`.
    public var url: String { "mqtt://127.0.0.1:\(port)" }

    deinit { close(descriptor) }
}
