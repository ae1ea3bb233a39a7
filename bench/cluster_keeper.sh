#!/usr/bin/env bash
#
# bench/cluster_keeper.sh - how many holds can the keeper keep on one Redis
# Cluster node 1 ms and 10 ms away (issue 48, E1)?
#
#   sudo bash bench/cluster_keeper.sh
#
# Three Redis Cluster primaries on loopback (TCP, 127.0.0.1 only); one of
# them announces the port of bench/delay_proxy.pl, which holds each of its
# replies back BENCH_RTT_MS, so every redirection and slot map names the
# proxy: "a node 1 ms away".  For each added latency (BENCH_LATENCIES,
# default "1 10") and each count of holds (BENCH_HOLDS, default
# "600 2000"), sessions take that many one-slot semaphores served by the
# far node, each slot with a 3 s lease, and keep them BENCH_SECONDS
# (default 12: four leases) while the keeper refreshes them.  Then another
# session asks for every one of those slots (in a transaction rolled back):
# the slots it cannot get are those Redis still kept.  Prints, per
# latency and count: holds kept of those held, and the keeper's rounds
# (median and worst ms, from its DEBUG1 lines).
#
# Before and after: with BENCH_BEFORE=<revision>, that revision is built
# (from git archive) and installed first, the server restarted on it and
# measured, then this tree's build is installed and measured the same way:
# both sides in one table.  Both are installed into the system's
# PostgreSQL, like every bench script's build (the last one stays).
#
# Environment: BENCH_BEFORE (a git revision), BENCH_LATENCIES ("1 10"),
# BENCH_HOLDS ("600 2000"), BENCH_SECONDS (12), BENCH_NO_INSTALL=1 (this
# tree's side only, as installed), REDSEM_KEEP=1.

set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

LATENCIES=${BENCH_LATENCIES:-1 10}
HOLD_COUNTS=${BENCH_HOLDS:-600 2000}
SECONDS_HELD=${BENCH_SECONDS:-12}
PER_SESSION=500

command -v perl >/dev/null || redsem_die "perl not found"
bench_begin cluster_keeper

# three primaries on loopback ports, stopped on exit before everything else
NODE_DIRS=()
trap stop_nodes EXIT
bench_start_cluster
FAR=${PORTS[1]}
PROXY_PORT=$(redsem_free_port)

REDSEM_PG_EXTRA_CONF="redsem.unix_socket = ''
redsem.cluster = on
redsem.host = '127.0.0.1'
redsem.port = ${PORTS[0]}
redsem.max_tracked_holds = 16384
redsem.max_holds_per_session = 10000
max_connections = 50
log_min_messages = debug1" \
    redsem_start_pg "$BENCH_TMP" 2>>"$BENCH_TMP/start.log" || { cat "$BENCH_TMP/start.log" >&2; exit 1; }
BENCH_PORT=$(redsem_pg_port "$BENCH_TMP")
bench_sql "CREATE EXTENSION redsem" >/dev/null
PGLOG=$BENCH_TMP/postgres.log

# names of one-slot semaphores served by the far node, as many as asked
FAR_RANGES=$(redis-cli -p "$FAR" CLUSTER NODES | awk '/myself/ { for (i = 9; i <= NF; i++) print $i }')
MAX_HOLDS=0
for h in $HOLD_COUNTS; do ((h > MAX_HOLDS)) && MAX_HOLDS=$h; done
for ((i = 0; i < MAX_HOLDS * 4; i++)); do echo "CLUSTER KEYSLOT {ck_$i}"; done |
    redis-cli -p "$FAR" | awk -v r="$FAR_RANGES" '
        BEGIN { n = split(r, rs, "\n") }
        { for (k = 1; k <= n; k++) { split(rs[k], ab, "-"); if (ab[2] == "") ab[2] = ab[1]
              if ($1 >= ab[1] && $1 <= ab[2]) { print "ck_" (NR - 1); break } } }' >"$BENCH_TMP/names"
[[ $(wc -l <"$BENCH_TMP/names") -ge $MAX_HOLDS ]] || redsem_die "too few names on the far node"

bench_header "redsem keeper in a Redis Cluster: holds on one node, 3 s leases, kept ${SECONDS_HELD} s"
printf '%-12s %-10s %8s %8s %12s %12s\n' side latency held kept "round med" "round worst"

# install SIDE : build and install that side (BENCH_BEFORE's tree, or this
# one), and restart the server on it
install_side() {
    if [[ $1 == before ]]; then
        mkdir -p "$BENCH_TMP/before-src"
        git -C "$BENCH_DIR/.." archive "$BENCH_BEFORE" | tar -x -C "$BENCH_TMP/before-src"
        chown -R postgres "$BENCH_TMP/before-src"
        (REDSEM_REPO_ROOT=$BENCH_TMP/before-src redsem_build_install) >"$BENCH_TMP/build-before.log" 2>&1 ||
            { tail -n 20 "$BENCH_TMP/build-before.log" >&2; redsem_die "could not build $BENCH_BEFORE"; }
    else
        bench_install
    fi
    redsem_as_postgres pg_ctl -D "$BENCH_TMP/pgdata" -l "$PGLOG" -w -t 60 restart >/dev/null
}

# run LATENCY HOLDS : one measurement
run() {
    local ms=$1 holds=$2 s sessions dir=$BENCH_TMP/run_$1_$2 offset kept med worst
    mkdir -p "$dir"
    chown postgres "$dir"
    bench_bg perl "$BENCH_DIR/delay_proxy.pl" "127.0.0.1:$PROXY_PORT" "127.0.0.1:$FAR" "$ms" >"$dir/proxy.log" 2>&1
    local proxy=$BENCH_PID
    redis-cli -p "$FAR" CONFIG SET cluster-announce-port "$PROXY_PORT" >/dev/null
    bench_wait_for "the proxy's port in the slot map" 30 bash -c "redis-cli -p ${PORTS[0]} CLUSTER NODES | grep -q ':$PROXY_PORT@'"
    bench_wait_for "the proxy" 10 bash -c "[ \"\$(redis-cli -p $PROXY_PORT ping 2>/dev/null)\" = PONG ]"
    head -n "$holds" "$BENCH_TMP/names" | sed "s/.*/'&'/" | paste -sd, >"$dir/list"
    sessions=$(((holds + PER_SESSION - 1) / PER_SESSION))
    local pids=()
    for ((s = 0; s < sessions; s++)); do
        head -n "$holds" "$BENCH_TMP/names" | sed -n "$((s * PER_SESSION + 1)),$(((s + 1) * PER_SESSION))p" |
            sed "s/.*/'&'/" | paste -sd, >"$dir/list$s"
        bench_bg bench_psql -o "$dir/s$s.out" \
            -c "SELECT count(redsem_acquire(n, 1, lease => '3 s')) FROM unnest(ARRAY[$(cat "$dir/list$s")]) n" \
            -c "SELECT pg_sleep($SECONDS_HELD + 600)" >/dev/null 2>&1
        pids+=("$BENCH_PID")
    done
    bench_wait_for "$holds holds" 300 bash -c "cat $dir/s*.out 2>/dev/null | awk '{ n += \$1 } END { exit !(n == $holds) }'"
    offset=$(stat -c %s "$PGLOG")
    sleep "$SECONDS_HELD"
    kept=$(bench_psql -c "BEGIN" -c "SELECT count(*) FROM unnest(ARRAY[$(cat "$dir/list")]) n WHERE redsem_acquire_xact(n, 1) IS NULL" -c "ROLLBACK" | tail -n 1)
    tail -c +"$((offset + 1))" "$PGLOG" |
        sed -n 's/.*redsem keeper: [0-9]* hold(s) refreshed or released with [0-9]* command(s) in [0-9]* round trip(s), \([0-9]*\) ms.*/\1/p' |
        sort -n >"$dir/rounds"
    med=$(awk '{ v[NR] = $1 } END { print (NR ? v[int((NR + 1) / 2)] : "-") }' "$dir/rounds")
    worst=$(tail -n 1 "$dir/rounds")
    local label=this-tree
    [[ $SIDE == before ]] && label=${BENCH_BEFORE:0:12}
    printf '%-12s %-10s %8d %8d %12s %12s\n' "$label" "$ms ms" "$holds" "$kept" "$med ms" "${worst:--} ms"
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    bench_sql "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%' AND pid <> pg_backend_pid()" >/dev/null
    bench_wait_for "the sessions to end" 120 bash -c "[ \"\$(redis-cli -p $FAR --scan --pattern 'redsem:{ck_*:owner' | wc -l)\" = 0 ]"
    redis-cli -p "$FAR" CONFIG SET cluster-announce-port 0 >/dev/null
    bench_wait_for "the far node's own port in the slot map" 30 bash -c "redis-cli -p ${PORTS[0]} CLUSTER NODES | grep -q ':$FAR@'"
    kill "$proxy" 2>/dev/null || true
    wait "$proxy" 2>/dev/null || true
}

SIDES=(after)
[[ -n ${BENCH_BEFORE:-} ]] && SIDES=(before after)
for SIDE in "${SIDES[@]}"; do
    install_side "$SIDE"
    for ms in $LATENCIES; do
        for holds in $HOLD_COUNTS; do
            run "$ms" "$holds"
        done
    done
done
