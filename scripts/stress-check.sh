#!/usr/bin/env bash
# The retain-less membership stress test at full size, alone: 2, 5 and 20 participants joining one
# session at random moments, 50 rounds each, on one mosquitto without retained messages and on two
# bridged ones (about 80 s). Alone, because its hundreds of participants would slow the timing bounds
# of every suite running beside it; the whole suite (scripts/test.sh) runs it at 2 rounds, one at a time.
#   scripts/stress-check.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
swift build --build-tests
GROUPSYNC_STRESS_ROUNDS=${1:-50} swift test --skip-build --filter RetainlessMembershipTests
