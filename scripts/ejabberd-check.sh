#!/usr/bin/env bash
# Runs GroupSync against a second broker implementation: one ejabberd node (Debian's `ejabberd`,
# mod_mqtt) on a loopback port, started and stopped by scripts/ejabberd-node.sh. First the demos
# (gallery and playback, 3, 10 and 20 participants), then every test suite that does not need a
# mosquitto of its own (GROUPSYNC_TEST_BROKER; the others are skipped with their reason).
# Installs ejabberd when it is missing and keeps the package's own service from running.
#
#   scripts/ejabberd-check.sh [SWIFT-TEST-ARGUMENTS...]   (e.g. --filter GroupSessionTests)
#
# Builds the tests (incrementally: after scripts/test.sh there is nothing to do) and runs them with
# `swift test --skip-build`. Exit code: 0 when every demo and test passed, 1 otherwise. Nothing of
# ejabberd is left running, on any exit.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
if ! compgen -G "/usr/lib/x86_64-linux-gnu/ejabberd-*" >/dev/null; then
    echo "Installing ejabberd ..." >&2
    # The package starts its own service at install, listening on all interfaces (1883, 5222,
    # 5269, 5280, 5443): a policy-rc.d that denies every start keeps it from running at all.
    policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        policy=/usr/sbin/policy-rc.d
        printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
        $sudo chmod 755 "$policy"
    fi
    $sudo apt-get update -qq
    status=0
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends ejabberd >/dev/null || status=$?
    if [ -n "$policy" ]; then $sudo rm -f "$policy"; fi
    [ "$status" -eq 0 ] || exit "$status"
fi
# On a host run by systemd, keep the package's service from starting at boot (and stop it, should
# it run).
if [ -d /run/systemd/system ] && systemctl is-enabled --quiet ejabberd 2>/dev/null; then
    $sudo systemctl disable --now ejabberd >/dev/null 2>&1 || true
fi

swift build --build-tests >/dev/null
groupsync=.build/debug/groupsync

dir=$(mktemp -d "${TMPDIR:-/tmp}/groupsync-ejabberd.XXXXXX")
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    if [ -n "${tests_pid:-}" ] && kill -0 "$tests_pid" 2>/dev/null; then
        # swift test and the test runner it started, by PID
        pkill -TERM -P "$tests_pid" 2>/dev/null || true
        kill -TERM "$tests_pid" 2>/dev/null || true
    fi
    scripts/ejabberd-node.sh stop "$dir" || true
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

url=$(scripts/ejabberd-node.sh start "$dir" "$port")
echo "ejabberd node on $url" >&2

failed=0
for participants in 3 10 20; do
    for mode in gallery playback; do
        flags=(--participants "$participants" --broker "$url" --timeout 60)
        [ "$mode" = playback ] && flags+=(--playback)
        log="$dir/demo-$mode-$participants.log"
        if "$groupsync" demo "${flags[@]}" >"$log" 2>&1; then
            echo "PASS  demo $mode, $participants participants" >&2
        else
            echo "FAIL  demo $mode, $participants participants:" >&2
            tail -n 25 "$log" >&2
            failed=1
        fi
    done
done
echo "Test suites against $url:" >&2
start=$(date +%s)
tests_log=.build/ejabberd-tests.log  # kept for a look after a failure
# One test at a time: every test shares this one broker, and the timing bounds (start spreads of
# 25 ms, catch-ups within 1.5 s) assume a broker that the whole suite's parallel traffic does not
# queue behind (in parallel, 4 of 6 whole runs here broke one such bound: 2 of 2 on ejabberd, 2 of 4
# on a mosquitto shared the same way).
# In the background, so that a TERM or INT is handled at once (bash runs a trap only once the
# foreground command is done), and the cleanup stops the tests before the node.
GROUPSYNC_TEST_BROKER=$url swift test --skip-build --no-parallel "$@" >"$tests_log" 2>&1 &
tests_pid=$!
if wait "$tests_pid"; then
    echo "PASS  test suites against ejabberd ($(($(date +%s) - start)) s): $(grep -E '^. Test run with' "$tests_log" | tail -n 1)" >&2
else
    echo "FAIL  test suites against ejabberd ($(($(date +%s) - start)) s), whole output in $tests_log:" >&2
    grep -E '^. Test run with|recorded an issue|^error|[Ff]atal' "$tests_log" | tail -n 60 >&2
    failed=1
fi
exit "$failed"
