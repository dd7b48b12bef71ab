#!/usr/bin/env bash
# Runs the whole test suite again under ThreadSanitizer (CI does both). Any race report fails the run:
# a process with reports exits with TSan's code 66, the test process and the CLI children alike.
# No suppressions: the project's locks are pthread mutexes (LockedValue), which TSan understands.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
export TSAN_OPTIONS="${TSAN_OPTIONS:-second_deadlock_stack=1 history_size=4}"
swift build --build-tests --sanitize=thread --scratch-path .build/tsan
swift test --skip-build --sanitize=thread --scratch-path .build/tsan "$@"
