import Foundation

// See GroupSyncBench.swift and `groupsync-bench --help`.
//
// Not a top-level `await`: an async main makes the main thread leave through dispatch's
// `pthread_exit`, which valgrind 3.19 cannot follow, and the bench must run under callgrind to be
// profiled. It runs in a detached task instead; the main thread sleeps until that task calls exit().
let arguments = Array(CommandLine.arguments.dropFirst())
Task.detached {
    exit(await GroupSyncBench.main(arguments))
}
while true { sleep(3_600) }
