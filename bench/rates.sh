#!/usr/bin/env bash
#
# bench/rates.sh - how exactly a stored rate (redsem_set_rate) paces
# admissions, beside the same workload with no rate, in one invocation.
#
#   sudo bash bench/rates.sh
#
# Workload: pgbench, 8 clients, each transaction one redsem_acquire_xact on
# semaphore "r" (limit 1000, so the limit never binds) waiting up to 10 s;
# the slot ends with the transaction.  First with no rate (the baseline:
# how fast admissions come when nothing paces them), then with each rate
# below, the rate's clock starting fresh.  Printed per rate: admissions per
# second against the rate set (ratio), admissions against the bound
# burst + rate x seconds, the most admissions seen within any 1 s window
# (from pgbench's per-transaction log: end times, so grant times plus a
# commit) against burst + rate, and the script calls per admission (INFO
# commandstats: FCALL; a waiter polling would make this large).
#
# Each rate is also run without it, pgbench --rate pacing the same
# admissions per second: a call costs Redis several times more CPU when
# Redis is mostly idle (cold caches), so that is the fair baseline for the
# rate's own cost per call.
#
# Environment: BENCH_DURATION (seconds per run, default 6),
# BENCH_DUMP=PATH (also write each run's commandstats and slow log, every
# call with its duration, to PATH.<run>[.slowlog]), BENCH_NO_INSTALL=1,
# REDSEM_KEEP=1.

set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

DURATION=${BENCH_DURATION:-6}
CLIENTS=8
# rate text, per second, burst
RATES=("50/s 50 1" "50/s 50 2" "200/s 200 5" "20/s 20 10" "600/min 10 1")

bench_init rates

cat >"$W/take.sql" <<'EOF'
SELECT redsem_acquire_xact('r', 1000, wait => '10 s') IS NOT NULL;
EOF
chown postgres "$W/take.sql"
mkdir -p "$W/log" && chown postgres "$W/log"

# run LABEL [PGBENCH_ARGS...] : pgbench for DURATION; prints "tx secs
# fcalls max_in_1s fcall_usec"
run() {
    local label=$1 out stats tx tps
    shift
    bench_stats_reset
    if [[ -n ${BENCH_DUMP:-} ]]; then
        bench_redis CONFIG SET slowlog-log-slower-than 0 >/dev/null
        bench_redis CONFIG SET slowlog-max-len 200000 >/dev/null
        bench_redis SLOWLOG RESET >/dev/null
    fi
    rm -f "$W/log/"*
    out=$(cd "$W/log" && bench_pgbench -n -c "$CLIENTS" -j 2 -T "$DURATION" -l --log-prefix="$label" "$@" -f "$W/take.sql" 2>&1) || {
        printf '%s\n' "$out" >&2
        redsem_die "pgbench failed ($label)"
    }
    stats=$(bench_stats)
    if [[ -n ${BENCH_DUMP:-} ]]; then
        printf '%s\n' "$stats" >"$BENCH_DUMP.$label"
        bench_redis --json SLOWLOG GET 200000 >"$BENCH_DUMP.$label.slowlog"
        bench_redis CONFIG SET slowlog-log-slower-than 10000 >/dev/null
    fi
    tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
    tps=$(sed -n 's/^tps = \([0-9.]*\) (without.*/\1/p' <<<"$out")
    [[ -n $tx && -n $tps ]] || { printf '%s\n' "$out" >&2; redsem_die "could not read pgbench's output ($label)"; }
    # the most transactions ending within any 1 s window
    local max1
    max1=$(cat "$W/log/$label"* | awk '{ printf "%d.%06d\n", $5, $6 }' | sort -n |
        awk '{ t[NR] = $1 } END { j = 1; m = 0; for (i = 1; i <= NR; i++) { while (t[i] - t[j] >= 1) j++; if (i - j + 1 > m) m = i - j + 1 } print m }')
    printf '%s %s %s %s %s\n' "$tx" "$(bench_div "$tx" "$tps" '%.3f')" "$(bench_calls "$stats" '^fcall$')" "$max1" \
        "$(bench_usec "$stats" '^fcall$')"
}

bench_sql "SELECT redsem_acquire_xact('warm', 1)" >/dev/null
bench_header "redsem rate benchmark (bench/rates.sh)"
printf 'pgbench -j 2, %s clients, %s s per run, limit 1000 (never binding)\n\n' "$CLIENTS" "$DURATION"

read -r btx bsecs bcalls _ busec <<<"$(run none)"
base_rate=$(bench_div "$btx" "$bsecs" '%.0f')
base_us=$(bench_div "$busec" "$bcalls" '%.2f')
printf 'baseline, no rate: %s admissions/s (%s in %s s), %s script calls per admission, %s us of Redis CPU per call\n\n' \
    "$base_rate" "$btx" "$bsecs" "$(bench_div "$bcalls" "$btx" '%.2f')" "$base_us"

printf '%-10s %6s %8s %7s %7s %9s %7s %10s %9s %10s %8s %8s %8s\n' rate burst "adm/s" "/rate" "/base" admitted bound "max in 1s" "bound 1s" "calls/adm" "us/call" "paced" "/paced"
for spec in "${RATES[@]}"; do
    read -r text per_s burst <<<"$spec"
    # the same admissions per second, paced by pgbench instead (no rate):
    # Redis CPU per call at that call rate, without the rate's work
    bench_sql "SELECT redsem_set_rate('r', NULL)" >/dev/null
    read -r _ _ pcalls _ pusec <<<"$(run "p$per_s-$burst" --rate="$per_s")"
    pus=$(bench_div "$pusec" "$pcalls" '%.2f')
    bench_sql "SELECT redsem_set_rate('r', '$text', $burst)" >/dev/null
    read -r tx secs calls max1 usec <<<"$(run "r$per_s-$burst")"
    adm=$(bench_div "$tx" "$secs" '%.1f')
    bound=$(awk -v b="$burst" -v r="$per_s" -v s="$secs" 'BEGIN { printf "%d", b + r * s }')
    us=$(bench_div "$usec" "$calls" '%.2f')
    printf '%-10s %6s %8s %7s %7s %9s %7s %10s %9s %10s %8s %8s %8s\n' "$text" "$burst" "$adm" \
        "$(bench_ratio "$adm" "$per_s")" "$(bench_ratio "$adm" "$base_rate")" "$tx" "$bound" \
        "$max1" "$((burst + per_s))" "$(bench_div "$calls" "$tx" '%.2f')" "$us" "$pus" "$(bench_ratio "$us" "$pus")"
done
bench_sql "SELECT redsem_set_rate('r', NULL)" >/dev/null
printf '\nadm/s: admissions per second over the run (pgbench tps); /rate: against the rate set;\n'
printf '/base: against the baseline with no rate; admitted <= bound (burst + rate x seconds)\n'
printf 'must hold; max in 1s counts transaction ends, so a commit delay can shift one by a little;\n'
printf 'us/call: Redis CPU per script call (waiters'"'"' looks included); paced: the same without a rate,\n'
printf 'pgbench --rate pacing the same admissions per second (a call costs more when Redis is mostly idle).\n'
