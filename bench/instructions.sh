#!/usr/bin/env bash
#
# bench/instructions.sh - the script's cost in machine instructions, counted
# by valgrind, with an earlier revision's script side by side.
#
#   sudo BENCH_BEFORE=<git revision> bash bench/instructions.sh
#
# On a busy or virtual machine the timings of lua_loop.sh move 10-30%
# between runs, more than the change one usually wants to see.  This runs
# the same loops (bench/loop.lua) in a Redis run by valgrind's callgrind,
# and counts the instructions Redis runs for one FCALL of each: counts move
# about 2% between runs, whatever the machine is doing.  Each figure is
# (count of N2 operations - count of N1) / (N2 - N1), so the loop's set-up
# (holders, the line of 200) drops out.  An instruction is not a
# microsecond (a cache miss costs more than an add), but a change that
# removes instructions from the script removes time: lua_loop.sh shows how
# much, when the machine is quiet.  Printed, in thousands of instructions:
# the rows of lua_loop.sh, and the tenants' hand-offs as ratios to the
# hand-off with no tenant (issue 22: at most 1.3).  Then, as a client sends
# them (bench/ops.pl, redis-cli --pipe), acquire + release pairs of the
# shipped script and of bench/script_cpu.sh's four-command floor
# (bench/floor.lua), idle and beside 10 holders: the instructions Redis runs
# inside FCALL per call (the part INFO commandstats times), and their ratio
# (issue 21, target 1: at most 1.5), and the pairs spread over
# BENCH_SPREAD semaphores, each called once (cold).  Last, a keeper's refresh of one hold
# (refresh_many of one id, BENCH_CALLS holders refreshed once each) against
# the floor's release and, with BENCH_BEFORE, that revision's script.
#
# Environment: BENCH_BEFORE, BENCH_PAIRS (default "100 500": N1 and N2 of
# the pairs), BENCH_HANDOFFS (default "100 400"), BENCH_CALLS (default 500
# pairs), BENCH_SPREAD (default 1100: the cold row's semaphores),
# BENCH_CALLS_ONLY=1 (only the calls from a client: a quicker look),
# REDSEM_KEEP=1.  Installs valgrind if it is missing.

set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

read -r P1 P2 <<<"${BENCH_PAIRS:-100 500}"
read -r H1 H2 <<<"${BENCH_HANDOFFS:-100 400}"
CALLS=${BENCH_CALLS:-500}

bench_begin instructions
if ! command -v callgrind_control >/dev/null; then
    redsem_log "installing valgrind"
    DEBIAN_FRONTEND=noninteractive apt-get -q -y install --no-install-recommends valgrind >/dev/null
fi
cli() { redsem_as_postgres redis-cli -s "$W/redis.sock" "$@"; }

# Redis in callgrind, counting nothing until told (callgrind_control -z
# zeroes the counts, -d dumps them to $W/cg.out.<n>)
redsem_log "starting Redis under valgrind on $W/redis.sock"
(cd "$W" && redsem_as_postgres env -u USER -u LOGNAME valgrind --tool=callgrind --callgrind-out-file="$W/cg.out" \
    redis-server --port 0 --unixsocket "$W/redis.sock" --unixsocketperm 700 \
    --save '' --appendonly no --pidfile "$W/redis.pid" --dir "$W" >"$W/valgrind.log" 2>&1) &
REDSEM_REDIS_DIRS+=("$W")
for ((i = 0; i < 300; i++)); do
    [[ $(cli ping 2>/dev/null) == PONG ]] && break
    sleep 0.2
done
[[ $(cli ping 2>/dev/null) == PONG ]] || { tail -n 20 "$W/valgrind.log" >&2; redsem_die "Redis under valgrind did not start"; }
VPID=$(<"$W/redis.pid")

bench_loop_sides

# callgrind_control reaches valgrind through files in /tmp named after the
# user, from USER or LOGNAME: Redis overwrites its environment to set its
# process title, after which valgrind looks for them as user "???", so
# both run without either.
# cg_zero: zero the counts
cg_zero() { redsem_as_postgres env -u USER -u LOGNAME callgrind_control -z "$VPID" >/dev/null 2>&1; }
# cg_dump: dump the counts since cg_zero to $W/cg.out.<n>; print its name
cg_dump() {
    local f i
    redsem_as_postgres env -u USER -u LOGNAME callgrind_control -d "$VPID" >/dev/null 2>&1
    for ((i = 0; i < 100; i++)); do
        f=$(ls "$W"/cg.out.* 2>/dev/null | head -n 1)
        [[ -n $f ]] && grep -Eq '^(summary|totals):' "$f" && break
        sleep 0.1
    done
    [[ -n $f ]] || redsem_die "callgrind wrote no counts"
    printf '%s' "$f"
}
# count FN N ARG: instructions Redis ran for FCALL FN with N operations
count() {
    local f
    cg_zero
    cli FCALL "$1" 0 "$2" "$3" "c$RANDOM$RANDOM" >/dev/null
    f=$(cg_dump)
    awk '/^(summary|totals):/ { print $2; exit }' "$f"
    rm -f "$W"/cg.out.*
}
# per FN ARG N1 N2: thousands of instructions per operation
per() {
    local a b
    a=$(count "$1" "$3" "$2")
    b=$(count "$1" "$4" "$2")
    awk -v a="$a" -v b="$b" -v n="$(($4 - $3))" 'BEGIN { printf "%.1f", (b - a) / n / 1000 }'
}
# feed FILE: send the RESP operations in FILE with redis-cli --pipe
feed() {
    cli --pipe <"$1" >"$W/pipe.out" 2>&1 || { cat "$W/pipe.out" >&2; redsem_die "redis-cli --pipe failed"; }
    grep -q 'errors: 0' "$W/pipe.out" || { cat "$W/pipe.out" >&2; redsem_die "errors in $1"; }
}
# inside_fcall FILE N: send the operations in FILE, N calls; print the
# thousands of instructions Redis ran inside FCALL (fcallCommand and all it
# calls) per call
inside_fcall() {
    local f ir
    cg_zero
    feed "$1"
    f=$(cg_dump)
    ir=$(callgrind_annotate --inclusive=yes "$f" 2>/dev/null |
        awk '$0 ~ /:fcallCommand / { gsub(",", "", $1); print $1; exit }')
    rm -f "$W"/cg.out.*
    awk -v ir="${ir:-0}" -v n="$2" 'BEGIN { if (ir > 0) printf "%.1f", ir / n / 1000; else print "n/a" }'
}
# per_call FN SEM HOLDERS: thousands of instructions Redis runs inside
# FCALL (fcallCommand and all it calls) per call, for acquire + release
# pairs of new ids sent from a client (bench/ops.pl, as src/script.c sends
# them) beside HOLDERS holders
per_call() {
    if [[ $3 -gt 0 ]]; then
        perl "$BENCH_DIR/ops.pl" "FCALL $1" - "$2" 1 "$3" fill >"$W/fill.resp"
        feed "$W/fill.resp"
    fi
    perl "$BENCH_DIR/ops.pl" "FCALL $1" "FCALL $1" "$2" 1000 "$CALLS" pairs >"$W/ops.resp"
    inside_fcall "$W/ops.resp" $((2 * CALLS))
}
# per_spread FN SEM: the same per call, for SPREAD acquires each on a
# semaphore of its own, then their releases (more semaphores than the
# script keeps names of: every call makes its keys' names)
SPREAD=${BENCH_SPREAD:-1100}
per_spread() {
    perl "$BENCH_DIR/ops.pl" "FCALL $1" "FCALL $1" "$2" 1 "$SPREAD" spread >"$W/ops.resp"
    inside_fcall "$W/ops.resp" $((2 * SPREAD))
}
# per_refresh FN SEM: thousands of instructions inside FCALL per refresh
# of one hold (refresh_many, as a keeper sends it for a semaphore of one
# hold of this server: the worst case), CALLS holders refreshed once each
per_refresh() {
    perl "$BENCH_DIR/ops.pl" "FCALL $1" - "$2" 1 "$CALLS" fill >"$W/fill.resp"
    feed "$W/fill.resp"
    perl "$BENCH_DIR/ops.pl" "FCALL $1" - "$2" 1 "$CALLS" refresh >"$W/ops.resp"
    inside_fcall "$W/ops.resp" "$CALLS"
}
{ printf '#!lua name=icall\n'; grep -v -e '^#!lua' -e '^redis.register_function' "$BENCH_DIR/../src/redsem.lua"
  printf "redis.register_function('icall', dispatch)\n"; } >"$W/icall.lua"
cli -x FUNCTION LOAD <"$W/icall.lua" >/dev/null
cli -x FUNCTION LOAD <"$BENCH_DIR/floor.lua" >/dev/null
# the generation key (I15) as a server that has used this Redis knows it
perl "$BENCH_DIR/ops.pl" "FCALL icall" "FCALL icall" gen_warm 1 1 pairs | cli --pipe >/dev/null
OPS_GEN=$(cli GET 'redsem:gen')
export OPS_GEN
declare -A C
for holders in 0 10; do
    C[redsem$holders]=$(per_call icall "i$holders" "$holders")
    C[floor$holders]=$(per_call floor_four "f$holders" "$holders")
done
C[spread]=$(per_spread icall s)
C[refresh]=$(per_refresh icall r)
C[refresh_floor]=$(per_refresh floor_four fr)
if [[ -n ${BENCH_BEFORE:-} ]]; then
    bench_before_library "$W/before.lua"   # (as bcall: bench_loop_sides has a library "before")
    sed -e '1s/name=before/name=bcall/' -e "s/register_function('before'/register_function('bcall'/" \
        "$W/before.lua" >"$W/bcall.lua"
    [[ $(cli -x FUNCTION LOAD <"$W/bcall.lua") == bcall ]] || redsem_die "cannot load $BENCH_BEFORE's script"
    # (that script wants six keys: no generation key, I15)
    C[before0]=$(OPS_KEYS=6 per_call bcall b0 0)
    C[before10]=$(OPS_KEYS=6 per_call bcall b10 10)
    C[refresh_before]=$(OPS_KEYS=6 per_refresh bcall rb)
    C[spread_before]=$(OPS_KEYS=6 per_spread bcall sb)
fi

declare -A K
[[ -n ${BENCH_CALLS_ONLY:-} ]] && SIDES=()
for side in "${SIDES[@]}"; do
    K[$side.p0]=$(per "${side}_pairs" 0 "$P1" "$P2")
    K[$side.p10]=$(per "${side}_pairs" 10 "$P1" "$P2")
    for t in 0 10 100; do
        K[$side.h$t]=$(per "${side}_handoffs" "$t" "$H1" "$H2")
    done
done

printf 'redsem script cost in instructions (bench/instructions.sh, valgrind)\n'
printf 'date: %s   host: %s   Redis %s\n' "$(date -u '+%Y-%m-%d %H:%M:%S UTC')" \
    "$(hostname)" "$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')"
printf 'thousands of instructions per operation; pairs %s-%s, hand-offs %s-%s\n\n' "$P1" "$P2" "$H1" "$H2"
[[ -n ${BENCH_CALLS_ONLY:-} ]] || bench_loop_table K

# issue 21, target 1: at most 1.5x the four-command floor
printf '\ncalls from a client (redis-cli --pipe, %s acquire + release pairs), thousands of\n' "$CALLS"
printf 'instructions inside FCALL per call (as INFO commandstats times it)\n'
printf '%-52s %10s %10s\n' "semaphore with" "0 (idle)" "10 holders"
printf '%-52s %10s %10s\n' "redsem: acquire or release, mean" "${C[redsem0]}" "${C[redsem10]}"
printf '%-52s %10s %10s\n' "floor: a four-command function (bench/floor.lua)" "${C[floor0]}" "${C[floor10]}"
printf '%-52s %10s %10s\n' "  ratio redsem / floor (issue 21: at most 1.5)" \
    "$(bench_ratio "${C[redsem0]}" "${C[floor0]}")" "$(bench_ratio "${C[redsem10]}" "${C[floor10]}")"
if [[ -n ${BENCH_BEFORE:-} ]]; then
    printf '%-52s %10s %10s\n' "the script at $BENCH_BEFORE, acquire or release" "${C[before0]}" "${C[before10]}"
    printf '%-52s %10s %10s\n' "  ratio redsem / the script at $BENCH_BEFORE" \
        "$(bench_div "${C[redsem0]}" "${C[before0]}" %.3f)" "$(bench_div "${C[redsem10]}" "${C[before10]}" %.3f)"
fi
printf '%-52s %10s\n' "redsem, $SPREAD semaphores, each called once (cold)" "${C[spread]}"
if [[ -n ${BENCH_BEFORE:-} ]]; then
    printf '%-52s %10s\n' "the script at $BENCH_BEFORE, the same" "${C[spread_before]}"
    printf '%-52s %10s\n' "  ratio redsem / the script at $BENCH_BEFORE" "$(bench_div "${C[spread]}" "${C[spread_before]}" %.3f)"
fi
printf '\na keeper'"'"'s refresh of one hold (refresh_many, %s holders refreshed once each), thousands\n' "$CALLS"
printf 'of instructions inside FCALL per call\n'
printf '%-52s %10s\n' "redsem" "${C[refresh]}"
[[ -n ${BENCH_BEFORE:-} ]] && printf '%-52s %10s\n' "the script at $BENCH_BEFORE" "${C[refresh_before]}"
printf '%-52s %10s\n' "floor: the four-command function (its release)" "${C[refresh_floor]}"
printf '%-52s %10s\n' "  ratio redsem / floor (issue 21: at most 1.5)" "$(bench_ratio "${C[refresh]}" "${C[refresh_floor]}")"
