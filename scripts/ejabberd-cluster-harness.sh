#!/usr/bin/env bash
# Sourced by ejabberd-cluster-check.sh and ejabberd-cluster-probe.sh: a work directory (WORK) whose
# cluster lives in WORK/cluster, background processes recorded in BG, and a cleanup that runs on every
# exit path: it kills what BG holds, kills the cluster's nodes (a frozen node ignores SIGTERM) and
# removes WORK.
#
#   source scripts/ejabberd-cluster-harness.sh NAME    (run from the repository's root)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/groupsync-$1.XXXXXX")
declare -a BG=()

# shellcheck disable=SC2317 # called by the EXIT trap
harness_cleanup() {
    local p n
    for p in "${BG[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    for n in 1 2; do
        if [[ -f $WORK/cluster/$n/ejabberd.pid ]]; then
            scripts/ejabberd-cluster.sh kill "$WORK/cluster" "$n" >/dev/null 2>&1 || true
        fi
    done
    scripts/ejabberd-cluster.sh stop "$WORK/cluster" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap harness_cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
