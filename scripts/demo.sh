#!/usr/bin/env bash
#
# scripts/demo.sh - watch redsem cap concurrency across database sessions.
#
#   sudo bash scripts/demo.sh
#
# Installs the dependencies (only what is missing), builds and installs
# redsem, starts a throwaway Redis and PostgreSQL in a temp dir (unix sockets
# only; both are stopped and the dir removed on exit or Ctrl-C), then:
#
#   Act 1: 12 "monthly reports" start at once, but at most 3 may run at a
#          time: redsem_acquire('monthly_report', 3, wait => '0') hands out
#          3 slots and refuses the rest (NULL); refused reports retry after
#          a short pause.  Unfair on purpose (try-once keeps no place), to
#          contrast with act 2.
#   Act 2: 6 sessions line up for a single "cache_refill" slot with
#          wait => '20 seconds' and are served first come, first served
#          (FIFO, notified hand-off).
#   Act 3: a second PostgreSQL server joins; an "analyst" role's heavy
#          queries, plain SQL with no redsem call in it, are capped at 2
#          across both servers by a statement queue (redsem_create_queue,
#          ALTER ROLE analyst SET redsem.queue).  A live timeline shows the
#          queries submitted, running and done, and the queue every half
#          second.
#   Act 4: a batch flood fills a semaphore of 2 slots with a line of 8;
#          two interactive queries arrive just after, one plain and one with
#          priority => 10: the plain one waits behind the flood, the other
#          gets the next free slot; then, with one slot reserved for
#          priority 10 (redsem_set_reserve), it waits for nothing.
#
# The number of sessions inside is counted independently of redsem (counter
# files under flock), so the demo checks the limit rather than trusting it.
# Exit status is non-zero if the limit or the order was ever violated.
#
# Environment: REDSEM_KEEP=1 keeps the temp dir (logs of Redis and PostgreSQL).

set -euo pipefail

# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REPORTS=12      # act 1: how many reports
LIMIT=3         # act 1: how many may run at once (act 2 uses 1)
MAX_ATTEMPTS=15 # act 1: tries per report before it gives up
REFILLS=6       # act 2: sessions waiting in line for one slot
ANALYSTS=4      # act 3: analyst queries per server
ACTIVE=2        # act 3: the queue's active_statements
BATCHES=10      # act 4: batch jobs flooding a semaphore of 2 slots

DIR=      # the temp dir
T0=       # start of the timeline, in microseconds
PSQL=()   # psql options for the demo server
JOBS=()   # background sessions still running
ACT1_OK=0
ACT2_OK=0
ACT3_OK=0
ACT4_OK=0

# --- the event helper -------------------------------------------------------
#
# Every timeline line is printed by DIR/event.sh. The sessions run it
# themselves, through psql's \! (as postgres), right after the SQL call
# before it returned, so the timeline is what the sessions saw. It keeps each
# act's counters in files under flock: inside, max, finished, refused, gaveup,
# and the arrival / order lists of act 2.

write_event_helper() {
    cat >"$DIR/event.sh" <<'HELPER'
#!/bin/bash
# event.sh KIND : print one timeline line for $WHO, update counters in $ACT_DIR.
# Expects WHO, ACT_DIR, LIMIT and T0 (start, in microseconds) in the environment.
set -euo pipefail
kind=$1
exec 9>>"$ACT_DIR/lock"
flock 9
# Counters are small files, read and written without forking (this runs
# once per event, often many at a time).
put() { printf '%s\n' "$2" >"$ACT_DIR/$1"; }
now=${EPOCHREALTIME/[.,]/}
cs=$(( (now - T0) / 10000 ))             # hundredths of a second
printf -v stamp '[+%d.%02ds]' $((cs / 100)) $((cs % 100))
max=0 finished=0 refused=0 gaveup=0 inside=0
for c in max finished refused gaveup inside; do
    if [[ -s $ACT_DIR/$c ]]; then read -r "${c?}" <"$ACT_DIR/$c"; fi
done
case $kind in
enter)
    inside=$((inside + 1)); put inside "$inside"
    if (( inside > max )); then put max "$inside"; fi
    printf '%s\n' "$WHO" >>"$ACT_DIR/order"
    msg="RUNNING ($inside/$LIMIT inside)" ;;
leave)
    inside=$((inside - 1)); put inside "$inside"
    put finished $((finished + 1))
    msg="done" ;;
refused)
    put refused $((refused + 1))
    msg="refused (full)" ;;
gaveup)
    put gaveup $((gaveup + 1))
    msg="gave up" ;;
ask)
    printf '%s\n' "$WHO" >>"$ACT_DIR/arrival"
    msg="asks for the slot" ;;
timeout)
    msg="timed out waiting" ;;
submit)
    msg="submits its query (plain SQL, no redsem call)" ;;
ran)
    # STARTED and ENDED: when the query ran, in seconds since the epoch
    s=$(( (${STARTED/./} / 10000 - T0 / 10000) ))
    e=$(( (${ENDED/./} / 10000 - T0 / 10000) ))
    printf '%s %s\n' "${STARTED/./}" "${ENDED/./}" >>"$ACT_DIR/periods"
    printf -v msg 'ran from +%d.%02ds to +%d.%02ds' $((s / 100)) $((s % 100)) $((e / 100)) $((e % 100)) ;;
*)
    msg=$kind ;;
esac
# fd 5 is demo.sh's stdout (psql's own stdout is captured by demo.sh).
printf '%-9s %-10s %s\n' "$stamp" "$WHO" "$msg" >&5
HELPER
    chmod 755 "$DIR/event.sh"
    chown postgres:postgres "$DIR/event.sh"
}

# event ACT_DIR WHO KIND : print a timeline line from the shell side.
event() {
    redsem_as_postgres ACT_DIR="$1" WHO="$2" LIMIT="$LIMIT" T0="$T0" \
        "$DIR/event.sh" "$3"
}

# new_act NAME : fresh counter dir for one act (owned by postgres).
new_act() {
    local d=$DIR/$1
    mkdir -p "$d"
    chown postgres:postgres "$d"
    printf '%s\n' "$d"
}

# act_count ACT_DIR NAME : a counter's value.
act_count() { cat "$1/$2" 2>/dev/null || echo 0; }

# --- SQL scripts run by each session ----------------------------------------
#
# psql's \gset unsets the variable when the value is NULL, so \if :{?id}
# tells "got a slot" from "refused". \! commands see psql's environment.

write_sql_scripts() {
    # Act 1: one attempt of one report; prints "done t" or "refused".
    cat >"$DIR/report.sql" <<'SQL'
SELECT redsem_acquire('monthly_report', 3, lease => '30 seconds', wait => '0') AS id \gset
\if :{?id}
\! "$DEMO_DIR/event.sh" enter
SELECT pg_sleep(:secs) AS slept \gset
\! "$DEMO_DIR/event.sh" leave
SELECT redsem_release('monthly_report', :'id') AS released \gset
\echo done :released
\else
\! "$DEMO_DIR/event.sh" refused
\echo refused
\endif
SQL
    # Act 2: wait in line for the single cache_refill slot.
    cat >"$DIR/refill.sql" <<'SQL'
\! "$DEMO_DIR/event.sh" ask
SELECT redsem_acquire('cache_refill', 1, wait => '20 seconds') AS id \gset
\if :{?id}
\! "$DEMO_DIR/event.sh" enter
SELECT pg_sleep(:secs) AS slept \gset
\! "$DEMO_DIR/event.sh" leave
SELECT redsem_release('cache_refill', :'id') AS released \gset
\echo done :released
\else
\! "$DEMO_DIR/event.sh" timeout
\echo timeout
\endif
SQL
    # Act 3: one heavy query of the analyst; the queue is invisible to it.
    # (clock_timestamp() is read when the query runs, after the queue let
    # it in; \setenv hands the times to the timeline helper.)
    cat >"$DIR/analyst.sql" <<'SQL'
\! "$DEMO_DIR/event.sh" submit
SELECT extract(epoch FROM clock_timestamp())::numeric(20,6) AS started,
       pg_sleep(:secs) AS slept,
       extract(epoch FROM clock_timestamp())::numeric(20,6) AS ended \gset
\setenv STARTED :started
\setenv ENDED :ended
\! "$DEMO_DIR/event.sh" ran
\echo done t
SQL
    # Act 4: a batch job, and an interactive query that reports its wait.
    cat >"$DIR/batch.sql" <<'SQL'
SELECT redsem_acquire('warehouse', 2, lease => '30 seconds', wait => '60 seconds') AS id \gset
SELECT pg_sleep(:secs) AS slept \gset
SELECT redsem_release('warehouse', :'id') AS released \gset
\echo done :released
SQL
    cat >"$DIR/interactive.sql" <<'SQL'
SELECT clock_timestamp() AS t0 \gset
SELECT redsem_acquire('warehouse', 2, lease => '30 seconds', wait => '60 seconds', priority => :prio) AS id \gset
SELECT round(extract(epoch FROM clock_timestamp() - :'t0')::numeric, 2) AS waited \gset
SELECT pg_sleep(0.2) AS slept \gset
SELECT redsem_release('warehouse', :'id') AS released \gset
\echo :waited
SQL
    chown postgres:postgres "$DIR/report.sql" "$DIR/refill.sql" "$DIR/analyst.sql" \
        "$DIR/batch.sql" "$DIR/interactive.sql"
}

# session ACT_DIR WHO SQLFILE SECS : run one psql session of the demo and
# print its last output line ("done t", "refused", ...).
session() {
    redsem_as_postgres DEMO_DIR="$DIR" ACT_DIR="$1" WHO="$2" LIMIT="$LIMIT" T0="$T0" \
        psql "${PSQL[@]}" -v secs="$4" -f "$3" | tail -n 1
}

# A random duration of 1.0-3.0 s, as "S.T".
random_secs() {
    local t=$((10 + RANDOM % 21))
    printf '%d.%d\n' $((t / 10)) $((t % 10))
}

# A random pause of 0.5-1.0 s before trying again.
random_pause() {
    local t=$((50 + RANDOM % 51))
    printf '%d.%02d\n' $((t / 100)) $((t % 100))
}

# --- act 1 -------------------------------------------------------------------

# report ACT_DIR N : one report, retrying while refused.
report() {
    local act=$1 who attempt status
    who=$(printf 'report %02d' "$2")
    for ((attempt = 1; attempt <= MAX_ATTEMPTS; attempt++)); do
        status=$(session "$act" "$who" "$DIR/report.sql" "$(random_secs)") || status=error
        case $status in
        "done t") return 0 ;;
        refused) sleep "$(random_pause)" ;;
        *)
            event "$act" "$who" "ERROR: session ended with '$status'"
            return 1
            ;;
        esac
    done
    event "$act" "$who" gaveup
}

act1() {
    local act
    act=$(new_act act1)
    LIMIT=3
    cat <<EOF

=== Act 1: $REPORTS reports start at once; at most $LIMIT may run ===
Each report: redsem_acquire('monthly_report', $LIMIT, lease => '30 seconds', wait => '0')
  id   -> run 1-3 s, then redsem_release('monthly_report', id)
  NULL -> refused; try again shortly (at most $MAX_ATTEMPTS tries)
This act is unfair on purpose: wait => '0' tries once and keeps no place,
so whoever retries at the right moment gets in, like a pg_try_advisory_lock
slot pool. The limit holds, the order does not. Act 2 waits in line instead.

EOF
    local n pid failures=0
    JOBS=()
    for ((n = 1; n <= REPORTS; n++)); do
        report "$act" "$n" &
        JOBS+=($!)
    done
    for pid in "${JOBS[@]}"; do
        wait "$pid" || failures=$((failures + 1))
    done
    JOBS=()

    local max completed refused gaveup
    max=$(act_count "$act" max)
    completed=$(act_count "$act" finished)
    refused=$(act_count "$act" refused)
    gaveup=$(act_count "$act" gaveup)
    cat <<EOF

Act 1 summary:
  reports completed:  $completed of $REPORTS
  refused attempts:   $refused
  gave up:            $gaveup
  observed maximum concurrently inside: $max (limit $LIMIT)
EOF
    ACT1_OK=1
    if ((max > LIMIT)); then
        echo "  !! the limit was exceeded"
        ACT1_OK=0
    fi
    if ((failures > 0)); then
        echo "  !! $failures report(s) failed with an error"
        ACT1_OK=0
    fi
}

# --- act 2 -------------------------------------------------------------------

# refill ACT_DIR N : one session waiting in line for cache_refill.
refill() {
    local act=$1 who status
    who="refill $2"
    status=$(session "$act" "$who" "$DIR/refill.sql" 0.6) || status=error
    if [[ $status != "done t" ]]; then
        event "$act" "$who" "ERROR: session ended with '$status'"
        return 1
    fi
}

act2() {
    local act
    act=$(new_act act2)
    LIMIT=1
    cat <<EOF

=== Act 2: $REFILLS sessions wait in line for 1 slot ===
Each: redsem_acquire('cache_refill', 1, wait => '20 seconds'), hold 0.6 s, release.
They arrive 0.3 s apart. With a wait, each keeps its place in one line kept
in Redis: the slot is handed over by a wake-up, first come, first served,
no polling and no one getting ahead -- unlike act 1's retries.

EOF
    local n pid failures=0
    JOBS=()
    for ((n = 1; n <= REFILLS; n++)); do
        refill "$act" "$n" &
        JOBS+=($!)
        sleep 0.3
    done
    for pid in "${JOBS[@]}"; do
        wait "$pid" || failures=$((failures + 1))
    done
    JOBS=()

    local arrival order max
    arrival=$(sed 's/^refill //' "$act/arrival" 2>/dev/null | paste -sd' ')
    order=$(sed 's/^refill //' "$act/order" 2>/dev/null | paste -sd' ')
    max=$(act_count "$act" max)
    cat <<EOF

Act 2 summary:
  arrival order: $arrival
  served order:  $order
  observed maximum concurrently inside: $max (limit 1)
EOF
    ACT2_OK=1
    if [[ -z $order || $order != "$arrival" ]]; then
        echo "  !! not served in order of arrival"
        ACT2_OK=0
    else
        echo "  first come, first served"
    fi
    if ((max > 1 || failures > 0)); then
        echo "  !! limit exceeded or $failures session(s) failed"
        ACT2_OK=0
    fi
}

# --- act 3 -------------------------------------------------------------------

# analyst ACT_DIR N SERVER : one analyst query on server a or b.
analyst() {
    local act=$1 who status dir=$DIR
    who="analyst $3$2"
    [[ $3 == a ]] || dir=$DIR/b
    status=$(redsem_as_postgres DEMO_DIR="$DIR" ACT_DIR="$act" WHO="$who" LIMIT="$ACTIVE" T0="$T0" \
        psql -X -A -t -q -v ON_ERROR_STOP=1 -h "$dir" -p "$(redsem_pg_port "$dir")" -U analyst -d postgres \
        -v secs="$(random_secs)" -f "$DIR/analyst.sql" 2>&1 | tail -n 1) || status=error
    if [[ $status != "done t" ]]; then
        event "$act" "$who" "ERROR: session ended with '$status'"
        return 1
    fi
}

# monitor ACT_DIR : every half second, the queue as server a sees it
monitor() {
    local act=$1 line
    while [[ ! -e $act/stop ]]; do
        line=$(redsem_as_postgres psql "${PSQL[@]}" -c \
            "SELECT format('queue analysts: %s running, %s waiting (on every server)', running, waiting)
               FROM redsem_queues WHERE name = 'analysts'" 2>/dev/null) || line=
        [[ -z $line ]] || event "$act" "--------" "$line"
        sleep 0.5
    done
}

# max_overlap FILE : the most periods ("start end" in microseconds) at once
max_overlap() {
    awk '{ print $1, 1; print $2, -1 }' "$1" | sort -k1,1n -k2,2n |
        awk '{ n += $2; if (n > max) max = n } END { print max + 0 }'
}

# start_server_b : a second PostgreSQL server on the same Redis
start_server_b() {
    mkdir -p "$DIR/b"
    chown postgres:postgres "$DIR/b"
    REDSEM_PG_EXTRA_CONF="redsem.unix_socket = '$DIR/redis.sock'
cluster_name = 'b'" redsem_start_pg "$DIR/b" >/dev/null
}

# setup_queue DIR [define] : the role analyst in the queue "analysts", on
# one server; with define, the queue is first defined for every server
# (in Redis), and each server waits until its keeper has read it (within
# a second), so that ALTER ROLE names a queue it knows
setup_queue() {
    local i
    redsem_psql "$1" >/dev/null <<SQL
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS redsem;
CREATE ROLE analyst LOGIN;
SQL
    [[ -z ${2:-} ]] || redsem_psql "$1" -qAt >/dev/null \
        -c "SELECT redsem_create_queue('analysts', 'active_statements=$ACTIVE max_wait=2min')"
    for i in $(seq 50); do
        [[ $(redsem_psql "$1" -qAt -c "SELECT count(*) FROM redsem_queues WHERE name = 'analysts'") == 1 ]] && break
        sleep 0.1
    done
    redsem_psql "$1" -qAt >/dev/null -c "ALTER ROLE analyst SET redsem.queue = 'analysts'"
}

act3() {
    local act
    act=$(new_act act3)
    LIMIT=$ACTIVE
    cat <<EOF

=== Act 3: an analyst's heavy queries, capped across two servers ===
A second PostgreSQL server (b) now shares the Redis. The DBA defines a
statement queue once, for every server, and puts the role analyst in it on
both -- no change to any SQL:
  SELECT redsem_create_queue('analysts', 'active_statements=$ACTIVE max_wait=2min');
  ALTER ROLE analyst SET redsem.queue = 'analysts';
$ANALYSTS analyst queries on each server start at once; each is just
  SELECT ..., pg_sleep(1-3 s), ...
Every top-level statement of the analyst waits its turn in the queue: at most
$ACTIVE run at once, across both servers, first come first served.

EOF
    start_server_b
    setup_queue "$DIR" define
    setup_queue "$DIR/b"
    sleep 0.5
    local n pid failures=0 mon
    monitor "$act" &
    mon=$!
    JOBS=("$mon")
    for ((n = 1; n <= ANALYSTS; n++)); do
        analyst "$act" "$n" a &
        JOBS+=($!)
        analyst "$act" "$n" b &
        JOBS+=($!)
    done
    for pid in "${JOBS[@]:1}"; do
        wait "$pid" || failures=$((failures + 1))
    done
    touch "$act/stop"
    wait "$mon" 2>/dev/null || true
    JOBS=()

    local max ran
    max=$(max_overlap "$act/periods")
    ran=$(wc -l <"$act/periods")
    cat <<EOF

Act 3 summary:
  analyst queries run: $ran of $((2 * ANALYSTS)), on servers a and b
  observed maximum running at once (from the times the queries report): $max (limit $ACTIVE)
EOF
    ACT3_OK=1
    if ((max > ACTIVE || failures > 0 || ran != 2 * ANALYSTS)); then
        echo "  !! limit exceeded, or $failures query(ies) failed"
        ACT3_OK=0
    fi
}

# --- act 4 -------------------------------------------------------------------

# interactive PRIORITY : one interactive query; prints how long it waited (s).
interactive() {
    redsem_as_postgres psql "${PSQL[@]}" -v prio="$1" -f "$DIR/interactive.sql" | tail -n 1
}

act4() {
    cat <<TEXT

=== Act 4: priorities: an interactive query behind a batch flood ===
$BATCHES batch jobs of 1 s ask for the 2 slots of 'warehouse' at once: 2 run, 8 wait.
Just after, two interactive queries ask too (wait => '60 seconds'):
  plain:     redsem_acquire('warehouse', 2, ...)
  urgent:    redsem_acquire('warehouse', 2, ..., priority => 10)
A waiter stands in line as if it had come a second earlier per level of
priority, so the urgent one takes the next free slot; the plain one waits its turn.

TEXT
    local n pid plain urgent failures=0
    JOBS=()
    for ((n = 1; n <= BATCHES; n++)); do
        redsem_as_postgres psql "${PSQL[@]}" -v secs=1 -f "$DIR/batch.sql" >/dev/null &
        JOBS+=($!)
    done
    sleep 0.4
    interactive 0 >"$DIR/plain.out" &
    JOBS+=($!)
    sleep 0.1
    urgent=$(interactive 10) || urgent=
    for pid in "${JOBS[@]}"; do
        wait "$pid" || failures=$((failures + 1))
    done
    JOBS=()
    plain=$(cat "$DIR/plain.out" 2>/dev/null || true)
    cat <<TEXT

Then a reserve: redsem_set_reserve('warehouse', 1, min_priority => 10) keeps one
of the 2 slots for priority 10 and up. 4 batch jobs of 1 s flood again: 1 runs,
3 wait; the urgent query takes the reserved slot without waiting at all.
TEXT
    local reserved
    redsem_as_postgres psql "${PSQL[@]}" -c "SELECT redsem_set_reserve('warehouse', 1, 10)" >/dev/null
    for ((n = 1; n <= 4; n++)); do
        redsem_as_postgres psql "${PSQL[@]}" -v secs=1 -f "$DIR/batch.sql" >/dev/null &
        JOBS+=($!)
    done
    sleep 0.4
    reserved=$(interactive 10) || reserved=
    for pid in "${JOBS[@]}"; do
        wait "$pid" || failures=$((failures + 1))
    done
    JOBS=()
    redsem_as_postgres psql "${PSQL[@]}" -c "SELECT redsem_set_reserve('warehouse', NULL)" >/dev/null
    cat <<TEXT

Act 4 summary:
  the plain query waited:            ${plain:-?} s (behind the batch line)
  the priority => 10 query waited:   ${urgent:-?} s (the next free slot)
  ... with a slot reserved for it:   ${reserved:-?} s (the reserved slot)
TEXT
    if [[ $failures == 0 && -n $plain && -n $urgent && -n $reserved ]] &&
        awk -v p="$plain" -v u="$urgent" -v r="$reserved" 'BEGIN { exit !(u < p && r < 0.3) }'; then
        echo "  OK: priority went first, the reserve let it in at once, and the batch jobs all ran"
        ACT4_OK=1
    else
        echo "  !! the urgent query did not go first or wait for nothing, or $failures session(s) failed"
    fi
}

# --- main --------------------------------------------------------------------

# Stop the background sessions, then the servers.
demo_cleanup() {
    local pid
    for pid in "${JOBS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    redsem_cleanup
}

main() {
    redsem_reexec_as_root "${BASH_SOURCE[0]}"
    trap demo_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM

    redsem_install_deps
    redsem_build_install

    redsem_make_tmpdir redsem-demo
    DIR=$REDSEM_TMPDIR
    redsem_start_redis "$DIR"
    redsem_start_pg "$DIR"
    mapfile -t PSQL < <(redsem_psql_args "$DIR")
    redsem_psql "$DIR" -c 'CREATE EXTENSION redsem'
    redsem_log "redsem $(redsem_psql "$DIR" -c "SELECT extversion FROM pg_extension WHERE extname = 'redsem'") ready"

    write_event_helper
    write_sql_scripts
    T0=${EPOCHREALTIME/[.,]/}
    # The timeline goes to fd 5: the sessions inherit it through runuser,
    # psql and \!, while their stdout is captured to read "done"/"refused".
    exec 5>&1

    act1
    act2
    act3
    act4

    echo
    if [[ $ACT1_OK == 1 && $ACT2_OK == 1 && $ACT3_OK == 1 && $ACT4_OK == 1 ]]; then
        echo "redsem demo: OK"
    else
        echo "redsem demo: PROBLEMS (see above)"
        return 1
    fi
}

main "$@"
