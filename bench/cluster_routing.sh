#!/usr/bin/env bash
#
# bench/cluster_routing.sh - what a new session's first calls cost in a
# Redis Cluster, direct mode against broker mode (issue 51: the broker owns
# the routing).
#
#   sudo bash bench/cluster_routing.sh
#
# Three Redis Cluster primaries on loopback; two PostgreSQL servers on the
# same cluster (redsem.cluster on, the seed is node 0), one per connection
# mode.  A warm-up session on each server takes and gives back a slot of
# BENCH_NAMES (default 30) semaphores, spread over the nodes by their names.
# Then BENCH_SESSIONS (default 20) new sessions per mode, the modes
# interleaved one session at a time, each take and give back a slot of
# every one of them once (one DO block, timed inside): the calls a new
# backend makes on semaphores its server already knows.  Counted over the
# three nodes (INFO commandstats, errorstats, stats): Redis commands the
# clients sent, MOVED replies, connections opened; and the mean time per
# call of those first calls, beside the same calls made again in one warm
# session (BENCH_WARM_PASSES passes, default 20).
#
# Environment: BENCH_NAMES, BENCH_SESSIONS, BENCH_WARM_PASSES,
# BENCH_NO_INSTALL=1, REDSEM_KEEP=1.

set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

NAMES=${BENCH_NAMES:-30}
SESSIONS=${BENCH_SESSIONS:-20}
WARM_PASSES=${BENCH_WARM_PASSES:-20}
MODES=(direct broker)

bench_begin cluster_routing
bench_install
NODE_DIRS=()
trap stop_nodes EXIT
bench_start_cluster

# one PostgreSQL server per mode, both seeded at node 0
for mode in "${MODES[@]}"; do
    mkdir -p "$BENCH_TMP/$mode"
    chown postgres "$BENCH_TMP/$mode"
    REDSEM_PG_EXTRA_CONF="redsem.unix_socket = ''
redsem.cluster = on
redsem.host = '127.0.0.1'
redsem.port = ${PORTS[0]}
redsem.connection_mode = $mode
max_connections = 50" \
        redsem_start_pg "$BENCH_TMP/$mode" 2>>"$BENCH_TMP/start.log" || { cat "$BENCH_TMP/start.log" >&2; exit 1; }
    BENCH_PG=$BENCH_TMP/$mode bench_sql "CREATE EXTENSION redsem" >/dev/null
done

LIST=$(for ((i = 0; i < NAMES; i++)); do printf "'cr_%d'\n" "$i"; done | paste -sd,)
PASS="PERFORM redsem_release(n, redsem_acquire(n, 100)) FROM unnest(ARRAY[$LIST]) n"
# how many of the names the seed serves (their first call needs no redirection anywhere)
ON_SEED=$(for ((i = 0; i < NAMES; i++)); do echo "CLUSTER KEYSLOT {cr_$i}"; done | redis-cli -p "${PORTS[0]}" |
    awk -v r="$(redis-cli -p "${PORTS[0]}" CLUSTER NODES | awk '/myself/ { for (i = 9; i <= NF; i++) print $i }')" '
        BEGIN { n = split(r, rs, "\n") }
        { for (k = 1; k <= n; k++) { split(rs[k], ab, "-"); if (ab[2] == "") ab[2] = ab[1]
              if ($1 >= ab[1] && $1 <= ab[2]) { s++; break } } }
        END { print s + 0 }')

# timed PASSES : a DO block that makes the calls PASSES times and says the ms per call
timed() {
    printf 'DO $$ DECLARE t0 timestamptz; BEGIN t0 := clock_timestamp();
        FOR i IN 1..%d LOOP %s; END LOOP;
        RAISE NOTICE %s, extract(epoch FROM clock_timestamp() - t0) * 1000 / (%d * %d * 2); END $$' \
        "$1" "$PASS" "'cr %'" "$1" "$NAMES"
}

# psql_notice MODE SQL : run SQL in a new session of MODE's server, print its figure
psql_notice() {
    BENCH_PG=$BENCH_TMP/$1 bench_psql -c "$2" 2>&1 | sed -n 's/.*NOTICE:  cr //p'
}

# node_stats : INFO commandstats, errorstats and stats of the three nodes,
# one redis-cli connection per node (which total_connections_received counts)
node_stats() {
    local port
    for port in "${PORTS[@]}"; do redis-cli -p "$port" INFO commandstats errorstats stats | tr -d '\r'; done
}

# node_sum STATS FIELD-REGEX : sum over the nodes of the matching lines'
# calls (rejected ones too: a MOVED is one), counts or values
node_sum() {
    awk -F'[:,=]' -v re="$2" '$1 ~ re {
        if (NF == 2) { n += $2; next }
        for (i = 2; i <= NF; i += 2) if ($i == "calls" || $i == "rejected_calls" || $i == "count") n += $(i + 1) }
        END { print n + 0 }' <<<"$1"
}

# the commands clients send, as INFO commandstats names them
BENCH_CLIENT_CMDS_INFO='^cmdstat_(fcall|fcall_ro|evalsha|eval|asking|cluster[|].*|ping|auth|hello|select|client[|].*|function[|].*|blpop)$'

reset_all() { local port; for port in "${PORTS[@]}"; do redis-cli -p "$port" CONFIG RESETSTAT >/dev/null; done; }

# the warm-up: each server's first session uses every name once
for mode in "${MODES[@]}"; do psql_notice "$mode" "$(timed 1)" >/dev/null; done

bench_header "Cluster routing: a new session's first calls, direct mode against broker mode"
declare -A CMDS MOVED CONNS MS
for mode in "${MODES[@]}"; do CMDS[$mode]=0 MOVED[$mode]=0 CONNS[$mode]=0 MS[$mode]=0; done
for ((s = 0; s < SESSIONS; s++)); do
    for mode in "${MODES[@]}"; do
        reset_all
        ms=$(psql_notice "$mode" "$(timed 1)")
        st=$(node_stats)
        CMDS[$mode]=$((CMDS[$mode] + $(node_sum "$st" "$BENCH_CLIENT_CMDS_INFO")))
        MOVED[$mode]=$((MOVED[$mode] + $(node_sum "$st" '^errorstat_MOVED$')))
        # (less node_stats' own connection to each node)
        CONNS[$mode]=$((CONNS[$mode] + $(node_sum "$st" '^total_connections_received$') - ${#PORTS[@]}))
        MS[$mode]=$(awk -v a="${MS[$mode]}" -v b="${ms:-0}" 'BEGIN { print a + b }')
    done
done
declare -A WARM
for mode in "${MODES[@]}"; do
    WARM[$mode]=$(psql_notice "$mode" "$(timed 1); $(timed "$WARM_PASSES")" | tail -n 1 | awk '{ printf "%.3f", $1 }')
done

CALLS=$((SESSIONS * NAMES * 2))
printf '\n%s names (%s served by the seed), %s new sessions per mode, 3 primaries on loopback\n\n' "$NAMES" "$ON_SEED" "$SESSIONS"
printf '%-44s %12s %12s %14s\n' measure direct broker broker/direct
row() { printf '%-44s %12s %12s %14s\n' "$1" "$2" "$3" "$(bench_ratio "$3" "$2")"; }
row "Redis commands per call, first calls" "$(bench_div "${CMDS[direct]}" "$CALLS")" "$(bench_div "${CMDS[broker]}" "$CALLS")"
row "MOVED replies per new session" "$(bench_div "${MOVED[direct]}" "$SESSIONS")" "$(bench_div "${MOVED[broker]}" "$SESSIONS")"
row "Redis connections opened per new session" "$(bench_div "${CONNS[direct]}" "$SESSIONS")" "$(bench_div "${CONNS[broker]}" "$SESSIONS")"
row "ms per call, a new session's first calls" "$(bench_div "${MS[direct]}" "$SESSIONS" '%.3f')" "$(bench_div "${MS[broker]}" "$SESSIONS" '%.3f')"
row "ms per call, the same calls warm" "${WARM[direct]:-n/a}" "${WARM[broker]:-n/a}"
printf '(a call: one acquire or one release; the first calls include each session'"'"'s own link or connections)\n'
