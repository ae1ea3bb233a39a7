#!/usr/bin/env bash
#
# bench/priorities.sh - how long an interactive query waits behind a batch
# flood, with plain first-come-first-served and with a priority, in one
# invocation.
#
#   sudo bash bench/priorities.sh
#
# A semaphore of 2 slots.  The flood: pgbench, 6 clients, each transaction
# one redsem_acquire_xact (waiting up to 60 s) and a 50 ms batch job, so a
# line of about 4 is always there.  The interactive side, at the same time:
# pgbench, 1 client, 5 queries a second (--rate), each one
# redsem_acquire_xact and a 5 ms query; first with priority 0 (the
# baseline: plain FIFO), then with priority 10, then with priority 10 and
# one of the two slots reserved for it (redsem_set_reserve).  Printed: the
# interactive latency p50/p90/p99 (pgbench's per-transaction log, the 5 ms
# query included) and the ratios to FIFO, and the batch jobs done per
# second in each run (a priority reorders the line and must not cost
# throughput; a reserve trades batch throughput for an idle slot).
#
# Environment: BENCH_DURATION (seconds per run, default 10),
# BENCH_NO_INSTALL=1, REDSEM_KEEP=1.

set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

DURATION=${BENCH_DURATION:-10}
FLOOD=6

bench_init priorities

cat >"$W/batch.sql" <<'EOF'
BEGIN;
SELECT redsem_acquire_xact('wh', 2, lease => '30 s', wait => '60 s') IS NOT NULL;
SELECT pg_sleep(0.05);
COMMIT;
EOF
cat >"$W/interactive.sql" <<'EOF'
BEGIN;
SELECT redsem_acquire_xact('wh', 2, lease => '30 s', wait => '60 s', priority => :prio) IS NOT NULL;
SELECT pg_sleep(0.005);
COMMIT;
EOF
chown postgres "$W"/*.sql
mkdir -p "$W/log" && chown postgres "$W/log"

# run PRIO : flood and interactive side by side; prints "p50 p90 p99 n batch_tps" (ms)
run() {
    local prio=$1 flood_out inter_out batch_tps
    rm -f "$W/log/"*
    flood_out=$W/flood.$prio.out
    bench_pgbench -n -c "$FLOOD" -j 2 -T $((DURATION + 2)) -f "$W/batch.sql" >"$flood_out" 2>&1 &
    local flood=$!
    BENCH_BG_PIDS+=("$flood")
    sleep 1
    inter_out=$(cd "$W/log" && bench_pgbench -n -c 1 -T "$DURATION" -R 5 -D prio="$prio" -l \
        --log-prefix=i -f "$W/interactive.sql" 2>&1) || {
        printf '%s\n' "$inter_out" >&2
        redsem_die "interactive pgbench failed (priority $prio)"
    }
    wait "$flood" || { cat "$flood_out" >&2; redsem_die "flood pgbench failed (priority $prio)"; }
    batch_tps=$(sed -n 's/^tps = \([0-9.]*\) (without.*/\1/p' "$flood_out")
    # column 3 of pgbench's log: the transaction's latency in microseconds
    cat "$W/log/i"* | awk '{ print $3 / 1000 }' | sort -n | awk -v b="$batch_tps" '
        { v[NR] = $1 }
        END {
            if (NR == 0) { print "n/a n/a n/a 0", b; exit }
            i99 = int(NR * 0.99 + 0.5); if (i99 < 1) i99 = 1
            i50 = int(NR * 0.5 + 0.5); if (i50 < 1) i50 = 1
            i90 = int(NR * 0.9 + 0.5); if (i90 < 1) i90 = 1
            printf "%.1f %.1f %.1f %d %.1f\n", v[i50], v[i90], v[i99], NR, b
        }'
}

bench_sql "SELECT redsem_acquire_xact('warm', 1)" >/dev/null
bench_header "redsem priority benchmark (bench/priorities.sh)"
printf 'a semaphore of 2 slots; flood: %s pgbench clients, 50 ms jobs; interactive: 1 client, 5/s, 5 ms queries; %s s per run\n\n' \
    "$FLOOD" "$DURATION"

read -r f50 f90 f99 fn ftps <<<"$(run 0)"
read -r p50 p90 p99 pn ptps <<<"$(run 10)"
bench_sql "SELECT redsem_set_reserve('wh', 1, 10)" >/dev/null
read -r r50 r90 r99 rn rtps <<<"$(run 10)"
bench_sql "SELECT redsem_set_reserve('wh', NULL)" >/dev/null

printf '%-34s %10s %10s %10s %8s %12s\n' "interactive latency (ms)" p50 p90 p99 queries "batch jobs/s"
printf '%-34s %10s %10s %10s %8s %12s\n' "plain FIFO (priority 0)" "$f50" "$f90" "$f99" "$fn" "$ftps"
printf '%-34s %10s %10s %10s %8s %12s\n' "priority => 10" "$p50" "$p90" "$p99" "$pn" "$ptps"
printf '%-34s %10s %10s %10s %8s %12s\n' "priority 10, 1 slot reserved" "$r50" "$r90" "$r99" "$rn" "$rtps"
printf '%-34s %10s %10s %10s %8s %12s\n' "ratio priority / FIFO" "$(bench_ratio "$p50" "$f50")" \
    "$(bench_ratio "$p90" "$f90")" "$(bench_ratio "$p99" "$f99")" "" "$(bench_ratio "$ptps" "$ftps")"
printf '%-34s %10s %10s %10s %8s %12s\n' "ratio reserve / FIFO" "$(bench_ratio "$r50" "$f50")" \
    "$(bench_ratio "$r90" "$f90")" "$(bench_ratio "$r99" "$f99")" "" "$(bench_ratio "$rtps" "$ftps")"
printf '\nWith a priority the interactive query waits for the next free slot (at most one 50 ms job, the\n'
printf 'two slots freeing in turn), not for the line of batch jobs ahead of it. With a slot reserved it\n'
printf 'waits for nothing while that slot is idle, and the batch runs on the other slot alone.\n'
