#!/usr/bin/env bash
# Runs the whole test suite again under ThreadSanitizer (CI does both). Any race report fails the run:
# a process with reports exits with TSan's code 66, the test process and the CLI children alike.
# The project's locks are pthread mutexes (LockedValue), which TSan understands; the one suppression
# (scripts/tsan-suppressions.txt) is a known false positive in the concurrency runtime, explained there.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
export TSAN_OPTIONS="${TSAN_OPTIONS:-second_deadlock_stack=1 history_size=4 suppressions=$PWD/scripts/tsan-suppressions.txt}"
# Instrumented code runs several times slower: stretch the time bounds the tests assert (the plain run
# of scripts/test.sh checks the real ones).
export GROUPSYNC_TIME_SCALE="${GROUPSYNC_TIME_SCALE:-4}"
# The decoder fuzz test is single-threaded (nothing for TSan to find) and ~10× slower instrumented: its
# 100,000 inputs run in the plain suite, 10,000 here.
export GROUPSYNC_FUZZ_INPUTS="${GROUPSYNC_FUZZ_INPUTS:-10000}"
swift build --build-tests --sanitize=thread --scratch-path .build/tsan
swift test --skip-build --sanitize=thread --scratch-path .build/tsan "$@"
