#!/usr/bin/env bash
# scripts/bench_smoke.sh - the benchmarks that take the Lua script apart
# (cut short after each stage, looped inside one FCALL, run under valgrind)
# still run to their end on the script as it is: each once, with tiny
# workloads and BENCH_BEFORE=HEAD, its figures ignored.  They read the
# script's internals, so a change to the script can break them with no test
# noticing (bench/script_cpu.sh once stopped at its start for several
# commits).  Redis only, no PostgreSQL; about 45 s.  Run as root after
# scripts/test.sh (.ci/run does); instructions.sh only where valgrind is.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export BENCH_NO_INSTALL=1 BENCH_RUNS=1 BENCH_BEFORE=HEAD
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT

# smoke SCRIPT VAR=VALUE..: run bench/SCRIPT with those settings; on failure
# show the end of its output and stop.
smoke() {
    local script=$1 start=$SECONDS
    shift
    if ! env "$@" bash "bench/$script" >"$LOG" 2>&1; then
        tail -n 30 "$LOG"
        echo "bench smoke: bench/$script FAILED" >&2
        exit 1
    fi
    echo "bench smoke: bench/$script ran to its end ($((SECONDS - start)) s)"
}

smoke script_cpu.sh BENCH_OPS=300 BENCH_HOLDERS=100
smoke lua_loop.sh BENCH_OPS=50
if command -v valgrind >/dev/null; then
    smoke instructions.sh BENCH_PAIRS='10 20' BENCH_HANDOFFS='10 20' BENCH_CALLS=20 BENCH_SPREAD=20
else
    echo "bench smoke: no valgrind, bench/instructions.sh not run"
fi
