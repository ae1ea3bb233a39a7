#!/usr/bin/env bash
#
# bench/script_cpu.sh - Redis CPU per redsem operation, measured inside Redis
# (INFO commandstats usec_per_call), with no PostgreSQL and no client in
# the way, side by side with baselines run in the same invocation.
#
#   sudo bash bench/script_cpu.sh
#
# A throwaway Redis (unix socket, no persistence) gets redsem's library, and
# redis-cli --pipe feeds it operations as another server would send them
# (the same keys and arguments as src/script.c).  On a semaphore that
# already has H holders (10, then BENCH_HOLDERS, default 20000), BENCH_OPS
# times: acquire + release of a new id, so the holders stay at H and H + 1.
# To tell acquire from release (commandstats counts per command, not per
# function), each is also run with the other one sent as EVALSHA of the
# same code.  Every figure is the better of two runs (the machine's noise
# only ever adds).
# Baselines, in the same Redis and the same run:
#   the same script run as an EVALSHA script (how redsem 0.2.0 and earlier
#     ran it): its Lua functions are made anew at every call
#   an empty function (FCALL of "return 1" with the same keys and
#     arguments): what any FCALL costs
#   a four-command function (TIME, HMGET, then ZADD + HSET to acquire, or
#     ZREM + HSET to release, with no checks at all): about the least any
#     semaphore kept in Redis hashes and sorted sets can cost per operation
# Where the time goes inside the function, on the semaphore with 10 holders:
# the same library without its fast paths (the general path alone), and
# cut short after each stage of run_op() (parse the arguments; then read
# the clock and the state; then the probe, housekeeping and finish with no
# operation), each loaded under its own name; the rest is the operation.
# What is left for an idle semaphore (issue 21, target 1): bench/solo.lua's
# bound on a "one-key" layout, as bare commands and after redsem's own
# argument checks and state read (the library cut short once more, "solo").
# Under pgbench (bench/throughput.sh) the same figure comes out higher: there
# Redis shares two cores with PostgreSQL and pgbench, and a preempted call
# counts the time it waited.
#
# With BENCH_BEFORE=<git revision>, that revision's src/redsem.lua is loaded
# too (as library "before"), and acquire+release pairs of both are run
# interleaved, BENCH_RUNS (default 5) times each, the best of each kept:
# before and after in one run.
#
# Environment: BENCH_OPS (default 50000), BENCH_HOLDERS (default 20000),
# BENCH_BEFORE, BENCH_RUNS, REDSEM_KEEP=1.

set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

OPS=${BENCH_OPS:-50000}
BIG=${BENCH_HOLDERS:-20000}

bench_init_redis cpu
SOCK=$W/redis.sock
cli() { redsem_as_postgres redis-cli -s "$SOCK" "$@"; }

BODY=$BENCH_DIR/../src/redsem.lua
LIB=$(bench_library)
{ printf '#!lua name=%s\n' "$LIB"; cat "$BODY"; printf "\nredis.register_function('%s', dispatch)\n" "$LIB"; } >"$W/lib.lua"
{ cat "$BODY"; printf '\nreturn dispatch(KEYS, ARGV)\n'; } >"$W/script.lua"
# the baselines: an empty function and a four-command one (bench/floor.lua)
cli -x FUNCTION LOAD <"$W/lib.lua" >/dev/null
# cut_short LIBNAME STAGE: the library cut short after STAGE of run_op(),
# or (general) whole but without the fast paths
cut_short() {
    local name=$1 stage=$2
    { printf '#!lua name=%s\n' "$name"; cat "$BODY"; printf "\nredis.register_function('%s', dispatch)\n" "$name"; } |
        STAGE=$stage TAIL=$(sed -n '/^-- solo tail begins/,/^-- solo tail ends/p' "$BENCH_DIR/solo.lua") perl -0pe '
            my $gen = "    begin_general()\n    local due = probe(a)\n    note_counts()\n    housekeeping(due)\n";
            my %keep = (parse => "    return 1\n",
                        read => "    begin(keys)\n    read_state()\n    return 1\n",
                        frame => "    begin(keys)\n    read_state()\n$gen    finish()\n    return 1\n",
                        general => "    begin(keys)\n    read_state()\n$gen    local reply = op.run(...)\n    finish()\n    return reply\n",
                        solo => "    begin(keys)\n    read_state()\n    member_count()\n    return solo_tail(keys, a, NOW_US_TEXT, NOW_TEXT)\n");
            s/(\nlocal function run_op\(keys, a, op, ok, \.\.\.\)\n    if not ok then return refused\(op, a\) end\n)    begin\(keys\)\n.*?\n    return reply\nend\n/$1$keep{$ENV{STAGE}}end\n/s
              or die "run_op() has changed: update cut_short() in bench/script_cpu.sh\n";
            s/^(local function run_op\()/$ENV{TAIL}\n$1/m if $ENV{STAGE} eq "solo"' >"$W/cut_$stage.lua"
    [[ $(cli -x FUNCTION LOAD <"$W/cut_$stage.lua") == "$name" ]] || redsem_die "cannot load $name"
}
if [[ -n ${BENCH_BEFORE:-} ]]; then
    bench_before_library "$W/before.lua"
    cli -x FUNCTION LOAD <"$W/before.lua" >/dev/null
fi
cut_short cut_parse parse
cut_short cut_read read
cut_short cut_frame frame
cut_short cut_general general
cut_short cut_solo solo
cli -x FUNCTION LOAD <"$BENCH_DIR/floor.lua" >/dev/null
[[ $(cli -x FUNCTION LOAD <"$BENCH_DIR/solo.lua") == solo ]] || redsem_die "cannot load bench/solo.lua"
SHA=$(cli -x SCRIPT LOAD <"$W/script.lua")
# the generation key (I15) as a server that has used this Redis knows it:
# one acquire makes it, and every operation then passes it on
perl "$BENCH_DIR/ops.pl" "FCALL $LIB" "FCALL $LIB" gen_warm 1 1 pairs | cli --pipe >/dev/null
OPS_GEN=$(cli GET 'redsem:gen')
[[ $OPS_GEN == n* ]] || redsem_die "no generation key after the first acquire"
export OPS_GEN

# once NAME CMD ACQ REL SEM FROM COUNT WHAT: feed the operations (ops.pl),
# print the mean usec of CMD (fcall or evalsha), check that none failed
once() {
    local name=$1 cmd=$2
    shift 2
    perl "$BENCH_DIR/ops.pl" "$@" >"$W/ops.resp"
    cli CONFIG RESETSTAT >/dev/null
    cli --pipe <"$W/ops.resp" >"$W/pipe.out" 2>&1 || { cat "$W/pipe.out" >&2; redsem_die "redis-cli --pipe failed ($name)"; }
    grep -q 'errors: 0' "$W/pipe.out" || { cat "$W/pipe.out" >&2; redsem_die "errors in $name"; }
    cli INFO commandstats | tr -d '\r' >"$W/stats"
    sed -n "s/^cmdstat_$cmd:calls=\([0-9]*\),usec=\([0-9]*\),.*/\1 \2/p" "$W/stats" |
        awk '{ if ($1 > 0) printf "%.2f\n", $2 / $1; else print "n/a" }'
}

# run NAME CMD ACQ REL SEM FROM COUNT: the better of two runs of COUNT
# acquire+release pairs (the second on new ids)
run() {
    local a b
    a=$(once "$1" "$2" "$3" "$4" "$5" "$6" "$7" pairs)
    b=$(once "$1" "$2" "$3" "$4" "$5" "$(($6 + $7))" "$7" pairs)
    awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", (a < b ? a : b) }'
}

# run_ab SEM FROM COUNT: the shipped library's acquire+release pairs and
# the "before" one's, interleaved BENCH_RUNS (default 5) times, the best of
# each (this machine's noise drifts over a run: interleaving spreads it
# over both): prints "after before"
run_ab() {
    local sem=$1 from=$2 count=$3 a b best_a=999999 best_b=999999
    for ((k = 0; k < ${BENCH_RUNS:-5}; k++)); do
        a=$(once after fcall "$F" "$F" "$sem" "$((from + 2 * k * count))" "$count" pairs)
        b=$(OPS_KEYS=6 once before fcall "FCALL before" "FCALL before" "$sem" "$((from + (2 * k + 1) * count))" "$count" pairs)
        best_a=$(awk -v x="$a" -v y="$best_a" 'BEGIN { print (x < y ? x : y) }')
        best_b=$(awk -v x="$b" -v y="$best_b" 'BEGIN { print (x < y ? x : y) }')
    done
    printf '%.2f %.2f\n' "$best_a" "$best_b"
}

# run_idle NAME=FUNCTION...: acquire+release pairs of each function on idle
# semaphores, interleaved BENCH_RUNS (default 5) times, the best of each
# into R[NAME] (as run_ab: the machine's drift spreads over all of them)
run_idle() {
    local k f name fn u
    for ((k = 0; k < ${BENCH_RUNS:-5}; k++)); do
        for f in "$@"; do
            name=${f%%=*} fn=${f#*=}
            u=$(once "$name" fcall "FCALL $fn" "FCALL $fn" "idle_$name$k" 12000000 "$OPS" pairs)
            R[$name]=$(awk -v x="$u" -v y="${R[$name]:-999999}" 'BEGIN { print (x < y ? x : y) }')
        done
    done
}

# commands run inside the script per call, in the last run
inner_per_call() {
    awk -F'[:=,]' '$1 ~ /^cmdstat_/ { c = substr($1, 9) }
                   $1 ~ /^cmdstat_/ && c !~ /^(fcall|evalsha|config|info|function|script)/ { n += $3 }
                   c ~ /^(fcall|evalsha)$/ { k += $3 }
                   END { if (k) printf "%.1f", n / k; else print "n/a" }' "$W/stats"
}

F="FCALL $LIB" E="EVALSHA $SHA"
declare -A R
for holders in 0 10 "$BIG"; do
    sem=cpu$holders
    if [[ $holders -gt 0 ]]; then
        once fill fcall "$F" "$F" "$sem" 10000000 "$holders" fill >/dev/null
        once fill fcall "FCALL floor_four" - "f$sem" 10000000 "$holders" fill >/dev/null
    fi
    R[pairs$holders]=$(run pairs fcall "$F" "$F" "$sem" 1000000 "$OPS")
    R[inner$holders]=$(inner_per_call)
    R[acq$holders]=$(run acquire fcall "$F" "$E" "$sem" 2000000 "$OPS")
    R[rel$holders]=$(run release fcall "$E" "$F" "$sem" 3000000 "$OPS")
    R[eval$holders]=$(run evalsha evalsha "$E" "$E" "$sem" 4000000 "$OPS")
    R[empty$holders]=$(run empty fcall "FCALL floor_empty" "FCALL floor_empty" "$sem" 5000000 "$OPS")
    R[four$holders]=$(run four fcall "FCALL floor_four" "FCALL floor_four" "f$sem" 6000000 "$OPS")
    R[general$holders]=$(run general fcall "FCALL cut_general" "FCALL cut_general" "$sem" 8000000 "$OPS")
    if [[ -n ${BENCH_BEFORE:-} ]]; then
        read -r R[after$holders] R[before$holders] < <(run_ab "$sem" 9000000 "$OPS")
    fi
done
run_idle bound_four=floor_four bound_bare=solo_bare bound_cut=cut_solo "bound_redsem=$LIB"
for stage in parse read frame; do
    R[cut_$stage]=$(run "cut_$stage" fcall "FCALL cut_$stage" "FCALL cut_$stage" cpu10 7000000 "$OPS")
done

printf 'redsem Redis CPU benchmark (bench/script_cpu.sh)\n'
printf 'date: %s   host: %s   cores: %s   Redis %s\n' "$(date -u '+%Y-%m-%d %H:%M:%S UTC')" \
    "$(hostname)" "$(nproc)" "$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')"
printf 'load average at start: %s (compare ratios)\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
printf 'usec per call inside Redis (INFO commandstats), %s acquire+release pairs, better of two runs,\nredis-cli --pipe, no PostgreSQL\n\n' "$OPS"
printf '%-44s %12s %12s %12s\n' "semaphore with" "0 (idle)" "10 holders" "$BIG holders"
row() { printf '%-44s %12s %12s %12s\n' "$1" "${R[${2}0]}" "${R[$2$3]}" "${R[$2$BIG]}"; }
row "redsem (FCALL): acquire + release, mean" pairs 10
row "  acquire" acq 10
row "  release" rel 10
row "  commands run inside, per call" inner 10
row "  the general path alone (no fast paths)" general 10
if [[ -n ${BENCH_BEFORE:-} ]]; then
    printf '%s\n' "interleaved with the script at $BENCH_BEFORE (best of ${BENCH_RUNS:-5}):"
    row "  this script, acquire + release" after 10
    row "  the script at $BENCH_BEFORE, acquire + release" before 10
fi
row "the same script as EVALSHA (0.2.0)" eval 10
row "floor: an empty FCALL" empty 10
row "floor: a four-command function" four 10
# ratio3 LABEL A B: A/B for each column
ratio3() {
    printf '%-44s %12s %12s %12s\n' "$1" "$(bench_ratio "${R[${2}0]}" "${R[${3}0]}")" \
        "$(bench_ratio "${R[${2}10]}" "${R[${3}10]}")" "$(bench_ratio "${R[$2$BIG]}" "${R[$3$BIG]}")"
}
ratio3 "ratio redsem / its general path alone" pairs general
[[ -n ${BENCH_BEFORE:-} ]] && ratio3 "ratio this script / the one at $BENCH_BEFORE" after before
ratio3 "ratio redsem / EVALSHA script" pairs eval
ratio3 "ratio redsem / four-command floor" pairs four
ratio3 "  acquire / four-command floor" acq four
ratio3 "  release / four-command floor" rel four
printf '%-44s %12s\n' "ratio $BIG holders / 10 holders (redsem)" "$(bench_ratio "${R[pairs$BIG]}" "${R[pairs10]}")"
printf '\nthe least a one-key layout could cost an idle semaphore (bench/solo.lua, a bound):\n'
printf 'acquire+release pairs on idle semaphores, interleaved, best of %s\n' "${BENCH_RUNS:-5}"
# bound LABEL KEY: its usec per call and its ratio to the four-command floor
bound() { printf '%-44s %12s %12s\n' "$1" "${R[$2]}" "$(bench_ratio "${R[$2]}" "${R[bound_four]}")"; }
printf '%-44s %12s %12s\n' "" "usec" "/ floor"
bound "floor: a four-command function" bound_four
bound "one-key layout: its six commands alone" bound_bare
bound "  after redsem's checks, begin, read_state" bound_cut
bound "redsem as shipped (four keys made, deleted)" bound_redsem
printf '\nwhere the time of a call goes, 10 holders, without the fast paths (usec, share)\n'
R[gen]=${R[general10]}
# stage LABEL FROM TO: usec of a stage (TO - FROM) and its share of the
# general path's call
stage() {
    awk -v l="$1" -v a="$2" -v b="$3" -v t="${R[gen]}" \
        'BEGIN { printf "%-44s %12.2f %11.0f%%\n", l, b - a, 100 * (b - a) / t }'
}
stage "FCALL itself (an empty function)" 0 "${R[empty10]}"
stage "checking the arguments" "${R[empty10]}" "${R[cut_parse]}"
stage "TIME and reading the state (HMGET)" "${R[cut_parse]}" "${R[cut_read]}"
stage "probe, housekeeping, finish; no operation" "${R[cut_read]}" "${R[cut_frame]}"
stage "the operation (acquire or release)" "${R[cut_frame]}" "${R[gen]}"
stage "whole call, general path only" 0 "${R[gen]}"
stage "whole call with the fast paths (as shipped)" 0 "${R[pairs10]}"
printf '%-44s %12s\n' "ratio general path / four-command floor" "$(bench_ratio "${R[gen]}" "${R[four10]}")"
