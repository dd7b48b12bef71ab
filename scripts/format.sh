#!/usr/bin/env bash
# Formats the Swift sources with `swift format` (it ships with the toolchain) and the repository's
# .swift-format configuration.
#   scripts/format.sh            formats every Swift file in place
#   scripts/format.sh --check    changes nothing; fails on any finding (what .ci/run checks)
set -euo pipefail
cd "$(dirname "$0")/.."
paths=(Package.swift Sources Tests Benchmarks)
case "${1:-}" in
    "") swift format format --in-place --recursive --parallel "${paths[@]}" ;;
    --check) swift format lint --strict --recursive --parallel "${paths[@]}" ;;
    *) echo "usage: scripts/format.sh [--check]" >&2; exit 2 ;;
esac
