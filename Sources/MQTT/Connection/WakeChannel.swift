import CMosquitto
import Foundation

/// What wakes the network thread's `poll()` when another thread hands libmosquitto a packet.
///
/// In threaded mode (`mosquitto_threaded_set(true)`) libmosquitto 2.0.11 only *queues* a packet that
/// another thread publishes, subscribes or unsubscribes (`packet__queue` in lib/packet_mosq.c), then writes
/// one byte to `sockpairW`, one end of a private socket pair that `mosquitto_new` creates, so that
/// `mosquitto_loop`'s `select()` on the other end, `sockpairR`, wakes up. `mosquitto_loop` reads one byte
/// back per call; nothing else reads `sockpairR` — not `mosquitto_loop_read`, `mosquitto_loop_write` nor
/// `mosquitto_loop_misc`, the functions a `poll()` loop is built from.
///
/// What happens when nobody drains it (measured with a C program driving a client by `poll()` and those
/// three functions, Linux 6.18, libmosquitto 2.0.11): every queued packet — each publish, subscribe and
/// unsubscribe, and the network thread's own PUBACKs and PINGREQs — leaves one byte in `sockpairR`
/// (`ss -xp` shows it as Recv-Q). The kernel charges 768 bytes for each one-byte message, so after about
/// 278 packets the pair holds 213,504 bytes, its `SO_SNDBUF` (212,992), and libmosquitto's write fails
/// from then on. Nothing blocks: the pair is non-blocking and the write's result is ignored. But
/// - about 210 KiB of unswappable kernel memory stays allocated per connection for its whole life:
///   1,000 connections with full pairs took 216 MiB more unreclaimable slab (`SUnreclaim`), 207 MiB of
///   which came back as soon as the pairs were drained;
/// - every packet queued after that leaves `errno` = EAGAIN behind in the queuing thread, and
///   `mosquitto_loop_read` stops reading as soon as `errno` is EAGAIN after a packet whose handler queued
///   a reply on the network thread (PUBACK, PUBREC, …). Over TCP the loop just polls again; with TLS,
///   packets OpenSSL has already decrypted are invisible to `poll()` (five QoS 1 messages that a test
///   broker sent in one TLS record after the pair had filled waited 5 s, for the next keepalive
///   exchange), which is why the loop also asks OpenSSL (`Mosquitto.tlsHasBufferedData`).
///
/// Draining the pair on the network thread (what this type did first) cured both, but kept the wake-up
/// libmosquitto writes for *every* queued packet: since publishing threads write their packets
/// themselves when they can (`Mosquitto.writeFromCaller`), that woke the network thread once per message
/// for nothing — a poll, a drain and a keepalive check, on a 2-core machine where the broker and both
/// peers share the CPU (a stream of messages lost ≈ 0.07× of raw libmosquitto's throughput to it). So
/// the pair is *silenced* instead: its write end, `sockpairW`, is replaced with `/dev/null` (`dup2` onto
/// the same descriptor number, so libmosquitto keeps writing to "its" pair and `mosquitto_destroy` closes
/// it), and the network thread polls a pipe of its own, which is signalled (``signal()``) when a packet
/// is left for it to write — a publish its caller could not write, every subscribe and unsubscribe —, on
/// a stop request, and before a QoS 0 publish that ends a quiet spell (why: `Mosquitto.writeFromCaller`).
/// Packets the network thread queues itself (PUBACKs, PINGREQs) need no wake-up: it looks for something
/// to write before every `poll()`.
///
/// Finding `sockpairW`. libmosquitto has no API for it. Comparing the process's open descriptors just
/// before and after `mosquitto_new` under a process-wide lock is not sound: the lock only orders this
/// library's own calls, while other threads of the process open and close descriptors whenever they like
/// (other connections' network threads reconnecting, a child process being spawned). A descriptor another
/// thread opens in that window shows up as new; one it closes can be reused by the pair, which then does
/// not show up at all — and a wrong guess would redirect another component's descriptor. Instead the
/// descriptor is read from the handle itself: in 2.0.x client builds, `struct mosquitto` starts with
/// `int sock, sockpairR, sockpairW` (lib/mosquitto_internal.h). That layout is private, so it is proven on
/// the loaded library once per process (``layoutIsVerified``) before any handle is trusted: on a probe
/// handle the first field must equal `mosquitto_socket()` both before and after connecting, the second
/// must be a Unix stream socket that holds exactly the one wake-up byte that connecting (one queued
/// CONNECT packet) writes, and the third its other end (a byte written to it arrives). Where the proof
/// fails — another libmosquitto version with another layout, or no socket pair — the pair is left alone
/// and fills as described above: it costs the kernel memory, and the loop copes with the early stops.
struct WakeChannel: Sendable {
    /// What happens to libmosquitto's own wake-up pair.
    enum Source: Sendable {
        /// Silenced when the layout is proven (the default).
        case silencedLibraryPairIfVerified
        /// Left alone: the fallback for an unproven layout, chosen by tests to run that path.
        case ownPipeOnly
    }

    /// Our pipe's read end: polled by the network thread, drained after each wake-up.
    let descriptor: Int32
    /// Our pipe's write end.
    private let writeEnd: Int32
    /// libmosquitto's `sockpairR` when its pair was silenced (it then never holds a byte), else -1.
    let silencedLibraryPairReadEnd: Int32

    /// Whether libmosquitto's wake-up pair was silenced.
    var silencesLibraryPair: Bool { silencedLibraryPairReadEnd != -1 }

    /// The channel for `handle`, just created by `mosquitto_new`. Nil only if no pipe could be created.
    static func make(for handle: OpaquePointer, source: Source) -> WakeChannel? {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { return nil }
        for end in ends {
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
        var silenced: Int32 = -1
        if source == .silencedLibraryPairIfVerified, layoutIsVerified, let null = devNull,
           case let reader = field(1, of: handle), isNonBlockingUnixStream(reader),
           case let writer = field(2, of: handle), isNonBlockingUnixStream(writer),
           dup2(null, writer) == writer {  // closes the pair's end and puts /dev/null in its place, atomically
            _ = fcntl(writer, F_SETFD, FD_CLOEXEC)
            silenced = reader
        }
        return WakeChannel(descriptor: ends[0], writeEnd: ends[1], silencedLibraryPairReadEnd: silenced)
    }

    /// Wakes the network thread: a packet was queued that it must write, or something else changed
    /// (a stop request, a socket closed by another thread).
    func signal() {
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)  // EAGAIN: the pipe is full, so a wake-up is pending anyway
    }

    /// Network thread: reads every pending wake-up byte (at most a few hundred; both ends are non-blocking).
    func drain() {
        var buffer = (UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        let size = MemoryLayout.size(ofValue: buffer)
        while withUnsafeMutableBytes(of: &buffer, { read(descriptor, $0.baseAddress, size) }) == size {}
    }

    /// Closes our pipe. libmosquitto's pair (silenced or not) is closed by `mosquitto_destroy`.
    func close() {
        _ = Foundation.close(descriptor)
        _ = Foundation.close(writeEnd)
    }

    /// `/dev/null` opened for writing once per process: what a silenced `sockpairW` becomes.
    private static let devNull: Int32? = {
        let descriptor = open("/dev/null", O_WRONLY | O_CLOEXEC)
        return descriptor >= 0 ? descriptor : nil
    }()

    // MARK: - The layout proof

    /// Whether the loaded libmosquitto keeps `int sock, sockpairR, sockpairW` at the start of
    /// `struct mosquitto`, proven once per process on a probe handle (see the type's documentation).
    static let layoutIsVerified: Bool = probeLayout()

    /// The `index`th `int` of the handle's `struct mosquitto` (0 `sock`, 1 `sockpairR`, 2 `sockpairW`).
    private static func field(_ index: Int, of handle: OpaquePointer) -> Int32 {
        UnsafeRawPointer(handle).load(fromByteOffset: index * MemoryLayout<Int32>.size, as: Int32.self)
    }

    private static func probeLayout() -> Bool {
        MosquittoLibrary.initializeOnce()
        guard let listener = LoopbackListener() else { return false }
        defer { listener.close() }
        guard let probe = mosquitto_new(nil, true, nil) else { return false }
        defer { mosquitto_destroy(probe) }
        let pair = field(1, of: probe)
        guard field(0, of: probe) == -1, mosquitto_socket(probe) == -1, isNonBlockingUnixStream(pair),
              unreadBytes(pair) == 0 else { return false }
        // Not threaded: libmosquitto queues CONNECT (one wake-up byte) and writes it at once. The connect
        // completes from the listener's backlog without an accept.
        guard mosquitto_connect(probe, "127.0.0.1", listener.port, 60) == MOSQ_ERR_SUCCESS.rawValue else { return false }
        let socket = mosquitto_socket(probe)
        guard socket != -1 && field(0, of: probe) == socket && unreadBytes(pair) == 1 else { return false }
        // The third field, `sockpairW`, must be the pair's other end: a byte written to it arrives.
        let writer = field(2, of: probe)
        var byte: UInt8 = 1
        return isNonBlockingUnixStream(writer) && write(writer, &byte, 1) == 1 && unreadBytes(pair) == 2
    }

    private static func isNonBlockingUnixStream(_ descriptor: Int32) -> Bool {
        guard descriptor >= 0, fcntl(descriptor, F_GETFL) & O_NONBLOCK != 0 else { return false }
        var type: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(descriptor, SOL_SOCKET, SO_TYPE, &type, &length) == 0, type == Int32(SOCK_STREAM.rawValue) else {
            return false
        }
        var address = sockaddr_storage()
        length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        return named == 0 && Int32(address.ss_family) == AF_UNIX
    }

    private static func unreadBytes(_ descriptor: Int32) -> Int32 {
        var count: Int32 = -1
        guard ioctl(descriptor, UInt(FIONREAD), &count) == 0 else { return -1 }
        return count
    }
}

/// A TCP listener on a free loopback port that never accepts: connects to it complete from its backlog.
private struct LoopbackListener {
    let descriptor: Int32
    let port: Int32

    init?() {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard listener >= 0 else { return nil }
        _ = fcntl(listener, F_SETFD, FD_CLOEXEC)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let listening = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, length) == 0 && listen(listener, 1) == 0 && getsockname(listener, $0, &length) == 0
            }
        }
        guard listening else {
            _ = Foundation.close(listener)
            return nil
        }
        descriptor = listener
        port = Int32(UInt16(bigEndian: address.sin_port))
    }

    func close() {
        _ = Foundation.close(descriptor)
    }
}
