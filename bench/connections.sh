#!/usr/bin/env bash
#
# bench/connections.sh - what one PostgreSQL server costs Redis in
# connections and memory, and what a backend's first call costs: the
# figures issue 51 (one broker per server) sets its targets against.
#
#   sudo bash bench/connections.sh
#
# Each part runs in both connection modes (BENCH_MODES, default "direct
# broker"), the server restarted between them, and the figures are set side
# by side with broker/direct ratios at the end.  In direct mode each backend
# that calls redsem keeps a connection of its own for the session; in broker
# mode one process per server carries every backend's calls (issue 51,
# docs/broker.md).  Parts:
#
#   connections  BENCH_BACKENDS (100 500) clients that each take and give
#                back a slot of one semaphore every BENCH_PAUSE_MS (500),
#                all connected at once; once all have called, the Redis
#                connections this server holds, counted by the names redsem
#                gives them in CLIENT LIST (redsem:<cluster_name>:<purpose>:
#                <pid>: backend or broker, and keeper), and INFO memory's
#                mem_clients_normal
#   waiting      BENCH_WAITERS (200) sessions waiting at once in the line
#                of one semaphore (limit 1) behind one holder: this
#                server's Redis connections and client memory while they
#                wait, Redis round trips and CPU (INFO commandstats) per
#                second over BENCH_WAIT_S (10) seconds of waiting, then how
#                fast the line drains once the holder leaves (each waiter
#                takes the slot and gives it back: hand-offs per second)
#   one client   one client taking and giving back a slot (a pgbench
#                transaction: SELECT redsem_acquire_xact, commit) against
#                the same client running SELECT 1, beside a Redis PING
#                round trip: what a call adds to a statement, in PINGs; in
#                direct mode also through a byte relay (socat, if
#                installed) between the backend and Redis: what any process
#                in the path costs on this machine, the baseline for the
#                broker's hop
#   first call   BENCH_SESSIONS (30) new sessions, each timing its first
#                call (connect, set up, call) and its second: over the Unix
#                socket, and over TLS on loopback where this build has TLS
#                (hiredis 1.0 or later with hiredis_ssl: Debian 13 and
#                later; Debian 12's hiredis 0.14 has none, and the part says
#                so); over TLS once more with the call planned (EXPLAIN)
#                before the first, so that PostgreSQL's own first use of
#                the functions in a new session (cold catalog caches) is
#                out of the first call's figure; and each session times a
#                third call after a pause as long as the one between two
#                sessions (measured): the control for what an idle machine
#                (Redis, the broker, the CPUs asleep) costs any call after a
#                pause, which every session's first call pays too
#
# Environment: BENCH_MODES, BENCH_BACKENDS, BENCH_PAUSE_MS, BENCH_WAITERS,
# BENCH_WAIT_S, BENCH_SESSIONS,
# BENCH_ONE_S (8: seconds of each one-client run), BENCH_NO_INSTALL=1,
# REDSEM_KEEP=1.

set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

BACKENDS=${BENCH_BACKENDS:-100 500}
PAUSE_MS=${BENCH_PAUSE_MS:-500}
SESSIONS=${BENCH_SESSIONS:-30}
WAITERS=${BENCH_WAITERS:-200}
WAIT_S=${BENCH_WAIT_S:-10}
ONE_S=${BENCH_ONE_S:-8}
MODES=${BENCH_MODES:-direct broker}
MOST=$WAITERS
for n in $BACKENDS; do ((n > MOST)) && MOST=$n; done

command -v pgbench >/dev/null || redsem_die "pgbench not found (package postgresql-15 / postgresql-contrib)"
bench_begin connections
bench_install
bench_start_redis
# (database 1: redsem names a connection it sets up with AUTH or SELECT,
# and this Redis has no password; CLIENT LIST and INFO are server-wide)
REDSEM_PG_EXTRA_CONF="max_connections = $((MOST + 20))
cluster_name = 'bench'
redsem.database = 1" redsem_start_pg "$BENCH_TMP" 2>>"$BENCH_TMP/start.log" ||
    { cat "$BENCH_TMP/start.log" >&2; exit 1; }
BENCH_PORT=$(redsem_pg_port "$BENCH_TMP")
bench_sql "CREATE EXTENSION redsem" >/dev/null

# use_mode MODE: the server restarted in connection mode MODE
use_mode() {
    bench_sql "ALTER SYSTEM SET redsem.connection_mode = '$1'" >/dev/null
    redsem_as_postgres pg_ctl -D "$BENCH_TMP/pgdata" -l "$BENCH_TMP/postgres.log" -w -t 60 restart >/dev/null ||
        redsem_die "PostgreSQL failed to restart in mode $1"
    [[ $(bench_psql -X -A -t -c 'SHOW redsem.connection_mode') == "$1" ]] || redsem_die "mode $1 not in effect"
}

# named PURPOSE: this server's Redis connections of PURPOSE (backend,
# broker, keeper)
named() {
    bench_redis CLIENT LIST | tr -d '\r' | grep -c " name=redsem:bench:$1:" || true
}

# mem_clients: INFO memory's mem_clients_normal (bytes)
mem_clients() {
    bench_redis INFO memory | tr -d '\r' | sed -n 's/^mem_clients_normal://p'
}

# The figures, by "mode key"
declare -A R

bench_header "connections: one PostgreSQL server, modes: $MODES, $(nproc) CPUs"

printf 'SELECT redsem_release('"'"'conn'"'"', redsem_acquire('"'"'conn'"'"', 1000, wait => '"'"'30 s'"'"'));\n\\sleep %s ms\n' \
    "$PAUSE_MS" >"$BENCH_TMP/conn.sql"
printf "SELECT redsem_acquire_xact('one', 4);\n" >"$BENCH_TMP/one.sql"
printf "SELECT redsem_release('wq', redsem_acquire('wq', 1, '600 s', wait => '600 s'));\n" >"$BENCH_TMP/wait.sql"
printf 'SELECT 1;\n' >"$BENCH_TMP/select1.sql"
chown postgres "$BENCH_TMP/conn.sql" "$BENCH_TMP/one.sql" "$BENCH_TMP/select1.sql" "$BENCH_TMP/wait.sql"

# connections MODE: the connections and memory part
connections() {
    local n secs load i nb nk mem idle_mem
    idle_mem=$(mem_clients)
    for n in $BACKENDS; do
        secs=$((20 + n / 25))
        (cd "$BENCH_TMP" && bench_pgbench -n -c "$n" -j 2 -T "$secs" -f "$BENCH_TMP/conn.sql" \
            >"$BENCH_TMP/conn-$1-$n.out" 2>&1) &
        load=$!
        # every client connected and called at least once (direct mode: as
        # many named backend connections as clients; broker mode: as many
        # backends that called redsem), or the run's middle
        for ((i = 0; i < secs * 2 - 4; i++)); do
            sleep 0.5
            (($(called "$1") >= n)) && break
        done
        sleep 2
        nb=$(($(named backend) + $(named broker)))
        nk=$(named keeper)
        mem=$(mem_clients)
        wait "$load" || { cat "$BENCH_TMP/conn-$1-$n.out" >&2; exit 1; }
        R["$1 conns $n"]=$nb
        R["$1 keeper $n"]=$nk
        R["$1 mem $n"]=$((mem - idle_mem))
        # the backends are gone: so are their direct connections
        bench_wait_for "the clients' connections to close" 30 bash -c "(( \$(redis-cli -s '$BENCH_SOCK' CLIENT LIST | grep -c ' name=redsem:bench:backend:') == 0 ))"
    done
}

# waiting MODE: the waiting part
waiting() {
    local hold load idle_mem stats t0 t1
    idle_mem=$(mem_clients)
    bench_psql -c "SELECT redsem_acquire('wq', 1, '600 s')" -c "SELECT pg_sleep(600)" >/dev/null 2>&1 &
    hold=$!
    bench_wait_for "the holder" 30 bash -c "[[ \$(redis-cli -s '$BENCH_SOCK' -n 1 ZCARD 'redsem:{wq}:owner') == 1 ]]"
    (cd "$BENCH_TMP" && bench_pgbench -n -c "$WAITERS" -j 2 -t 1 -f "$BENCH_TMP/wait.sql" \
        >"$BENCH_TMP/wait-$1.out" 2>&1) &
    load=$!
    bench_wait_for "$WAITERS waiters in line" 120 bash -c "[[ \$(redis-cli -s '$BENCH_SOCK' -n 1 ZCARD 'redsem:{wq}:waiting') == $WAITERS ]]"
    sleep 2
    R["$1 wconns"]=$(($(named backend) + $(named broker)))
    R["$1 wmem"]=$(($(mem_clients) - idle_mem))
    bench_stats_reset
    sleep "$WAIT_S"
    stats=$(bench_stats)
    R["$1 wcalls"]=$(bench_div "$(bench_roundtrips "$stats")" "$WAIT_S" '%.0f')
    R["$1 wusec"]=$(bench_div "$(bench_usec "$stats" .)" "$WAIT_S" '%.0f')
    t0=$(bench_now)
    bench_sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(600)'" >/dev/null
    wait "$load" || { cat "$BENCH_TMP/wait-$1.out" >&2; exit 1; }
    t1=$(bench_now)
    wait "$hold" 2>/dev/null || true
    R["$1 drain"]=$(awk -v n="$WAITERS" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", n / (b - a) }')
}

# called MODE: how many backends have called redsem (direct: their named
# connections; broker: the broker's clients, which CLIENT LIST cannot see,
# so the sessions whose last statement was the pgbench script's)
called() {
    if [[ $1 == direct ]]; then
        named backend
    else
        bench_psql -X -A -t -c "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%redsem_acquire(''conn''%' AND pid <> pg_backend_pid()"
    fi
}

# one_ms SCRIPT: mean latency (ms) of one client running SCRIPT for ONE_S
one_ms() {
    (cd "$BENCH_TMP" && bench_pgbench -n -c 1 -j 1 -T "$ONE_S" -f "$1" 2>&1) |
        sed -nE 's/^latency average = ([0-9.]+) ms.*/\1/p'
}

# one_client MODE: what a call adds to a statement, and Redis calls per
# transaction (from INFO commandstats)
one_client() {
    local base call stats tx
    base=$(one_ms "$BENCH_TMP/select1.sql")
    bench_stats_reset
    call=$(one_ms "$BENCH_TMP/one.sql")
    stats=$(bench_stats)
    tx=$(awk -v t="$ONE_S" -v ms="$call" 'BEGIN { printf "%.0f", t * 1000 / ms }')
    R["$1 base ms"]=$base
    R["$1 call ms"]=$call
    R["$1 calls per tx"]=$(bench_div "$(bench_roundtrips "$stats")" "$tx" '%.2f')
    R["$1 add us"]=$(awk -v a="$call" -v b="$base" 'BEGIN { printf "%.0f", (a - b) * 1000 }')
    # the same over TLS on loopback, where this build has TLS (through the
    # broker: its hop and the connection's relay process)
    [[ -z $TLS_PORT ]] || R["$1 tls call ms"]=$(PGOPTIONS="-c redsem.tls=on -c redsem.unix_socket= \
-c redsem.host=127.0.0.1 -c redsem.port=$TLS_PORT -c redsem.tls_ca_file=$tls/ca.crt" one_ms "$BENCH_TMP/one.sql" || true)
    [[ $1 == direct ]] && relay_client
    return 0
}

# relay_client: direct mode's one client again, its Redis connection
# through socat relaying bytes between two Unix sockets (nothing parsed)
relay_client() {
    local call
    bench_start_relay
    [[ -n $RELAY_SOCK ]] || return 0
    call=$(PGOPTIONS="-c redsem.unix_socket=$RELAY_SOCK" one_ms "$BENCH_TMP/one.sql")
    bench_stop_relay
    R["relay call ms"]=$call
    R["relay add us"]=$(awk -v a="$call" -v b="${R["direct call ms"]}" 'BEGIN { printf "%.0f", (a - b) * 1000 }')
}

# first_warm SETTINGS [PLANNED]: mean first-call, warm-call and
# warm-call-after-a-pause time (ms) over SESSIONS new sessions, each after
# SETTINGS (SET commands); with PLANNED, the session has planned the same
# call (EXPLAIN, which calls nothing) before the first: its catalog caches
# are warm, so the first call differs from the warm one only by what redsem
# does the first time (its link, TLS, AUTH...), not by what PostgreSQL does
# for any new session's first use of a function.  The third call follows a
# pause as long as the one between two sessions' calls (PAUSE_GAP_S: a
# psql started, a backend forked; measured), the control for what an idle
# machine costs any call after a pause (Redis, the broker and the CPUs
# asleep, caches cold), which the first call pays too
PAUSE_GAP_S=0.010
first_warm() {
    local i plan=''
    [[ -z ${2:-} ]] || plan="EXECUTE 'EXPLAIN SELECT redsem_release(''fw'', redsem_acquire(''fw'', 100))';"
    for ((i = 0; i < SESSIONS; i++)); do
        bench_psql -X -q -A -t -c "$1" -c "
            DO \$\$ DECLARE t0 timestamptz; t1 timestamptz; t2 timestamptz; t3 timestamptz; BEGIN
              $plan
              t0 := clock_timestamp(); PERFORM redsem_release('fw', redsem_acquire('fw', 100));
              t1 := clock_timestamp(); PERFORM redsem_release('fw', redsem_acquire('fw', 100));
              t2 := clock_timestamp(); PERFORM pg_sleep($PAUSE_GAP_S);
              t3 := clock_timestamp(); PERFORM redsem_release('fw', redsem_acquire('fw', 100));
              RAISE NOTICE 'fw % % %', extract(epoch FROM t1 - t0) * 1000, extract(epoch FROM t2 - t1) * 1000,
                extract(epoch FROM clock_timestamp() - t3) * 1000;
            END \$\$;" 2>&1 | sed -n 's/.*NOTICE:  fw //p'
    done | awk '{ f += $1; w += $2; p += $3; n++ } END { if (n) printf "%.3f %.3f %.3f\n", f / n, w / n, p / n; else print "n/a n/a n/a" }'
}

# session_gap_s: the pause between the end of one new session's call and
# the next session's first (seconds; mean of 10), PAUSE_GAP_S's measure
session_gap_s() {
    local i
    for ((i = 0; i < 11; i++)); do
        bench_psql -X -q -A -t -c "SELECT extract(epoch FROM clock_timestamp())"
    done | awk 'NR > 1 { s += $1 - last; n++ } { last = $1 } END { printf "%.3f\n", n ? s / n : 0.01 }'
}

# TLS: a throwaway CA and a server certificate for 127.0.0.1, and a Redis
# with TLS on a free loopback port (TLS_PORT; empty: this build has none)
TLS_PORT=
tls=$BENCH_TMP/tls
start_tls_redis() {
    local probe
    probe=$(bench_psql -X -q -c "SET redsem.tls = on; SET redsem.unix_socket = ''; SET redsem.port = 1;
        SELECT redsem_acquire_xact('t', 1)" 2>&1 || true)
    grep -q 'has no TLS support' <<<"$probe" && return 0
    mkdir -p "$tls"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj '/CN=bench CA' \
        -keyout "$tls/ca.key" -out "$tls/ca.crt" >/dev/null 2>&1
    openssl req -new -newkey rsa:2048 -nodes -subj '/CN=127.0.0.1' \
        -keyout "$tls/server.key" -out "$tls/server.csr" >/dev/null 2>&1
    printf 'subjectAltName=IP:127.0.0.1\n' >"$tls/ext"
    openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" -CAcreateserial \
        -days 2 -extfile "$tls/ext" -out "$tls/server.crt" >/dev/null 2>&1
    chown -R postgres "$tls"
    chmod 0600 "$tls"/*.key
    TLS_PORT=$(redsem_free_port)
    redsem_as_postgres redis-server --port 0 --tls-port "$TLS_PORT" --bind 127.0.0.1 \
        --tls-cert-file "$tls/server.crt" --tls-key-file "$tls/server.key" \
        --tls-ca-cert-file "$tls/ca.crt" --tls-auth-clients no \
        --save '' --appendonly no --daemonize yes --pidfile "$tls/redis.pid" \
        --logfile "$tls/redis.log" --dir "$tls" || redsem_die "the TLS Redis failed to start"
    bench_wait_for "the TLS Redis" 10 bash -c "redis-cli --tls --cacert '$tls/ca.crt' -p $TLS_PORT PING 2>/dev/null | grep -q PONG"
}

# first_call MODE: first calls against warm ones, over the Unix socket and TLS
first_call() {
    local f w p
    PAUSE_GAP_S=$(session_gap_s)
    R["$1 gap ms"]=$(bench_div "$PAUSE_GAP_S" 0.001 '%.1f')
    read -r f w p <<<"$(first_warm 'SET redsem.connect_timeout = 5000')"
    R["$1 unix first"]=$f R["$1 unix warm"]=$w R["$1 unix paused"]=$p
    [[ -n $TLS_PORT ]] || return 0
    local tls_set="SET redsem.tls = on; SET redsem.unix_socket = ''; SET redsem.host = '127.0.0.1';
        SET redsem.port = $TLS_PORT; SET redsem.tls_ca_file = '$tls/ca.crt'"
    read -r f w p <<<"$(first_warm "$tls_set")"
    R["$1 tls first"]=$f R["$1 tls warm"]=$w R["$1 tls paused"]=$p
    read -r f w p <<<"$(first_warm "$tls_set" planned)"
    R["$1 tls planned first"]=$f R["$1 tls planned warm"]=$w R["$1 tls planned paused"]=$p
}

start_tls_redis
for mode in $MODES; do
    redsem_log "mode $mode"
    use_mode "$mode"
    connections "$mode"
    waiting "$mode"
    one_client "$mode"
    first_call "$mode"
done
[[ -z $TLS_PORT ]] || kill "$(cat "$tls/redis.pid")" 2>/dev/null || true
ping_us=$(bench_ping_us "$BENCH_SOCK")

# --- the table ------------------------------------------------------------------
# row LABEL KEY [FORMAT]: KEY's figure in each mode, and broker/direct
row() {
    local m out=()
    for m in $MODES; do out+=("${R["$m $2"]:-n/a}"); done
    printf '%-40s |' "$1"
    printf ' %12s' "${out[@]}"
    if [[ " $MODES " == *" direct "* && " $MODES " == *" broker "* ]]; then
        printf ' %14s' "$(bench_ratio "${R["broker $2"]:-0}" "${R["direct $2"]:-0}")"
    fi
    printf '\n'
}
printf '\n%-40s |' measure
for m in $MODES; do printf ' %12s' "$m"; done
printf ' %14s\n' "broker/direct"
for n in $BACKENDS; do
    row "Redis connections at $n backends" "conns $n"
    row "  and the keeper's" "keeper $n"
    row "  mem_clients_normal (bytes)" "mem $n"
done
row "Redis connections, $WAITERS waiting" "wconns"
row "  mem_clients_normal (bytes)" "wmem"
row "  Redis round trips per second" "wcalls"
row "  Redis CPU per second (us)" "wusec"
row "  hand-offs per second, draining" "drain"
row "one client: SELECT 1 (ms)" "base ms"
row "one client: a slot taken and given (ms)" "call ms"
row "  Redis calls per transaction" "calls per tx"
row "  what the calls add (us)" "add us"
row "  the same over TLS on loopback (ms)" "tls call ms"
row "first call, Unix socket (ms)" "unix first"
row "warm call, Unix socket (ms)" "unix warm"
row "  warm call after a pause (ms)" "unix paused"
row "first call, TLS on loopback (ms)" "tls first"
row "warm call, TLS on loopback (ms)" "tls warm"
row "  warm call after a pause (ms)" "tls paused"
row "first call, TLS, call planned first (ms)" "tls planned first"
row "warm call, TLS, call planned first (ms)" "tls planned warm"
row "  warm call after a pause (ms)" "tls planned paused"
row "  the pause: between two sessions (ms)" "gap ms"
[[ -n $TLS_PORT ]] || printf '(TLS: skipped, this build has no TLS: hiredis 0.14)\n'
printf '\nPING round trip: %s us\n' "$ping_us"
for m in $MODES; do
    printf '%s: first call / warm call: Unix socket %s, TLS %s; TLS, the call planned first %s (target <= 1.5)\n' "$m" \
        "$(bench_ratio "${R["$m unix first"]:-0}" "${R["$m unix warm"]:-0}")" \
        "$(bench_ratio "${R["$m tls first"]:-0}" "${R["$m tls warm"]:-0}")" \
        "$(bench_ratio "${R["$m tls planned first"]:-0}" "${R["$m tls planned warm"]:-0}")"
    printf '%s: first call / warm call after the same pause (the idle machine left out): Unix socket %s, TLS %s; TLS, planned first %s\n' "$m" \
        "$(bench_ratio "${R["$m unix first"]:-0}" "${R["$m unix paused"]:-0}")" \
        "$(bench_ratio "${R["$m tls first"]:-0}" "${R["$m tls paused"]:-0}")" \
        "$(bench_ratio "${R["$m tls planned first"]:-0}" "${R["$m tls planned paused"]:-0}")"
done
if [[ " $MODES " == *" direct "* && " $MODES " == *" broker "* ]]; then
    hop=$(awk -v b="${R["broker add us"]}" -v d="${R["direct add us"]}" -v c="${R["direct calls per tx"]}" \
        'BEGIN { if (c + 0 == 0) print "n/a"; else printf "%.0f", (b - d) / c }')
    printf 'the hop through the broker: %s us per Redis call, %s PING round trips (target <= 0.25)\n' \
        "$hop" "$(bench_div "$hop" "$ping_us" '%.2f')"
    if [[ -n ${R["broker tls call ms"]:-} && -n ${R["direct tls call ms"]:-} ]]; then
        hop=$(awk -v b="${R["broker tls call ms"]}" -v d="${R["direct tls call ms"]}" -v c="${R["direct calls per tx"]}" \
            'BEGIN { if (c + 0 == 0) print "n/a"; else printf "%.0f", (b - d) * 1000 / c }')
        printf 'the hop over TLS (the broker and the connection'"'"'s relay): %s us per Redis call, %s PING round trips\n' \
            "$hop" "$(bench_div "$hop" "$ping_us" '%.2f')"
    fi
    if [[ -n ${R["relay add us"]:-} ]]; then
        relay_hop=$(bench_div "${R["relay add us"]}" "${R["direct calls per tx"]}" '%.0f')
        printf 'the hop through a byte relay (socat), direct mode: %s us per Redis call, %s PING round trips (what any process in the path costs here)\n' \
            "$relay_hop" "$(bench_div "$relay_hop" "$ping_us" '%.2f')"
    else
        printf '(the byte relay baseline: skipped, socat is not installed)\n'
    fi
    printf 'with %s waiting: %s Redis connections (target <= 4 plus the keeper'"'"'s)\n' "$WAITERS" "${R["broker wconns"]}"
    for n in $BACKENDS; do
        printf 'at %s backends: %s Redis connections (target <= 4 plus the keeper'"'"'s), memory %s of direct mode'"'"'s (target <= 0.02)\n' \
            "$n" "${R["broker conns $n"]}" "$(bench_ratio "${R["broker mem $n"]}" "${R["direct mem $n"]}")"
    done
fi
