#!/usr/bin/env bash
#
# bench/handoff.sh - how fast a released slot reaches the next waiter, and
# what waiting costs Redis: redsem's blocking wait side by side with a
# polling waiter (redsem_acquire(..., wait => '0') retried every 10 ms, what
# popular Redis semaphore libraries do), in one invocation.
#
#   sudo bash bench/handoff.sh
#
# Phase 1, hand-off latency: K sessions share a semaphore of limit 1. Each
# one, BENCH_ROUNDS times: notes t_start, acquires (blocking: wait => '30 s';
# polling: wait => '0' then pg_sleep(10 ms), again), notes t_got =
# clock_timestamp() right after the acquire returns, holds HOLD ms, notes
# t_rel = clock_timestamp() right before redsem_release, releases, rests
# REST ms (so a polling releaser does not simply take the slot back). The
# loop runs server side in PL/pgSQL: each timestamp is taken in the backend,
# around the SQL function call, on one machine (one clock). A hand-off is a
# consecutive pair (previous holder, next holder) where the next one was
# already waiting when the previous released (t_start < t_rel); its latency
# is t_got(next) - t_rel(previous). With limit 1, t_got(next) < t_rel(prev)
# would be two holders at once: counted as "overlaps" (must be 0).
#
# Phase 2, cost of waiting: one session holds the slot; W waiters wait on it
# for T seconds (blocking with the default lease of 10 s, or polling every
# 10 ms). Round trips from INFO commandstats over those T seconds, divided
# by W*T.
#
# With gnuplot installed, the distribution of hand-off latencies of both
# waiters is plotted to $BENCH_PLOTS/handoff.svg (default bench/plots).
#
# Environment: BENCH_SESSIONS (K, 6), BENCH_ROUNDS (per session, 50),
# BENCH_HOLD_MS (5), BENCH_REST_MS (10), BENCH_POLL_MS (10),
# BENCH_WAITERS (W, 8), BENCH_WAIT_SECS (T, 20), BENCH_NO_INSTALL=1,
# REDSEM_KEEP=1.

set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

K=${BENCH_SESSIONS:-6}
ROUNDS=${BENCH_ROUNDS:-50}
HOLD_MS=${BENCH_HOLD_MS:-5}
REST_MS=${BENCH_REST_MS:-10}
POLL_MS=${BENCH_POLL_MS:-10}
WAITERS=${BENCH_WAITERS:-8}
WAIT_SECS=${BENCH_WAIT_SECS:-20}

bench_init handoff

bench_psql -f - >/dev/null <<'EOF'
CREATE UNLOGGED TABLE handoff_log (
    mode text, pid int, round int,
    t_start timestamptz, t_got timestamptz, t_rel timestamptz);

-- acquire in the given mode; polls every poll_ms when mode = 'polling'
CREATE FUNCTION bench_acquire(mode text, sem text, lease interval, poll_ms int)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    id text;
BEGIN
    IF mode = 'blocking' THEN
        RETURN redsem_acquire(sem, 1, lease, '30 s');
    END IF;
    LOOP
        id := redsem_acquire(sem, 1, lease, '0');
        IF id IS NOT NULL THEN
            RETURN id;
        END IF;
        PERFORM pg_sleep(poll_ms / 1000.0);
    END LOOP;
END $$;

CREATE FUNCTION bench_chain(mode text, sem text, rounds int, hold_ms int,
                            rest_ms int, poll_ms int)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    id text;
    t_start timestamptz;
    t_got timestamptz;
    t_rel timestamptz;
BEGIN
    FOR r IN 1..rounds LOOP
        t_start := clock_timestamp();
        id := bench_acquire(mode, sem, '30 s', poll_ms);
        t_got := clock_timestamp();
        IF id IS NULL THEN
            RAISE EXCEPTION 'no slot within 30 s';
        END IF;
        PERFORM pg_sleep(hold_ms / 1000.0);
        t_rel := clock_timestamp();
        PERFORM redsem_release(sem, id);
        INSERT INTO handoff_log VALUES (mode, pg_backend_pid(), r, t_start, t_got, t_rel);
        PERFORM pg_sleep(rest_ms / 1000.0);
    END LOOP;
    RETURN rounds;
END $$;

-- wait for the slot (limit 1), then give it back at once
CREATE FUNCTION bench_wait_once(mode text, sem text, poll_ms int)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RETURN redsem_release(sem, bench_acquire(mode, sem, '10 s', poll_ms));
END $$;
EOF

# load the script into Redis
bench_sql "SELECT redsem_release('warm', redsem_acquire('warm', 1))" >/dev/null

bench_header "redsem hand-off benchmark (bench/handoff.sh)"
printf 'limit 1, %s sessions x %s rounds, hold %s ms, rest %s ms, poll every %s ms\n\n' \
    "$K" "$ROUNDS" "$HOLD_MS" "$REST_MS" "$POLL_MS"

declare -A ACQ RT STATSLINE N P50 P90 P99 AVG MAX OVL WRT WSECS WLINE

# --- phase 1: hand-off latency ------------------------------------------------

# chain MODE : K sessions, ROUNDS each, on semaphore chain_MODE
chain() {
    local mode=$1 sem=chain_$1 i pids=() stats rc=0
    bench_stats_reset
    for ((i = 0; i < K; i++)); do
        bench_bg bench_sql "SELECT bench_chain('$mode', '$sem', $ROUNDS, $HOLD_MS, $REST_MS, $POLL_MS)" >/dev/null
        pids+=("$BENCH_PID")
    done
    for i in "${pids[@]}"; do
        wait "$i" || rc=$?
    done
    [[ $rc -eq 0 ]] || redsem_die "a $mode chain session failed"
    stats=$(bench_stats)
    ACQ[$mode]=$((K * ROUNDS))
    RT[$mode]=$(bench_roundtrips "$stats")
    STATSLINE[$mode]=$(bench_stats_line "$stats")
}

chain blocking
chain polling

# percentiles of the hand-offs, per mode
while IFS='|' read -r mode n p50 p90 p99 avg max ovl; do
    # shellcheck disable=SC2034 # read through namerefs in report_row
    N[$mode]=$n P50[$mode]=$p50 P90[$mode]=$p90 P99[$mode]=$p99 AVG[$mode]=$avg MAX[$mode]=$max OVL[$mode]=$ovl
done < <(bench_sql "
    WITH o AS (
        SELECT mode, t_start, t_got,
               lag(t_rel) OVER (PARTITION BY mode ORDER BY t_got) AS prev_rel
          FROM handoff_log),
    h AS (
        SELECT mode, extract(epoch FROM t_got - prev_rel) * 1000 AS ms
          FROM o
         WHERE prev_rel IS NOT NULL AND t_start < prev_rel)
    SELECT mode, count(*) FILTER (WHERE ms >= 0),
           round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FILTER (WHERE ms >= 0)::numeric, 3),
           round(percentile_cont(0.9) WITHIN GROUP (ORDER BY ms) FILTER (WHERE ms >= 0)::numeric, 3),
           round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) FILTER (WHERE ms >= 0)::numeric, 3),
           round((avg(ms) FILTER (WHERE ms >= 0))::numeric, 3),
           round((max(ms) FILTER (WHERE ms >= 0))::numeric, 3),
           count(*) FILTER (WHERE ms < 0)
      FROM h GROUP BY mode")

for mode in blocking polling; do
    [[ -n ${N[$mode]:-} ]] || redsem_die "no hand-offs recorded for $mode"
done

# --- phase 2: Redis commands per waiter-second ---------------------------------

# waiters MODE : one holder, WAITERS waiters, WAIT_SECS seconds measured
waiters() {
    local mode=$1 sem=wait_$1 i pids=() t0 t1 stats rc=0 holder
    bench_bg bench_psql -c "SET application_name = 'bench_holder_$mode'" \
        -c "SELECT redsem_acquire('$sem', 1, '30 s') IS NOT NULL" -c "SELECT pg_sleep(60)" >/dev/null 2>&1
    holder=$BENCH_PID
    bench_wait_for "the holder of $sem" 10 zcard_is "$sem" 1
    for ((i = 0; i < WAITERS; i++)); do
        bench_bg bench_sql "SELECT bench_wait_once('$mode', '$sem', $POLL_MS)" >/dev/null
        pids+=("$BENCH_PID")
    done
    if [[ $mode == blocking ]]; then
        bench_wait_for "$WAITERS waiters in line" 10 zcard_is "$sem" $((WAITERS + 1))
    fi
    sleep 0.5 # every poller is in its loop
    bench_stats_reset
    t0=$(bench_now)
    sleep "$WAIT_SECS"
    stats=$(bench_stats)
    t1=$(bench_now)
    WSECS[$mode]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    WRT[$mode]=$(bench_roundtrips "$stats")
    WLINE[$mode]=$(bench_stats_line "$stats")
    # end the holder's session: its slot goes to the waiters, one by one
    bench_sql "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                WHERE application_name = 'bench_holder_$mode'" >/dev/null
    for i in "${pids[@]}"; do
        wait "$i" || rc=$?
    done
    wait "$holder" 2>/dev/null || true
    [[ $rc -eq 0 ]] || redsem_die "a $mode waiter failed"
}
zcard_is() { [[ $(bench_redis ZCARD "$(bench_key "$1" owner)") == "$2" ]]; }

waiters blocking
waiters polling

# --- report ---------------------------------------------------------------------

printf '%-34s %12s %12s %12s\n' "release -> next holder (ms)" blocking polling "poll/block"
# report_row LABEL ARRAY : one line, blocking vs polling and their ratio
report_row() {
    local -n arr=$2
    printf '%-34s %12s %12s %12s\n' "$1" "${arr[blocking]}" "${arr[polling]}" \
        "$(bench_ratio "${arr[polling]}" "${arr[blocking]}")"
}
printf '%-34s %12s %12s\n' "hand-offs measured" "${N[blocking]}" "${N[polling]}"
report_row p50 P50
report_row p90 P90
report_row p99 P99
report_row avg AVG
report_row max MAX
printf '%-34s %12s %12s\n' "overlaps (two holders; must be 0)" "${OVL[blocking]}" "${OVL[polling]}"
printf '%-34s %12s %12s %12s\n' "round trips per acquisition" \
    "$(bench_div "${RT[blocking]}" "${ACQ[blocking]}")" "$(bench_div "${RT[polling]}" "${ACQ[polling]}")" \
    "$(bench_ratio "$(bench_div "${RT[polling]}" "${ACQ[polling]}")" "$(bench_div "${RT[blocking]}" "${ACQ[blocking]}")")"
printf '  blocking: %s\n  polling:  %s\n\n' "${STATSLINE[blocking]}" "${STATSLINE[polling]}"

printf '%s waiters on a held slot for %s s (blocking: lease 10 s)\n' "$WAITERS" "$WAIT_SECS"
printf '%-34s %12s %12s %12s\n' "" blocking polling "poll/block"
wb=$(awk -v c="${WRT[blocking]}" -v w="$WAITERS" -v t="${WSECS[blocking]}" 'BEGIN { printf "%.3f", c / (w * t) }')
wp=$(awk -v c="${WRT[polling]}" -v w="$WAITERS" -v t="${WSECS[polling]}" 'BEGIN { printf "%.3f", c / (w * t) }')
printf '%-34s %12s %12s\n' "round trips in the window" "${WRT[blocking]}" "${WRT[polling]}"
printf '%-34s %12s %12s %12s\n' "round trips per waiter-second" "$wb" "$wp" "$(bench_ratio "$wp" "$wb")"
printf '  blocking: %s\n  polling:  %s\n' "${WLINE[blocking]}" "${WLINE[polling]}"
printf '(blocking expected: one BLPOP + one FCALL per waiter every 5 s at most (the holder is kept alive, so no lease ahead runs out) = 0.4/s)\n'

# --- plot -------------------------------------------------------------------------

if command -v gnuplot >/dev/null; then
    PLOTS=${BENCH_PLOTS:-$BENCH_DIR/plots}
    mkdir -p "$PLOTS"
    for mode in blocking polling; do
        bench_sql "
            WITH o AS (
                SELECT t_start, t_got,
                       lag(t_rel) OVER (ORDER BY t_got) AS prev_rel
                  FROM handoff_log WHERE mode = '$mode'),
            h AS (
                SELECT extract(epoch FROM t_got - prev_rel) * 1000 AS ms
                  FROM o WHERE prev_rel IS NOT NULL AND t_start < prev_rel)
            SELECT round(ms::numeric, 3), round((row_number() OVER (ORDER BY ms))::numeric / count(*) OVER (), 4)
              FROM h WHERE ms >= 0 ORDER BY ms" | tr '|' ' ' >"$BENCH_TMP/handoff_$mode.dat"
    done
    gnuplot <<EOF
set terminal svg size 640,400 font "sans,11"
set output "$PLOTS/handoff.svg"
set title "release -> next holder, limit 1, $K sessions ($(date -u +%Y-%m-%d))"
set xlabel "hand-off latency (ms, log scale)"
set ylabel "fraction of hand-offs"
set logscale x
set key bottom right
set grid
plot "$BENCH_TMP/handoff_blocking.dat" using 1:2 with steps lw 2 title "redsem, waiting in line (woken)", \\
     "$BENCH_TMP/handoff_polling.dat" using 1:2 with steps lw 2 title "retry every $POLL_MS ms (polling)"
EOF
    printf '\nplot: %s\n' "$PLOTS/handoff.svg"
fi
