#!/usr/bin/env bash
# Probes a two-node ejabberd cluster (scripts/ejabberd-cluster.sh) with plain MQTT 5 clients
# (mosquitto_pub / mosquitto_sub) and prints what it observed, with times:
# - live messages across nodes, retained messages across nodes, a will across nodes;
# - node 2 stopped (SIGTERM), killed (SIGKILL) or frozen (SIGSTOP): wills of its clients, what clients of
#   node 1 see (disconnects and reconnects), whether node 1 keeps routing, persistent sessions.
#
#   scripts/ejabberd-cluster-probe.sh [term|kill|freeze|all]   (default all: routing, then each loss
#                                                              on a fresh cluster; freeze = SIGSTOP)
#
# Needs Debian's ejabberd and mosquitto-clients. Everything it starts is stopped on every exit path.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/ejabberd-cluster-harness.sh
source scripts/ejabberd-cluster-harness.sh ejabberd-probe
now() { echo "$EPOCHREALTIME"; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) * 1000 }'; }
say() { printf '%s\n' "$*"; }

common=(-h 127.0.0.1 -u groupsync -P groupsync -V mqttv5)

start_cluster() {
    rm -rf "$WORK/cluster"
    P1=$(free_port) P2=$(free_port)
    local t0
    t0=$(now)
    scripts/ejabberd-cluster.sh start "$WORK/cluster" "$P1" "$P2" >/dev/null
    say "cluster up on $P1 + $P2 in $(ms "$t0" "$(now)") ms"
}

# A timestamped, debug-logging subscriber in the background: LOG gets "EPOCH LINE" lines.
watch_bg() { # LOG PORT CLIENT-ID ARGS...
    local log=$1 port=$2 id=$3
    shift 3
    mosquitto_sub "${common[@]}" -p "$port" -i "$id" -d -v "$@" </dev/null \
        > >(while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done >"$log") 2>&1 &
    BG+=($!) # mosquitto_sub itself; the stamping loop ends with its output
    disown # killed by PID; no job notice
}

await_line() { # LOG PATTERN [SECONDS]: prints the first matching line's timestamp, or "none"
    local deadline=$((SECONDS + ${3:-10})) hit
    while ((SECONDS < deadline)); do
        hit=$(grep -m 1 -E -- "$2" "$1" 2>/dev/null | cut -d' ' -f1) || true
        if [[ -n $hit ]]; then echo "$hit"; return 0; fi
        sleep 0.02
    done
    echo none
}

count_lines() { grep -c -E -- "$2" "$1" 2>/dev/null || true; }

pub() { mosquitto_pub "${common[@]}" "$@"; }

probe_routing() {
    say "--- live messages"
    local log=$WORK/live.log n
    watch_bg "$log" "$P2" live-sub -t probe/live -q 1
    await_line "$log" "received SUBACK" >/dev/null
    for n in $(seq 1 20); do pub -p "$P1" -t probe/live -q 1 -m "$(now)"; done
    local deadline=$((SECONDS + 5))
    while (($(count_lines "$log" '^[0-9.]+ probe/live ') < 20 && SECONDS < deadline)); do sleep 0.05; done
    say "published 20 QoS 1 on node 1, received on node 2: $(count_lines "$log" '^[0-9.]+ probe/live ')"
    awk '$2 == "probe/live" { d = ($1 - $3) * 1000; s += d; if (d > m) m = d; n++ }
         END { if (n) printf "node1 -> node2 latency (incl. mosquitto_pub connect): mean %.1f ms, max %.1f ms\n", s / n, m }' "$log"

    say "--- retained messages"
    pub -p "$P1" -t probe/ret/one -r -q 1 -m from-node-1
    pub -p "$P2" -t probe/ret/two -r -q 1 -m from-node-2
    local where filter
    for where in "$P1" "$P2"; do
        for filter in 'probe/ret/#' probe/ret/one probe/ret/two; do
            say "subscribe on :$where to $filter -> $(mosquitto_sub "${common[@]}" -p "$where" -t "$filter" -W 1 -v 2>/dev/null | tr '\n' ' ' || true)"
        done
    done
    pub -p "$P2" -t probe/ret/one -r -q 1 -m rewritten-on-node-2
    say "after rewriting probe/ret/one on node 2: node 1 -> $(mosquitto_sub "${common[@]}" -p "$P1" -t probe/ret/one -W 1 -v 2>/dev/null | tr '\n' ' ' || true), node 2 -> $(mosquitto_sub "${common[@]}" -p "$P2" -t probe/ret/one -W 1 -v 2>/dev/null | tr '\n' ' ' || true)"
    pub -p "$P1" -t probe/ret/one -r -q 1 -n
    say "after clearing probe/ret/one on node 1: node 1 -> $(mosquitto_sub "${common[@]}" -p "$P1" -t probe/ret/one -W 1 -v 2>/dev/null | tr '\n' ' ' || true), node 2 -> $(mosquitto_sub "${common[@]}" -p "$P2" -t probe/ret/one -W 1 -v 2>/dev/null | tr '\n' ' ' || true)"
    pub -p "$P1" -t probe/ret/two -r -q 1 -n
    say "after clearing probe/ret/two (set on node 2) on node 1: node 2 -> $(mosquitto_sub "${common[@]}" -p "$P2" -t probe/ret/two -W 1 -v 2>/dev/null | tr '\n' ' ' || true)"

    say "--- a will across nodes"
    log=$WORK/will.log
    watch_bg "$log" "$P2" will-sub -t 'probe/will/#' -q 1
    await_line "$log" "received SUBACK" >/dev/null
    mosquitto_sub "${common[@]}" -p "$P1" -i willer -t probe/nothing --will-topic probe/will/willer \
        --will-payload gone --will-qos 1 -k 60 >/dev/null 2>&1 &
    local willer=$!
    BG+=("$willer")
    disown
    sleep 0.5
    local t0
    t0=$(now)
    kill -KILL "$willer"
    local got
    got=$(await_line "$log" "probe/will/willer gone" 5)
    if [[ $got == none ]]; then say "will of a client killed on node 1: NOT received on node 2 within 5 s"
    else say "will of a client killed on node 1: received on node 2 after $(ms "$t0" "$got") ms"; fi
}

probe_node_loss() { # term|kill
    local how=$1
    say "=== node 2: $how"
    start_cluster
    local log1=$WORK/n1-$how.log log2=$WORK/n2-$how.log
    # On node 1: a watcher of everything (its own disconnects show as a new CONNECT).
    watch_bg "$log1" "$P1" watcher1 -t 'probe/#' -q 1 -k 5
    # On node 2: a client with a will, and a persistent session (session expiry 300 s) subscribed QoS 1.
    mosquitto_sub "${common[@]}" -p "$P2" -i willer2 -t probe/nothing --will-topic probe/will/willer2 \
        --will-payload gone --will-qos 1 -k 60 >/dev/null 2>&1 &
    BG+=($!)
    disown
    watch_bg "$log2" "$P2" watcher2 -t 'probe/#' -q 1 -k 5
    await_line "$log1" "received SUBACK" >/dev/null
    await_line "$log2" "received SUBACK" >/dev/null
    mosquitto_sub "${common[@]}" -p "$P2" -i persist2 -c -x 300 -t probe/persist -q 1 -W 1 >/dev/null 2>&1 || true
    mosquitto_sub "${common[@]}" -p "$P1" -i persist1 -c -x 300 -t probe/persist -q 1 -W 1 >/dev/null 2>&1 || true
    pub -p "$P1" -t probe/persist -q 1 -m queued-before
    pub -p "$P1" -t probe/before -q 1 -m node1-before
    await_line "$log2" "probe/before node1-before" 5 >/dev/null
    sleep 0.3

    local t0
    t0=$(now)
    case $how in
        term) scripts/ejabberd-node.sh stop "$WORK/cluster/2" 2>/dev/null ;;
        kill) scripts/ejabberd-cluster.sh kill "$WORK/cluster" 2 ;;
        freeze) kill -STOP "$(cat "$WORK/cluster/2/ejabberd.pid")" ;;
    esac
    say "node 2 ${how} done after $(ms "$t0" "$(now)") ms"

    # Does node 1 still route to its own clients? One publish at a time, from a new connection.
    local first_ok=none i t tries=0 failed=0 loss_deadline=$((SECONDS + 90))
    for i in $(seq 1 200); do
        t=$(now)
        tries=$i
        if timeout 10 mosquitto_pub "${common[@]}" -p "$P1" -t probe/after -q 1 -m "n$i" 2>/dev/null \
            && [[ $(await_line "$log1" "probe/after n$i\$" 1) != none ]]; then
            first_ok=$t
            break
        fi
        failed=$((failed + 1))
        ((SECONDS < loss_deadline)) || break
    done
    if [[ $first_ok == none ]]; then say "node 1 did not route a publish to its own subscriber ($tries tries)"
    else say "node 1 routed a publish to its own subscriber: the first that worked was sent $(ms "$t0" "$first_ok") ms after the loss and took $(ms "$first_ok" "$(await_line "$log1" "probe/after n$i\$" 1)") ms ($failed failed before)"; fi
    local got
    got=$(await_line "$log1" "probe/will/willer2 gone" 3)
    if [[ $got == none ]]; then say "will of node 2's client: NOT received on node 1 (waited until $(ms "$t0" "$(now)") ms)"
    else say "will of node 2's client: received on node 1 after $(ms "$t0" "$got") ms"; fi
    sleep 3
    local connects
    connects=$(count_lines "$log1" "sending CONNECT")
    say "watcher on node 1: $connects CONNECT(s) in all (1 = never disconnected)"
    if ((connects > 1)); then
        say "watcher on node 1: reconnect CONNACK at $(ms "$t0" "$(grep -E 'received CONNACK' "$log1" | sed -n 2p | cut -d' ' -f1)") ms"
        grep -E -i 'disconnect|error|lost' "$log1" | head -n 3 | sed 's/^/    /'
    fi
    # New connections to node 1.
    t=$(now)
    if pub -p "$P1" -t probe/new -q 1 -m x; then say "a new connection + QoS 1 publish on node 1: ok in $(ms "$t" "$(now)") ms"
    else say "a new connection + QoS 1 publish on node 1: FAILED"; fi
    # Persistent sessions: persist1 (on node 1) must hold queued-before; persist2 was on node 2.
    say "persist1 resumes on node 1: $(mosquitto_sub "${common[@]}" -p "$P1" -i persist1 -c -x 300 -t probe/persist -q 1 -W 2 -v 2>/dev/null | tr '\n' ' ' || true)"
    say "persist2 (was on node 2) resumes on node 1: $(mosquitto_sub "${common[@]}" -p "$P1" -i persist2 -c -x 300 -t probe/persist -q 1 -W 2 -v -d 2>/dev/null | grep -E 'CONNACK|probe/persist' | tr '\n' ' ' || true)"
    grep -E '\[(error|warning)\]' "$WORK/cluster/1/log/erl.out" | cut -c33-260 | sort | uniq -c | sort -rn | head -n 8 | sed 's/^/    node 1 log: /'
    if [[ $how == freeze ]]; then scripts/ejabberd-cluster.sh kill "$WORK/cluster" 2; fi
    scripts/ejabberd-cluster.sh stop "$WORK/cluster" >/dev/null 2>&1
}

case ${1:-all} in
    term | kill | freeze) probe_node_loss "$1" ;;
    all)
        start_cluster
        probe_routing
        scripts/ejabberd-cluster.sh stop "$WORK/cluster" >/dev/null 2>&1
        probe_node_loss term
        probe_node_loss kill
        probe_node_loss freeze
        ;;
    *) echo "usage: $0 [term|kill|freeze|all]" >&2; exit 2 ;;
esac
