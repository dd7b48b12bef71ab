#!/usr/bin/env bash
# GroupSync across a two-node ejabberd cluster (scripts/ejabberd-cluster.sh), loopback only.
#
#   scripts/ejabberd-cluster-check.sh [GROUPSYNC-BINARY [demos|failover|ci]]
#       (default: builds and uses .build/debug/groupsync, runs demos and failover)
#
# ci: what CI runs, retain-less only — the demos (gallery and playback, 3, 10 and 20 participants), the
#     failover, and the suites that spread their clients over two brokers against both nodes
#     (GROUPSYNC_TEST_BROKER=URL1,URL2): the retain-less stress test (GROUPSYNC_STRESS_ROUNDS rounds,
#     default 50), the observers, the retain-less shared state and journal. Needs `swift build
#     --build-tests` done.
#
# 1. demos: `groupsync demo --broker URL1 --broker URL2` (participants spread across the nodes),
#    gallery and playback, 3/10/20 participants, with and without --no-retain; PASS/FAIL each, and
#    for the gallery the "active" list each joiner printed (a split membership shows there);
# 2. failover, with and without --no-retain: `groupsync join` participants a1, a2 on node 1 and b1, b2
#    on node 2, every one with both URLs (its own node first); each sends a numbered message (`!`)
#    every 50 ms; node 1 is SIGKILLed; a1 and a2 move to node 2. Reported per pair sender -> receiver:
#    messages sent / received / missing / duplicated, and the longest silence around the kill; and
#    whether anyone saw another leave. Until node 2 has taken node 1 out of its cluster, ejabberd's
#    routing of a publish on node 2 (mod_mqtt_mnesia:mqtree_multi_match, which asserts that every node
#    answered) crashes the publisher's MQTT session: its will goes out and it reconnects. Such a
#    participant, found in node 2's error log, may be seen leaving and coming back; it is reported.
#
# Exit code: 0 when every --no-retain demo passed and the --no-retain failover lost nothing, duplicated
# nothing and showed no one leaving but those whose session ejabberd crashed, back by the end; 1
# otherwise. The runs with retained messages are reported but do
# not count: the nodes share their retained store but each keeps its own index of retained topics, so
# a subscriber is replayed only what was retained through its own node (each joiner sees only the
# members on its node); GroupSync needs --no-retain on an ejabberd cluster.
# Needs Debian's ejabberd and mosquitto-clients; leaves nothing running.
set -euo pipefail
cd "$(dirname "$0")/.."

groupsync=${1:-}
if [[ -z $groupsync ]]; then
    swift build --product groupsync >/dev/null
    groupsync=.build/debug/groupsync
fi
groupsync=$(realpath "$groupsync")

# shellcheck source=scripts/ejabberd-cluster-harness.sh
source scripts/ejabberd-cluster-harness.sh ejabberd-cluster

start_cluster() { # sets URL1 URL2
    scripts/ejabberd-cluster.sh stop "$WORK/cluster" >/dev/null 2>&1 || true
    rm -rf "$WORK/cluster"
    local urls
    mapfile -t urls < <(scripts/ejabberd-cluster.sh start "$WORK/cluster" "$(free_port)" "$(free_port)")
    [[ ${#urls[@]} == 2 ]] || { echo "the cluster did not start" >&2; exit 1; }
    URL1=${urls[0]} URL2=${urls[1]}
}

failed=0

demos() { # [--no-retain-only]
    start_cluster
    echo "cluster: $URL1 + $URL2" >&2
    local retain participants mode retains=("" --no-retain)
    [[ ${1:-} == --no-retain-only ]] && retains=(--no-retain)
    for retain in "${retains[@]}"; do
        for participants in 3 10 20; do
            for mode in gallery playback; do
                local flags=(--participants "$participants" --broker "$URL1" --broker "$URL2" --timeout 60)
                [[ $mode == playback ]] && flags+=(--playback)
                [[ -n $retain ]] && flags+=("$retain")
                local log=$WORK/demo-$mode-$participants$retain.log t0=$EPOCHREALTIME
                local label="demo $mode ${retain:-(retained)}, $participants participants"
                if "$groupsync" demo "${flags[@]}" >"$log" 2>&1; then
                    awk -v l="$label" -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "PASS  %s (%.2f s)\n", l, b - a }' >&2
                elif [[ -z $retain ]]; then
                    echo "FAIL  $label (not counted):" >&2
                    { grep -E 'demo failed|result:|late joiner:|position spread:' "$log" || tail -n 3 "$log"; } | sed 's/^/      /' >&2
                else
                    echo "FAIL  $label:" >&2
                    tail -n 25 "$log" >&2
                    failed=1
                fi
                if [[ $mode == gallery ]]; then
                    # Each joiner's own view of who is active; everyone joined before the late joiner.
                    { grep -E ' joined; active: ' "$log" || true; } | awk '{ n = split($0, a, "active: "); m = split(a[2], b, ", ");
                        printf "%s%s:%d", sep, $3, m; sep = " " } END { print "" }' | sed 's/^/      active at join: /' >&2
                fi
            done
        done
    done
}

stamp() { while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done; }

failover() { # "" | --no-retain
    local retain=$1 dir=$WORK/failover${1:-}
    mkdir -p "$dir"
    start_cluster
    local group=cluster-$RANDOM$RANDOM names=(a1 b1 a2 b2) name
    declare -A fd
    local session=
    for name in "${names[@]}"; do
        local brokers=(--broker "$URL1" --broker "$URL2")
        [[ $name == b* ]] && brokers=(--broker "$URL2" --broker "$URL1")
        local args=(join com.example.gallery --group "$group" --as "$name" --timeout 30 "${brokers[@]}")
        [[ -n $session ]] && args+=(--session "$session") || args+=(--title Cluster)
        [[ -n $retain ]] && args+=("$retain")
        mkfifo "$dir/$name.in"
        "$groupsync" "${args[@]}" <"$dir/$name.in" > >(stamp >"$dir/$name.out") 2> >(stamp >"$dir/$name.err") &
        BG+=($!)
        echo $! >"$dir/$name.pid"
        local writer
        exec {writer}>"$dir/$name.in"
        fd[$name]=$writer
        if [[ -z $session ]]; then
            local deadline=$((SECONDS + 30))
            until session=$(awk '$2 == "session" { print $3; exit }' "$dir/$name.out" 2>/dev/null) && [[ -n $session ]]; do
                ((SECONDS < deadline)) || { echo "FAIL  failover: no session from $name" >&2; [[ -z $retain ]] || failed=1; return; }
                sleep 0.05
            done
        fi
    done
    # Everyone lists all four participants.
    local deadline=$((SECONDS + 30)) all=0
    while ((all < 4)); do
        all=0
        for name in "${names[@]}"; do
            grep -qE ' participants (a1|a2|b1|b2)(,(a1|a2|b1|b2)){3}$' "$dir/$name.out" 2>/dev/null && all=$((all + 1))
        done
        if ((SECONDS >= deadline)); then
            echo "FAIL  failover ${retain:-(retained)}: only $all of 4 saw everyone within 30 s; last lists:" >&2
            [[ -z $retain ]] || failed=1
            for name in "${names[@]}"; do
                echo "  $name: $(grep ' participants ' "$dir/$name.out" | tail -n 1 | cut -d' ' -f3-)" >&2
            done
            break
        fi
        sleep 0.05
    done
    local joined=$EPOCHREALTIME
    declare -a senders=()
    for name in "${names[@]}"; do
        (
            i=0
            while :; do
                i=$((i + 1))
                echo "!$name-$i" >&"${fd[$name]}"
                echo "$EPOCHREALTIME $i" >>"$dir/$name.sent"
                sleep 0.05
            done
        ) &
        senders+=($!)
        BG+=($!)
    done
    sleep 1
    local killed=$EPOCHREALTIME
    scripts/ejabberd-cluster.sh kill "$WORK/cluster" 1
    sleep 4
    kill -KILL "${senders[@]}" 2>/dev/null || true
    wait "${senders[@]}" 2>/dev/null || true
    sleep 2
    local closing=$EPOCHREALTIME
    for name in "${names[@]}"; do eval "exec ${fd[$name]}>&-"; done
    for name in "${names[@]}"; do
        local pid
        pid=$(cat "$dir/$name.pid")
        local deadline=$((SECONDS + 10))
        while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.05; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    awk -v r="${retain:-(retained, not counted)}" -v a="$joined" -v b="$killed" \
        'BEGIN { printf "failover %s: all four listed everyone %.0f ms before node 1 was SIGKILLed (times below from the kill)\n", r, (b - a) * 1000 }' >&2
    if ! python3 - "$dir" "$killed" "$closing" "$WORK/cluster/2/log/error.log" >&2 <<'EOF' && [[ -n $retain ]]; then failed=1; fi
import sys, json, os, re
d, killed, closing, node2_errors = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
names = ["a1", "a2", "b1", "b2"]
ok = True
# Sessions that node 2 crashed itself (see the header): a crash report names the client's JID, whose
# resource is its client ID, gs-<name>-<suffix>.
crashed = set()
if os.path.exists(node2_errors):
    for report in open(node2_errors).read().split("** Generic server ")[1:]:
        if "mqtree_multi_match" in report:
            crashed.update(re.findall(r'<<"gs-(a1|a2|b1|b2)-[a-z0-9]+">>', report))
for n in sorted(crashed):
    print(f"  ejabberd crashed {n}'s session on node 2 (mod_mqtt_mnesia:mqtree_multi_match): its will went out, it reconnected")
sent = {n: [(float(t), int(i)) for t, i in (l.split() for l in open(f"{d}/{n}.sent"))] for n in names}
for receiver in names:
    got = {}
    left, lists, last = [], [], None
    for line in open(f"{d}/{receiver}.out"):
        t, _, rest = line.rstrip("\n").partition(" ")
        m = re.match(r"message (\S+) (\{.*\})$", rest)
        if m:
            text = json.loads(m.group(2)).get("text", "")
            s, _, i = text.rpartition("-")
            got.setdefault(s, []).append((float(t), int(i)))
        m = re.match(r"participants (.*)$", rest)
        if m and killed < float(t) < closing:
            at = f"+{(float(t) - killed) * 1000:.0f} ms"
            left.append(f"{at} {m.group(1)}")
            lists.append(set(m.group(1).split(",")))
        if m and float(t) < closing:  # after `closing` the others leave as they are closed
            last = set(m.group(1).split(","))
    for sender in names:
        if sender == receiver:
            continue
        numbers = [i for _, i in got.get(sender, [])]
        wanted = {i for _, i in sent[sender]}
        missing = sorted(wanted - set(numbers))
        dups = len(numbers) - len(set(numbers))
        times = sorted(t for t, _ in got.get(sender, []))
        gap, at = 0.0, 0.0
        for x, y in zip(times, times[1:]):
            if y - x > gap:
                gap, at = y - x, x
        after = [t for t in times if t > killed]
        first = f"{(after[0] - killed) * 1000:.0f} ms" if after else "never"
        line = (f"  {sender} -> {receiver}: sent {len(wanted)}, received {len(numbers)}, missing {len(missing)}"
                f"{' ' + str(missing[:8]) if missing else ''}, duplicated {dups}, first after the kill {first}, "
                f"longest silence {gap * 1000:.0f} ms from +{(at - killed) * 1000:.0f} ms")
        print(line)
        ok = ok and not missing and dups == 0
    if left:
        print(f"  {receiver} saw the participants change after the kill: {'; '.join(left)}")
        # Only those whose session ejabberd crashed may have gone missing, and they are back.
        ok = ok and set(names) - set.intersection(*lists) <= crashed and last == set(names)
for n in names:
    err = [l.split(" ", 1)[1].strip() for l in open(f"{d}/{n}.err") if l.strip()]
    if err:
        print(f"  {n} stderr: " + " | ".join(err[:4]))
print(f"  result: {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
EOF
}

suites() {
    start_cluster
    local start=$SECONDS log=$WORK/tests.log
    # One test at a time, as against one ejabberd node (scripts/ejabberd-check.sh); in the background,
    # so that a TERM or INT is handled at once.
    GROUPSYNC_TEST_BROKER=$URL1,$URL2 GROUPSYNC_STRESS_ROUNDS=${GROUPSYNC_STRESS_ROUNDS:-50} swift test --skip-build --no-parallel \
        --filter 'RetainlessMembershipTests|ObserverTests|ObserverWelcomeTests|participantsWithoutRetainedMessages|withoutRetainedMessages' \
        >"$log" 2>&1 &
    BG+=($!)
    if wait $!; then
        echo "PASS  test suites across both nodes ($((SECONDS - start)) s): $(grep -E '^. Test run with' "$log" | tail -n 1)" >&2
    else
        echo "FAIL  test suites across both nodes ($((SECONDS - start)) s):" >&2
        grep -E '^. Test run with|recorded an issue|^error|[Ff]atal|skipped' "$log" | tail -n 60 >&2
        failed=1
    fi
}

part=${2:-all}
if [[ $part == all || $part == demos ]]; then demos; fi
if [[ $part == all || $part == failover ]]; then
    failover ""
    failover --no-retain
fi
if [[ $part == ci ]]; then
    demos --no-retain-only
    failover --no-retain
    suites
fi
exit "$failed"
