#!/usr/bin/env bash
# One ejabberd node (Debian's `ejabberd` package) speaking MQTT on a loopback port.
#
#   scripts/ejabberd-node.sh start DIR PORT   writes DIR/ejabberd.yml, starts the node, waits for a
#                                             CONNACK, prints the broker URL on stdout
#   scripts/ejabberd-node.sh stop DIR         stops the node and every process it started, by PID
#
# The node is run with `erl` directly, as the invoking user, not through `ejabberdctl`:
# - `ejabberdctl` switches to the `ejabberd` user, so every directory it touches must belong to
#   that user; running `erl` as ourselves keeps DIR ours;
# - the node is not distributed (no `-sname`), so no `epmd` daemon and no distribution port are
#   started at all; `ejabberdctl` cannot talk to it, which nothing here needs;
# - `erl` execs `erlexec`, which execs `beam.smp`, so the PID of the background job is the PID of
#   the VM, and SIGTERM to it is a clean `init:stop()`.
# Readiness is an MQTT CONNACK seen by `mosquitto_pub`, not `ejabberdctl started` (2 s polls).
#
# Only the MQTT listener is opened, on 127.0.0.1. Authentication is anonymous: ejabberd 23.01
# accepts any user name with a non-empty password (an empty password is refused, ejabberd issue
# #3985), so the URL carries USER:PW. mod_mqtt settings:
# - max_topic_depth: ejabberd refuses a subscription whose filter is deeper (SUBACK failure);
#   publishing deeper topics is not limited. GroupSync's topics have at most 8 levels (see
#   GroupTopics), which is ejabberd's default; it is written out so that a deeper filter fails here;
# - match_retained_limit: the default (1000) silently truncates the retained replay of a filter;
# - max_queue: messages held for a slow or offline session (default 5000).
set -euo pipefail

readonly EJABBERD_LIB=/usr/lib/x86_64-linux-gnu
readonly USER_NAME=groupsync
readonly PASSWORD=groupsync

die() { echo "${PROGRAM_NAME:-ejabberd-node}: $*" >&2; exit 1; }

connack() { # PORT: one QoS 0 publish that needs a CONNACK first (a listener that never answers fails it)
    timeout 2 mosquitto_pub -h 127.0.0.1 -p "$1" -u "$USER_NAME" -P "$PASSWORD" -V mqttv5 \
        -i "ejabberd-node-probe-$$" -t ejabberd-node/probe -m up -q 0 >/dev/null 2>&1
}

write_config() { # DIR PORT
    cat >"$1/ejabberd.yml" <<EOF
hosts:
  - localhost
loglevel: info
log_rotate_count: 0
certfiles: []
listen:
  -
    port: $2
    ip: "127.0.0.1"
    module: mod_mqtt
    backlog: 1000
auth_method: anonymous
anonymous_protocol: login_anon
allow_multiple_connections: true
acl:
  local:
    user_regexp: ""
access_rules:
  local:
    allow: all
modules:
  mod_mqtt:
    max_topic_depth: 8
    match_retained_limit: infinity
    max_queue: 100000
    session_expiry: 300
EOF
}

start() { # DIR PORT
    local dir=$1 port=$2
    [[ $port =~ ^[0-9]+$ ]] || die "port must be a number: $port"
    check_installed
    mkdir -p "$dir/spool" "$dir/log"
    dir=$(cd "$dir" && pwd -P)
    refuse_running "$dir" "$port"
    write_config "$dir" "$port"
    launch "$dir" "$port"
    # Whatever ends this script before the node is ready (a failure, a deadline, a signal) stops it.
    trap 'stop "$dir" >/dev/null 2>&1 || true' EXIT
    trap 'exit 143' TERM
    trap 'exit 130' INT
    await_connack "$dir" "$port"
    trap - EXIT TERM INT
    echo "mqtt://$USER_NAME:$PASSWORD@127.0.0.1:$port"
}

check_installed() {
    [[ -d $EJABBERD_LIB/ejabberd-23.01 || -n $(compgen -G "$EJABBERD_LIB/ejabberd-*") ]] \
        || die "Debian's ejabberd is not installed (apt-get install -y ejabberd)"
    command -v mosquitto_pub >/dev/null || die "mosquitto_pub is needed (mosquitto-clients)"
}

refuse_running() { # DIR PORT
    if [[ -f $1/ejabberd.pid ]] && is_node "$(cat "$1/ejabberd.pid")" "$1"; then
        die "a node already runs from $1 (pid $(cat "$1/ejabberd.pid"))"
    fi
    if connack "$2"; then die "something already answers MQTT on 127.0.0.1:$2"; fi
}

launch() { # DIR PORT [ERL-ARG...]: the VM in the background (DIR absolute, config written)
    local dir=$1 port=$2
    shift 2
    (
        cd "$dir/spool"
        export EJABBERD_CONFIG_PATH=$dir/ejabberd.yml
        export EJABBERD_LOG_PATH=$dir/log/ejabberd.log
        export ERL_CRASH_DUMP=$dir/log/erl_crash.dump ERL_CRASH_DUMP_BYTES=0
        export ERL_LIBS=$EJABBERD_LIB
        export ERL_EPMD_ADDRESS=127.0.0.1 # only matters if something makes the node distributed
        export ERL_INETRC=/etc/ejabberd/inetrc
        exec erl +K true +P 250000 -noinput -noshell \
            -mnesia dir "\"$dir/spool\"" "$@" -s ejabberd \
            </dev/null >"$dir/log/erl.out" 2>&1
    ) &
    echo "$!" >"$dir/ejabberd.pid"
    echo "$port" >"$dir/port"
}

await_connack() { # DIR PORT: returns once the node answers MQTT; fails if it dies or 60 s pass
    local dir=$1 port=$2 pid
    pid=$(cat "$dir/ejabberd.pid")
    local deadline=$((SECONDS + 60))
    until connack "$port"; do
        if ! alive "$pid" || grep -q "Failed to open socket" "$dir/log/erl.out"; then
            grep -m 3 "\[error\]" "$dir/log/erl.out" >&2 || tail -n 20 "$dir/log/erl.out" >&2 || true
            die "the node did not come up (log in $dir/log)"
        fi
        ((SECONDS < deadline)) || die "no CONNACK on 127.0.0.1:$port within 60 s (log in $dir/log)"
        sleep 0.1
    done
}

alive() { # PID: exists and is not a zombie
    local state
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [[ -n $state && $state != Z ]]
}

is_node() { # PID DIR: the VM this script started from DIR (not a process that reused its PID)
    alive "$1" && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$2/spool"
}

descendants() { # PID: every process below PID, deepest last
    local child
    for child in $(pgrep -P "$1" || true); do
        echo "$child"
        descendants "$child"
    done
}

stop() { # DIR
    local dir=$1
    if [[ ! -f $dir/ejabberd.pid ]]; then
        echo "${PROGRAM_NAME:-ejabberd-node}: no node recorded in $dir, nothing to stop" >&2
        return 0
    fi
    dir=$(cd "$dir" && pwd -P)
    local pid
    pid=$(cat "$dir/ejabberd.pid")
    if is_node "$pid" "$dir"; then
        local -a pids
        mapfile -t pids < <(echo "$pid"; descendants "$pid")
        # SIGTERM is init:stop(): ejabberd closes its listener and stops within milliseconds, then
        # the VM takes almost 3 s more to exit. The spool is thrown away, so once ejabberd logs that
        # it stopped, the VM gets half a second and is then killed.
        kill -TERM "$pid" 2>/dev/null || true
        local deadline=$((SECONDS + 20)) grace_end=0 now
        while alive "$pid" && ((SECONDS < deadline)); do
            now=$(date +%s%N)
            if ((grace_end == 0)); then
                grep -q "is stopped in the node" "$dir/log/erl.out" 2>/dev/null \
                    && grace_end=$((now + 500000000))
            elif ((now >= grace_end)); then
                break
            fi
            sleep 0.05
        done
        local p
        for p in "${pids[@]}"; do
            if alive "$p"; then kill -KILL "$p" 2>/dev/null || true; fi
        done
        while alive "$pid"; do sleep 0.05; done
    fi
    rm -f "$dir/ejabberd.pid"
}

# Sourced (by ejabberd-cluster.sh), it only defines the functions above.
[[ ${BASH_SOURCE[0]} == "$0" ]] || return 0

case ${1:-} in
    start) [[ $# -eq 3 ]] || die "usage: $0 start DIR PORT"; start "$2" "$3" ;;
    stop) [[ $# -eq 2 ]] || die "usage: $0 stop DIR"; stop "$2" ;;
    *) die "usage: $0 start DIR PORT | stop DIR" ;;
esac
