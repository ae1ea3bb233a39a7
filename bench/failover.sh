#!/usr/bin/env bash
#
# bench/failover.sh - what a Redis failover costs redsem, through Sentinel
# and in a Redis Cluster: over-admissions and seconds without a grant, with
# redsem.grant_replicas off and on, side by side in one run.
#
#   sudo bash bench/failover.sh
#
# Runs every round of t/050_sentinel.pl (a primary, two replicas and three
# sentinels on loopback; six sessions taking and giving back slots of a
# semaphore of 2, each waiting up to 10 s, half of them connecting anew each
# time; SENTINEL FAILOVER, then a SIGKILL of the primary, which comes back
# once the sentinels name the new one; each once with grant_replicas = 0 and
# once with 1) and of t/052_cluster.pl (three primaries, three replicas; six
# sessions over ten semaphores of 2; CLUSTER FAILOVER, then a SIGKILL of a
# primary: "cfailover", "ckill"), BENCH_ROUNDS times, and prints every
# round's figures and their totals.  Then t/050 once more with one replica
# ("failover/1", "kill/1"; BENCH_ONE_REPLICA=0 skips it).  "fresh idle" is
# the time from every sentinel naming the new primary until a fresh session
# gets a semaphore that was idle at the failover.  Over-admissions are counted
# independently of redsem, from the periods the sessions log in PostgreSQL;
# "longest gap" is the longest time after the trigger without a grant;
# failed acquires are those that raised or got no slot within their wait
# (failed releases and holders stopped are counted apart).  Last, t/099
# with REDSEM_RIDE_LONG=1: a waiter in line for over a minute rides a
# SENTINEL FAILOVER (its result is printed).
#
# Environment: BENCH_ROUNDS (default 1), BENCH_ROUND_S (seconds of load per
# round, default 18), BENCH_FAILOVER_ROUNDS (default all: as
# REDSEM_FAILOVER_ROUNDS, say 'failover:1 kill:1'), BENCH_NO_INSTALL=1.

set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROUNDS=${BENCH_ROUNDS:-1}
REPORT=$(mktemp /tmp/redsem-failover.XXXXXX)
trap 'rm -f "$REPORT"' EXIT

[[ ${EUID} -eq 0 ]] || { echo "run as root" >&2; exit 1; }
install=()
[[ -n ${BENCH_NO_INSTALL:-} ]] && install=(env REDSEM_NO_INSTALL=1)
chmod 666 "$REPORT"
# one invocation of the tests: label, extra environment, tests
run_tests() {
    local label=$1 env_extra=$2; shift 2
    local log=/tmp/redsem-failover-$label.log kept
    # shellcheck disable=SC2086
    if env $env_extra REDSEM_FAILOVER_ROUNDS="${BENCH_FAILOVER_ROUNDS:-all}" REDSEM_FAILOVER_REPORT="$REPORT" REDSEM_FAILOVER_ROUND_S="${BENCH_ROUND_S:-18}" REDSEM_KEEP=1 \
        "${install[@]}" bash "$REPO/scripts/test.sh" tap "$@" >"$log" 2>&1; then
        # the tests passed: drop their temp dir and log
        kept=$(sed -n 's/^==> kept temp dir: //p' "$log")
        [[ -z $kept ]] || rm -rf "$kept"
        rm -f "$log"
    else
        echo "redsem failover bench: $label: a test failed (figures kept; see $log and the temp dir it names)" >&2
    fi
    install=(env REDSEM_NO_INSTALL=1)
}

for ((i = 1; i <= ROUNDS; i++)); do
    echo "==> round $i of $ROUNDS" >&2
    run_tests "round$i" "" t/050_sentinel.pl t/052_cluster.pl
    if [[ ${BENCH_ONE_REPLICA:-1} == 1 ]]; then
        run_tests "round$i-1replica" "REDSEM_SENTINEL_REPLICAS=1" t/050_sentinel.pl
    fi
done

# the slow edge of the ride (t/099 runs its short one in the suite): a
# waiter in line for over a minute rides a SENTINEL FAILOVER
ride_long=passed
run_tests "ride-long" "REDSEM_RIDE_LONG=1" t/099_ride_wait_edges.pl || true
[[ -f /tmp/redsem-failover-ride-long.log ]] && ride_long=failed

echo "failover figures ($ROUNDS runs; each line one forced failover):"
cat "$REPORT"
echo
echo "totals per kind of failover and setting:"
sed -E 's/= +/=/g; s/=>/=/g' "$REPORT" | awk '{
    key = $1 " " $2
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    for (i = 3; i <= NF; i++) {
        split($i, kv, "="); k = kv[1]; x = kv[2] + 0
        if (k ~ /_s$/) { sum[key, k] += x; cnt[key, k]++; if (x > worst[key, k]) worst[key, k] = x }
        else v[key, k] += x
    }
} END {
    printf "%-10s %-17s %8s %16s %16s %10s %11s %12s %13s\n", "failover", "setting", "periods", "over_admissions",
        "failed_acquires", "mean_gap_s", "worst_gap_s", "mean_fresh_s", "worst_fresh_s"
    for (i = 1; i <= n; i++) { k = order[i]; split(k, p, " ")
        fm = cnt[k, "fresh_idle_s"] ? sprintf("%.2f", sum[k, "fresh_idle_s"] / cnt[k, "fresh_idle_s"]) : "-"
        fw = cnt[k, "fresh_idle_s"] ? sprintf("%.2f", worst[k, "fresh_idle_s"]) : "-"
        printf "%-10s %-17s %8d %16d %16d %10.2f %11.2f %12s %13s\n", p[1], p[2], v[k, "periods"], v[k, "over_admissions"],
            v[k, "failed_acquires"],
            sum[k, "longest_gap_s"] / cnt[k, "longest_gap_s"], worst[k, "longest_gap_s"], fm, fw }
}'
echo
echo "a waiter in line for over a minute rides a SENTINEL FAILOVER (t/099, REDSEM_RIDE_LONG=1): $ride_long"
