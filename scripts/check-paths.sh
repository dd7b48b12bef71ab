#!/usr/bin/env bash
# Fails when two tracked paths (files or the folders on their way) differ only by case: on a
# case-insensitive file system, macOS's default, a clone would merge them into one.
set -euo pipefail
cd "$(dirname "$0")/.."
clashes=$(git ls-files | awk -F/ '{ path = ""; for (i = 1; i <= NF; i++) { path = path (i > 1 ? "/" : "") $i; print path } }' \
    | sort -u | sort -f | uniq -di)
if [ -n "$clashes" ]; then
    echo "Paths that differ only by case (one folder on macOS):" >&2
    git ls-files | awk -F/ '{ path = ""; for (i = 1; i <= NF; i++) { path = path (i > 1 ? "/" : "") $i; print path } }' \
        | sort -u | grep -Fix -f <(echo "$clashes") >&2
    exit 1
fi
