#!/usr/bin/env bash
# Two ejabberd nodes (Debian's `ejabberd` 23.01) joined into one Mnesia cluster, each speaking MQTT
# on its own loopback port.
#
#   scripts/ejabberd-cluster.sh start DIR PORT1 PORT2   starts gs1@127.0.0.1 and gs2@127.0.0.1, joins
#                                                       gs2 to gs1, prints both broker URLs (one a line)
#   scripts/ejabberd-cluster.sh stop DIR                stops both nodes and every process they started
#   scripts/ejabberd-cluster.sh kill DIR 1|2            SIGKILLs one node (and its port programs)
#   scripts/ejabberd-cluster.sh eval DIR 1|2 EXPR       evaluates an Erlang expression on a node and
#                                                       prints the result, e.g. `ejabberd_cluster:get_nodes()`
#
# Each node is started like scripts/ejabberd-node.sh starts its one node (same mod_mqtt settings,
# `erl` run directly as the invoking user, DIR/1 and DIR/2 laid out like its DIR), and made
# distributed without exposing anything beyond 127.0.0.1:
# - no epmd at all: `-start_epmd false -epmd_module gs_epmd`, a module compiled into DIR/ebin that
#   answers name lookups from a fixed table (gs1 and gs2 to their distribution ports, given as
#   `-gs_dist_ports`); nodes not in the table listen on any port and cannot be looked up;
# - the distribution listener is bound to 127.0.0.1 (`-kernel inet_dist_use_interface`);
# - the cookie is random, in DIR/.erlang.cookie (mode 400), found through HOME=DIR so it never
#   appears on a command line.
# - EJABBERD_NET_TICKTIME (seconds, default ejabberd's 60; its `net_ticktime` option) sets how long a node that stops answering
#   without closing its connections (frozen, cut off) stays in the cluster: until then Mnesia
#   transactions wait for it, so the other node accepts no new MQTT session (measured: ~60 s).
# gs2 joins with `ejabberd_admin:join_cluster(<<"gs1@127.0.0.1">>)` called over RPC from a hidden,
# short-lived control node (what `ejabberdctl join_cluster` does, without its user switching): it
# stops ejabberd on gs2, replaces gs2's Mnesia schema with a copy of every table of gs1, and starts
# ejabberd again; the script then waits for gs2's CONNACK once more.
set -euo pipefail

PROGRAM_NAME=ejabberd-cluster
# shellcheck source=scripts/ejabberd-node.sh
source "$(dirname "${BASH_SOURCE[0]}")/ejabberd-node.sh"

readonly HOST=127.0.0.1

write_epmd_module() { # DIR: compiles gs_epmd into DIR/ebin
    mkdir -p "$1/ebin"
    cat >"$1/ebin/gs_epmd.erl" <<'EOF'
%% Node discovery without epmd, for nodes on one host: the distribution port of each known node
%% name comes from the command line (-gs_dist_ports gs1=PORT,gs2=PORT). A name not in the table
%% listens on any port and cannot be looked up (control nodes that only call out).
-module(gs_epmd).
-export([start_link/0, register_node/2, register_node/3, listen_port_please/2,
         port_please/2, port_please/3, address_please/3, names/0, names/1]).

start_link() -> ignore.
register_node(Name, Port) -> register_node(Name, Port, inet).
register_node(_Name, _Port, _Family) -> {ok, rand:uniform(16#fffffff0) + 3}.
listen_port_please(Name, _Host) -> {ok, port_of(Name, 0)}.
port_please(Name, Host) -> port_please(Name, Host, infinity).
port_please(Name, _Host, _Timeout) ->
    case port_of(Name, noport) of
        noport -> noport;
        Port -> {port, Port, 6}
    end.
address_please(_Name, Host, Family) -> inet:getaddr(Host, Family).
names() -> {error, address}.
names(_Host) -> {error, address}.

port_of(Name, Default) ->
    Short = hd(string:split(to_list(Name), "@")),
    {ok, [[Table]]} = init:get_argument(gs_dist_ports),
    Pairs = [string:split(Entry, "=") || Entry <- string:split(Table, ",", all)],
    case [list_to_integer(Port) || [N, Port] <- Pairs, N =:= Short] of
        [Port | _] -> Port;
        [] -> Default
    end.

to_list(Name) when is_atom(Name) -> atom_to_list(Name);
to_list(Name) -> Name.
EOF
    erlc -o "$1/ebin" "$1/ebin/gs_epmd.erl"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

dist_args() { # DIR NAME: the erl arguments that make a node distributed, loopback only, without epmd
    echo "-name $2@$HOST -start_epmd false -epmd_module gs_epmd -pa $1/ebin"
    echo "-gs_dist_ports $(cat "$1/dist_ports")"
    echo "-kernel inet_dist_use_interface {127,0,0,1}"
    echo "-kernel net_ticktime ${EJABBERD_NET_TICKTIME:-60}"
}

control() { # DIR EXPR: evaluates EXPR on a hidden control node, prints the result (~p), 30 s deadline
    local dir=$1 expr=$2
    local -a args
    mapfile -t args < <(dist_args "$dir" "gsctl$$" | tr ' ' '\n')
    (
        export HOME=$dir
        exec timeout -s KILL 30 erl -noinput -noshell -hidden "${args[@]}" -eval "
            R = try ($expr) catch C:E -> {C, E} end,
            io:format(\"~p~n\", [R]),
            halt(0)."
    ) &
    local pid=$!
    echo "$pid" >"$dir/control.pid"
    wait "$pid"
    rm -f "$dir/control.pid"
}

on_node() { # N EXPR: EXPR as an rpc:call on gsN
    echo "rpc:call('gs$1@$HOST', erlang, apply, [fun() -> $2 end, []], 20000)"
}

start() { # DIR PORT1 PORT2
    local dir=$1 port1=$2 port2=$3
    [[ $port1 =~ ^[0-9]+$ && $port2 =~ ^[0-9]+$ ]] || die "ports must be numbers: $port1 $port2"
    [[ $port1 != "$port2" ]] || die "the two nodes need two ports"
    check_installed
    command -v erlc >/dev/null || die "erlc is needed (erlang-base)"
    mkdir -p "$dir/1/spool" "$dir/1/log" "$dir/2/spool" "$dir/2/log"
    dir=$(cd "$dir" && pwd -P)
    refuse_running "$dir/1" "$port1"
    refuse_running "$dir/2" "$port2"

    (umask 077 && head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$dir/.erlang.cookie")
    chmod 400 "$dir/.erlang.cookie"
    echo "gs1=$(free_port),gs2=$(free_port)" >"$dir/dist_ports"
    write_epmd_module "$dir"

    # Whatever ends this script before the cluster is ready stops both nodes.
    trap 'stop_cluster "$dir" >/dev/null 2>&1 || true' EXIT
    trap 'exit 143' TERM
    trap 'exit 130' INT
    local n port
    for n in 1 2; do
        port=$([[ $n == 1 ]] && echo "$port1" || echo "$port2")
        write_config "$dir/$n" "$port"
        # ejabberd sets net_ticktime again from its own option at start (a change that only takes
        # effect after a transition of the old tick time); the VM starts with the same value.
        echo "net_ticktime: ${EJABBERD_NET_TICKTIME:-60}" >>"$dir/$n/ejabberd.yml"
        local -a args
        mapfile -t args < <(dist_args "$dir" "gs$n" | tr ' ' '\n')
        HOME=$dir launch "$dir/$n" "$port" "${args[@]}"
    done
    await_connack "$dir/1" "$port1"
    await_connack "$dir/2" "$port2"

    local joined
    joined=$(control "$dir" "$(on_node 2 "ejabberd_admin:join_cluster(<<\"gs1@$HOST\">>)")")
    [[ $joined == ok ]] || die "gs2 did not join gs1: $joined (logs in $dir/1/log, $dir/2/log)"
    await_connack "$dir/2" "$port2"
    local nodes
    nodes=$(control "$dir" "$(on_node 1 "lists:sort(ejabberd_cluster:get_nodes())")")
    [[ $nodes == "['gs1@$HOST','gs2@$HOST']" ]] || die "the cluster is not gs1 + gs2: $nodes"
    trap - EXIT TERM INT
    echo "mqtt://$USER_NAME:$PASSWORD@$HOST:$port1"
    echo "mqtt://$USER_NAME:$PASSWORD@$HOST:$port2"
}

stop_cluster() { # DIR
    local dir=$1
    [[ -d $dir ]] || { echo "$PROGRAM_NAME: no directory $dir, nothing to stop" >&2; return 0; }
    dir=$(cd "$dir" && pwd -P)
    if [[ -f $dir/control.pid ]]; then
        local pid
        pid=$(cat "$dir/control.pid")
        # The control node's command line names DIR/ebin (its epmd module path).
        if alive "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$dir/ebin"; then
            kill -KILL "$pid" 2>/dev/null || true
        fi
        rm -f "$dir/control.pid"
    fi
    local n
    for n in 2 1; do
        if [[ -f $dir/$n/ejabberd.pid ]]; then stop "$dir/$n"; fi
    done
}

kill_node() { # DIR N: SIGKILL to the VM and to every process below it
    local dir
    dir=$(cd "$1" && pwd -P)
    local pid
    pid=$(cat "$dir/$2/ejabberd.pid" 2>/dev/null) || die "no node $2 recorded in $dir"
    is_node "$pid" "$dir/$2" || die "node $2 of $dir is not running"
    local -a pids
    mapfile -t pids < <(echo "$pid"; descendants "$pid")
    kill -KILL "${pids[@]}" 2>/dev/null || true
    while alive "$pid"; do sleep 0.01; done
    rm -f "$dir/$2/ejabberd.pid"
}

case ${1:-} in
    start) [[ $# -eq 4 ]] || die "usage: $0 start DIR PORT1 PORT2"; start "$2" "$3" "$4" ;;
    stop) [[ $# -eq 2 ]] || die "usage: $0 stop DIR"; stop_cluster "$2" ;;
    kill) [[ $# -eq 3 && $3 =~ ^[12]$ ]] || die "usage: $0 kill DIR 1|2"; kill_node "$2" "$3" ;;
    eval) [[ $# -eq 4 && $3 =~ ^[12]$ ]] || die "usage: $0 eval DIR 1|2 EXPR"
          control "$(cd "$2" && pwd -P)" "$(on_node "$3" "$4")" ;;
    *) die "usage: $0 start DIR PORT1 PORT2 | stop DIR | kill DIR 1|2 | eval DIR 1|2 EXPR" ;;
esac
