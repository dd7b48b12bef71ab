#!/usr/bin/env bash
# Runs the whole test suite against real mosquitto brokers that the tests start themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
swift build --build-tests
swift test --skip-build "$@"
