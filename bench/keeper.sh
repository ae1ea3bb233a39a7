#!/usr/bin/env bash
#
# bench/keeper.sh - can the keeper keep 4096 holds alive with Redis 1 ms
# away?  Its refresh cycle, side by side with refreshing the same holds one
# call per round trip (what a keeper without batches does), in one
# invocation.
#
#   sudo bash bench/keeper.sh
#
# Redis sits behind bench/delay_proxy.pl, which holds every reply back
# BENCH_RTT_MS (default 1 ms): a round trip costs that much more.  16
# sessions take 256 holds each (4096) with 1 s leases, the shortest redsem
# allows, so each must be refreshed within a third of a second; they keep
# them for BENCH_SECONDS (default 5) while the keeper works, then end.
# Two layouts:
#
#   grouped: the 4096 holds on 16 semaphores (256 each)
#   spread:  every hold on a semaphore of its own (4096 semaphores), the
#            worst case for batching (no two refreshes share a script call)
#
# The keeper logs each cycle at DEBUG1 (holds, script calls, round trips,
# ms); Redis's INFO commandstats gives the script calls and the Redis CPU
# per refresh.  Then, as the baseline, the same 4096 holds are refreshed
# with one FCALL per round trip through the same proxy (redis-cli reading
# the commands one by one), and timed.
#
# Prints, for each layout: cycles with every hold due, script calls and
# round trips per cycle, cycle time (median and worst) against the budget
# (a third of the lease: 333 ms), the baseline's time against the same
# budget, and Redis microseconds per refresh.
#
# Environment: BENCH_RTT_MS (1), BENCH_SECONDS (5), BENCH_NO_INSTALL=1,
# REDSEM_KEEP=1.

set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

RTT_MS=${BENCH_RTT_MS:-1}
SECONDS_HELD=${BENCH_SECONDS:-5}
SESSIONS=16
PER_SESSION=256
HOLDS=$((SESSIONS * PER_SESSION))
BUDGET_MS=333

command -v perl >/dev/null || redsem_die "perl not found"
bench_begin keeper
bench_install
bench_start_redis
PROXY_SOCK=$BENCH_TMP/delay.sock
bench_bg perl "$BENCH_DIR/delay_proxy.pl" "$PROXY_SOCK" "$BENCH_SOCK" "$RTT_MS" >"$BENCH_TMP/proxy.log" 2>&1
bench_wait_for "the delay proxy" 10 test -S "$PROXY_SOCK"
REDSEM_PG_EXTRA_CONF="redsem.unix_socket = '$PROXY_SOCK'
redsem.max_tracked_holds = 8192
log_min_messages = debug1" \
    redsem_start_pg "$BENCH_TMP" 2>>"$BENCH_TMP/start.log" || { cat "$BENCH_TMP/start.log" >&2; exit 1; }
BENCH_PORT=$(redsem_pg_port "$BENCH_TMP")
bench_sql "CREATE EXTENSION redsem" >/dev/null
PGLOG=$BENCH_TMP/postgres.log
LIB=$(bench_library)

# Round trip through the proxy: 200 PINGs, one at a time.
t0=$(bench_now)
for _ in $(seq 200); do echo PING; done | redis-cli -s "$PROXY_SOCK" >/dev/null
t1=$(bench_now)
RTT=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) * 1000 / 200 }')

bench_header "redsem keeper benchmark: $HOLDS holds, 1 s leases, Redis $RTT_MS ms away (delay proxy)"
echo "measured round trip through the proxy: $RTT ms (PING, one at a time)"
echo

# semaphore_of LAYOUT SESSION : SQL for the semaphore of hold g of a session
semaphore_of() {
    case $1 in
    grouped) echo "'kb_' || $2" ;;
    spread) echo "'kb_' || ($2 * $PER_SESSION + g)" ;;
    esac
}

# run_layout LAYOUT : take the holds, measure the keeper, then the baseline
run_layout() {
    local layout=$1 s offset stats calls usec
    local dir=$BENCH_TMP/$layout
    mkdir -p "$dir"
    chown postgres "$dir"
    for ((s = 0; s < SESSIONS; s++)); do
        bench_bg bench_psql -At -o "$dir/s$s.out" -c "SELECT count(redsem_acquire($(semaphore_of "$layout" "$s"), $HOLDS, '1 s')) FROM generate_series(0, $PER_SESSION - 1) g" \
            -c "SELECT pg_sleep($SECONDS_HELD + 120)" >/dev/null 2>&1
    done
    bench_wait_for "$HOLDS holds" 120 bash -c "cat $dir/s*.out 2>/dev/null | awk '{ n += \$1 } END { exit !(n == $HOLDS) }'"
    sleep 1     # let the holds fall into step
    offset=$(stat -c %s "$PGLOG")
    bench_stats_reset
    sleep "$SECONDS_HELD"
    stats=$(bench_stats)
    calls=$(bench_calls "$stats" '^fcall$')
    usec=$(bench_usec "$stats" '^fcall$')

    # the keeper's cycles while we watched
    tail -c +"$((offset + 1))" "$PGLOG" |
        sed -n 's/.*redsem keeper: \([0-9]*\) hold(s) refreshed or released with \([0-9]*\) command(s) in \([0-9]*\) round trip(s), \([0-9]*\) ms.*/\1 \2 \3 \4/p' \
            >"$dir/cycles"

    # the baseline: the same holds, one refresh per round trip
    bench_psql -At -c "SELECT h.id, s.name FROM (SELECT DISTINCT $(semaphore_of "$layout" 's') AS name FROM generate_series(0, $SESSIONS - 1) s, generate_series(0, $PER_SESSION - 1) g) s, redsem_holders(s.name) h" |
        awk -F'|' -v lib="$LIB" '{
            printf "FCALL %s 1 redsem:{%s}:owner refresh %s 1000\n", lib, $2, $1 }' >"$dir/baseline.cmds"
    local nbase
    nbase=$(wc -l <"$dir/baseline.cmds")
    t0=$(bench_now)
    redis-cli -s "$PROXY_SOCK" <"$dir/baseline.cmds" >"$dir/baseline.out"
    t1=$(bench_now)
    local base_ms refreshed
    base_ms=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", (b - a) * 1000 }')
    refreshed=$(grep -c '^1000$' "$dir/baseline.out" || true)

    # cycle times of the cycles with every hold due, sorted (median, worst)
    local med worst
    med=$(awk -v h="$HOLDS" '$1 == h { print $4 }' "$dir/cycles" | sort -n |
        awk '{ v[NR] = $1 } END { print (NR ? v[int((NR + 1) / 2)] : 0) }')
    worst=$(awk -v h="$HOLDS" '$1 == h { print $4 }' "$dir/cycles" | sort -n | tail -n 1)
    awk -v layout="$layout" -v holds="$HOLDS" -v budget="$BUDGET_MS" \
        -v calls="$calls" -v usec="$usec" -v base_ms="$base_ms" -v nbase="$nbase" \
        -v refreshed="$refreshed" -v med="$med" -v worst="${worst:-0}" '
        { n++; h += $1; c += $2; r += $3
          if ($1 == holds) { full++; fc += $2; fr += $3 } }
        END {
            printf "%s: %d holds\n", layout, holds
            printf "  keeper cycles with Redis work: %d, holds refreshed %d, script calls %d, round trips %d\n", n, h, c, r
            if (full == 0) { print "  no cycle had every hold due at once"; exit }
            printf "  cycles with all %d due: %d; per cycle %.1f script calls, %.1f round trips\n", holds, full, fc / full, fr / full
            printf "  cycle time: median %d ms, worst %d ms; budget (a third of the lease) %d ms: worst/budget = %.2f\n", med, worst, budget, worst / budget
            printf "  baseline, one refresh per round trip: %d refreshes (%d answered a lease) in %d ms: baseline/budget = %.2f, baseline/keeper = %.1f\n", nbase, refreshed, base_ms, base_ms / budget, base_ms / (med > 0 ? med : 1)
            if (calls > 0)
                printf "  Redis CPU (FCALL, while the keeper worked): %.1f us per script call, %.1f us per hold refreshed\n", usec / calls, (h > 0 ? usec / h : 0)
        }' "$dir/cycles"
    echo
    # the sessions end after their sleep; do not wait for it
    for pid in "${BENCH_BG_PIDS[@]}"; do
        [[ $pid == "${BENCH_BG_PIDS[0]}" ]] && continue
        kill "$pid" 2>/dev/null || true
    done
    bench_sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%' AND pid <> pg_backend_pid()" >/dev/null
    bench_wait_for "the sessions to end" 60 bash -c "[ \"\$(redis-cli -s $BENCH_SOCK --scan --pattern 'redsem:{kb_*:owner' | wc -l)\" = 0 ]"
    BENCH_BG_PIDS=("${BENCH_BG_PIDS[0]}")
}

run_layout grouped
run_layout spread
