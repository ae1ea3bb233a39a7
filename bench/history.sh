#!/usr/bin/env bash
#
# bench/history.sh - never more than N running, checked on a history under
# faults, with the stop (redsem.on_slot_lost = cancel) and without it
# (warn), side by side: the README's table.
#
#   sudo bash bench/history.sh
#
# Runs t/081_history_faults.pl in its bench mode: two servers share a
# semaphore of 2, four sessions each loop on it (take a slot, log the work's
# start and end from inside PostgreSQL on the machine's boot clock, give it
# back), and each fault is injected once per policy while they run: a
# server cut off from Redis (a proxy that stops forwarding), a hung Redis
# (SIGSTOP), a paused holder (SIGSTOP of its backend), a wall-clock step on
# one server (libfaketime), FLUSHALL, and a Redis restart without
# persistence.  The checker (t/RedsemHistory.pm) counts the starts that made
# more than 2 run at once.  Then t/083_failover_lost_writes.pl in its bench
# mode: a Sentinel failover to a replica cut off first (a limit of 1; server
# A's session holds on the primary alone and works 20 s, server B's two
# loop), with cancel and warn.
#
# Environment: BENCH_RUN_S (seconds of load per case, default 20),
# BENCH_NO_INSTALL=1.

set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[[ ${EUID} -eq 0 ]] || { echo "run as root" >&2; exit 1; }
install=()
[[ -n ${BENCH_NO_INSTALL:-} ]] && install=(env REDSEM_NO_INSTALL=1)
log=$(mktemp /tmp/redsem-history.XXXXXX)
trap 'rm -f "$log"' EXIT

status=0
REDSEM_HISTORY_BENCH=1 REDSEM_HISTORY_RUN_S="${BENCH_RUN_S:-20}" "${install[@]}" \
    bash "$REPO/scripts/test.sh" tap t/081_history_faults.pl t/083_failover_lost_writes.pl >"$log" 2>&1 || status=$?
echo "history under faults (limit 2, two servers, four sessions each, works of 0.8 s, leases of 1 s; $(date -u +%F)):"
sed -n 's/^.*# \(|.*|\)$/\1/p' "$log"
if [[ $status -ne 0 ]]; then
    echo "redsem history bench: the run failed; its output:" >&2
    tail -40 "$log" >&2
fi
exit $status
