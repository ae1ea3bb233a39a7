#!/usr/bin/env bash
#
# bench/failover.sh - what a Redis failover costs redsem, through Sentinel
# and in a Redis Cluster: over-admissions and seconds without a grant, with
# redsem.grant_replicas off and on, side by side in one run.
#
#   sudo bash bench/failover.sh
#
# Runs the rounds of t/050_sentinel.pl (a primary, a replica and three
# sentinels on loopback; six sessions taking and giving back slots of a
# semaphore of 2, half of them connecting anew each time; SENTINEL FAILOVER,
# then a SIGKILL of the primary; each once with grant_replicas = 0 and once
# with 1) and of t/052_cluster.pl (three primaries, three replicas; six
# sessions over ten semaphores of 2; CLUSTER FAILOVER, then a SIGKILL of a
# primary: "cfailover", "ckill"), BENCH_ROUNDS times, and prints every
# round's figures and their totals.  Over-admissions are counted independently of redsem, from the
# periods the sessions log in PostgreSQL; "longest gap" is the longest time
# after the trigger without a grant.
#
# Environment: BENCH_ROUNDS (default 2), BENCH_ROUND_S (seconds of load per
# round, default 18), BENCH_NO_INSTALL=1.

set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROUNDS=${BENCH_ROUNDS:-2}
REPORT=$(mktemp /tmp/redsem-failover.XXXXXX)
trap 'rm -f "$REPORT"' EXIT

[[ ${EUID} -eq 0 ]] || { echo "run as root" >&2; exit 1; }
install=()
[[ -n ${BENCH_NO_INSTALL:-} ]] && install=(env REDSEM_NO_INSTALL=1)
chmod 666 "$REPORT"
for ((i = 1; i <= ROUNDS; i++)); do
    echo "==> round $i of $ROUNDS" >&2
    log=/tmp/redsem-failover-round$i.log
    if REDSEM_FAILOVER_REPORT=$REPORT REDSEM_FAILOVER_ROUND_S=${BENCH_ROUND_S:-18} REDSEM_KEEP=1 \
        "${install[@]}" bash "$REPO/scripts/test.sh" tap t/050_sentinel.pl t/052_cluster.pl >"$log" 2>&1; then
        # the tests passed: drop their temp dir and log
        kept=$(sed -n 's/^==> kept temp dir: //p' "$log")
        [[ -z $kept ]] || rm -rf "$kept"
        rm -f "$log"
    else
        echo "redsem failover bench: round $i: a test failed (figures kept; see $log and the temp dir it names)" >&2
    fi
    install=(env REDSEM_NO_INSTALL=1)
done

echo "failover figures ($ROUNDS runs; each line one forced failover):"
cat "$REPORT"
echo
echo "totals per kind of failover and setting:"
sed -E 's/= +/=/g; s/=>/=/g' "$REPORT" | awk '{
    key = $1 " " $2
    for (i = 3; i <= NF; i++) { split($i, kv, "="); v[key, kv[1]] += kv[2] }
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    if ($0 ~ /longest_gap_s/) { split($0, a, "longest_gap_s="); g = a[2] + 0; if (g > maxgap[key]) maxgap[key] = g; sumgap[key] += g; cnt[key]++ }
} END {
    printf "%-9s %-17s %8s %16s %15s %15s\n", "failover", "setting", "periods", "over_admissions", "mean_gap_s", "worst_gap_s"
    for (i = 1; i <= n; i++) { k = order[i]; split(k, p, " ")
        printf "%-9s %-17s %8d %16d %15.2f %15.2f\n", p[1], p[2], v[k, "periods"], v[k, "over_admissions"], sumgap[k] / cnt[k], maxgap[k] }
}'
