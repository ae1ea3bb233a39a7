#!/usr/bin/env bash
#
# bench/adaptive.sh - an adaptive limit (issue 50) against the best static
# limit, found by sweep in the same run, and against two controls of the
# published formulas (Gradient2, AIMD) on the same harness.
#
#   sudo bash bench/adaptive.sh
#
# The harness: BENCH_HEAVY (16) clients of a CPU-bound guarded statement
# (bench_heavy(): a slot of semaphore "heavy", then a count over
# generate_series, then the slot back at commit; its time under the slot,
# the "guarded run time", is recorded) beside BENCH_LIGHT (4) clients of a
# light unguarded OLTP read (pgbench's select-only on pgbench_accounts,
# BENCH_LIGHT_RATE transactions a second in all: a background that needs
# little CPU but suffers from a crowded run queue), on one PostgreSQL
# server with its own Redis.
#
# "Alone" is the guarded run time of one heavy statement at a time on a
# machine without the hog (limit 1).  The best static limit of a condition
# is the one with the highest heavy throughput whose guarded run time (its
# median) stays within 2x alone: the objective a Gradient-style limiter has
# (throughputs within 5% of the highest are a tie, won by the smallest
# limit: a larger limit that adds no throughput only adds latency).
# A CPU hog is the step change: by default a real-time loop on each CPU,
# busy half the time, which halves capacity at every limit (see hog_start).
#
# Phases:
#   sweep      static limits BENCH_LIMITS, each BENCH_SWEEP_S seconds,
#              without the hog and with it: heavy tx/s, guarded p50 and
#              p99, light p99; the best static limit of each condition
#   adaptive   redsem_set_adaptive_limit('heavy', 1, 32) from its start (1),
#              no tuning: BENCH_STEP_S seconds without the hog, as many with
#              it, as many without; the limit is read every second
#   gradient2  the same, with the limit set each second from outside by
#              Gradient2 (Netflix concurrency-limits: gradient =
#              clamp(tolerance 1.5 x long RTT / short RTT, 0.5, 1), new =
#              limit x gradient + queue size (sqrt of the limit), smoothed
#              0.2, long RTT an average over 600 samples that decays when
#              short is far below it; no growth while less than half the
#              limit is in use)
#   aimd       the same with AIMD (+1 a second while the median is within
#              2x the best median seen, else x0.9)
#   head to head  the adaptive limit from its start, the best calm static
#              limit, that limit again (an A/A control: what noise alone
#              moves a ratio by) and the controls, each on a semaphore of its own, one
#              at a time in rotated order, BENCH_AB_ROUNDS rounds of
#              BENCH_AB_S seconds a side: the same minutes for all, so a
#              machine's drift over the run falls on all alike; the issue's
#              calm ratios are judged here
#   cost       what being adaptive costs a call: short holds on an adaptive
#              semaphore that never makes anyone wait against a static one,
#              alternately: calls/s, round trips and Redis us per call
# For each of the last three: heavy tx/s, guarded p99 and light p99 per
# phase (the first 10 s after a step left out of the steady figures), the
# seconds after each step until the limit is within +-20% of that
# condition's best static limit, and the steady swing (the largest
# distance of the limit from its median over the last half of a phase).
#
# Output: a table, the ratios the issue's targets ask for, the series in
# $BENCH_TMP/series-*.csv and, with gnuplot, a plot at
# $BENCH_PLOTS/adaptive.svg (default bench/plots).
#
# Environment: BENCH_SWEEP_S (15), BENCH_STEP_S (40), BENCH_LIMITS
# ("1 2 3 4 5 6 7 8 12 16": every limit near the best, so that +-20% of
# it means something), BENCH_HEAVY (16), BENCH_LIGHT (4),
# BENCH_LIGHT_RATE (200), BENCH_WORK (rows counted per heavy statement;
# default: calibrated to about 100 ms alone), BENCH_CONTROLS ("gradient2
# aimd"; empty: none), BENCH_AB_ROUNDS (5, one per side: each side takes
# each place once; 0: no head to head),
# BENCH_AB_S (20), BENCH_COST_S (8; 0: no cost phase), BENCH_WAIT_MS (100:
# the heavy statement also waits that many ms under its slot after its
# count, as work that waits for I/O or a lock does; 0: CPU only. The
# issue's own sweep on 2 cores, heavy throughput still rising from limit 8
# to 16, is work of that shape: CPU-only work saturates 2 cores at limit
# 2, with and without the hog, so its steps move no best static limit), BENCH_HOG (rt: the default; spin: a plain busy loop per CPU, as
# before), BENCH_HOG_ON_MS (5: the rt hog's busy and idle stretches),
# BENCH_NO_INSTALL=1, REDSEM_KEEP=1.

set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SWEEP_S=${BENCH_SWEEP_S:-15}
STEP_S=${BENCH_STEP_S:-40}
LIMITS=${BENCH_LIMITS:-1 2 3 4 5 6 7 8 12 16}
# (limit 1 is the guarded statement alone, which every other figure is read against)
[[ " $LIMITS " == *" 1 "* ]] || redsem_die "BENCH_LIMITS must include 1 (the guarded statement alone): '$LIMITS'"
HEAVY=${BENCH_HEAVY:-16}
LIGHT=${BENCH_LIGHT:-4}
LIGHT_RATE=${BENCH_LIGHT_RATE:-200}
CONTROLS=${BENCH_CONTROLS-gradient2 aimd}
PLOTS=${BENCH_PLOTS:-$BENCH_DIR/plots}
AB_ROUNDS=${BENCH_AB_ROUNDS:-5}
WAIT_MS=${BENCH_WAIT_MS:-100}
AB_S=${BENCH_AB_S:-20}
HOG=${BENCH_HOG:-rt}
HOG_ON_MS=${BENCH_HOG_ON_MS:-5}
COST_S=${BENCH_COST_S:-8}
SETTLE_S=10
# the first seconds of each head-to-head segment are left out (pgbench
# starting, the slots of the other side's last statements coming back)
AB_SKIP_S=3

bench_init adaptive
HOG_PIDS=()

# hog_start / hog_stop: the step change. "rt" (the default): on each CPU a
# real-time (SCHED_FIFO) loop that is busy HOG_ON_MS then sleeps as long:
# it runs whenever it wants, so it takes half of every CPU however many
# processes compete, and capacity halves at every limit. "spin": one plain
# busy loop per CPU, which the scheduler shares with the others as one
# process more each (at limit 16 it took about 1/9 of the CPU: with it the
# earlier runs' heavy throughput at limit 16 was 1.04x calm's, nothing
# halved).
hog_start() {
    local i
    for ((i = 0; i < $(nproc); i++)); do
        if [[ $HOG == rt ]]; then
            taskset -c "$i" chrt -f 10 perl -MTime::HiRes=time,sleep -e \
                'my $s = $ARGV[0] / 1000; while (1) { my $t = time + $s; 1 while time < $t; sleep $s }' \
                "$HOG_ON_MS" &
        else
            bash -c 'while :; do :; done' &
        fi
        HOG_PIDS+=($!)
        BENCH_BG_PIDS+=($!)
    done
}
hog_stop() {
    local pid
    for pid in "${HOG_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${HOG_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    HOG_PIDS=()
}

redsem_log "pgbench -i (scale 10) and the heavy statement"
bench_pgbench -i -q -s 10 >/dev/null 2>&1
bench_sql "
CREATE UNLOGGED TABLE bench_runs (at timestamptz NOT NULL, guarded_ms float8 NOT NULL,
                                  sem text NOT NULL);
CREATE FUNCTION bench_heavy(n integer, sem text DEFAULT 'heavy', wait_ms float8 DEFAULT 0)
RETURNS void LANGUAGE plpgsql AS \$\$
DECLARE
    t0 timestamptz;
BEGIN
    IF redsem_acquire_xact(sem, wait => '5 min') IS NULL THEN
        RAISE EXCEPTION 'no slot';
    END IF;
    t0 := clock_timestamp();
    PERFORM count(*) FROM generate_series(1, n);
    IF wait_ms > 0 THEN PERFORM pg_sleep(wait_ms / 1000); END IF;
    INSERT INTO bench_runs VALUES (clock_timestamp(),
        extract(epoch FROM clock_timestamp() - t0) * 1000, sem);
END \$\$;
CREATE FUNCTION bench_work_ms(n integer) RETURNS float8 LANGUAGE plpgsql AS \$\$
DECLARE
    t0 timestamptz := clock_timestamp();
BEGIN
    PERFORM count(*) FROM generate_series(1, n);
    RETURN extract(epoch FROM clock_timestamp() - t0) * 1000;
END \$\$;" >/dev/null

# the work: rows that take about 100 ms alone (BENCH_WORK to choose)
WORK=${BENCH_WORK:-}
if [[ -z $WORK ]]; then
    ms=$(bench_sql "SELECT bench_work_ms(1000000); SELECT round(bench_work_ms(1000000))" | tail -1)
    WORK=$(awk -v ms="$ms" 'BEGIN { printf "%d", 1000000 * 100 / (ms > 1 ? ms : 1) }')
fi
printf '\\set n %s\nSELECT bench_heavy(:n, %s, %s);\n' "$WORK" "'heavy'" "$WAIT_MS" >"$BENCH_TMP/heavy.sql"
chown postgres "$BENCH_TMP/heavy.sql"

# sampler_start CSV / sampler_stop: one session notes the limit in effect
# every second, "epoch,limit" lines in CSV (a DO block: no process started
# per sample, and the sweep runs it too, so every phase pays the same)
sampler_start() {
    local csv=$1
    printf '%s\n' "DO \$\$ BEGIN LOOP
        RAISE NOTICE 'limit %,%,%', extract(epoch FROM clock_timestamp()),
            (SELECT limit_in_effect FROM redsem_semaphore('heavy')),
            (SELECT last_move FROM redsem_semaphore('heavy'));
        PERFORM pg_sleep(1); END LOOP; END \$\$;" >"$BENCH_TMP/sampler.sql"
    (bench_psql -f "$BENCH_TMP/sampler.sql" 2>&1 | sed -n 's/.*NOTICE:  limit //p' >"$csv") &
    SAMPLER=$!
}
# controls_stop: end every control's loop.  (Killing its psql is not
# enough: a backend running a DO block does not notice its client went, and
# an orphaned loop would go on setting the limit of the semaphore it
# names, beside the next controller.)
controls_stop() {
    local left
    bench_sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                WHERE query LIKE 'DO \$\$%lim float8 := 1%' AND pid <> pg_backend_pid()" >/dev/null
    for _ in $(seq 50); do
        left=$(bench_sql "SELECT count(*) FROM pg_stat_activity
                           WHERE query LIKE 'DO \$\$%lim float8 := 1%' AND pid <> pg_backend_pid()")
        [[ $left == 0 ]] && return 0
        sleep 0.1
    done
    redsem_die "a control's loop is still running"
}
sampler_stop() {
    bench_sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                WHERE query LIKE 'DO \$\$ BEGIN LOOP%' AND pid <> pg_backend_pid()" >/dev/null
    wait "$SAMPLER" 2>/dev/null || true
}

# run_load SECONDS TAG [SCRIPT]: the heavy and light clients for SECONDS;
# the light clients' log goes to $BENCH_TMP/light-TAG.*; heavy tx/s to
# heavy-TAG.out; SCRIPT (default heavy.sql) names the heavy statement
run_load() {
    local s=$1 tag=$2 script=${3:-heavy.sql} hp lp
    (cd "$BENCH_TMP" && bench_pgbench -n -c "$HEAVY" -j 2 -T "$s" -f "$BENCH_TMP/$script" \
        >"$BENCH_TMP/heavy-$tag.out" 2>&1) &
    hp=$!
    (cd "$BENCH_TMP" && bench_pgbench -n -S -c "$LIGHT" -j 1 -R "$LIGHT_RATE" -T "$s" \
        -l --log-prefix="light-$tag" >"$BENCH_TMP/light-$tag.out" 2>&1) &
    lp=$!
    wait "$hp" || { cat "$BENCH_TMP/heavy-$tag.out" >&2; exit 1; }
    wait "$lp" || { cat "$BENCH_TMP/light-$tag.out" >&2; exit 1; }
}

# light_p99 TAG [FROM TO]: the light clients' p99 latency (ms), over epoch
# seconds [FROM, TO) if given
light_p99() {
    cat "$BENCH_TMP"/light-"$1".* 2>/dev/null | awk -v from="${2:-0}" -v to="${3:-1e18}" '
        $5 >= from && $5 < to { print $3 / 1000 }' | sort -n |
        awk '{ v[NR] = $1 } END { if (NR == 0) { print "n/a"; exit }
                                  i = int(NR * 0.99 + 0.5); if (i < 1) i = 1; printf "%.1f\n", v[i] }'
}

# heavy_stats FROM TO: "tx/s p50 p99" of the heavy statements that ended in
# epoch seconds [FROM, TO)
heavy_stats() {
    bench_sql "SELECT count(*) / ($2 - $1)::float8,
                      percentile_cont(0.5) WITHIN GROUP (ORDER BY guarded_ms),
                      percentile_cont(0.99) WITHIN GROUP (ORDER BY guarded_ms)
                 FROM bench_runs
                WHERE at >= to_timestamp($1) AND at < to_timestamp($2)" |
        awk -F'|' '{ printf "%.1f %.0f %.0f\n", $1, $2, $3 }'
}

# windows_sql SEGMENTS: an SQL condition on bench_runs.at for "FROM:TO"
# words (epoch seconds, [FROM, TO))
windows_sql() {
    local w cond=false
    for w in $1; do cond+=" OR (at >= to_timestamp(${w%%:*}) AND at < to_timestamp(${w##*:}))"; done
    printf '%s' "$cond"
}

# pooled_heavy SEM SEGMENTS: "tx/s p50 p99" of SEM's statements over the
# "FROM:TO" segments, pooled
pooled_heavy() {
    local w secs=0
    for w in $2; do secs=$((secs + ${w##*:} - ${w%%:*})); done
    bench_sql "SELECT count(*) / $secs::float8,
                      percentile_cont(0.5) WITHIN GROUP (ORDER BY guarded_ms),
                      percentile_cont(0.99) WITHIN GROUP (ORDER BY guarded_ms)
                 FROM bench_runs WHERE sem = '$1' AND ($(windows_sql "$2"))" |
        awk -F'|' '{ printf "%.1f %.0f %.0f\n", $1, $2, $3 }'
}

# pooled_light TAGGED: the light clients' p99 (ms) over "TAG:FROM:TO" words
pooled_light() {
    local w tag rest
    for w in $1; do
        tag=${w%%:*} rest=${w#*:}
        cat "$BENCH_TMP"/light-"$tag".* 2>/dev/null |
            awk -v from="${rest%%:*}" -v to="${rest##*:}" '$5 >= from && $5 < to { print $3 / 1000 }'
    done | sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) { print "n/a"; exit }
                                                i = int(NR * 0.99 + 0.5); if (i < 1) i = 1; printf "%.1f\n", v[i] }'
}

# sweep COND: each static limit for SWEEP_S; rows "limit tx/s p50 p99 light_p99"
sweep() {
    local cond=$1 l from to
    for l in $LIMITS; do
        bench_sql "SELECT redsem_set_limit('heavy', $l)" >/dev/null
        from=$(($(date +%s) + 3))
        sampler_start "$BENCH_TMP/sweep-$cond-$l.csv"
        run_load "$SWEEP_S" "$cond-$l"
        sampler_stop
        to=$(date +%s)
        printf '%s %s %s\n' "$l" "$(heavy_stats "$from" "$to")" \
            "$(light_p99 "$cond-$l" "$from" "$to")"
    done
}

# best ROWS ALONE_MS: the row of the best static limit: the highest tx/s
# among the limits whose p50 is within 2x alone; a limit within 5% of that
# is a tie (the noise of a run this short), and the smallest tied wins
best() {
    awk -v alone="$2" '$3 <= 2 * alone { row[NR] = $0; tx[NR] = $2; if ($2 > top) top = $2 }
        END { for (i = 1; i <= NR; i++) if ((i in row) && tx[i] >= 0.95 * top) { print row[i]; exit } }' <<<"$1"
}

bench_header "adaptive limits: $HEAVY heavy clients (about $WORK rows each$( ((WAIT_MS > 0)) && printf ', then %s ms waiting' "$WAIT_MS")), $LIGHT light clients at $LIGHT_RATE tx/s, $(nproc) CPUs"
redsem_log "sweep without the hog (${SWEEP_S}s per limit)"
CALM=$(sweep calm)
ALONE=$(awk '$1 == 1 { print $3 }' <<<"$CALM")
[[ $ALONE =~ ^[0-9.]+$ ]] || redsem_die "limit 1's sweep gave no guarded p50 (every figure is read against it): '$ALONE'"
redsem_log "sweep with the hog"
hog_start
HOGGED=$(sweep hog)
hog_stop
BEST_CALM=$(best "$CALM" "$ALONE")
BEST_HOG=$(best "$HOGGED" "$ALONE")
[[ -n $BEST_HOG ]] || BEST_HOG=$(awk '$1 == 1' <<<"$HOGGED")
printf '\nstatic limits (alone: guarded p50 %s ms at limit 1 without the hog)\n' "$ALONE"
printf '%-8s %-6s | %9s %8s %8s %9s\n' condition limit "heavy/s" "p50 ms" "p99 ms" "light p99"
while read -r l tx p50 p99 lp; do printf '%-8s %-6s | %9s %8s %8s %9s\n' calm "$l" "$tx" "$p50" "$p99" "$lp"; done <<<"$CALM"
while read -r l tx p50 p99 lp; do printf '%-8s %-6s | %9s %8s %8s %9s\n' hog "$l" "$tx" "$p50" "$p99" "$lp"; done <<<"$HOGGED"
printf 'best static limit: %s without the hog, %s with it\n' "$(cut -d' ' -f1 <<<"$BEST_CALM")" "$(cut -d' ' -f1 <<<"$BEST_HOG")"

# control_sql KIND [SEM]: a DO block that sets SEM's limit (default heavy)
# each second by KIND's formula, from SEM's guarded run times of the second
# before
control_sql() {
    local sem=${2:-heavy}
    control_formula "$1" | sed -e "s/'heavy'/'$sem'/g" \
        -e "s/WHERE at >= clock_timestamp()/WHERE sem = '$sem' AND at >= clock_timestamp()/"
}

# control_formula KIND: control_sql's block for semaphore heavy
control_formula() {
    case $1 in
    gradient2) cat <<'EOF'
DO $$
DECLARE
    lim float8 := 1; long float8; short float8; n bigint; g float8; nl float8;
    inuse bigint;
BEGIN
    PERFORM redsem_set_limit('heavy', 1);
    LOOP
        PERFORM pg_sleep(1);
        SELECT avg(guarded_ms), count(*) INTO short, n FROM bench_runs
         WHERE at >= clock_timestamp() - interval '1 second';
        CONTINUE WHEN n = 0;
        long := CASE WHEN long IS NULL THEN short
                     ELSE long + (short - long) * least(n, 600) / 600.0 END;
        IF long / short > 2 THEN long := long * 0.95; END IF;
        SELECT permits_held INTO inuse FROM redsem_semaphore('heavy');
        CONTINUE WHEN inuse * 2 < lim AND short <= long;
        g := greatest(0.5, least(1.0, 1.5 * long / short));
        nl := lim * g + sqrt(lim);
        lim := greatest(1, least(32, lim * 0.8 + nl * 0.2));
        PERFORM redsem_set_limit('heavy', round(lim)::int);
    END LOOP;
END $$;
EOF
        ;;
    aimd) cat <<'EOF'
DO $$
DECLARE
    lim float8 := 1; med float8; best float8;
BEGIN
    PERFORM redsem_set_limit('heavy', 1);
    LOOP
        PERFORM pg_sleep(1);
        SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY guarded_ms) INTO med
          FROM bench_runs WHERE at >= clock_timestamp() - interval '1 second';
        CONTINUE WHEN med IS NULL;
        best := least(coalesce(best, med), med);
        IF med > 2 * best THEN lim := greatest(1, lim * 0.9);
        ELSE lim := least(32, lim + 1); END IF;
        PERFORM redsem_set_limit('heavy', floor(lim)::int);
    END LOOP;
END $$;
EOF
        ;;
    esac
}

# run_steps KIND: the three phases under KIND (adaptive, or a control);
# the limit each second in $BENCH_TMP/series-KIND.csv; the epoch seconds
# where the phases start and the end, "t0 t1 t2 t3", in T[KIND]
run_steps() {
    local kind=$1 t0 ctl=
    bench_sql "SELECT redsem_set_limit('heavy', NULL)" >/dev/null
    if [[ $kind == adaptive ]]; then
        bench_sql "SELECT redsem_set_adaptive_limit('heavy', 1, 32, 1)" >/dev/null
    else
        control_sql "$kind" >"$BENCH_TMP/control-$kind.sql"
        bench_bg bench_psql -f "$BENCH_TMP/control-$kind.sql" 2>"$BENCH_TMP/control-$kind.log"
        ctl=$BENCH_PID
    fi
    t0=$(date +%s)
    sampler_start "$BENCH_TMP/series-$kind.csv"
    run_load "$((3 * STEP_S))" "$kind" &
    local load=$!
    sleep "$STEP_S"
    hog_start
    sleep "$STEP_S"
    hog_stop
    wait "$load"
    sampler_stop
    if [[ -n $ctl ]]; then controls_stop; wait "$ctl" 2>/dev/null || true; fi
    bench_sql "SELECT redsem_set_adaptive_limit('heavy', NULL, NULL); SELECT redsem_set_limit('heavy', NULL)" >/dev/null
    T[$kind]="$t0 $((t0 + STEP_S)) $((t0 + 2 * STEP_S)) $((t0 + 3 * STEP_S))"
}

# settle CSV FROM TO BEST: seconds after FROM until the limit is within
# +-20% of BEST and stays there until TO ("never" if it does not)
settle() {
    awk -F, -v from="$2" -v to="$3" -v best="$4" '
        $1 >= from && $1 < to && $2 != "" {
            ok = ($2 >= 0.8 * best && $2 <= 1.2 * best)
            if (ok && first == "") first = $1 - from
            if (!ok) first = ""
        }
        END { if (first == "") print "never"; else printf "%.0f\n", first }' "$1"
}

# swing CSV FROM TO: the largest distance of the limit from its median over
# [FROM, TO), as a share of the median (%)
swing() {
    awk -F, -v from="$2" -v to="$3" '$1 >= from && $1 < to && $2 != "" { print $2 }' "$1" | sort -n |
        awk '{ v[NR] = $1 } END {
            if (NR == 0) { print "n/a"; exit }
            m = v[int((NR + 1) / 2)]; d = 0
            for (i = 1; i <= NR; i++) { x = v[i] - m; if (x < 0) x = -x; if (x > d) d = x }
            printf "%.0f\n", 100 * d / m }'
}

# phase_row KIND NAME FROM TO: steady figures of one phase (from SETTLE_S
# after its start)
phase_row() {
    printf '%-9s %-5s | %9s %8s %8s %9s\n' "$1" "$2" $(heavy_stats "$(($3 + SETTLE_S))" "$4") \
        "$(light_p99 "$1" "$(($3 + SETTLE_S))" "$4")"
}

# head_to_head: the adaptive limit (from its start, no tuning), the best
# calm static limit and each control, each on a semaphore of its own, one
# side at a time, AB_ROUNDS rounds of AB_S seconds a side, the order
# rotated each round (each side takes each place once in as many rounds as
# there are sides), without the hog. All sides get the same minutes, so the
# drift of a machine over a run (which moved the step run's calm throughput
# ratio from 1.06 to 0.88 between two runs of the same code) falls on all
# alike. While another side runs, a side has no releases and holds still
# (the controls skip a second without samples, as the adaptive limit does).
# Segments "FROM:TO" in AB_SEG[side], light logs "TAG:FROM:TO" in AB_LIGHT.
declare -A AB_SEG AB_LIGHT
# "again" is the best static limit once more, on a semaphore of its own: an
# A/A control, whose distance from "static" is what the same limit's
# figures move by from segment to segment (the noise a ratio is read
# against)
AB_SIDES=(adaptive static again $CONTROLS)
# ab_sem SIDE: the semaphore a side's statements take
ab_sem() {
    case $1 in
    adaptive) echo heavy ;;
    static) echo heavy_static ;;
    again) echo heavy_again ;;
    *) echo "heavy_$1" ;;
    esac
}
head_to_head() {
    local r i side t0 n=${#AB_SIDES[@]} ctls=() pid
    bench_sql "SELECT redsem_set_limit('heavy', NULL); SELECT redsem_set_adaptive_limit('heavy', 1, 32, 1);
               SELECT redsem_set_limit('heavy_static', $bc); SELECT redsem_set_limit('heavy_again', $bc)" >/dev/null
    for side in "${AB_SIDES[@]}"; do
        printf '\\set n %s\nSELECT bench_heavy(:n, %s, %s);\n' "$WORK" "'$(ab_sem "$side")'" "$WAIT_MS" >"$BENCH_TMP/heavy-ab-$side.sql"
        chown postgres "$BENCH_TMP/heavy-ab-$side.sql"
        [[ $side == adaptive || $side == static || $side == again ]] && continue
        control_sql "$side" "$(ab_sem "$side")" >"$BENCH_TMP/control-ab-$side.sql"
        bench_bg bench_psql -f "$BENCH_TMP/control-ab-$side.sql" 2>"$BENCH_TMP/control-ab-$side.log"
        ctls+=("$BENCH_PID")
    done
    sampler_start "$BENCH_TMP/series-ab.csv"
    # the adaptive side from its start, not measured
    run_load "$AB_S" ab-warm heavy-ab-adaptive.sql
    for ((r = 0; r < AB_ROUNDS; r++)); do
        for ((i = 0; i < n; i++)); do
            side=${AB_SIDES[$(((i + r) % n))]}
            t0=$(date +%s)
            run_load "$AB_S" "ab-$side-$r" "heavy-ab-$side.sql"
            AB_SEG[$side]+=" $((t0 + AB_SKIP_S)):$(date +%s)"
            AB_LIGHT[$side]+=" ab-$side-$r:$((t0 + AB_SKIP_S)):$(date +%s)"
        done
    done
    sampler_stop
    controls_stop
    for pid in "${ctls[@]}"; do wait "$pid" 2>/dev/null || true; done
    bench_sql "SELECT redsem_set_adaptive_limit('heavy', NULL, NULL); SELECT redsem_set_limit('heavy', NULL)" >/dev/null
}

# path_cost: what being adaptive costs a call. Short holds (take a slot,
# commit) by BENCH_HEAVY clients on an adaptive semaphore whose bounds are
# both 64 (it never makes anyone wait, but every release is sampled and the
# keeper runs the controller) against a static limit of 64, alternately,
# COST_S seconds a side, twice; no light clients, no hog. Rows
# "side tx/s round-trips/call redis-us/call" in COST[side] (summed).
declare -A COST_TX COST_RT COST_US
path_cost() {
    local r side order stats tx
    bench_sql "SELECT redsem_set_adaptive_limit('cost_ad', 64, 64, 64); SELECT redsem_set_limit('cost_st', 64)" >/dev/null
    printf "SELECT redsem_acquire_xact('cost_ad');\n" >"$BENCH_TMP/cost-adaptive.sql"
    printf "SELECT redsem_acquire_xact('cost_st');\n" >"$BENCH_TMP/cost-static.sql"
    chown postgres "$BENCH_TMP"/cost-*.sql
    for r in 0 1; do
        order="adaptive static"
        ((r == 0)) || order="static adaptive"
        for side in $order; do
            bench_stats_reset
            tx=$(cd "$BENCH_TMP" && bench_pgbench -n -c "$HEAVY" -j 2 -T "$COST_S" -f "$BENCH_TMP/cost-$side.sql" 2>&1 |
                sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p')
            stats=$(bench_stats)
            COST_TX[$side]=$((${COST_TX[$side]:-0} + ${tx:-0}))
            COST_RT[$side]=$((${COST_RT[$side]:-0} + $(bench_roundtrips "$stats")))
            COST_US[$side]=$((${COST_US[$side]:-0} + $(bench_usec "$stats" '^fcall')))
        done
    done
    bench_sql "SELECT redsem_set_adaptive_limit('cost_ad', NULL, NULL); SELECT redsem_set_limit('cost_ad', NULL);
               SELECT redsem_set_limit('cost_st', NULL)" >/dev/null
}

declare -A T
for kind in adaptive $CONTROLS; do
    redsem_log "$kind: ${STEP_S}s calm, ${STEP_S}s hog, ${STEP_S}s calm"
    run_steps "$kind"
done
bc=$(cut -d' ' -f1 <<<"$BEST_CALM")
bh=$(cut -d' ' -f1 <<<"$BEST_HOG")
if ((AB_ROUNDS > 0)); then
    redsem_log "head to head: ${AB_SIDES[*]} (static $bc), ${AB_ROUNDS} rounds of ${AB_S}s a side"
    head_to_head
fi
if ((COST_S > 0)); then
    redsem_log "the adaptive path's own cost: short holds, ${COST_S}s a side, twice"
    path_cost
fi

printf '\nsteps (steady: from %ss after each step)\n' "$SETTLE_S"
printf '%-9s %-5s | %9s %8s %8s %9s\n' controller phase "heavy/s" "p50 ms" "p99 ms" "light p99"
for kind in adaptive $CONTROLS; do
    read -r t0 t1 t2 t3 <<<"${T[$kind]}"
    phase_row "$kind" calm "$t0" "$t1"
    phase_row "$kind" hog "$t1" "$t2"
    phase_row "$kind" calm2 "$t2" "$t3"
done
printf '\n%-9s | %-22s %-22s | %-24s\n' controller "to +-20% after hog on" "after hog off" "steady swing (calm/hog/calm)"
for kind in adaptive $CONTROLS; do
    read -r t0 t1 t2 t3 <<<"${T[$kind]}"
    f=$BENCH_TMP/series-$kind.csv
    printf '%-9s | %-22s %-22s | %s%%/%s%%/%s%%\n' "$kind" "$(settle "$f" "$t1" "$t2" "$bh") s (best $bh)" \
        "$(settle "$f" "$t2" "$t3" "$bc") s (best $bc)" \
        "$(swing "$f" "$((t0 + STEP_S / 2))" "$t1")" "$(swing "$f" "$((t1 + STEP_S / 2))" "$t2")" \
        "$(swing "$f" "$((t2 + STEP_S / 2))" "$t3")"
done

# the ratios the targets ask for: adaptive (calm, steady) vs the best static
read -r t0 t1 t2 t3 <<<"${T[adaptive]}"
read -r atx ap50 ap99 <<<"$(heavy_stats "$((t0 + SETTLE_S))" "$t1")"
alp=$(light_p99 adaptive "$((t0 + SETTLE_S))" "$t1")
read -r _ btx bp50 bp99 blp <<<"$BEST_CALM"
printf '\nstep run, calm and steady, against the sweep (different minutes): adaptive vs best static (%s): heavy/s %s, guarded p99 %s, light p99 %s ms vs %s ms\n' \
    "$bc" "$(bench_ratio "$atx" "$btx")" "$(bench_ratio "$ap99" "$bp99")" "$alp" "$blp"

if ((AB_ROUNDS > 0)); then
    printf '\nhead to head, same minutes (%s rounds of %ss a side, order rotated, first %ss of each left out)\n' "$AB_ROUNDS" "$AB_S" "$AB_SKIP_S"
    printf '%-9s %-5s | %9s %8s %8s %9s\n' side round "heavy/s" "p50 ms" "p99 ms" "light p99"
    declare -A ABTX ABP99 ABLP ABROUND
    for side in "${AB_SIDES[@]}"; do
        r=0
        for w in ${AB_SEG[$side]}; do
            lw=$(cut -d' ' -f$((r + 2)) <<<"${AB_LIGHT[$side]}")
            lp=$(pooled_light "$lw")
            ABROUND[$side]+=" $lp"
            printf '%-9s %-5s | %9s %8s %8s %9s\n' "$side" "$r" $(pooled_heavy "$(ab_sem "$side")" "$w") "$lp"
            r=$((r + 1))
        done
    done
    for side in "${AB_SIDES[@]}"; do
        read -r tx p50 p99 <<<"$(pooled_heavy "$(ab_sem "$side")" "${AB_SEG[$side]}")"
        ABTX[$side]=$tx ABP99[$side]=$p99 ABLP[$side]=$(pooled_light "${AB_LIGHT[$side]}")
        printf '%-9s %-5s | %9s %8s %8s %9s\n' "$side" all "$tx" "$p50" "$p99" "${ABLP[$side]}"
    done
    # the limit while the adaptive side ran (its segments only)
    lims=$(for w in ${AB_SEG[adaptive]}; do
        awk -F, -v from="${w%%:*}" -v to="${w##*:}" '$1 >= from && $1 < to && $2 != "" { print $2 }' "$BENCH_TMP/series-ab.csv"
    done | sort -n | awk '{ v[NR] = $1 } END { if (NR) printf "median %s, from %s to %s", v[int((NR + 1) / 2)], v[1], v[NR] }')
    printf 'adaptive limit during its segments: %s (static: %s)\n' "${lims:-n/a}" "$bc"
    printf 'adaptive vs best static (%s), head to head: heavy/s %s (target >= 0.9), guarded p99 %s (target <= 1.25), light p99 %s (%s ms vs %s ms; target <= 1)\n' \
        "$bc" "$(bench_ratio "${ABTX[adaptive]}" "${ABTX[static]}")" "$(bench_ratio "${ABP99[adaptive]}" "${ABP99[static]}")" \
        "$(bench_ratio "${ABLP[adaptive]}" "${ABLP[static]}")" "${ABLP[adaptive]}" "${ABLP[static]}"
    # rounds_worse SIDE: in how many rounds SIDE's light p99 was above static's
    rounds_worse() {
        paste <(tr ' ' '\n' <<<"${ABROUND[$1]# }") <(tr ' ' '\n' <<<"${ABROUND[static]# }") |
            awk '$1 != "n/a" && $2 != "n/a" { n++; if ($1 > $2) w++ } END { printf "%d of %d", w, n }'
    }
    printf 'A/A, the same static limit on another semaphore vs static: heavy/s %s, guarded p99 %s, light p99 %s (%s ms): what noise alone moves these by\n' \
        "$(bench_ratio "${ABTX[again]}" "${ABTX[static]}")" "$(bench_ratio "${ABP99[again]}" "${ABP99[static]}")" \
        "$(bench_ratio "${ABLP[again]}" "${ABLP[static]}")" "${ABLP[again]}"
    printf 'light p99 above static'"'"'s, by round: adaptive in %s rounds, the A/A side in %s\n' \
        "$(rounds_worse adaptive)" "$(rounds_worse again)"
    for side in $CONTROLS; do
        printf 'adaptive vs %s, head to head: heavy/s %s (target >= 1, or within the 5%% a tie is), guarded p99 %s (target < 1), light p99 %s\n' \
            "$side" "$(bench_ratio "${ABTX[adaptive]}" "${ABTX[$side]}")" "$(bench_ratio "${ABP99[adaptive]}" "${ABP99[$side]}")" \
            "$(bench_ratio "${ABLP[adaptive]}" "${ABLP[$side]}")"
    done
fi

if ((COST_S > 0)); then
    printf '\nthe adaptive path'"'"'s own cost: short holds, %s clients, never waiting (limit 64 both), %ss a side twice\n' "$HEAVY" "$COST_S"
    printf '%-9s | %9s %14s %14s\n' side "calls/s" "round trips" "Redis us"
    for side in adaptive static; do
        printf '%-9s | %9s %14s %14s\n' "$side" "$(bench_div "${COST_TX[$side]}" "$((2 * COST_S))" '%.0f')" \
            "$(bench_div "${COST_RT[$side]}" "${COST_TX[$side]}")" "$(bench_div "${COST_US[$side]}" "${COST_TX[$side]}" '%.1f')"
    done
    printf 'adaptive vs static, per call: calls/s %s, round trips %s, Redis us %s\n' \
        "$(bench_ratio "${COST_TX[adaptive]}" "${COST_TX[static]}")" \
        "$(bench_ratio "$(bench_div "${COST_RT[adaptive]}" "${COST_TX[adaptive]}")" "$(bench_div "${COST_RT[static]}" "${COST_TX[static]}")")" \
        "$(bench_ratio "$(bench_div "${COST_US[adaptive]}" "${COST_TX[adaptive]}" '%.2f')" "$(bench_div "${COST_US[static]}" "${COST_TX[static]}" '%.2f')")"
fi

if command -v gnuplot >/dev/null; then
    mkdir -p "$PLOTS"
    read -r t0 t1 t2 t3 <<<"${T[adaptive]}"
    bench_sql "SELECT floor(extract(epoch FROM at))::bigint - $t0, count(*),
                      percentile_cont(0.99) WITHIN GROUP (ORDER BY guarded_ms)
                 FROM bench_runs WHERE at >= to_timestamp($t0) AND at < to_timestamp($t3)
                GROUP BY 1 ORDER BY 1" | tr '|' ' ' >"$BENCH_TMP/per-second.dat"
    awk -F, -v t0="$t0" '$2 != "" { printf "%.1f %s\n", $1 - t0, $2 }' "$BENCH_TMP/series-adaptive.csv" >"$BENCH_TMP/limit.dat"
    for kind in $CONTROLS; do
        read -r c0 _ _ _ <<<"${T[$kind]}"
        awk -F, -v t0="$c0" '$2 != "" { printf "%.1f %s\n", $1 - t0, $2 }' "$BENCH_TMP/series-$kind.csv" >"$BENCH_TMP/limit-$kind.dat"
    done
    gnuplot <<EOF
set terminal svg size 720,480 font "sans,11"
set output "$PLOTS/adaptive.svg"
set multiplot layout 2,1 title "adaptive limit through a CPU hog (on at ${STEP_S}s, off at $((2 * STEP_S))s)"
set xrange [0:$((3 * STEP_S))]
set ylabel "limit"
set key top right
set arrow from $STEP_S, graph 0 to $STEP_S, graph 1 nohead dt 2
set arrow from $((2 * STEP_S)), graph 0 to $((2 * STEP_S)), graph 1 nohead dt 2
plot "$BENCH_TMP/limit.dat" using 1:2 with steps lw 2 title "adaptive", \
     $bc with lines dt 3 title "best static, calm ($bc)", $bh with lines dt 4 title "best static, hog ($bh)"$(for kind in $CONTROLS; do printf ', "%s" using 1:2 with steps title "%s"' "$BENCH_TMP/limit-$kind.dat" "$kind"; done)
set xlabel "seconds"
set ylabel "heavy/s"
set y2label "guarded p99 (ms)"
set y2tics
plot "$BENCH_TMP/per-second.dat" using 1:2 with lines title "heavy statements/s", \
     "$BENCH_TMP/per-second.dat" using 1:3 axes x1y2 with lines title "guarded p99 (ms)"
unset multiplot
EOF
    printf 'plot: %s\n' "$PLOTS/adaptive.svg"
fi
