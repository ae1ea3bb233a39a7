#!/usr/bin/env bash
#
# bench/queues.sh - what statement queues cost: pgbench -S (select-only)
# side by side on two servers of the same build and settings, one with
# redsem preloaded (its hooks installed, queues defined) and one without
# redsem at all, in one invocation.
#
#   sudo bash bench/queues.sh
#
# Phases (pgbench -S -M prepared -j 2, BENCH_CLIENTS clients, each side
# BENCH_DURATION seconds in halves interleaved A B A B):
#   A  a role in no queue, on the server with the hooks vs the server
#      without redsem: the cost of the hooks for everyone else (the target
#      is at most 2%)
#   B  a role whose queue lets every statement pass by cost (min_cost above
#      any pgbench -S plan) vs a role in no queue, same server: the cost of
#      the cost test
#   C  a role whose queue takes a slot for every statement (active 1000)
#      vs a role in no queue, same server: the cost of queueing, two Redis
#      commands per statement (the release is sent without waiting)
#   D  one client: the latency a queued statement adds over a role in no
#      queue, with the release sent without waiting (the default) and with
#      redsem.await_release = on, each beside a Redis PING round trip
#      measured in the same run (redis-benchmark, one client): the target
#      is at most 1.3 PINGs, one round trip waited for; and the floor of
#      that: a role in no queue whose statement (the same SELECT) also
#      calls redsem_limit() once, one Redis round trip through redsem's
#      connection with a read-only script, vs the same statement without it
# Redis commands per statement come from INFO commandstats.
#
# Environment: BENCH_DURATION (seconds per side, default 10),
# BENCH_CLIENTS (default 4), BENCH_NO_INSTALL=1, REDSEM_KEEP=1.

set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

DURATION=${BENCH_DURATION:-10}
CLIENTS=${BENCH_CLIENTS:-4}
HALF=$(((DURATION + 1) / 2))

bench_begin queues
bench_install
bench_start_redis
HOOKS=$BENCH_TMP/hooks
PLAIN=$BENCH_TMP/plain
mkdir -p "$HOOKS" "$PLAIN"
chown postgres "$HOOKS" "$PLAIN"
REDSEM_PG_EXTRA_CONF="redsem.unix_socket = '$BENCH_SOCK'
redsem.queues = 'passes: active_statements=1 min_cost=1e12; everyone: active_statements=1000'" \
    redsem_start_pg "$HOOKS" 2>>"$BENCH_TMP/start.log" || { cat "$BENCH_TMP/start.log" >&2; exit 1; }
REDSEM_NO_PRELOAD=1 redsem_start_pg "$PLAIN" 2>>"$BENCH_TMP/start.log" || { cat "$BENCH_TMP/start.log" >&2; exit 1; }

# on_server DIR ARGS... : pgbench against the server in DIR
on_server() {
    local dir=$1
    shift
    redsem_as_postgres pgbench -h "$dir" -p "$(redsem_pg_port "$dir")" "$@" postgres
}
sql_on() { redsem_psql "$1" -c "$2"; }

sql_on "$HOOKS" "CREATE EXTENSION redsem" >/dev/null
for dir in "$HOOKS" "$PLAIN"; do
    on_server "$dir" -U postgres -i -s 1 -q >/dev/null 2>&1
    sql_on "$dir" "CREATE ROLE bench_plain LOGIN; CREATE ROLE bench_passes LOGIN; CREATE ROLE bench_queued LOGIN;
                   CREATE ROLE bench_awaited LOGIN;
                   GRANT SELECT ON ALL TABLES IN SCHEMA public TO bench_plain, bench_passes, bench_queued, bench_awaited" >/dev/null
done
sql_on "$HOOKS" "ALTER ROLE bench_passes SET redsem.queue = 'passes'; ALTER ROLE bench_queued SET redsem.queue = 'everyone';
                 ALTER ROLE bench_awaited SET redsem.queue = 'everyone'; ALTER ROLE bench_awaited SET redsem.await_release = on" >/dev/null

declare -A TX SECS RT

# D's floor: pgbench -S's statement, with and without one light redsem
# call (one Redis round trip, nothing taken)
for f in select floor; do
    {
        echo '\set aid random(1, 100000 * :scale)'
        if [[ $f == floor ]]; then
            echo "SELECT abalance, redsem_limit('q') FROM pgbench_accounts WHERE aid = :aid;"
        else
            echo 'SELECT abalance FROM pgbench_accounts WHERE aid = :aid;'
        fi
    } >"$BENCH_TMP/$f.sql"
done
chown postgres "$BENCH_TMP"/*.sql

# run_half LABEL DIR ROLE [SCRIPT] : one half of one side (pgbench -S, or
# the script)
run_half() {
    local label=$1 dir=$2 role=$3 out tx tps stats workload=(-S)
    [[ -z ${4:-} ]] || workload=(-f "$4")
    bench_stats_reset
    out=$(on_server "$dir" -U "$role" -n "${workload[@]}" -M prepared -c "${HALF_CLIENTS:-$CLIENTS}" -j "$(( ${HALF_CLIENTS:-$CLIENTS} < 2 ? 1 : 2 ))" -T "$HALF" 2>&1) || {
        printf '%s\n' "$out" >&2
        redsem_die "pgbench failed ($label)"
    }
    stats=$(bench_stats)
    tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
    tps=$(sed -n 's/^tps = \([0-9.]*\) (without.*/\1/p' <<<"$out")
    [[ -n $tx && -n $tps ]] || {
        printf '%s\n' "$out" >&2
        redsem_die "could not read pgbench's output ($label)"
    }
    TX[$label]=$((${TX[$label]:-0} + tx))
    SECS[$label]=$(awk -v a="${SECS[$label]:-0}" -v t="$tx" -v r="$tps" 'BEGIN { printf "%.6f", a + t / r }')
    RT[$label]=$((${RT[$label]:-0} + $(bench_roundtrips "$stats")))
}

# run_pair A_LABEL A_DIR A_ROLE B_LABEL B_DIR B_ROLE : A B A B
run_pair() {
    run_half "$1" "$2" "$3"
    run_half "$4" "$5" "$6"
    run_half "$1" "$2" "$3"
    run_half "$4" "$5" "$6"
}
tps_of() { bench_div "${TX[$1]}" "${SECS[$1]}" '%.0f'; }
rt_of() { bench_div "${RT[$1]}" "${TX[$1]}" '%.3f'; }

bench_header "redsem statement queue benchmark (bench/queues.sh)"
printf 'pgbench -S -M prepared -c %s -j 2, %s s per side (two interleaved halves), scale 1\n\n' "$CLIENTS" "$DURATION"

run_pair hooks "$HOOKS" bench_plain plain "$PLAIN" bench_plain
run_pair passes "$HOOKS" bench_passes nonq "$HOOKS" bench_plain
run_pair queued "$HOOKS" bench_queued nonq2 "$HOOKS" bench_plain
HALF_CLIENTS=1
run_pair one_deferred "$HOOKS" bench_queued one_plain "$HOOKS" bench_plain
run_pair one_awaited "$HOOKS" bench_awaited one_plain2 "$HOOKS" bench_plain
for i in 1 2; do
    run_half one_floor "$HOOKS" bench_plain "$BENCH_TMP/floor.sql"
    run_half one_select "$HOOKS" bench_plain "$BENCH_TMP/select.sql"
done
unset HALF_CLIENTS

PING_US=$(bench_ping_us "$BENCH_SOCK")
# added_us QUEUED PLAIN : latency a queued statement adds, in microseconds
added_us() { awk -v q="$(tps_of "$1")" -v p="$(tps_of "$2")" 'BEGIN { printf "%.1f", 1000000 / q - 1000000 / p }'; }

printf '%-44s %10s %10s %8s %14s\n' "" "tx/s" "baseline" "ratio" "Redis cmd/stmt"
printf '%-44s %10s %10s %8s %14s\n' "A no queue, hooks installed / no redsem" "$(tps_of hooks)" "$(tps_of plain)" \
    "$(bench_ratio "$(tps_of hooks)" "$(tps_of plain)")" "$(rt_of hooks)"
printf '%-44s %10s %10s %8s %14s\n' "B queue, passes by cost / no queue" "$(tps_of passes)" "$(tps_of nonq)" \
    "$(bench_ratio "$(tps_of passes)" "$(tps_of nonq)")" "$(rt_of passes)"
printf '%-44s %10s %10s %8s %14s\n' "C queue, a slot per statement / no queue" "$(tps_of queued)" "$(tps_of nonq2)" \
    "$(bench_ratio "$(tps_of queued)" "$(tps_of nonq2)")" "$(rt_of queued)"
printf '(A: the target is a ratio of at least 0.98; A and B expect 0.000 Redis commands per statement, C 2.000: an acquire waited for, a release not)\n'
printf '\nD one client: latency a queued statement adds over a role in no queue\n'
printf '%-44s %10s %10s %12s %12s\n' "" "tx/s" "no queue" "added us" "added/PING"
printf '%-44s %10s %10s %12s %12s\n' "release sent without waiting (default)" "$(tps_of one_deferred)" "$(tps_of one_plain)" \
    "$(added_us one_deferred one_plain)" "$(bench_ratio "$(added_us one_deferred one_plain)" "$PING_US")"
printf '%-44s %10s %10s %12s %12s\n' "redsem.await_release = on" "$(tps_of one_awaited)" "$(tps_of one_plain2)" \
    "$(added_us one_awaited one_plain2)" "$(bench_ratio "$(added_us one_awaited one_plain2)" "$PING_US")"
printf '%-44s %10s %10s %12s %12s\n' "floor: one redsem_limit() call, no queue" "$(tps_of one_floor)" "$(tps_of one_select)" \
    "$(added_us one_floor one_select)" "$(bench_ratio "$(added_us one_floor one_select)" "$PING_US")"
printf 'a Redis PING round trip (redis-benchmark, 1 client, no pipelining): %s us\n' "$PING_US"
printf '(D: the target is at most 1.3 PINGs added with the release sent without waiting; the floor is one\n'
printf ' Redis round trip waited for in a statement, with the lightest script: what any queue could reach)\n'
