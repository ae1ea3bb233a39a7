# shellcheck shell=bash
#
# bench/common.sh - shared setup for redsem's benchmark scripts.
#
# Sourced by bench/*.sh. Reuses scripts/lib.sh (private Redis on a unix
# socket, private PostgreSQL on a unix socket and a free port, cleanup) and
# adds what the benchmarks need:
#
#   bench_begin NAME       root check, traps, temp dir (BENCH_TMP, also W)
#   bench_start_redis      Redis started on BENCH_TMP/redis.sock (BENCH_SOCK)
#   bench_init NAME        bench_begin, build+install, Redis + PostgreSQL
#                          started, CREATE EXTENSION redsem
#   bench_sql SQL          run SQL (psql -X -A -t -q) and print the result
#   bench_psql ARGS...     psql against the private server, as postgres
#   bench_pgbench ARGS...  pgbench against the private server, as postgres
#   bench_redis ARGS...    redis-cli against the private Redis
#   bench_init_redis NAME  bench_begin and Redis, for a script needing Redis
#                          only (no PostgreSQL, no install)
#   bench_before_library F the library "before" ($BENCH_BEFORE's script)
#   bench_loop_sides       load src/redsem.lua (and BENCH_BEFORE's) with
#                          bench/loop.lua, as after_* (and before_*); SIDES
#   bench_loop_table ARRAY the table both print, from ARRAY's figures
#   bench_stats_reset      CONFIG RESETSTAT
#   bench_stats            INFO commandstats as "command calls usec" lines
#   bench_roundtrips STATS commands sent by clients (FCALL, BLPOP, ...)
#   bench_inner STATS      commands run inside the Lua script
#   bench_now              wall clock, seconds with microseconds
#   bench_start_cluster    three Redis Cluster primaries on loopback (PORTS)
#   bench_start_relay      socat relaying bytes to BENCH_SOCK (RELAY_SOCK)
#   bench_stop_relay       ... stopped
#   bench_ratio A B        A/B with 2 decimals ("n/a" if B is 0)
#
# Environment:
#   BENCH_NO_INSTALL=1     don't run make install (use what is installed)
#   REDSEM_KEEP=1          keep the temp dir (see scripts/lib.sh)

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib.sh
source "$BENCH_DIR/../scripts/lib.sh"

BENCH_TMP=
BENCH_BG_PIDS=()

# Stop background clients we started (by pid), then the servers.
bench_cleanup() {
    local pid
    for pid in "${BENCH_BG_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${BENCH_BG_PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    BENCH_BG_PIDS=()
    redsem_cleanup
}

# bench_bg CMD... : run CMD in the background, remember its pid in BENCH_PID.
bench_bg() {
    "$@" &
    BENCH_PID=$!
    BENCH_BG_PIDS+=("$BENCH_PID")
}

# bench_begin NAME: what every benchmark does first: check that it runs as
# root and that the Redis tools are there, stop what it started on any exit,
# and make its temp dir (BENCH_TMP; W names the same dir).
bench_begin() {
    [[ ${EUID} -eq 0 ]] || redsem_die "run as root (the servers run as postgres, through runuser)"
    command -v redis-server >/dev/null || redsem_die "redis-server not found"
    command -v redis-cli >/dev/null || redsem_die "redis-cli not found"
    trap bench_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    redsem_make_tmpdir "redsem-bench-$1"
    BENCH_TMP=$REDSEM_TMPDIR
    W=$BENCH_TMP
}

# bench_start_redis: the benchmark's Redis on BENCH_TMP/redis.sock (BENCH_SOCK);
# its start-up messages go to BENCH_TMP/start.log, shown if it fails.
bench_start_redis() {
    BENCH_SOCK=$BENCH_TMP/redis.sock
    redsem_start_redis "$BENCH_TMP" 2>>"$BENCH_TMP/start.log" || { cat "$BENCH_TMP/start.log" >&2; exit 1; }
}

# Build and install, retrying while the source tree is being edited.
bench_install() {
    [[ ${BENCH_NO_INSTALL:-} == 1 ]] && return 0
    local try
    for try in 1 2 3; do
        if (redsem_build_install) >"$BENCH_TMP/build.log" 2>&1; then
            return 0
        fi
        redsem_warn "build failed (try $try of 3); retrying in 30 s"
        tail -n 5 "$BENCH_TMP/build.log" >&2
        sleep 30
    done
    redsem_die "could not build and install redsem (see the messages above)"
}

bench_init() {
    command -v pgbench >/dev/null || redsem_die "pgbench not found (package postgresql-15 / postgresql-contrib)"
    bench_begin "$1"
    bench_install
    bench_start_redis
    # more connections than the default 100 are never needed; keep the
    # defaults otherwise (fsync off etc. come from lib.sh: a throwaway
    # server), but let the keeper track the O(log N) phase's 20,000 holders,
    # taken by one session
    REDSEM_PG_EXTRA_CONF=$'redsem.max_tracked_holds = 65536\nredsem.max_holds_per_session = 100000' \
        redsem_start_pg "$BENCH_TMP" 2>>"$BENCH_TMP/start.log" || { cat "$BENCH_TMP/start.log" >&2; exit 1; }
    BENCH_PORT=$(redsem_pg_port "$BENCH_TMP")
    bench_sql "CREATE EXTENSION redsem" >/dev/null
}

# bench_init_redis NAME: for a script that needs Redis only (no PostgreSQL,
# no install): bench_begin, then Redis on BENCH_TMP/redis.sock (W is BENCH_TMP)
bench_init_redis() {
    bench_begin "$1"
    bench_start_redis
}

# bench_loop_library NAME FILE: load the library in FILE (its function's
# line dropped) with bench/loop.lua's functions, as NAME_pairs and
# NAME_handoffs, into the Redis on W/redis.sock
bench_loop_library() {
    { printf '#!lua name=%s\n' "$1"; grep -v -e '^#!lua' -e '^redis.register_function' "$2"
      cat "$BENCH_DIR/loop.lua"
      printf "redis.register_function('%s_pairs', loop_pairs)\n" "$1"
      printf "redis.register_function('%s_handoffs', loop_handoffs)\n" "$1"; } >"$W/$1.lua"
    redsem_as_postgres redis-cli -s "$W/redis.sock" -x FUNCTION LOAD <"$W/$1.lua" >/dev/null
}

# bench_loop_sides: this revision's script as "after", and with BENCH_BEFORE
# that revision's as "before"; SIDES lists them
bench_loop_sides() {
    bench_loop_library after "$BENCH_DIR/../src/redsem.lua"
    SIDES=(after)
    if [[ -n ${BENCH_BEFORE:-} ]]; then
        bench_before_library "$W/before_body.lua"
        bench_loop_library before "$W/before_body.lua"
        SIDES=(after before)
    fi
}

# bench_loop_table ARRAY: the table of lua_loop.sh and instructions.sh, from
# ARRAY[<side>.<row>] (rows p0 p10 h0 h10 h100): a column per side, this/that
# with BENCH_BEFORE, and the tenants' hand-offs as ratios to h0
bench_loop_table() {
    local -n fig=$1
    printf '%-52s %10s' "" "this"
    [[ -n ${BENCH_BEFORE:-} ]] && printf ' %10s %10s' "$BENCH_BEFORE" "this/that"
    printf '\n'
    # row LABEL KEY [BASE]: with BASE, each side's ratio to its BASE too
    row() {
        local label=$1 key=$2 base=${3:-}
        printf '%-52s %10s' "$label" "${fig[after.$key]}"
        [[ -n ${BENCH_BEFORE:-} ]] && printf ' %10s %10s' "${fig[before.$key]}" \
            "$(bench_ratio "${fig[after.$key]}" "${fig[before.$key]}")"
        printf '\n'
        if [[ -n $base ]]; then
            printf '%-52s %10s' "  ratio to the line with no tenant" \
                "$(bench_ratio "${fig[after.$key]}" "${fig[after.$base]}")"
            [[ -n ${BENCH_BEFORE:-} ]] && printf ' %10s' \
                "$(bench_ratio "${fig[before.$key]}" "${fig[before.$base]}")"
            printf '\n'
        fi
        return 0
    }
    row "acquire + release, idle semaphore" p0
    row "acquire + release beside 10 holders" p10
    row "hand-off, line of 200, no tenant" h0
    row "hand-off, the line over 10 tenants" h10 h0
    row "hand-off, the line over 100 tenants" h100 h0
}

# bench_before_library FILE: the library "before", from src/redsem.lua at
# revision $BENCH_BEFORE, written to FILE (for FUNCTION LOAD)
bench_before_library() {
    { printf '#!lua name=before\n'
      git -C "$BENCH_DIR/.." show "$BENCH_BEFORE:src/redsem.lua" || redsem_die "no src/redsem.lua at $BENCH_BEFORE"
      printf "\nredis.register_function('before', dispatch)\n"; } >"$1"
}

# The server that bench_psql, bench_sql and bench_pgbench use: BENCH_PG, a
# directory of redsem_start_pg (default BENCH_TMP, the one bench_init starts)
bench_psql() { redsem_psql "${BENCH_PG:-$BENCH_TMP}" "$@"; }
bench_sql() { redsem_psql "${BENCH_PG:-$BENCH_TMP}" -c "$1"; }

bench_pgbench() {
    local dir=${BENCH_PG:-$BENCH_TMP}
    redsem_as_postgres pgbench -h "$dir" -p "$(redsem_pg_port "$dir")" -U postgres "$@" postgres
}

bench_redis() { redis-cli -s "$BENCH_SOCK" "$@"; }

bench_stats_reset() { bench_redis CONFIG RESETSTAT >/dev/null; }

# One line per command: "<cmd> <calls> <usec>"; failed or rejected calls
# (e.g. a missing library) as "<cmd>!failed <n> 0", so they show up.
bench_stats() {
    bench_redis INFO commandstats | tr -d '\r' | awk -F'[:,=]' '
        /^cmdstat_/ {
            cmd = substr($1, 9); calls = usec = failed = rejected = 0
            for (i = 2; i <= NF; i += 2) {
                if ($i == "calls") calls = $(i + 1)
                if ($i == "usec") usec = $(i + 1)
                if ($i == "failed_calls") failed = $(i + 1)
                if ($i == "rejected_calls") rejected = $(i + 1)
            }
            print cmd, calls, usec
            if (failed + rejected > 0) print cmd "!failed", failed + rejected, 0
        }'
}

# Commands a client sends (round trips). Everything else in commandstats
# was run by the Lua library inside one of those FCALLs (Redis counts
# those too), or is the benchmark's own INFO/CONFIG.
BENCH_CLIENT_CMDS='^(fcall|fcall_ro|function[|].*|evalsha|eval|evalsha_ro|eval_ro|blpop|brpop|auth|select|ping|hello|client[|].*|quit|script[|].*)(!failed)?$'

# bench_calls STATS REGEX : calls of the commands matching REGEX
bench_calls() { awk -v re="$2" '$1 ~ re { n += $2 } END { print n + 0 }' <<<"$1"; }
# bench_usec STATS REGEX : Redis-side microseconds spent in those commands
bench_usec() { awk -v re="$2" '$1 ~ re { n += $3 } END { print n + 0 }' <<<"$1"; }
# Round trips: client-sent commands, not counting the benchmark's own
bench_roundtrips() { bench_calls "$1" "$BENCH_CLIENT_CMDS"; }
# Commands run inside scripts
bench_inner() { awk -v re="$BENCH_CLIENT_CMDS" '$1 !~ re && $1 !~ /^(info|config[|]resetstat)$/ { n += $2 } END { print n + 0 }' <<<"$1"; }
# The client-sent commands seen, on one line ("fcall=12 blpop=3")
bench_stats_line() {
    awk -v re="$BENCH_CLIENT_CMDS" '$1 ~ re { printf "%s%s=%s", sep, $1, $2; sep = " " } END { if (!sep) printf "none"; print "" }' <<<"$1"
}

bench_now() { date +%s.%N; }

# bench_ping_us SOCKET : one Redis PING round trip in microseconds (one
# client, no pipelining; PING has no key, so no -r keyspace): the median of
# five runs of 20000 (one run alone made the hop ratio wander)
bench_ping_us() {
    local rps i
    for i in 1 2 3 4 5; do
        rps=$(redis-benchmark -s "$1" -t ping_mbulk -c 1 -n 20000 -P 1 -q 2>/dev/null |
            sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p' | head -n 1)
        bench_div 1000000 "${rps:-0}" '%.1f'
    done | sort -g | sed -n 3p
}
bench_ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "n/a"; else printf "%.2f\n", a / b }'; }
bench_div() { awk -v a="$1" -v b="$2" -v f="${3:-%.2f}" 'BEGIN { if (b + 0 == 0) print "n/a"; else printf f "\n", a / b }'; }

# Key of a semaphore (default prefix "redsem:", names without special bytes)
# The name of redsem's function library (and function), as src/script.c
# makes it: redsem_ and 16 hex digits of the script's SHA1.
bench_library() { printf 'redsem_%s' "$(sha1sum <"$BENCH_DIR/../src/redsem.lua" | cut -c1-16)"; }
bench_key() { printf 'redsem:{%s}:%s' "$1" "$2"; }

# bench_wait_for DESC SECONDS CMD... : poll until CMD succeeds
bench_wait_for() {
    local desc=$1 secs=$2 i
    shift 2
    for ((i = 0; i < secs * 20; i++)); do
        "$@" && return 0
        sleep 0.05
    done
    redsem_die "timed out waiting for $desc"
}

bench_header() {
    printf '%s\n' "$1"
    printf 'date: %s   host: %s   cores: %s   %s   Redis %s\n' \
        "$(date -u '+%Y-%m-%d %H:%M:%S UTC')" "$(hostname)" "$(nproc)" \
        "PostgreSQL $(redsem_as_postgres postgres --version | sed 's/.*) //')" \
        "$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')"
    printf 'load average at start: %s (other work on the machine skews absolute figures; compare ratios)\n' \
        "$(cut -d' ' -f1-3 /proc/loadavg)"
}

# bench_start_cluster : three Redis Cluster primaries on loopback ports, as
# postgres, in BENCH_TMP/n0..n2 (NODE_DIRS), their ports in PORTS, the
# cluster created and its state ok.  The caller stops them (stop_nodes).
bench_start_cluster() {
    local i port
    NODE_DIRS=() PORTS=()
    for i in 0 1 2; do
        port=$(redsem_free_port)
        mkdir -p "$BENCH_TMP/n$i"
        chown postgres "$BENCH_TMP/n$i"
        NODE_DIRS+=("$BENCH_TMP/n$i")
        redsem_as_postgres redis-server --bind 127.0.0.1 --port "$port" \
            --cluster-enabled yes --cluster-config-file nodes.conf \
            --cluster-port "$(redsem_free_port)" --cluster-node-timeout 20000 \
            --cluster-require-full-coverage no --save '' --appendonly no \
            --daemonize yes --pidfile "$BENCH_TMP/n$i/redis.pid" \
            --dir "$BENCH_TMP/n$i" --logfile "$BENCH_TMP/n$i/redis.log"
        PORTS+=("$port")
    done
    for port in "${PORTS[@]}"; do
        bench_wait_for "Redis on $port" 10 bash -c "[ \"\$(redis-cli -p $port ping 2>/dev/null)\" = PONG ]"
    done
    redis-cli --cluster create "${PORTS[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes >"$BENCH_TMP/create.log" 2>&1
    for port in "${PORTS[@]}"; do
        bench_wait_for "the cluster" 60 bash -c "redis-cli -p $port CLUSTER INFO | grep -q cluster_state:ok"
    done
}

# stop_nodes : stop the cluster's nodes (by the pids they wrote), then
# everything else (an EXIT trap)
stop_nodes() {
    local d
    for d in "${NODE_DIRS[@]}"; do
        [[ -f $d/redis.pid ]] && kill "$(cat "$d/redis.pid")" 2>/dev/null || true
    done
    bench_cleanup
}

# bench_start_relay : socat (if installed), as postgres, relaying bytes
# between RELAY_SOCK (BENCH_TMP/relay/relay.sock) and BENCH_SOCK, nothing
# parsed: what any process in the path costs.  RELAY_SOCK is empty
# without socat.
bench_start_relay() {
    RELAY_SOCK=
    command -v socat >/dev/null || return 0
    mkdir -p "$BENCH_TMP/relay"
    chown postgres "$BENCH_TMP/relay"
    RELAY_SOCK=$BENCH_TMP/relay/relay.sock
    bench_bg redsem_as_postgres socat "UNIX-LISTEN:$RELAY_SOCK,fork,mode=700,backlog=256" "UNIX-CONNECT:$BENCH_SOCK" \
        >"$BENCH_TMP/relay/socat.log" 2>&1
    bench_wait_for "the relay" 10 test -S "$RELAY_SOCK"
}

# bench_stop_relay : end it (socat runs under runuser: found by its socket's path)
bench_stop_relay() {
    [[ -z ${RELAY_SOCK:-} ]] || pkill -f "UNIX-LISTEN:$RELAY_SOCK" 2>/dev/null || true
}
