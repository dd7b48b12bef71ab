import Foundation

/// Names threads for `perf sched` and `top -H`: Foundation's `Thread.name` does not reach the kernel on
/// Linux. The bench's names are ASCII; the kernel keeps 15 bytes.
enum ThreadName {
    static func set(_ name: String) {
        let file = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard file >= 0 else { return }
        _ = write(file, name, min(name.utf8.count, 15))
        close(file)
    }
}
