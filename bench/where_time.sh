#!/usr/bin/env bash
#
# bench/where_time.sh - where the time of one redsem call goes: per call,
# the backend's CPU, Redis's CPU (the whole process, and inside commands),
# Redis round trips, the backend's system calls and its wake-ups, side by
# side with the usual advisory-lock slot pool and an empty loop, in one
# invocation.
#
#   sudo bash bench/where_time.sh
#
# Each workload is one statement in one session that calls N times
# (generate_series), so no client round trip is counted: what is left is
# the cost of the call itself.  Workloads:
#   empty       SELECT count(*) FROM generate_series(1, N): the loop alone
#   advisory    pg_try_advisory_lock + pg_advisory_unlock (the slot pool)
#   idle        redsem_acquire + redsem_release on a semaphore nobody else
#               holds (the acquire creates its keys, the release empties it)
#   busy        the same beside 10 live holders (taken by another session)
# Figures, per acquire+release pair:
#   backend CPU   utime+stime of the backend (/proc/PID/stat), in us
#   wakeups       the backend's voluntary context switches (each is a sleep
#                 on the socket or the latch that something ended)
#   syscalls      from strace -c on a second, separate run (strace slows
#                 the process; only its counts are used)
#   Redis CPU     used_cpu_user+used_cpu_sys of Redis (INFO cpu), in us:
#                 the event loop, socket reads and writes and the commands
#   in commands   the usec of INFO commandstats: the commands alone
#   round trips   commands the backend sent (FCALL, BLPOP, ...)
# Ratios are against the slot pool (backend CPU) and against the empty loop
# (what is redsem's own).  Every figure is the better of two runs.
#
# Environment: BENCH_CALLS (default 20000), BENCH_NO_INSTALL=1,
# REDSEM_KEEP=1.

set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

CALLS=${BENCH_CALLS:-20000}

command -v strace >/dev/null || redsem_die "strace not found (package strace)"
bench_init where_time


# The statement of a workload
workload_sql() { # NAME
    case $1 in
    empty) echo "SELECT count(*) FROM generate_series(1, $CALLS)" ;;
    advisory) echo "SELECT count(*) FROM generate_series(1, $CALLS) g WHERE pg_try_advisory_lock(4242, 0) AND pg_advisory_unlock(4242, 0)" ;;
    idle) echo "SELECT count(redsem_release('wt_idle', redsem_acquire('wt_idle', 4))) FROM generate_series(1, $CALLS)" ;;
    busy) echo "SELECT count(redsem_release('wt_busy', redsem_acquire('wt_busy', 100))) FROM generate_series(1, $CALLS)" ;;
    esac
}

# A script the session runs (\!) around its statement; prints "LABEL
# backend_cpu_ns backend_voluntary_switches redis_cpu_us wall_ns"
write_snap() {
    {
        echo '#!/bin/bash'
        # CPU time in ns: schedstat (exact), else the stat ticks
        echo 'if [[ -r /proc/$BPID/schedstat ]]; then ns=$(cut -d" " -f1 /proc/$BPID/schedstat); else ns=$(awk -v hz="$(getconf CLK_TCK)" '"'"'{ printf "%d", ($14 + $15) * 1000000000 / hz }'"'"' /proc/$BPID/stat); fi'
        echo 'vcs=$(awk '"'"'/^voluntary_ctxt_switches/ { print $2 }'"'"' /proc/$BPID/status)'
        echo "rcpu=\$(redis-cli -s '$BENCH_SOCK' INFO cpu | tr -d '\\r' | awk -F: '/^used_cpu_(user|sys):/ { s += \$2 } END { printf \"%d\", s * 1000000 }')"
        echo 'echo "$1 $ns $vcs $rcpu $(date +%s%N)"'
    } >"$BENCH_TMP/snap.sh"
    chmod 755 "$BENCH_TMP/snap.sh"
}

# Run one workload in a fresh session, sampling around the statement.
# Prints "backend_us wakeups redis_us cmd_usec roundtrips wall_us" per call.
measure() { # NAME
    local name=$1 sql out stats
    sql=$(workload_sql "$name")
    bench_stats_reset
    out=$(bench_psql -v ON_ERROR_STOP=1 <<EOF
SELECT pg_backend_pid() AS pid \gset
\setenv BPID :pid
\! $BENCH_TMP/snap.sh before
$sql;
\! $BENCH_TMP/snap.sh after
EOF
)
    stats=$(bench_stats)
    awk -v n="$CALLS" -v cmd_us="$(bench_usec "$stats" '^fcall')" \
        -v rt="$(bench_roundtrips "$stats")" '
        $1 == "before" { t0 = $2; v0 = $3; r0 = $4; w0 = $5 }
        $1 == "after" { t1 = $2; v1 = $3; r1 = $4; w1 = $5 }
        END { printf "%.2f %.3f %.2f %.2f %.3f %.2f\n", (t1 - t0) / 1000 / n, (v1 - v0) / n, (r1 - r0) / n, cmd_us / n, rt / n, (w1 - w0) / 1000 / n }' <<<"$out"
}

# The backend's system calls per call: "total name=n ..." (those >= 0.05).
# strace runs as root beside the session, which waits for it to attach.
syscalls() { # NAME
    local name=$1 sql psql_pid spid bpid i
    sql=$(workload_sql "$name")
    rm -f "$BENCH_TMP/pid.$name"
    bench_psql -v ON_ERROR_STOP=1 >/dev/null <<EOF &
SELECT pg_backend_pid() AS pid \gset
\setenv BPID :pid
\! echo \$BPID > $BENCH_TMP/pid.$name
SELECT pg_sleep(1.5);
$sql;
EOF
    psql_pid=$!
    for ((i = 0; i < 100; i++)); do
        [[ -s $BENCH_TMP/pid.$name ]] && break
        sleep 0.05
    done
    bpid=$(cat "$BENCH_TMP/pid.$name")
    strace -c -qq -p "$bpid" -o "$BENCH_TMP/strace.$name" &
    spid=$!
    wait "$psql_pid"
    kill -INT "$spid"
    wait "$spid" 2>/dev/null || true
    # strace -c columns: % time, seconds, usecs/call, calls, [errors,] syscall
    awk -v n="$CALLS" '
        $1 ~ /^[0-9.]+$/ && $NF ~ /^[a-z_0-9]+$/ && $NF != "total" {
            total += $4
            if ($4 / n >= 0.05) list = list sprintf(" %s=%.2f", $NF, $4 / n)
        }
        END { printf "%.2f%s\n", total / n, list }' "$BENCH_TMP/strace.$name"
}

# the better (smaller) of two runs, field by field
best_of_two() { # NAME
    local a b
    a=$(measure "$1")
    b=$(measure "$1")
    paste -d' ' <(tr ' ' '\n' <<<"$a") <(tr ' ' '\n' <<<"$b") |
        awk '{ printf "%s%s", sep, ($1 < $2 ? $1 : $2); sep = " " } END { print "" }'
}

write_snap
bench_header "redsem: where the time of one call goes ($CALLS acquire+release pairs per run, better of two)"

# psql without output (a session the cleanup terminates)
bench_quiet_psql() { bench_psql "$@" >/dev/null 2>&1; }

# 10 live holders on wt_busy, held by another session for the whole run
bench_bg bench_quiet_psql -c "SELECT count(redsem_acquire('wt_busy', 100, lease => '10 minutes')) FROM generate_series(1, 10); SELECT pg_sleep(3600);"
bench_wait_for "10 holders on wt_busy" 30 bash -c "[[ \$(redis-cli -s $BENCH_SOCK --no-raw ZCARD '$(bench_key wt_busy owner)' | tr -dc 0-9) -ge 10 ]]"

declare -A R S
for w in empty advisory idle busy; do
    # warm up the session path (library load, connection) before measuring
    bench_sql "$(workload_sql "$w" | sed "s/$CALLS/100/")" >/dev/null
    R[$w]=$(best_of_two "$w")
    S[$w]=$(syscalls "$w")
done

printf '\n%-9s | %9s | %11s | %7s | %8s | %9s | %11s | %11s | %s\n' workload 'wall' 'backend CPU' wakeups syscalls 'Redis CPU' 'in commands' 'round trips' 'syscalls per call (>= 0.05)'
for w in empty advisory idle busy; do
    read -r cpu wk rcpu cmd rt wall <<<"${R[$w]}"
    read -r sc list <<<"${S[$w]}"
    printf '%-9s | %6s us | %8s us | %7s | %8s | %6s us | %8s us | %11s |%s\n' "$w" "$wall" "$cpu" "$wk" "$sc" "$rcpu" "$cmd" "$rt" " ${list:-}"
done
read -r e_cpu _ <<<"${R[empty]}"
read -r a_cpu _ <<<"${R[advisory]}"
for w in idle busy; do
    read -r cpu wk rcpu cmd rt wall <<<"${R[$w]}"
    own=$(awk -v a="$cpu" -v b="$e_cpu" 'BEGIN { printf "%.2f", a - b }')
    a_own=$(awk -v a="$a_cpu" -v b="$e_cpu" 'BEGIN { printf "%.2f", a - b }')
    printf '%s: backend CPU of the call itself %s us = %sx the slot pool'"'"'s (%s us); Redis CPU %s us, of which %s us in commands (%s%%)\n' \
        "$w" "$own" "$(bench_ratio "$own" "$a_own")" "$a_own" "$rcpu" "$cmd" "$(awk -v a="$cmd" -v b="$rcpu" 'BEGIN { if (b > 0) printf "%d", 100 * a / b; else print "n/a" }')"
done
