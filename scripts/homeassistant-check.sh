#!/usr/bin/env bash
# Checks `groupsync dashboard` against a real Home Assistant (core 2024.3.3): plays sessions with real
# participants on a private mosquitto and fails when Home Assistant logs a WARNING or ERROR about the
# dashboard's payloads. Not part of `swift test`; CI (.ci/run) runs it last.
#
#   scripts/homeassistant-check.sh
#
# Environment:
#   GROUPSYNC_HA_VENV  the Home Assistant venv, created on the first run and reused
#                      (default ~/.cache/groupsync-homeassistant, about 700 MB)
#   GROUPSYNC_BIN      a groupsync binary to check (default: `swift build --product groupsync`)
#   GROUPSYNC_HA_KEEP  1: keep the work directory (logs, HA config and database) even on success
#
# Exit status: 0 no relevant warning or error, 1 some (printed), 2 the scenario could not be played,
# 130 interrupted (Ctrl-C, SIGTERM; what happened until then is still reported).
# The scenario and the report are in scripts/homeassistant/check.py.
set -euo pipefail
cd "$(dirname "$0")/.."

ha_version=2024.3.3
github_raw=https://raw.githubusercontent.com/home-assistant/core
venv="${GROUPSYNC_HA_VENV:-$HOME/.cache/groupsync-homeassistant}"

scripts/install-deps.sh

# 1. The venv: Home Assistant with its own package_constraints.txt as pip constraints; josepy<2, which
# that file does not pin (josepy 2 dropped ComparableX509, which the acme 2.x that Home Assistant
# 2024.3 pulls in uses); and the requirements of every integration the check's configuration sets up
# (scripts/homeassistant/requirements.py), so that Home Assistant never runs pip itself. A stamp file
# makes the second run skip all of it.
python=""
for candidate in python3.12 python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
        "$candidate" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] <= (3, 12) else 1)' \
            2>/dev/null; then
        python="$candidate"
        break
    fi
done
stamp="$venv/.groupsync-ha-$ha_version"
if [ ! -f "$stamp" ]; then
    if [ -z "$python" ]; then
        echo "Home Assistant $ha_version needs Python 3.11 or 3.12 (python3.11 / python3.12 on PATH)" >&2
        exit 2
    fi
    # Debian ships venv's pip bootstrap apart, in python3-venv (python3.N-venv for python3.N).
    if ! "$python" -c 'import ensurepip' >/dev/null 2>&1; then
        if ! command -v apt-get >/dev/null 2>&1; then
            echo "$python lacks ensurepip (Debian: python3-venv); install it with your package manager" >&2
            exit 2
        fi
        sudo=""
        if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
        $sudo apt-get update -qq
        # python3.11 needs python3.11-venv; python3, the default, python3-venv.
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$python-venv" >/dev/null
        if ! "$python" -c 'import ensurepip' >/dev/null 2>&1; then
            echo "$python still lacks ensurepip after installing $python-venv" >&2
            exit 2
        fi
    fi
    echo "Installing Home Assistant $ha_version into $venv (once; about 700 MB; log: $venv/install.log)" >&2
    mkdir -p "$venv"
    install_log="$venv/install.log"
    : >"$install_log"
    if ! {
        "$python" -m venv "$venv" &&
            "$venv/bin/pip" install --upgrade pip wheel &&
            rm -rf "$venv/download" &&
            "$venv/bin/pip" download --no-deps --dest "$venv/download" "homeassistant==$ha_version" &&
            {
                # The constraints of the release: from GitHub when it is reachable, else from the wheel
                # just downloaded (the same file: homeassistant/package_constraints.txt of the tag).
                curl -fsS --max-time 15 -o "$venv/package_constraints.txt" \
                    "$github_raw/$ha_version/homeassistant/package_constraints.txt" ||
                    "$venv/bin/python" -c 'import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/homeassistant-*.whl")[0]
sys.stdout.buffer.write(zipfile.ZipFile(wheel).read("homeassistant/package_constraints.txt"))' \
                        "$venv/download" >"$venv/package_constraints.txt"
            } &&
            "$venv/bin/pip" install --constraint "$venv/package_constraints.txt" \
                "$venv"/download/homeassistant-*.whl 'josepy<2' &&
            "$venv/bin/python" scripts/homeassistant/requirements.py mqtt recorder http sensor binary_sensor \
                >"$venv/integration-requirements.txt" &&
            "$venv/bin/pip" install --constraint "$venv/package_constraints.txt" \
                --requirement "$venv/integration-requirements.txt"
    } >>"$install_log" 2>&1; then
        tail -n 40 "$install_log" >&2
        echo "Installing Home Assistant failed; the whole log is $install_log" >&2
        exit 2
    fi
    rm -rf "$venv/download"
    touch "$stamp"
fi

# 2. The binary under test.
if [ -z "${GROUPSYNC_BIN:-}" ]; then
    swift build --product groupsync >&2
    GROUPSYNC_BIN="$(swift build --show-bin-path)/groupsync"
fi

# 3. A private mosquitto on free ports, and a work directory; all stopped and removed on exit.
workdir="$(mktemp -d "${TMPDIR:-/tmp}/groupsync-ha-check.XXXXXX")"
mosquitto_pid=""
status=2  # until check.py has answered
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    for pid_file in "$workdir/hass.pid" "$workdir/dashboard.pid"; do
        if [ -f "$pid_file" ]; then kill -KILL "$(cat "$pid_file")" 2>/dev/null || true; fi
    done
    if [ -n "$mosquitto_pid" ]; then
        kill "$mosquitto_pid" 2>/dev/null || true
        wait "$mosquitto_pid" 2>/dev/null || true
    fi
    if [ "$status" -eq 0 ] && [ "${GROUPSYNC_HA_KEEP:-0}" != 1 ]; then
        rm -rf "$workdir"
    else
        echo "Work directory kept: $workdir (Home Assistant config and logs in config/, runs' logs beside it)" >&2
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

read -r broker_port http_port < <(python3 -c 'import socket
sockets = [socket.socket() for _ in range(2)]
for s in sockets: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in sockets))')
# The log records subscriptions: check.py reads there when Home Assistant has subscribed to a topic.
# `user` keeps a broker started as root from switching to the mosquitto user, which could not write it.
cat >"$workdir/mosquitto.conf" <<EOF
listener $broker_port 127.0.0.1
allow_anonymous true
set_tcp_nodelay true
user $(id -un)
log_dest file $workdir/mosquitto.log
log_type error
log_type warning
log_type notice
log_type information
log_type subscribe
log_type unsubscribe
EOF
mosquitto_bin="$(command -v mosquitto || echo /usr/sbin/mosquitto)"
# In a session of its own, so that Ctrl-C does not stop it before Home Assistant and the dashboard.
setsid "$mosquitto_bin" -c "$workdir/mosquitto.conf" >"$workdir/mosquitto.out" 2>&1 &
mosquitto_pid=$!
deadline=$((SECONDS + 10))
until mosquitto_pub -h 127.0.0.1 -p "$broker_port" -t groupsync-check/ping -n 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ] || ! kill -0 "$mosquitto_pid" 2>/dev/null; then
        cat "$workdir/mosquitto.out" "$workdir/mosquitto.log" >&2 2>/dev/null || true
        echo "mosquitto did not start on port $broker_port" >&2
        exit 2
    fi
    sleep 0.1
done

# 4.-7. The configuration, Home Assistant, the dashboard, the scenario and the report. On Ctrl-C or
# SIGTERM, check.py gets SIGTERM: it stops what it started and still reports.
python3 scripts/homeassistant/check.py --groupsync "$GROUPSYNC_BIN" --hass "$venv/bin/hass" \
    --broker-port "$broker_port" --broker-log "$workdir/mosquitto.log" --http-port "$http_port" \
    --workdir "$workdir" &
check_pid=$!
trap 'kill -TERM "$check_pid" 2>/dev/null || true' INT TERM
check_status=0
wait "$check_pid" || check_status=$?
# A trapped signal ends `wait` early while check.py is still stopping and reporting: wait again.
while kill -0 "$check_pid" 2>/dev/null; do
    check_status=0
    wait "$check_pid" || check_status=$?
done
status=$check_status
exit "$status"
