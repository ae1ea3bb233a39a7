#!/usr/bin/env bash
#
# bench/throughput.sh - acquire+release throughput of redsem, side by side
# with the usual pg_try_advisory_lock slot pool, in one invocation.
#
#   sudo bash bench/throughput.sh
#
# Phases (pgbench, -M prepared, one acquire + one release per transaction):
#   A  C clients, limit 4, C = 1, 4: redsem vs advisory slots (never full)
#   B  C clients, limit 4, C = 8, 16: redsem vs advisory slots (refusals
#      happen; a refused transaction is just the try, no release)
#   C  redsem in a semaphore with 10 live holders vs 20,000 live holders
#      (limit 100000): the Lua script must stay O(log N)
#   F  1 and 8 clients: the round-trip floor vs advisory slots: the same
#      two statements per transaction, each one redsem_limit() call (one
#      Redis round trip through redsem's connection, a read-only script,
#      no slot): what any design with one round trip per call can reach
#      here, so how far a target in ratios to the slot pool is reachable
#   M  BENCH_M_CLIENTS (1 8 64) clients, limit 4: redsem in broker mode (a
#      second server, redsem.connection_mode = broker, on the same Redis)
#      against direct mode and the round-trip floor, interleaved in halves;
#      plotted to throughput-modes.svg (issue 51's targets: broker/floor
#      >= 1.0 at 8 clients and >= 1.3 at 64); with socat installed, the
#      floor once more through a byte relay (socat between the backends
#      and Redis, nothing parsed): what any process in the path costs on
#      this machine, a baseline for the broker's figure
# With one client, redsem's cost per call over the slot pool is set beside
# a Redis PING round trip measured in the same run (redis-benchmark, one
# client, no pipelining).  With gnuplot installed, the tx/s of both sides
# are plotted to $BENCH_PLOTS/throughput.svg (default bench/plots).
# Each side of a comparison runs in two halves, interleaved (A B A B), so a
# slow patch of a noisy machine hits both sides.
#
# Redis round trips are counted from INFO commandstats (CONFIG RESETSTAT
# before each run): FCALL/BLPOP... are what the backends send; the
# commands the Lua library runs inside one FCALL are reported apart.
#
# Environment: BENCH_DURATION (seconds per side, default 8),
# BENCH_HOLDERS (default 20000), BENCH_PLOTS (where the plot goes),
# BENCH_NO_INSTALL=1, REDSEM_KEEP=1.

set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

DURATION=${BENCH_DURATION:-8}
HOLDERS=${BENCH_HOLDERS:-20000}
LIMIT=4
HALF=$(((DURATION + 1) / 2))

bench_init throughput

# --- workload scripts --------------------------------------------------------

# redsem: the holder id comes back to the client (\gset), then released.
# A refused acquire (NULL) bumps a sequence so the refusal rate can be read
# afterwards; the wrapper costs the same on both sides.
write_redsem_script() { # FILE SEM LIMIT
    cat >"$1" <<EOF
SELECT coalesce(id, '') AS id,
       CASE WHEN id IS NULL THEN nextval('refused') ELSE 0 END AS refused
  FROM (SELECT redsem_acquire('$2', $3, '30 s') AS id OFFSET 0) a \\gset
\\if :refused = 0
SELECT redsem_release('$2', :id);
\\endif
EOF
}

# advisory: the common slot pool - try slots 0..N-1 in one statement, take
# the first that locks (LIMIT 1 stops at the first success), unlock later.
write_advisory_script() { # FILE SEM LIMIT
    cat >"$1" <<EOF
SELECT coalesce(slot, -1) AS slot,
       CASE WHEN slot IS NULL THEN nextval('refused') ELSE 0 END AS refused
  FROM (SELECT (SELECT s FROM generate_series(0, $3 - 1) s
                 WHERE pg_try_advisory_lock(hashtext('$2'), s)
                 LIMIT 1) AS slot
        OFFSET 0) a \\gset
\\if :refused = 0
SELECT pg_advisory_unlock(hashtext('$2'), :slot);
\\endif
EOF
}

# the round-trip floor: two statements, each one light redsem call that
# reads the semaphore's stored limit (one FCALL) and takes nothing
write_floor_script() { # FILE SEM
    cat >"$1" <<EOF
SELECT redsem_limit('$2') IS NULL AS none \\gset
SELECT redsem_limit('$2');
EOF
}

write_floor_script "$W/floor.sql" b
write_redsem_script "$W/redsem4.sql" b "$LIMIT"
write_advisory_script "$W/advisory4.sql" b "$LIMIT"
write_redsem_script "$W/small.sql" small 100000
write_redsem_script "$W/big.sql" big 100000
chown postgres "$W"/*.sql

# --- running one side ---------------------------------------------------------

# Accumulators per label: transactions, seconds, refused, round trips,
# fcall, inner commands, fcall usec, failed calls.
declare -A TX SECS REF RT EVS INNER EVUS FAIL LAT

# run_half LABEL SCRIPT CLIENTS SECONDS
run_half() {
    local label=$1 script=$2 clients=$3 secs=$4 out stats tx tps lat
    bench_sql "ALTER SEQUENCE refused RESTART" >/dev/null
    bench_stats_reset
    out=$(bench_pgbench -n -M prepared -c "$clients" -j 2 -T "$secs" -f "$script" 2>&1) || {
        printf '%s\n' "$out" >&2
        redsem_die "pgbench failed ($label)"
    }
    stats=$(bench_stats)
    tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
    tps=$(sed -n 's/^tps = \([0-9.]*\) (without.*/\1/p' <<<"$out")
    lat=$(sed -n 's/^latency average = \([0-9.]*\) ms.*/\1/p' <<<"$out")
    [[ -n $tx && -n $tps ]] || {
        printf '%s\n' "$out" >&2
        redsem_die "could not read pgbench's output ($label)"
    }
    if grep -q 'aborted\|error' <<<"$out"; then
        printf '%s\n' "$out" >&2
        redsem_die "pgbench reported errors ($label)"
    fi
    TX[$label]=$((${TX[$label]:-0} + tx))
    # time actually spent, from tps (connection time excluded)
    SECS[$label]=$(awk -v a="${SECS[$label]:-0}" -v t="$tx" -v r="$tps" 'BEGIN { printf "%.6f", a + t / r }')
    LAT[$label]="${LAT[$label]:-}${LAT[$label]:+/}$lat"
    REF[$label]=$((${REF[$label]:-0} + $(bench_sql "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM refused")))
    RT[$label]=$((${RT[$label]:-0} + $(bench_roundtrips "$stats")))
    EVS[$label]=$((${EVS[$label]:-0} + $(bench_calls "$stats" '^fcall$')))
    EVUS[$label]=$((${EVUS[$label]:-0} + $(bench_usec "$stats" '^fcall$')))
    INNER[$label]=$((${INNER[$label]:-0} + $(bench_inner "$stats")))
    FAIL[$label]=$((${FAIL[$label]:-0} + $(bench_calls "$stats" '!failed$')))
}

# run_pair LABEL_A SCRIPT_A LABEL_B SCRIPT_B CLIENTS : A B A B
run_pair() {
    run_half "$1" "$2" "$5" "$HALF"
    run_half "$3" "$4" "$5" "$HALF"
    run_half "$1" "$2" "$5" "$HALF"
    run_half "$3" "$4" "$5" "$HALF"
}

tps_of() { bench_div "${TX[$1]}" "${SECS[$1]}" '%.0f'; }
ok_tps_of() { bench_div "$((${TX[$1]} - ${REF[$1]}))" "${SECS[$1]}" '%.0f'; }
refusal_of() { bench_div "$((100 * ${REF[$1]}))" "${TX[$1]}" '%.1f%%'; }
# redsem calls made: one acquire per transaction, one release per success
calls_of() { echo $((2 * ${TX[$1]} - ${REF[$1]})); }

# --- warm up: load the script into Redis -------------------------------------

bench_sql "CREATE SEQUENCE refused" >/dev/null
bench_sql "SELECT redsem_release('warm', redsem_acquire('warm', 1))" >/dev/null

bench_header "redsem throughput benchmark (bench/throughput.sh)"
printf 'pgbench -M prepared -j 2, %s s per side (two interleaved halves), limit %s\n\n' "$DURATION" "$LIMIT"

# --- A and B: redsem vs advisory slot pool ------------------------------------

CLIENT_COUNTS="1 4 8 16"
for clients in $CLIENT_COUNTS; do
    run_pair "redsem$clients" "$W/redsem4.sql" "advisory$clients" "$W/advisory4.sql" "$clients"
done

# F: the round-trip floor beside the slot pool, again in halves
FLOOR_CLIENTS="1 8"
for clients in $FLOOR_CLIENTS; do
    run_pair "floor$clients" "$W/floor.sql" "advisoryF$clients" "$W/advisory4.sql" "$clients"
done

# A Redis PING round trip, one client, no pipelining
PING_US=$(bench_ping_us "$BENCH_SOCK")

printf '%-28s %10s %10s %10s %8s\n' "acquire+release, limit $LIMIT" "redsem" "advisory" "ratio" ""
for clients in $CLIENT_COUNTS; do
    r=redsem$clients a=advisory$clients
    printf '%-28s %10s %10s %10s\n' "$clients clients: tx/s" "$(tps_of $r)" "$(tps_of $a)" \
        "$(bench_ratio "$(tps_of $r)" "$(tps_of $a)")"
    printf '%-28s %10s %10s %10s\n' "  slots obtained/s" "$(ok_tps_of $r)" "$(ok_tps_of $a)" \
        "$(bench_ratio "$(ok_tps_of $r)" "$(ok_tps_of $a)")"
    printf '%-28s %10s %10s\n' "  refused (full)" "$(refusal_of $r)" "$(refusal_of $a)"
    printf '%-28s %10s %10s\n' "  avg latency ms (halves)" "${LAT[$r]}" "${LAT[$a]}"
done
printf '\nRedis round trips (INFO commandstats, client-sent commands):\n'
printf '%-10s %10s %10s %10s %12s %12s %12s %10s\n' clients tx refused "redsem calls" "round trips" "per call" "per tx" "failed"
for clients in 4 16; do
    r=redsem$clients
    printf '%-10s %10s %10s %10s %12s %12s %12s %10s\n' "$clients" "${TX[$r]}" "${REF[$r]}" "$(calls_of $r)" \
        "${RT[$r]}" "$(bench_div "${RT[$r]}" "$(calls_of $r)" '%.3f')" \
        "$(bench_div "${RT[$r]}" "${TX[$r]}" '%.3f')" "${FAIL[$r]}"
done
printf '(expected: 1.000 per call; 2.000 per tx when nothing is refused; FCALL only)\n'
printf 'commands run inside the script per call: %s (4 clients), %s (16 clients)\n' \
    "$(bench_div "${INNER[redsem4]}" "$(calls_of redsem4)" '%.1f')" \
    "$(bench_div "${INNER[redsem16]}" "$(calls_of redsem16)" '%.1f')"
busy_of() { bench_div "$(bench_div "${EVUS[$1]}" 10000 '%.4f')" "${SECS[$1]}" '%.0f%%'; }
printf 'Redis CPU per FCALL (usec): %s (4 clients), %s (16 clients); Redis busy in FCALL: %s, %s of one core\n\n' \
    "$(bench_div "${EVUS[redsem4]}" "${EVS[redsem4]}" '%.1f')" \
    "$(bench_div "${EVUS[redsem16]}" "${EVS[redsem16]}" '%.1f')" \
    "$(busy_of redsem4)" "$(busy_of redsem16)"

# over_pool_us LABEL POOL: what a call of LABEL's transactions (two calls
# each) costs over one of the slot pool's, in microseconds
over_pool_us() {
    awk -v r="$(tps_of "$1")" -v a="$(tps_of "$2")" \
        'BEGIN { if (r > 0 && a > 0) printf "%.1f", (1e6 / r - 1e6 / a) / 2; else print "n/a" }'
}

# one client: what a redsem call costs over a slot-pool call, beside a PING
per_call_us=$(over_pool_us redsem1 advisory1)
printf 'one client: redsem costs %s us per call more than the slot pool (two calls per tx);\n' "$per_call_us"
printf '  a Redis PING round trip (redis-benchmark, 1 client, no pipelining): %s us; overhead/PING = %s\n' \
    "$PING_US" "$(bench_ratio "$per_call_us" "$PING_US")"
printf 'eight clients: redsem/advisory tx/s = %s\n\n' "$(bench_ratio "$(tps_of redsem8)" "$(tps_of advisory8)")"

# F: the same figures for the round-trip floor, against its own slot-pool run
floor_call_us=$(over_pool_us floor1 advisoryF1)
printf 'the round-trip floor (two redsem_limit calls per tx: one Redis round trip each, no slot):\n'
printf '  one client: %s us per call more than the slot pool; overhead/PING = %s\n' \
    "$floor_call_us" "$(bench_ratio "$floor_call_us" "$PING_US")"
printf '  eight clients: floor/advisory tx/s = %s (%s / %s); redsem/floor = %s\n' \
    "$(bench_ratio "$(tps_of floor8)" "$(tps_of advisoryF8)")" "$(tps_of floor8)" "$(tps_of advisoryF8)" \
    "$(bench_ratio "$(bench_ratio "$(tps_of redsem8)" "$(tps_of advisory8)")" "$(bench_ratio "$(tps_of floor8)" "$(tps_of advisoryF8)")")"
printf '  Redis usec per FCALL of the floor: %s, round trips per tx: %s\n\n' \
    "$(bench_div "${EVUS[floor8]}" "${EVS[floor8]}" '%.1f')" "$(bench_div "${RT[floor8]}" "${TX[floor8]}" '%.3f')"

# the plot: tx/s of both sides by clients
if command -v gnuplot >/dev/null; then
    PLOTS=${BENCH_PLOTS:-$BENCH_DIR/plots}
    mkdir -p "$PLOTS"
    for clients in $CLIENT_COUNTS; do
        printf '%s %s %s\n' "$clients" "$(tps_of "redsem$clients")" "$(tps_of "advisory$clients")"
    done >"$W/throughput.dat"
    gnuplot <<EOF
set terminal svg size 640,400 font "sans,11"
set output "$PLOTS/throughput.svg"
set title "acquire+release per second, limit 4 ($(date -u +%Y-%m-%d), $(nproc) cores)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set key top left
set ylabel "transactions per second"
set xlabel "pgbench clients"
set logscale y
set yrange [1000:*]
set grid ytics
plot "$W/throughput.dat" using 2:xtic(1) title "redsem (Redis on a unix socket)", \
     "" using 3 title "pg_try_advisory_lock slot pool (one server)"
EOF
    printf 'plot: %s\n\n' "$PLOTS/throughput.svg"
fi

# --- C: 10 vs 20,000 live holders ---------------------------------------------

# Holders must stay alive: sessions release everything when they end. Each
# filler is a background psql that acquires, then sleeps.
fill() { # NAME COUNT
    bench_bg redsem_psql "$BENCH_TMP" -c "SELECT count(redsem_acquire('$1', 100000, '10 min')) FROM generate_series(1, $2)" \
        -c "SELECT pg_sleep(3600)" >/dev/null 2>&1
}
zcard_is() { [[ $(bench_redis ZCARD "$(bench_key "$1" owner)") == "$2" ]]; }

t0=$(bench_now)
fill small 10
fill big "$HOLDERS"
bench_wait_for "10 holders in 'small'" 30 zcard_is small 10
bench_wait_for "$HOLDERS holders in 'big'" 120 zcard_is big "$HOLDERS"
t1=$(bench_now)
fill_secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')

run_pair small "$W/small.sql" big "$W/big.sql" 4
# still all there?
zcard_is big "$HOLDERS" || redsem_warn "'big' lost holders during the run: $(bench_redis ZCARD "$(bench_key big owner)")"

printf 'O(log N): acquire+release, 4 clients, limit 100000 (filled %s holders in %s s)\n' "$HOLDERS" "$fill_secs"
printf '%-28s %10s %10s %10s\n' "" "10 held" "$HOLDERS held" "ratio"
printf '%-28s %10s %10s %10s\n' "tx/s" "$(tps_of small)" "$(tps_of big)" "$(bench_ratio "$(tps_of big)" "$(tps_of small)")"
us_small=$(bench_div "${EVUS[small]}" "${EVS[small]}" '%.1f')
us_big=$(bench_div "${EVUS[big]}" "${EVS[big]}" '%.1f')
printf '%-28s %10s %10s %10s\n' "Redis usec per FCALL" "$us_small" "$us_big" "$(bench_ratio "$us_big" "$us_small")"
printf '%-28s %10s %10s\n' "round trips per tx" "$(bench_div "${RT[small]}" "${TX[small]}" '%.3f')" \
    "$(bench_div "${RT[big]}" "${TX[big]}" '%.3f')"
printf '%-28s %10s %10s\n' "script commands per call" "$(bench_div "${INNER[small]}" "$(calls_of small)" '%.1f')" \
    "$(bench_div "${INNER[big]}" "$(calls_of big)" '%.1f')"
printf '(expected: ratios near 1.00)\n'

# --- M: broker mode against direct mode (issue 51) ----------------------------

# A second server on the same Redis, in broker mode (redsem.connection_mode
# is a server-start setting), its sides interleaved in halves with direct
# mode's and the round-trip floor's (direct mode) at each client count.
M_CLIENTS=${BENCH_M_CLIENTS:-1 8 64}
BROKER_PG=$BENCH_TMP/broker
mkdir -p "$BROKER_PG"
chown postgres "$BROKER_PG"
REDSEM_PG_EXTRA_CONF="redsem.connection_mode = broker
redsem.unix_socket = '$BENCH_SOCK'
max_connections = 100" redsem_start_pg "$BROKER_PG" 2>>"$BENCH_TMP/start.log" ||
    { cat "$BENCH_TMP/start.log" >&2; exit 1; }
BENCH_PG=$BROKER_PG bench_sql "CREATE EXTENSION redsem; CREATE SEQUENCE refused" >/dev/null
BENCH_PG=$BROKER_PG bench_sql "SELECT redsem_release('warm', redsem_acquire('warm', 1))" >/dev/null

# The byte relay (socat, if installed), on RELAY_SOCK
bench_start_relay

# run_three CLIENTS: the floor (direct), redsem direct and redsem through
# the broker, and the floor through the relay, each in two halves, interleaved
run_three() {
    local h
    for h in 1 2; do
        run_half "floorM$1" "$W/floor.sql" "$1" "$HALF"
        run_half "directM$1" "$W/redsem4.sql" "$1" "$HALF"
        BENCH_PG=$BROKER_PG run_half "brokerM$1" "$W/redsem4.sql" "$1" "$HALF"
        [[ -z $RELAY_SOCK ]] ||
            PGOPTIONS="-c redsem.unix_socket=$RELAY_SOCK" run_half "relayM$1" "$W/floor.sql" "$1" "$HALF"
    done
}
for clients in $M_CLIENTS; do run_three "$clients"; done
bench_stop_relay

printf 'broker mode against direct mode: acquire+release, limit %s (tx/s; the floor: two one-round-trip calls per tx, direct)\n' "$LIMIT"
printf '%-10s %10s %10s %10s %14s %14s %16s %14s\n' clients floor direct broker "direct/floor" "broker/floor" "broker/direct" \
    "relay/floor"
for clients in $M_CLIENTS; do
    f=$(tps_of "floorM$clients") d=$(tps_of "directM$clients") b=$(tps_of "brokerM$clients") r=n/a
    [[ -z $RELAY_SOCK ]] || r=$(bench_ratio "$(tps_of "relayM$clients")" "$f")
    printf '%-10s %10s %10s %10s %14s %14s %16s %14s\n' "$clients" "$f" "$d" "$b" \
        "$(bench_ratio "$d" "$f")" "$(bench_ratio "$b" "$f")" "$(bench_ratio "$b" "$d")" "$r"
done
printf '(relay/floor: the floor itself through a byte relay, socat, nothing parsed: what a process in the path costs here%s)\n' \
    "$([[ -n $RELAY_SOCK ]] || echo '; not run, socat is not installed')"
printf 'round trips per tx (Redis commands the clients sent): direct %s, broker %s (8 clients)\n' \
    "$(bench_div "${RT[directM8]:-0}" "${TX[directM8]:-0}" '%.3f')" \
    "$(bench_div "${RT[brokerM8]:-0}" "${TX[brokerM8]:-0}" '%.3f')"
printf 'Redis usec per FCALL: direct %s, broker %s (8 clients)\n' \
    "$(bench_div "${EVUS[directM8]:-0}" "${EVS[directM8]:-0}" '%.1f')" \
    "$(bench_div "${EVUS[brokerM8]:-0}" "${EVS[brokerM8]:-0}" '%.1f')"
printf '(targets, issue 51: broker/floor >= 1.0 at 8 clients, >= 1.3 at 64)\n'
if command -v gnuplot >/dev/null; then
    PLOTS=${BENCH_PLOTS:-$BENCH_DIR/plots}
    for clients in $M_CLIENTS; do
        printf '%s %s %s %s\n' "$clients" "$(tps_of "directM$clients")" "$(tps_of "brokerM$clients")" \
            "$(tps_of "floorM$clients")"
    done >"$W/modes.dat"
    gnuplot <<GP
set terminal svg size 640,400 font "sans,11"
set output "$PLOTS/throughput-modes.svg"
set title "acquire+release per second, limit 4: direct and broker mode ($(date -u +%Y-%m-%d), $(nproc) cores)"
set key top left
set ylabel "transactions per second"
set xlabel "pgbench clients"
set logscale x 2
set grid
plot "$W/modes.dat" using 1:2 with linespoints title "direct (a connection per backend)", \
     "" using 1:3 with linespoints title "broker (one process per server)", \
     "" using 1:4 with linespoints dashtype 2 title "floor: one Redis round trip per call (direct)"
GP
    printf 'plot: %s\n' "$PLOTS/throughput-modes.svg"
fi
redsem_stop_pg "$BROKER_PG"
