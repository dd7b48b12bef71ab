import Foundation

/// Names the calling thread for `top -H`, `perf` and debuggers. Foundation's `Thread.name` does not reach
/// the kernel on Linux (a name set before `start()` is dropped), and Glibc's `pthread_setname_np` is not
/// visible to Swift, so the name is written to `/proc/thread-self/comm`. The kernel keeps 15 bytes; a
/// longer name is cut at a Unicode scalar boundary. Does nothing where that file cannot be opened.
package enum ThreadName {
    package static func setCurrent(_ name: String) {
        var bytes = Array(name.utf8.prefix(15))
        while String(validating: bytes, as: UTF8.self) == nil { bytes.removeLast() }
        let file = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard file >= 0 else { return }
        _ = write(file, bytes, bytes.count)
        close(file)
    }
}
