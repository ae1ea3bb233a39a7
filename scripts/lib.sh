# shellcheck shell=bash
#
# scripts/lib.sh - shared helpers for redsem's shell harness.
#
# Sourced by scripts/test.sh and scripts/demo.sh (never run directly). It
# provides:
#
#   redsem_install_deps        apt-get install the build/test dependencies
#   redsem_build_install       make && make install in the repository root
#   redsem_make_tmpdir PREFIX  private temp dir owned by postgres -> $REDSEM_TMPDIR
#   redsem_start_redis DIR     private Redis on DIR/redis.sock (no TCP port)
#   redsem_stop_redis DIR
#   redsem_start_pg DIR        private PostgreSQL in DIR/pgdata, socket in DIR
#   redsem_stop_pg DIR
#   redsem_psql DIR ARGS...    psql -X -A -t -q against that server, as postgres
#   redsem_as_postgres CMD...  run a command as the postgres user
#   redsem_cleanup             stop whatever was started, remove $REDSEM_TMPDIR
#
# The caller owns the traps, typically:
#
#   trap redsem_cleanup EXIT
#   trap 'exit 130' INT
#   trap 'exit 143' TERM
#
# Nothing here touches system services or the default ports (5432, 6379):
# Redis listens on a unix socket only, PostgreSQL on a unix socket only
# (listen_addresses = ''), both inside a private temp directory.
#
# Environment knobs:
#   REDSEM_PG_MAJOR=N    use PostgreSQL N (default: the newest installed, or
#                        the one this Debian release ships)
#   REDSEM_REDIS=valkey  test against Valkey instead of Redis
#   REDSEM_KEEP=1        keep the temp dir (servers are still stopped)
#   REDSEM_NO_PRELOAD=1  start PostgreSQL without shared_preload_libraries
#                        (only for debugging the harness itself)

if [[ -n "${REDSEM_LIB_SOURCED:-}" ]]; then
    return 0
fi
REDSEM_LIB_SOURCED=1

# --- constants ---------------------------------------------------------------

# Repository root: the parent of the directory holding this file.
REDSEM_REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Which PostgreSQL: $REDSEM_PG_MAJOR if set, else the newest one installed,
# else the one this Debian release ships (found once apt knows the
# packages, see redsem_install_deps). Which server: REDSEM_REDIS=redis
# (default) or valkey.
REDSEM_PG_MAJOR=${REDSEM_PG_MAJOR:-}
REDSEM_REDIS=${REDSEM_REDIS:-redis}
REDSEM_PG_BINDIR=
REDSEM_PG_CONFIG=
REDSEM_BASE_PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}"

# A locale that exists on every Debian (libc-bin ships C.UTF-8): avoids
# initdb failing on a LANG inherited from a desktop session.
export LC_ALL=C.UTF-8 LANG=C.UTF-8
unset LANGUAGE

# Use PostgreSQL major $1: its binaries first in PATH.
redsem_use_pg_major() {
    REDSEM_PG_MAJOR=$1
    REDSEM_PG_BINDIR=/usr/lib/postgresql/$1/bin
    REDSEM_PG_CONFIG=$REDSEM_PG_BINDIR/pg_config
    export PATH="$REDSEM_PG_BINDIR:$REDSEM_BASE_PATH"
}

# The newest PostgreSQL major whose server is installed, or nothing.
redsem_installed_pg_major() {
    local f
    for f in /usr/lib/postgresql/*/bin/postgres; do
        if [[ -x $f ]]; then basename "$(dirname "$(dirname "$f")")"; fi
    done | sort -n | tail -n 1
}

# The PostgreSQL major of this Debian release's "postgresql" package.
redsem_packaged_pg_major() {
    { apt-cache depends postgresql 2>/dev/null || true; } |
        sed -nE 's/^ *Depends: postgresql-([0-9]+)$/\1/p' | head -n 1
}

[[ -n $REDSEM_PG_MAJOR ]] || REDSEM_PG_MAJOR=$(redsem_installed_pg_major)
if [[ -n $REDSEM_PG_MAJOR ]]; then
    redsem_use_pg_major "$REDSEM_PG_MAJOR"
else
    export PATH=$REDSEM_BASE_PATH
fi

# Debian packages needed to build and test (for the PostgreSQL major and
# server chosen): build tools, the server and its headers (and the GSSAPI
# headers libpq/libpq-be.h includes in Debian's builds, which have GSSAPI:
# libkrb5-dev), hiredis, the Redis or Valkey server and client, perl/IPC::Run for the TAP tests, and
# OpenSSL (TLS with hiredis >= 1.0, and the throwaway CA of the TLS test),
# libfaketime (a server whose wall clock steps, t/081).
redsem_packages() {
    printf '%s\n' build-essential pkg-config \
        "postgresql-$REDSEM_PG_MAJOR" "postgresql-client-$REDSEM_PG_MAJOR" \
        "postgresql-server-dev-$REDSEM_PG_MAJOR" libkrb5-dev \
        libhiredis-dev libssl-dev openssl perl libipc-run-perl procps util-linux coreutils \
        pgbouncer locales libfaketime
    case $REDSEM_REDIS in
    valkey) printf '%s\n' valkey-server valkey-tools ;;
    *) printf '%s\n' redis-server redis-tools ;;
    esac
}

# Packages some tests use when this Debian release has them (those tests
# skip, saying so, where it does not): the real Prometheus exporter.
redsem_optional_packages() {
    printf '%s\n' prometheus-postgres-exporter
}

# Print the optional packages that are missing but apt can install.
redsem_missing_optional_packages() {
    local pkg status candidate
    while IFS= read -r pkg; do
        status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
        [[ $status == "install ok installed" ]] && continue
        candidate=$(apt-cache policy "$pkg" 2>/dev/null | sed -n 's/^ *Candidate: //p')
        [[ -n $candidate && $candidate != "(none)" ]] && printf '%s\n' "$pkg"
    done < <(redsem_optional_packages)
}

# The server and client programs: redis-server/redis-cli, or Valkey's.
redsem_server_bin() { [[ $REDSEM_REDIS == valkey ]] && echo valkey-server || echo redis-server; }
redsem_cli_bin() { [[ $REDSEM_REDIS == valkey ]] && echo valkey-cli || echo redis-cli; }

# State for redsem_cleanup.
REDSEM_TMPDIR=${REDSEM_TMPDIR:-}
REDSEM_POLICY_RC_CREATED=
REDSEM_REDIS_DIRS=()
REDSEM_PG_DIRS=()

# --- messages ----------------------------------------------------------------

redsem_log() { printf '==> %s\n' "$*" >&2; }
redsem_warn() { printf 'redsem: warning: %s\n' "$*" >&2; }
redsem_die() {
    printf 'redsem: error: %s\n' "$*" >&2
    exit 1
}

# --- privileges --------------------------------------------------------------

# redsem_as_root CMD... : run CMD as root (directly, or through sudo).
redsem_as_root() {
    if [[ ${EUID} -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -- "$@"
    else
        redsem_die "root is needed for: $* (run this script as root, e.g. with sudo)"
    fi
}

# redsem_reexec_as_root SCRIPT ARGS... : if not root, re-run the whole
# script as root through sudo, keeping the REDSEM_* settings.
redsem_reexec_as_root() {
    [[ ${EUID} -eq 0 ]] && return 0
    command -v sudo >/dev/null 2>&1 ||
        redsem_die "this script must run as root (PostgreSQL tests run as the postgres user via runuser); sudo is not available"
    local script=$1
    shift
    local keep=() var
    for var in $(compgen -e); do
        [[ $var == REDSEM_* && $var != REDSEM_LIB_SOURCED ]] && keep+=("$var=${!var}")
    done
    redsem_log "not root: re-running through sudo"
    exec sudo -- env "${keep[@]}" bash "$script" "$@"
}

# redsem_as_postgres CMD... : run CMD as the postgres user with a clean,
# explicit environment (runuser keeps the caller's environment, but HOME
# and PATH must suit postgres). Extra variables: put VAR=value words first
# (they are handed to env).
redsem_as_postgres() {
    local envs=(
        HOME=/var/lib/postgresql
        PATH="${REDSEM_TMPDIR:+$REDSEM_TMPDIR/bin:}${REDSEM_PG_BINDIR}:/usr/local/bin:/usr/bin:/bin"
        LC_ALL=C.UTF-8 LANG=C.UTF-8
    )
    # Run from / when postgres may not enter the current directory (say
    # /root/checkout): psql, initdb and pg_ctl complain otherwise.
    redsem_postgres_can_enter_cwd || envs=(-C / "${envs[@]}")
    if [[ $(id -un) == postgres ]]; then
        env "${envs[@]}" "$@"
    elif [[ ${EUID} -eq 0 ]]; then
        runuser -u postgres -- env "${envs[@]}" "$@"
    else
        sudo -u postgres -- env "${envs[@]}" "$@"
    fi
}

# Can the postgres user cd into the current directory? (Cached per directory.)
REDSEM_CWD_CHECKED=
REDSEM_CWD_OK=
# shellcheck disable=SC2016 # $1 is expanded by sh -c, on purpose
redsem_postgres_can_enter_cwd() {
    if [[ $REDSEM_CWD_CHECKED != "$PWD" ]]; then
        REDSEM_CWD_OK=no
        if [[ $(id -un) == postgres ]]; then
            REDSEM_CWD_OK=yes
        elif [[ ${EUID} -eq 0 ]]; then
            runuser -u postgres -- sh -c 'cd "$1"' sh "$PWD" 2>/dev/null && REDSEM_CWD_OK=yes
        else
            sudo -u postgres -- sh -c 'cd "$1"' sh "$PWD" 2>/dev/null && REDSEM_CWD_OK=yes
        fi
        REDSEM_CWD_CHECKED=$PWD
    fi
    [[ $REDSEM_CWD_OK == yes ]]
}

# --- dependencies ------------------------------------------------------------

# Print the packages of redsem_packages that are not installed.
redsem_missing_packages() {
    local pkg status
    while IFS= read -r pkg; do
        status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
        [[ $status == "install ok installed" ]] || printf '%s\n' "$pkg"
    done < <(redsem_packages)
}

# Keep apt from starting the redis-server / postgresql services it installs:
# a policy-rc.d that answers 101 ("action forbidden"). Only ours is removed.
redsem_block_service_start() {
    [[ -e /usr/sbin/policy-rc.d ]] && return 0
    printf '#!/bin/sh\n# temporary, from redsem scripts/lib.sh\nexit 101\n' |
        redsem_as_root tee /usr/sbin/policy-rc.d >/dev/null
    redsem_as_root chmod 755 /usr/sbin/policy-rc.d
    REDSEM_POLICY_RC_CREATED=1
}

redsem_unblock_service_start() {
    if [[ -n $REDSEM_POLICY_RC_CREATED ]]; then
        redsem_as_root rm -f /usr/sbin/policy-rc.d
        REDSEM_POLICY_RC_CREATED=
    fi
}

# apt-get ARGS..., quietly, its output kept in LOG and shown if it fails.
redsem_apt() {
    local log=$1 rc=0
    shift
    redsem_as_root env DEBIAN_FRONTEND=noninteractive \
        apt-get -q -o Dpkg::Use-Pty=0 "$@" >>"$log" 2>&1 || rc=$?
    if [[ $rc -ne 0 ]]; then
        tail -n 60 "$log" >&2
        redsem_unblock_service_start
        redsem_die "apt-get $1 failed (status $rc); its last lines are above"
    fi
}

# Install every package of redsem_packages that is missing. apt-get update
# runs only when something is missing (or the PostgreSQL major is still
# unknown), so a second run is fast.
redsem_install_deps() {
    command -v dpkg-query >/dev/null 2>&1 ||
        redsem_die "dpkg-query not found: these scripts need Debian (12, 13 or unstable)"
    local missing aptlog updated=
    aptlog=$(mktemp /tmp/redsem-apt.XXXXXXXX)
    redsem_block_service_start
    if [[ -z $REDSEM_PG_MAJOR ]]; then
        redsem_log "finding the PostgreSQL major this Debian release ships (apt-get update)"
        redsem_apt "$aptlog" update
        updated=1
        REDSEM_PG_MAJOR=$(redsem_packaged_pg_major)
        [[ -n $REDSEM_PG_MAJOR ]] ||
            redsem_die "apt knows no 'postgresql' package: set REDSEM_PG_MAJOR"
    fi
    redsem_use_pg_major "$REDSEM_PG_MAJOR"
    mapfile -t missing < <(redsem_missing_packages)
    [[ ${#missing[@]} -gt 0 && -z $updated ]] && { redsem_apt "$aptlog" update; updated=1; }
    mapfile -t -O "${#missing[@]}" missing < <(redsem_missing_optional_packages)
    if [[ ${#missing[@]} -eq 0 ]]; then
        redsem_unblock_service_start
        rm -f "$aptlog"
        redsem_log "dependencies already installed (PostgreSQL $REDSEM_PG_MAJOR, $REDSEM_REDIS)"
        return 0
    fi
    redsem_log "installing with apt-get (a few minutes on a fresh machine): ${missing[*]}"
    [[ -n $updated ]] || redsem_apt "$aptlog" update
    redsem_apt "$aptlog" -y install --no-install-recommends "${missing[@]}"
    redsem_unblock_service_start
    rm -f "$aptlog"
    mapfile -t missing < <(redsem_missing_packages)
    [[ ${#missing[@]} -eq 0 ]] || redsem_die "still missing after apt-get: ${missing[*]}"
    id postgres >/dev/null 2>&1 ||
        redsem_die "user postgres does not exist after installing postgresql-$REDSEM_PG_MAJOR"
}

# --- build -------------------------------------------------------------------

# redsem_build_install : make, then make install, in the repository root.
# When root runs this (sudo) in a checkout owned by a normal user, the build
# itself runs as that user so the object files do not end up owned by root;
# only "make install" runs as root.
redsem_build_install() {
    local make_args=(-s -C "$REDSEM_REPO_ROOT" "PG_CONFIG=$REDSEM_PG_CONFIG")
    local owner
    owner=$(stat -c %U "$REDSEM_REPO_ROOT")
    redsem_log "building redsem in $REDSEM_REPO_ROOT"
    if [[ ${EUID} -eq 0 && $owner != root && $owner != UNKNOWN ]] &&
        id "$owner" >/dev/null 2>&1; then
        runuser -u "$owner" -- env PATH="$PATH" LC_ALL=C.UTF-8 make "${make_args[@]}"
    else
        make "${make_args[@]}"
    fi
    redsem_install_notice
    redsem_as_root env PATH="$PATH" make "${make_args[@]}" install
}

# redsem_install_notice : say, before it happens, which files of the
# system PostgreSQL "make install" writes (PostgreSQL before 18 reads an
# extension's control and SQL files from its own share directory only, so
# a throwaway server cannot load redsem from a private prefix): redsem's
# library, control and SQL files, and nothing else; no server restarts.
redsem_install_notice() {
    local libdir extdir now=''
    libdir=$("$REDSEM_PG_CONFIG" --pkglibdir)
    extdir=$("$REDSEM_PG_CONFIG" --sharedir)/extension
    [[ -e $libdir/redsem.so ]] && now=' (a redsem installed there now is replaced)'
    redsem_log "NOTE: installing redsem into the system PostgreSQL $REDSEM_PG_MAJOR: $libdir/redsem.so and" \
        "$extdir/redsem.control, redsem--*.sql$now; nothing else of the machine's PostgreSQL is touched and" \
        "no server is restarted"
}

# --- temp dir ----------------------------------------------------------------

# redsem_make_tmpdir PREFIX : create /tmp/PREFIX.XXXXXXXX, mode 700, owned by
# postgres, and record it in REDSEM_TMPDIR for redsem_cleanup.
redsem_make_tmpdir() {
    local prefix=${1:-redsem}
    REDSEM_TMPDIR=$(mktemp -d "/tmp/${prefix}.XXXXXXXX")
    chmod 700 "$REDSEM_TMPDIR"
    # redis-server and redis-cli, first in the PATH of everything run as
    # postgres, are the chosen server's (Redis's own, or Valkey's)
    mkdir -p "$REDSEM_TMPDIR/bin"
    ln -s "$(command -v "$(redsem_server_bin)")" "$REDSEM_TMPDIR/bin/redis-server" ||
        redsem_die "$(redsem_server_bin) not found"
    ln -s "$(command -v "$(redsem_cli_bin)")" "$REDSEM_TMPDIR/bin/redis-cli" ||
        redsem_die "$(redsem_cli_bin) not found"
    if [[ $(id -un) != postgres ]]; then
        redsem_as_root chown postgres:postgres "$REDSEM_TMPDIR"
    fi
}

# --- Redis -------------------------------------------------------------------

# redsem_start_redis DIR : private redis-server, as postgres, listening only
# on DIR/redis.sock; waits (10 s at most) until it answers PING.
redsem_start_redis() {
    local dir=$1
    local sock=$dir/redis.sock
    redsem_log "starting Redis on $sock"
    redsem_as_postgres env ${REDSEM_TEST_REDIS_LOCALE:+"LOCPATH=${REDSEM_TEST_REDIS_LOCALE%%:*}" "LC_ALL=${REDSEM_TEST_REDIS_LOCALE#*:}"} \
        redis-server \
        --port 0 --unixsocket "$sock" --unixsocketperm 700 \
        --save '' --appendonly no --daemonize yes --enable-debug-command local \
        --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --dir "$dir" ||
        redsem_die "redis-server failed to start"
    REDSEM_REDIS_DIRS+=("$dir")
    local i
    for ((i = 0; i < 100; i++)); do
        if [[ $(redsem_as_postgres redis-cli -s "$sock" ping 2>/dev/null) == PONG ]]; then
            return 0
        fi
        sleep 0.1
    done
    tail -n 20 "$dir/redis.log" >&2 2>/dev/null || true
    redsem_die "Redis on $sock did not answer PING within 10 s"
}

# redsem_make_locale DIR : compile en_US.UTF-8 into DIR (LOCPATH; nothing
# of the system's changes) and set REDSEM_TEST_REDIS_LOCALE to
# "DIR:en_US.UTF-8", under which the tests' Redis servers then run: a
# locale that collates unlike bytes ('a' before 'B'), as production's often
# is.
redsem_make_locale() {
    local dir=$1
    mkdir -p "$dir"
    localedef -i en_US -f UTF-8 "$dir/en_US.UTF-8" ||
        redsem_die "localedef could not make en_US.UTF-8 (package locales)"
    chmod -R a+rX "$dir"
    export REDSEM_TEST_REDIS_LOCALE=$dir:en_US.UTF-8
}

# redsem_stop_redis DIR : SHUTDOWN NOSAVE, falling back to killing the pid.
redsem_stop_redis() {
    local dir=$1
    local sock=$dir/redis.sock pidfile=$dir/redis.pid pid=
    [[ -s $pidfile ]] && pid=$(<"$pidfile")
    if [[ -S $sock ]]; then
        redsem_as_postgres redis-cli -s "$sock" shutdown nosave >/dev/null 2>&1 || true
    fi
    if [[ -n $pid ]]; then
        local i
        for ((i = 0; i < 50; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            redsem_warn "Redis (pid $pid) ignored SHUTDOWN; killing it"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$sock" "$pidfile"
}

# --- PostgreSQL --------------------------------------------------------------

# Is TCP port $1 listened on (IPv4 or IPv6)? Reads /proc, so it needs no ss.
redsem_port_in_use() {
    local hex
    hex=$(printf '%04X' "$1")
    awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { found = 1 }
                      END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null && return 0
    # A socket file of another cluster using that port number.
    [[ -e /tmp/.s.PGSQL.$1 || -e /var/run/postgresql/.s.PGSQL.$1 ]]
}

# Print a random port in 20000-39999 that nothing listens on.
redsem_free_port() {
    local i port
    for ((i = 0; i < 100; i++)); do
        port=$((20000 + RANDOM % 20000))
        if ! redsem_port_in_use "$port"; then
            printf '%s\n' "$port"
            return 0
        fi
    done
    redsem_die "no free port found in 20000-39999"
}

# Port of the server started by redsem_start_pg in DIR.
redsem_pg_port() { cat "$1/pg.port"; }

# redsem_start_pg DIR : initdb DIR/pgdata as postgres, unix socket in DIR on
# a free port, redsem preloaded and pointed at DIR/redis.sock; start it.
redsem_start_pg() {
    local dir=$1
    local data=$dir/pgdata port
    port=$(redsem_free_port)
    redsem_log "initdb in $data"
    redsem_as_postgres initdb -D "$data" -U postgres --auth=trust \
        --no-locale --encoding=UTF8 --no-sync >"$dir/initdb.log" 2>&1 || {
        cat "$dir/initdb.log" >&2
        redsem_die "initdb failed"
    }
    {
        printf '\n# --- added by redsem scripts/lib.sh ---\n'
        printf "listen_addresses = ''\n"
        printf 'port = %s\n' "$port"
        printf "unix_socket_directories = '%s'\n" "$dir"
        if [[ -z ${REDSEM_NO_PRELOAD:-} ]]; then
            printf "shared_preload_libraries = 'redsem'\n"
        fi
        printf "redsem.unix_socket = '%s'\n" "$dir/redis.sock"
        # A throwaway server: durability does not matter.
        printf 'fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n'
        # anything the caller adds (REDSEM_PG_EXTRA_CONF: lines of settings)
        [[ -z ${REDSEM_PG_EXTRA_CONF:-} ]] || printf '%s\n' "$REDSEM_PG_EXTRA_CONF"
    } >>"$data/postgresql.conf"
    printf '%s\n' "$port" >"$dir/pg.port"
    redsem_log "starting PostgreSQL on $dir/.s.PGSQL.$port"
    REDSEM_PG_DIRS+=("$dir")
    if ! redsem_as_postgres pg_ctl -D "$data" -l "$dir/postgres.log" -w -t 60 start >/dev/null; then
        tail -n 30 "$dir/postgres.log" >&2 2>/dev/null || true
        redsem_die "PostgreSQL failed to start"
    fi
}

# redsem_stop_pg DIR : fast shutdown, immediate if that does not work.
redsem_stop_pg() {
    local data=$1/pgdata
    [[ -f $data/postmaster.pid ]] || return 0
    redsem_as_postgres pg_ctl -D "$data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
        redsem_as_postgres pg_ctl -D "$data" -m immediate -w -t 30 stop >/dev/null 2>&1 ||
        redsem_warn "could not stop PostgreSQL in $data"
}

# redsem_psql DIR ARGS... : psql as postgres against the server in DIR.
# Extra environment for psql: call redsem_as_postgres env VAR=... psql instead
# (see redsem_psql_args).
redsem_psql() {
    local dir=$1
    shift
    local args
    mapfile -t args < <(redsem_psql_args "$dir")
    redsem_as_postgres psql "${args[@]}" "$@"
}

# Print (one per line) the psql options to reach the server in DIR.
redsem_psql_args() {
    printf '%s\n' -X -A -t -q -v ON_ERROR_STOP=1 \
        -h "$1" -p "$(redsem_pg_port "$1")" -U postgres -d postgres
}

# --- cleanup -----------------------------------------------------------------

# redsem_cleanup : stop every server started through this file, drop the
# temporary policy-rc.d, remove $REDSEM_TMPDIR (kept if REDSEM_KEEP=1).
# Safe to call more than once.
redsem_cleanup() {
    local dir
    for dir in "${REDSEM_PG_DIRS[@]}"; do
        redsem_stop_pg "$dir"
    done
    REDSEM_PG_DIRS=()
    for dir in "${REDSEM_REDIS_DIRS[@]}"; do
        redsem_stop_redis "$dir"
    done
    REDSEM_REDIS_DIRS=()
    redsem_unblock_service_start
    if [[ -n $REDSEM_TMPDIR && -d $REDSEM_TMPDIR ]]; then
        if [[ ${REDSEM_KEEP:-} == 1 ]]; then
            redsem_log "kept temp dir: $REDSEM_TMPDIR"
        else
            rm -rf -- "$REDSEM_TMPDIR"
        fi
    fi
    REDSEM_TMPDIR=
}
