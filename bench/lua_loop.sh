#!/usr/bin/env bash
#
# bench/lua_loop.sh - the script's own cost, timed inside one FCALL, with
# an earlier revision's script side by side in the same Redis and run.
#
#   sudo BENCH_BEFORE=<git revision> bash bench/lua_loop.sh
#
# The commandstats figures of script_cpu.sh and tenants.sh time each FCALL
# from outside the script, and on a busy 2-core machine a preempted call
# counts the time it waited: their run-to-run noise (10-30% here) hides a
# change of a few microseconds.  This script loads src/redsem.lua (and,
# with BENCH_BEFORE, that revision's) with a loop function appended, which
# calls dispatch() directly BENCH_OPS times inside one FCALL and times its
# own calls with TIME; both libraries run interleaved BENCH_RUNS times
# (default 12) and the best of each is kept.  What it leaves out: the
# FCALL itself and the conversion of its arguments (the same for both).
# Printed, in microseconds:
#   - acquire + release of one permit that do not wait (the fast paths), on
#     an idle semaphore and beside 10 holders;
#   - a hand-off: a newcomer's waiting acquire, then the release of the
#     holder granted longest ago, which promotes the first waiter (limit
#     4, a line of 200), its waiters naming no tenant, then spread over 10
#     and 100 tenants (issue 22: at most 1.3x the line with no tenant);
#   - one command given a Lua number against the same given strings (Redis
#     formats a Lua number argument with "%.17g").
#
# Environment: BENCH_BEFORE, BENCH_OPS (default 5000 pairs, 500 hand-offs),
# BENCH_RUNS, REDSEM_KEEP=1.

set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

OPS=${BENCH_OPS:-5000}
RUNS=${BENCH_RUNS:-12}

bench_init_redis loop
cli() { redsem_as_postgres redis-cli -s "$W/redis.sock" "$@"; }

bench_loop_sides
# (the rounds of each sample, and its label)
declare -A BEST
sample() {
    local key=$1 fn=$2 n=$3 arg=$4 tag=$5 x
    x=$(cli FCALL "$fn" 0 "$n" "$arg" "$tag")
    BEST[$key]=$(awk -v a="$x" -v b="${BEST[$key]:-1e9}" 'BEGIN { print (a < b ? a : b) }')
}
for ((r = 0; r < RUNS; r++)); do
    for side in "${SIDES[@]}"; do
        sample "$side.p0" "${side}_pairs" "$OPS" 0 "$side$r.0"
        sample "$side.p10" "${side}_pairs" "$OPS" 10 "$side$r.10"
        for t in 0 10 100; do
            sample "$side.h$t" "${side}_handoffs" "$((OPS / 10))" "$t" "$side$r.$t"
        done
    done
done
# one command given a Lua number against strings, inside one FCALL
NUM=$(cli EVAL "
local n, now, s = 100000, 1764000000000, '1764000000000'
redis.call('ZADD', KEYS[1], '1', 'a')
local function us(t) return tonumber(t[1]) * 1000000 + tonumber(t[2]) end
local t0 = redis.call('TIME')
for i = 1, n do redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1) end
local t1 = redis.call('TIME')
for i = 1, n do redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', s, 'LIMIT', '0', '1') end
local t2 = redis.call('TIME')
redis.call('DEL', KEYS[1])
return string.format('%.2f %.2f', (us(t1) - us(t0)) / n, (us(t2) - us(t1)) / n)" 1 bench:numbers)

printf 'redsem script cost inside one FCALL (bench/lua_loop.sh)\n'
printf 'date: %s   host: %s   cores: %s   Redis %s\n' "$(date -u '+%Y-%m-%d %H:%M:%S UTC')" \
    "$(hostname)" "$(nproc)" "$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')"
printf 'usec, best of %s interleaved runs; %s pairs, %s hand-offs per run\n\n' "$RUNS" "$OPS" "$((OPS / 10))"
bench_loop_table BEST
read -r n s <<<"$NUM"
printf '\nZRANGEBYSCORE of a 1-member zset: the clock and LIMIT given as Lua numbers %s us, as strings %s us\n' "$n" "$s"
