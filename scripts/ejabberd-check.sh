#!/usr/bin/env bash
# Runs GroupSync's demos against a second broker implementation: one ejabberd node (Debian's
# `ejabberd`, mod_mqtt) on a loopback port, started and stopped by scripts/ejabberd-node.sh.
# Installs ejabberd when it is missing and keeps the package's own service from running.
#
#   scripts/ejabberd-check.sh [GROUPSYNC-BINARY]   (default: builds and uses .build/debug/groupsync)
#
# Exit code: 0 when every demo passed, 1 otherwise. Nothing of ejabberd is left running.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! compgen -G "/usr/lib/x86_64-linux-gnu/ejabberd-*" >/dev/null; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    echo "Installing ejabberd ..." >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends ejabberd >/dev/null
fi
# On a host run by systemd the package starts its own service, listening on all interfaces
# (1883, 5222, 5269, 5280, 5443): stop it and keep it from starting again.
if [ -d /run/systemd/system ] && systemctl is-enabled --quiet ejabberd 2>/dev/null; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo systemctl disable --now ejabberd >/dev/null 2>&1 || true
fi

groupsync=${1:-}
if [ -z "$groupsync" ]; then
    swift build --product groupsync >/dev/null
    groupsync=.build/debug/groupsync
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/groupsync-ejabberd.XXXXXX")
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
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
exit "$failed"
