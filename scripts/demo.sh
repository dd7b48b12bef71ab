#!/usr/bin/env bash
# Runs the gallery demo: three participants on a private mosquitto that the demo starts and stops.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
swift run -c release groupsync demo "$@"
