#!/usr/bin/env bash
#
# bench/connections.sh - what one PostgreSQL server costs Redis in
# connections and memory, and what a backend's first call costs: the
# figures issue 51 (one broker per server) sets its targets against.
#
#   sudo bash bench/connections.sh
#
# Mode "direct" (today's only mode: each backend that calls redsem keeps a
# connection of its own for the session).  Parts:
#
#   connections  BENCH_BACKENDS (100 500) clients that each take and give
#                back a slot of one semaphore every BENCH_PAUSE_MS (500),
#                all connected at once; once all have called, the Redis
#                connections this server holds, counted by the names redsem
#                gives them in CLIENT LIST (redsem:<cluster_name>:<purpose>:
#                <pid>), and INFO memory's mem_clients_normal
#   one client   one client taking and giving back a slot (a pgbench
#                transaction: SELECT redsem_acquire_xact, commit) against
#                the same client running SELECT 1, beside a Redis PING
#                round trip: what a call adds to a statement, in PINGs
#   first call   BENCH_SESSIONS (30) new sessions, each timing its first
#                call (connect, set up, call) and its second: over the Unix
#                socket, and over TLS on loopback where this build has TLS
#                (hiredis 1.0 or later with hiredis_ssl: Debian 13 and
#                later; Debian 12's hiredis 0.14 has none, and the part says
#                so)
#
# Environment: BENCH_BACKENDS, BENCH_PAUSE_MS, BENCH_SESSIONS,
# BENCH_ONE_S (8: seconds of each one-client run), BENCH_NO_INSTALL=1,
# REDSEM_KEEP=1.

set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

BACKENDS=${BENCH_BACKENDS:-100 500}
PAUSE_MS=${BENCH_PAUSE_MS:-500}
SESSIONS=${BENCH_SESSIONS:-30}
ONE_S=${BENCH_ONE_S:-8}
MOST=0
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

# named PURPOSE: this server's Redis connections of PURPOSE (backend, keeper)
named() {
    bench_redis CLIENT LIST | tr -d '\r' | grep -c " name=redsem:bench:$1:" || true
}

# mem_clients: INFO memory's mem_clients_normal (bytes)
mem_clients() {
    bench_redis INFO memory | tr -d '\r' | sed -n 's/^mem_clients_normal://p'
}

bench_header "connections: one PostgreSQL server, mode direct, $(nproc) CPUs"

# --- connections and memory ---------------------------------------------------
printf 'SELECT redsem_release('"'"'conn'"'"', redsem_acquire('"'"'conn'"'"', 1000, wait => '"'"'30 s'"'"'));\n\\sleep %s ms\n' \
    "$PAUSE_MS" >"$BENCH_TMP/conn.sql"
chown postgres "$BENCH_TMP/conn.sql"
idle_mem=$(mem_clients)
printf '\n%-9s | %19s %8s | %18s %14s\n' backends "Redis conns: backend" keeper "mem_clients_normal" "per backend"
for n in $BACKENDS; do
    secs=$((20 + n / 25))
    (cd "$BENCH_TMP" && bench_pgbench -n -c "$n" -j 2 -T "$secs" -f "$BENCH_TMP/conn.sql" \
        >"$BENCH_TMP/conn-$n.out" 2>&1) &
    load=$!
    # every client connected and called at least once: as many named
    # backend connections as clients, or the run's middle
    for ((i = 0; i < secs * 2 - 4; i++)); do
        sleep 0.5
        (($(named backend) >= n)) && break
    done
    sleep 2
    nb=$(named backend)
    nk=$(named keeper)
    mem=$(mem_clients)
    wait "$load" || { cat "$BENCH_TMP/conn-$n.out" >&2; exit 1; }
    printf '%-9s | %19s %8s | %18s %14s\n' "$n" "$nb" "$nk" "$mem" \
        "$(bench_div "$((mem - idle_mem))" "$n" '%.0f')"
    # the backends are gone: so are their connections
    bench_wait_for "the clients' connections to close" 30 bash -c "(( \$(redis-cli -s '$BENCH_SOCK' CLIENT LIST | grep -c ' name=redsem:bench:backend:') == 0 ))"
done

# --- one client ---------------------------------------------------------------
# one_ms SCRIPT: mean latency (ms) of one client running SCRIPT for ONE_S
one_ms() {
    (cd "$BENCH_TMP" && bench_pgbench -n -c 1 -j 1 -T "$ONE_S" -f "$1" 2>&1) |
        sed -nE 's/^latency average = ([0-9.]+) ms.*/\1/p'
}
printf "SELECT redsem_acquire_xact('one', 4);\n" >"$BENCH_TMP/one.sql"
printf 'SELECT 1;\n' >"$BENCH_TMP/select1.sql"
chown postgres "$BENCH_TMP/one.sql" "$BENCH_TMP/select1.sql"
base_ms=$(one_ms "$BENCH_TMP/select1.sql")
call_ms=$(one_ms "$BENCH_TMP/one.sql")
ping_us=$(bench_ping_us "$BENCH_SOCK")
add_us=$(awk -v a="$call_ms" -v b="$base_ms" 'BEGIN { printf "%.0f", (a - b) * 1000 }')
printf '\none client: SELECT 1 %s ms, a slot taken and given back %s ms: the call adds %s us, %s PING round trips (PING %s us)\n' \
    "$base_ms" "$call_ms" "$add_us" "$(bench_div "$add_us" "$ping_us" '%.1f')" "$ping_us"

# --- first call ---------------------------------------------------------------
# first_warm SETTINGS: mean first-call and warm-call time (ms) over SESSIONS
# new sessions, each after SETTINGS (SET commands)
first_warm() {
    local i
    for ((i = 0; i < SESSIONS; i++)); do
        bench_psql -X -q -A -t -c "$1" -c "
            DO \$\$ DECLARE t0 timestamptz; t1 timestamptz; t2 timestamptz; BEGIN
              t0 := clock_timestamp(); PERFORM redsem_release('fw', redsem_acquire('fw', 100));
              t1 := clock_timestamp(); PERFORM redsem_release('fw', redsem_acquire('fw', 100));
              t2 := clock_timestamp();
              RAISE NOTICE 'fw % %', extract(epoch FROM t1 - t0) * 1000, extract(epoch FROM t2 - t1) * 1000;
            END \$\$;" 2>&1 | sed -n 's/.*NOTICE:  fw //p'
    done | awk '{ f += $1; w += $2; n++ } END { if (n) printf "%.3f %.3f\n", f / n, w / n; else print "n/a n/a" }'
}
printf '\nfirst call of a new session against a warm call (%s sessions, each call a slot taken and given back)\n' "$SESSIONS"
printf '%-28s | %12s %12s %8s\n' transport "first ms" "warm ms" ratio
read -r f w <<<"$(first_warm 'SET redsem.connect_timeout = 5000')"
printf '%-28s | %12s %12s %8s\n' "Unix socket" "$f" "$w" "$(bench_ratio "$f" "$w")"

# TLS: a throwaway CA and a server certificate for 127.0.0.1
probe=$(bench_psql -X -q -c "SET redsem.tls = on; SET redsem.unix_socket = ''; SET redsem.port = 1;
    SELECT redsem_acquire_xact('t', 1)" 2>&1 || true)
if grep -q 'has no TLS support' <<<"$probe"; then
    printf '%-28s | %s\n' "TLS, loopback" "skipped: this build has no TLS (hiredis 0.14)"
else
    tls=$BENCH_TMP/tls
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
    tport=$(redsem_free_port)
    redsem_as_postgres redis-server --port 0 --tls-port "$tport" --bind 127.0.0.1 \
        --tls-cert-file "$tls/server.crt" --tls-key-file "$tls/server.key" \
        --tls-ca-cert-file "$tls/ca.crt" --tls-auth-clients no \
        --save '' --appendonly no --daemonize yes --pidfile "$tls/redis.pid" \
        --logfile "$tls/redis.log" --dir "$tls" || redsem_die "the TLS Redis failed to start"
    bench_wait_for "the TLS Redis" 10 bash -c "redis-cli --tls --cacert '$tls/ca.crt' -p $tport PING 2>/dev/null | grep -q PONG"
    read -r f w <<<"$(first_warm "SET redsem.tls = on; SET redsem.unix_socket = ''; SET redsem.host = '127.0.0.1';
        SET redsem.port = $tport; SET redsem.tls_ca_file = '$tls/ca.crt'")"
    kill "$(cat "$tls/redis.pid")" 2>/dev/null || true
    printf '%-28s | %12s %12s %8s\n' "TLS, loopback" "$f" "$w" "$(bench_ratio "$f" "$w")"
fi
printf '\n(a broker per server, issue 51, is to bring the backend connections to at most 4, memory to at most 1/50, and a first call over TLS to at most 1.5x a warm one)\n'
