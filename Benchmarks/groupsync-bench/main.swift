import Foundation

// See GroupSyncBench.swift and `groupsync-bench --help`.
//
// Not a top-level `await`: an async main makes the main thread leave through dispatch's
// `pthread_exit`, which valgrind (3.19, used to profile this bench with callgrind) cannot follow. The
// bench runs in a detached task instead; the main thread sleeps until that task calls exit().
let arguments = Array(CommandLine.arguments.dropFirst())
Task.detached {
    exit(await GroupSyncBench.main(arguments))
}
while true { sleep(3_600) }
