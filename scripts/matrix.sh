#!/usr/bin/env bash
#
# scripts/matrix.sh - the README's test command on fresh roots of the other
# Debian releases, and the Debian package built, installed and tested there.
#
#   sudo bash scripts/matrix.sh                 # all targets
#   sudo bash scripts/matrix.sh trixie          # some of: trixie sid sid-valkey
#
# For each release (Debian 13 "trixie", Debian unstable "sid"): make a
# minimal root with debootstrap from the Debian mirror this machine uses,
# bind-mount /proc, /sys and /dev, copy the repository in, and run
# "bash scripts/test.sh" there as a fresh machine would (it installs what
# it needs, builds, installs and runs the suite (see the skips below), with two of the
# four failover rounds and 1,500 random model steps; see run_target).  Then build the
# package with dpkg-buildpackage, install it, and run the regress and
# isolation tests against the installed package.  "sid-valkey" runs the
# suite once more in the sid root, against Valkey instead of Redis (the
# TAP files in VALKEY_TAP).  The other TAP files are split between the
# roots (EVERY_ROOT, TRIXIE_TAP, SID_TAP, HOST_ONLY below); the host runs
# them all.
#
# Prints one table: release, PostgreSQL, hiredis, server, the counts of
# each part, the package check, and the time.  Exits non-zero if any target
# failed (a test, the package, a compiler warning), including a root that
# could not be made (never a silent skip).
# Debian unstable's Release file may be past its Valid-Until date on a
# snapshot mirror: that is tolerated for sid only.
#
# Environment: REDSEM_MATRIX_DIR (default: matrix-out/ in the repository)
# holds the roots and logs; REDSEM_KEEP=1 keeps the roots afterwards;
# REDSEM_MODEL_STEPS (default 1500) is passed on to t/020.

set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${REDSEM_MATRIX_DIR:-$REPO/matrix-out}
TARGETS=("$@")
[[ ${#TARGETS[@]} -gt 0 ]] || TARGETS=(trixie sid sid-valkey)

log() { printf '==> [matrix] %s\n' "$*" >&2; }
die() {
    printf 'redsem matrix: error: %s\n' "$*" >&2
    exit 1
}

# Which TAP files each root runs.  The host runs them all; the roots are
# there for what differs on their platform (PostgreSQL 17 and 18, hiredis
# 1.2 with TLS, Redis 8, Valkey), so each file runs in one root at least,
# and those where PostgreSQL's version shows most (exit and commit
# callbacks, the keeper, upgrades, TLS, PgBouncer, the exporter, the
# README's examples) in both: .ci/run took 61 minutes on 2 cores with
# nearly every file in both roots, past its 50.  The other files are
# split between the roots by their time on the host (about 14 minutes of
# files each), with these kept where they were put for a reason: t/102
# (the broker: a forked child's use of the server's code changes most in
# PostgreSQL 18) and t/114 (the status API PostgreSQL 17 renamed) in sid.
# A file in no list (a new one) runs in both roots.
EVERY_ROOT='t/000_release.pl t/001_concurrency.pl t/002_redis_failures.pl t/003_session_exit.pl
t/004_layers.pl t/005_lua_locals.pl t/010_keeper.pl t/022_callbacks.pl t/030_upgrade.pl t/051_tls.pl
t/060_pgbouncer.pl t/061_prometheus_exporter.pl t/062_readme_examples.pl'
TRIXIE_TAP='t/013_ownership.pl t/015_host_names.pl t/023_waiters.pl t/025_keeper_batches.pl
t/026_grant_replicas.pl t/027_session_limits.pl t/040_queues.pl t/041_queue_edges.pl
t/042_deferred_release.pl t/045_deadlock_reserve.pl t/052_cluster.pl t/063_fleet_view.pl
t/065_priorities.pl t/067_class_failures.pl t/072_cluster_keeper_pipeline.pl t/074_role_holds.pl
t/082_forget_grace.pl t/083_failover_lost_writes.pl t/086_queue_light.pl t/091_light_nested.pl
t/092_light_nesting.pl t/094_queue_fleet.pl t/096_queue_fleet_forget.pl t/099_ride_wait_edges.pl
t/100_queue_moves.pl t/101_adaptive.pl t/103_broker_edges.pl t/104_broker_cluster.pl
t/106_sentinel_password_rotation.pl t/107_grant_link_closed.pl t/110_reload_same_data.pl'
SID_TAP='t/011_many_servers.pl t/012_observability.pl t/014_redis_errors.pl t/020_script_model.pl
t/021_keeper_isolation.pl t/024_permits.pl t/028_failover_line.pl t/029_grant_lease_left.pl
t/046_deadlock_look_memory.pl t/050_sentinel.pl t/053_cluster_hung_node.pl
t/054_sentinel_hung_primary.pl t/064_rates.pl t/066_tenants.pl t/069_fleet_far_redis.pl
t/071_keeper_hopeless_item.pl t/080_slot_lost.pl t/085_queue_cap_online.pl t/087_light_escapes.pl
t/090_cluster_migration.pl t/093_queue_copy.pl t/095_queue_fleet_races.pl
t/097_queue_fleet_rollback.pl t/098_release_refresh_race.pl t/102_broker.pl
t/105_password_rotation.pl t/108_broker_fd_limit.pl t/109_reload_ignored_host.pl
t/111_keeper_retry_in_lease.pl t/113_queue_own_timeouts.pl t/114_caught_cancel.pl
t/116_redis_restart_waiters.pl'
# On the host alone: the keeper's own timing and log lines, the same on
# every platform and mostly waiting (t/112: 35 s; t/115: 40 s through two
# Redis restarts), and t/070 (a keeper's 1 s lease kept alive while its
# touch hangs), which failed once in each root on 2026-11-30 (a refresh
# 0.3 s late) and never on the host, until that is understood.  t/081
# and t/084 test what Redis does under faults, not what PostgreSQL does:
# the host (Redis 7.0) and Valkey run them.
HOST_ONLY='t/070_keeper_wake_during_touch.pl t/081_history_faults.pl t/084_failover_check_costs.pl
t/112_keeper_lines_left_out.pl t/115_queue_drop_forgot.pl'
# Valkey runs the files that put the script through its paths (the model,
# failures, waiters, permits, rates, grant_replicas, lost slots and writes,
# Sentinel, Cluster); the others call it exactly as these do.
VALKEY_TAP='t/001_concurrency.pl t/002_redis_failures.pl t/005_lua_locals.pl t/014_redis_errors.pl
t/020_script_model.pl t/023_waiters.pl t/024_permits.pl t/026_grant_replicas.pl t/050_sentinel.pl
t/052_cluster.pl t/064_rates.pl t/080_slot_lost.pl t/081_history_faults.pl
t/084_failover_check_costs.pl'

# skip_but "t/X.pl ..": every TAP file of the repository but those (for
# REDSEM_TAP_SKIP)
skip_but() {
    local f out=()
    for f in "$REPO"/t/*.pl; do
        f=${f#"$REPO"/}
        [[ " ${1//$'\n'/ } " == *" $f "* ]] || out+=("$f")
    done
    echo "${out[*]}"
}

# root_skip "its own files": what a root leaves out: the other root's
# files, the host's and Valkey's alone
root_skip() {
    local f out=() all=" ${EVERY_ROOT//$'\n'/ } ${1//$'\n'/ } "
    for f in ${TRIXIE_TAP//$'\n'/ } ${SID_TAP//$'\n'/ } ${HOST_ONLY//$'\n'/ }; do
        [[ $all == *" $f "* ]] || out+=("$f")
    done
    echo "${out[*]}"
}

MOUNTED=()
ROWS=()
FAILED=0

# --- roots -------------------------------------------------------------------

# The Debian mirror this machine's apt uses (its first non-security one).
mirror() {
    local uri
    uri=$(grep -hsE '^[[:space:]]*(deb[[:space:]]|URIs:)' /etc/apt/sources.list /etc/apt/sources.list.d/* |
        grep -oE '(https?|ftp)://[^[:space:]]+' | grep -v -- '-security' | grep -E '/debian/?$' | head -n 1 || true)
    echo "${uri:-http://deb.debian.org/debian}"
}

# Mount what a chroot needs; remembered for unmount_all.
mount_root() {
    local root=$1 m
    for m in proc sys dev dev/pts; do
        mountpoint -q "$root/$m" && continue
        mkdir -p "$root/$m"
        mount --bind "/$m" "$root/$m"
        MOUNTED+=("$root/$m")
    done
    cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
}

# Stop whatever still runs inside root (after a failure), then unmount.
unmount_all() {
    local i p r
    for p in /proc/[0-9]*; do
        r=$(readlink "$p/root" 2>/dev/null || true)
        [[ -n $r && $r == "$OUT"/* ]] && kill -9 "${p#/proc/}" 2>/dev/null || true
    done
    for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
        umount -l "${MOUNTED[$i]}" 2>/dev/null || true
    done
    MOUNTED=()
}

# Run a command in root as a fresh root login would.
in_root() {
    local root=$1
    shift
    chroot "$root" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 TERM=dumb "$@"
}

# A fresh minimal root of suite in dir; dies (with the reason) if it fails.
make_root() {
    local suite=$1 dir=$2 mirror
    mirror=$(mirror)
    rm -rf "$dir"
    log "debootstrap $suite from $mirror into $dir"
    if ! debootstrap --variant=minbase "$suite" "$dir" "$mirror" >"$dir.debootstrap.log" 2>&1; then
        tail -n 20 "$dir.debootstrap.log" >&2
        die "could not make a $suite root with debootstrap (log: $dir.debootstrap.log)"
    fi
    if [[ $suite == sid ]]; then
        # a snapshot mirror's unstable may be past Valid-Until: tolerate it here only
        printf 'Acquire::Check-Valid-Until "false";\n' >"$dir/etc/apt/apt.conf.d/99redsem-unstable"
    fi
    mount_root "$dir"
}

# Copy the repository's files (not its build outputs) into root/redsem.
copy_repo() {
    local root=$1
    rm -rf "$root/redsem"
    mkdir -p "$root/redsem"
    (
        cd "$REPO"
        if command -v git >/dev/null 2>&1 && git -c safe.directory="$REPO" rev-parse --git-dir >/dev/null 2>&1; then
            git -c safe.directory="$REPO" ls-files -z --cached --others --exclude-standard
        else
            find . \( -path ./.git -o -path ./matrix-out \) -prune -o -type f ! -name '*.o' ! -name '*.so' -printf '%P\0'
        fi | tar --null -T - -cf -
    ) | tar -C "$root/redsem" -xf -
}

# --- one target ----------------------------------------------------------------

# The value of "key: value" in a test log's summary, or "?".
summary() {
    local log=$1 key=$2
    sed -nE "s/^$key: //p" "$log" | tail -n 1 | grep . || echo '?'
}

# Build the package in root, install it, run regress and isolation on it.
package_check() {
    local root=$1 log=$2
    in_root "$root" bash -c '
        set -e
        apt-get -q -y install --no-install-recommends debhelper dpkg-dev postgresql-server-dev-all
        cd /redsem
        dpkg-buildpackage -us -uc -b
        dpkg -i ../postgresql-*-redsem_*_*.deb
        so=$(ls /usr/lib/postgresql/*/lib/redsem.so | tail -n 1)
        dpkg -S "$so"
        REDSEM_NO_INSTALL=1 bash scripts/test.sh regress
        REDSEM_NO_INSTALL=1 bash scripts/test.sh isolation
    ' >"$log" 2>&1
}

# What failed, from a test log: prove's failing files and each failed
# assertion with its diagnostics, and the first regression diffs (CI keeps
# only what we print, not the logs).
failure_digest() {
    local log=$1
    echo "--- failures in $log ---"
    # (each part may find nothing: that must not end the run under set -e)
    { grep -E '^\[[0-9:]+\] t/.* (Dubious|Failed)|^t/[^ ]+ +\(Wstat|^ +Failed tests?:|^  Parse errors' "$log" | head -n 40; } || true
    { grep -E -A 12 '^not ok|^# +Failed test' "$log" | grep -E '^(not ok|#)' | head -n 120; } || true
    # a test script that died (a statement that failed or hung): its message
    { grep -E -B 8 '^([^#].*)? at t/[^ ]+ line [0-9]+\.$' "$log" | grep -vE '^(ok |\[[0-9:]+\] )' | head -n 60; } || true
    { grep -E -A 40 '^diff ' "$log" | head -n 80; } || true
    echo "--- end of failures ---"
}

# Run one target; append a row to ROWS.
run_target() {
    local target=$1 suite server=redis rounds root t0 rc=0 pkg='-' log skip=''
    case $target in
    trixie) suite=trixie rounds='failover:0' skip=$(root_skip "$TRIXIE_TAP") ;;
    sid) suite=sid rounds='kill:0' skip=$(root_skip "$SID_TAP") ;;
    sid-valkey) suite=sid server=valkey rounds='failover:0 kill:0' skip=$(skip_but "$VALKEY_TAP") ;;
    *) die "unknown target '$target' (trixie, sid, sid-valkey)" ;;
    esac
    root=$OUT/$suite
    log=$OUT/$target.log
    t0=$(date +%s)
    if [[ $target != sid-valkey || ! -d $root/redsem ]]; then
        make_root "$suite" "$root"
    else
        mount_root "$root"
    fi
    copy_repo "$root"
    log "$target: bash scripts/test.sh (REDSEM_REDIS=$server) in the $suite root; log: $log"
    # The host runs two of the four failover rounds of t/050 and t/052
    # (failover:1 kill:1, the default), trixie and sid one each of the
    # other two and Valkey both of them, so that a CI run covers all four
    # on Redis; the roots run fewer random model steps than the host's
    # 4,000: .ci/run stays within its time on a slow machine.
    # Three TAP files at a time, as on the host (two until t/070, whose
    # keeper-timing check failed once at three in a root, ran on the host
    # alone: .ci/run took 49 minutes with two).
    in_root "$root" env REDSEM_REDIS="$server" REDSEM_FAILOVER_ROUNDS="$rounds" \
        REDSEM_MODEL_STEPS="${REDSEM_MODEL_STEPS:-1500}" REDSEM_TAP_SKIP="$skip" \
        REDSEM_PROVE_FLAGS="${REDSEM_PROVE_FLAGS:---timer -j3}" \
        bash -c 'cd /redsem && bash scripts/test.sh' >"$log" 2>&1 || rc=$?
    tail -n 4 "$log" >&2
    [[ $rc -eq 0 ]] || failure_digest "$log" >&2
    # TLS through the broker: Debian 12's hiredis has no TLS, so the host's
    # broker-mode run of the TAP files cannot; sid's can (t/051 as is, its
    # servers in broker mode)
    if [[ $target == sid ]]; then
        log "$target: t/051 (TLS) in broker mode; log: $OUT/$target.broker.log"
        if ! in_root "$root" env REDSEM_REDIS="$server" REDSEM_TEST_CONNECTION_MODE=broker REDSEM_NO_INSTALL=1 \
            bash -c 'cd /redsem && bash scripts/test.sh tap t/051_tls.pl' >"$OUT/$target.broker.log" 2>&1; then
            rc=1
            failure_digest "$OUT/$target.broker.log" >&2
        fi
        tail -n 2 "$OUT/$target.broker.log" >&2
    fi
    # the build must be warning-free on every release
    if grep -E '^src/[^ ]+\.[ch]:[0-9]+:[0-9]+: warning:' "$log" >&2; then
        log "$target: the build printed warnings (above)"
        rc=1
    fi
    if [[ $target != sid-valkey ]]; then
        log "$target: building, installing and testing the Debian package; log: $OUT/$target.package.log"
        if package_check "$root" "$OUT/$target.package.log"; then
            # the package that owns the installed library (dpkg -S)
            pkg=$(sed -nE 's/^(postgresql-[0-9]+-redsem): \/usr\/lib\/postgresql\/.*/\1/p' \
                "$OUT/$target.package.log" | head -n 1)
            pkg="${pkg:-?} ok"
        else
            pkg='FAILED'
            rc=1
            tail -n 30 "$OUT/$target.package.log" >&2
        fi
    fi
    [[ $rc -eq 0 ]] || FAILED=1
    ROWS+=("$(printf '%s|%s|%s|%s|%s|%s|%s' "$target" "$(summary "$log" platform)" \
        "$(summary "$log" results)" "$(summary "$log" tests)" "$pkg" \
        "$(($(date +%s) - t0)) s" "$([[ $rc -eq 0 ]] && echo PASSED || echo FAILED)")")
}

# --- main ----------------------------------------------------------------------

[[ $EUID -eq 0 ]] || exec sudo -- bash "${BASH_SOURCE[0]}" "$@"
command -v debootstrap >/dev/null 2>&1 || {
    log "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get -q update >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get -q -y install --no-install-recommends debootstrap >/dev/null ||
        die "could not install debootstrap"
}
mkdir -p "$OUT"
trap unmount_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for target in "${TARGETS[@]}"; do
    run_target "$target"
done
unmount_all
if [[ ${REDSEM_KEEP:-} != 1 ]]; then
    for target in "${TARGETS[@]}"; do
        rm -rf "${OUT:?}/${target%-valkey}"
    done
fi

echo
echo "redsem platform matrix"
printf '%-11s | %-44s | %-40s | %-26s | %-24s | %-6s | %s\n' \
    release 'PostgreSQL, hiredis, server' 'regress / isolation / TAP' tests package time result
for row in "${ROWS[@]}"; do
    IFS='|' read -r t plat res tests pkg secs result <<<"$row"
    printf '%-11s | %-44s | %-40s | %-26s | %-24s | %-6s | %s\n' \
        "$t" "$plat" "$res" "$tests" "$pkg" "$secs" "$result"
done
[[ $FAILED -eq 0 ]] && echo "matrix: PASSED" || echo "matrix: FAILED"
exit "$FAILED"
