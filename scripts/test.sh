#!/usr/bin/env bash
#
# scripts/test.sh - build, install and run redsem's whole test suite.
#
#   sudo bash scripts/test.sh                  # everything
#   sudo bash scripts/test.sh regress [TEST..] # pg_regress tests only
#   sudo bash scripts/test.sh isolation [TEST..]
#   sudo bash scripts/test.sh tap [t/FILE.pl..]
#
# Steps: install the Debian dependencies (only what is missing), build and
# install the extension, copy the repository into a private temp dir owned by
# postgres, start a private Redis there (unix socket only), then run
# "make installcheck" as postgres in the copy. The Makefile runs pg_regress
# and the isolation tests against a temporary instance configured by
# test/redsem_test.conf (written here), then the TAP tests (t/*.pl).
#
# Environment:
#   REDSEM_KEEP=1            keep the temp dir and print its path
#   REDSEM_PROVE_FLAGS=...   flags for prove (default: --timer -j4: four TAP
#                            files at a time; most of their time is spent
#                            waiting out leases and timeouts (three at a
#                            time kept 2 cores about 20% busy), so four at
#                            once keep the whole suite near 9.5 minutes on 2
#                            cores (2026-12-06), three near 12; "--timer"
#                            runs them one by one)
#   REDSEM_NO_INSTALL=1      skip apt-get and make install: test the redsem
#                            that is already installed
#   REDSEM_TAP_SKIP="t/X.pl .."  TAP files left out of a run of all of them
#                            (scripts/matrix.sh's second server)
#   REDSEM_TEST_CONNECTION_MODE=broker  TAP servers that preload redsem run
#                            in broker mode (docs/broker.md)
#
# Regress, isolation and TAP tests run as three "make installcheck" calls
# (a failing part does not hide the others); the exit status is make's, of
# the last part that failed. Last lines: "redsem tests: PASSED|FAILED", the
# platform, each part's count ("regress 9/9, isolation 3/3, TAP 520/520":
# test files for regress and isolation, subtests for TAP) and the total
# "tests: N passed, N failed".

set -euo pipefail

# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# --- arguments ---------------------------------------------------------------

SUITE=${1:-all}
if [[ $# -gt 0 ]]; then shift; fi
SELECTED=("$@")

usage() {
    sed -n '3,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# The TAP files that take longest (a minute or more on 2 cores), started
# first: prove -j4 runs files in the order given, and one of these started
# last would run on alone at the end
TAP_SLOW_FIRST="t/094_queue_fleet.pl t/114_caught_cancel.pl t/081_history_faults.pl
t/080_slot_lost.pl t/082_forget_grace.pl t/040_queues.pl t/084_failover_check_costs.pl
t/102_broker.pl t/097_queue_fleet_rollback.pl t/085_queue_cap_online.pl t/052_cluster.pl
t/020_script_model.pl t/050_sentinel.pl t/117_late_acquire.pl t/126_sentinel_hung_first.pl"

# tap_files_but "t/X.pl ..": every TAP file but those, space-separated, the
# slow ones first
tap_files_but() {
    local f out=() root slow
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    slow=" ${TAP_SLOW_FIRST//$'\n'/ } "
    for f in $slow; do
        [[ -f $root/$f && " $1 " != *" $f "* ]] && out+=("$f")
    done
    for f in "$root"/t/*.pl; do
        f=${f#"$root"/}
        [[ " $1 " == *" $f "* || $slow == *" $f "* ]] || out+=("$f")
    done
    echo "${out[*]}"
}

# part_overrides PART : make variable overrides that run only PART
# (regress, isolation or tap) of PGXS's installcheck, which runs each part
# whose variable (REGRESS, ISOLATION, TAP_TESTS) is non-empty. Tests named on
# the command line select within the part.
part_overrides() {
    local part=$1 sel=
    [[ $part == "$SUITE" && ${#SELECTED[@]} -gt 0 ]] && sel="${SELECTED[*]}"
    case $part in
    regress)
        printf '%s\n' "ISOLATION=" "TAP_TESTS="
        [[ -z $sel ]] || printf '%s\n' "REGRESS=$sel"
        ;;
    isolation)
        printf '%s\n' "REGRESS=" "TAP_TESTS="
        [[ -z $sel ]] || printf '%s\n' "ISOLATION=$sel"
        ;;
    tap)
        printf '%s\n' "REGRESS=" "ISOLATION="
        if [[ -z $sel ]]; then
            sel=$(tap_files_but "${REDSEM_TAP_SKIP:-}")
        fi
        [[ -z $sel ]] || printf '%s\n' "PROVE_TESTS=$sel"
        ;;
    esac
}

case $SUITE in
all | regress | isolation | tap) ;;
*) usage ;; # including -h, --help
esac
if [[ $SUITE == all && ${#SELECTED[@]} -gt 0 ]]; then
    usage
fi

# --- helpers -----------------------------------------------------------------

# Print the repository's files (relative paths, NUL-separated), leaving out
# build and test outputs. Tracked and untracked-but-not-ignored files when
# this is a git checkout, otherwise everything but outputs.
list_repo_files() {
    local outputs='(^|/)[^/]*\.(o|so|bc)$|^(results|output_iso|tmp_check[^/]*|log)/|^regression\.(diffs|out)$|^\.git/'
    if command -v git >/dev/null 2>&1 &&
        git -c safe.directory="$REDSEM_REPO_ROOT" -C "$REDSEM_REPO_ROOT" rev-parse --git-dir >/dev/null 2>&1; then
        git -c safe.directory="$REDSEM_REPO_ROOT" -C "$REDSEM_REPO_ROOT" \
            ls-files -z --cached --others --exclude-standard
    else
        (cd "$REDSEM_REPO_ROOT" && find . -path ./.git -prune -o \( -type f -o -type l \) -printf '%P\0')
    fi | grep -zEv "$outputs" || true
}

# copy_repo DEST : copy the repository's files into DEST, owned by postgres.
copy_repo() {
    local dest=$1
    mkdir -p "$dest"
    # Deleted-but-still-tracked files are skipped.
    list_repo_files |
        (cd "$REDSEM_REPO_ROOT" && while IFS= read -r -d '' f; do
            if [[ -e $f || -L $f ]]; then printf '%s\0' "$f"; fi
        done) |
        tar -C "$REDSEM_REPO_ROOT" --null -T - -cf - | tar -C "$dest" -xf -
    chown -R postgres:postgres "$dest"
}

# write_test_conf COPY REDIS_SOCK : the extra config of pg_regress's
# temporary instance.
write_test_conf() {
    local copy=$1 sock=$2
    mkdir -p "$copy/test"
    {
        printf "shared_preload_libraries = 'redsem'\n"
        printf "redsem.unix_socket = '%s'\n" "$sock"
    } >"$copy/test/redsem_test.conf"
    chown -R postgres:postgres "$copy/test"
}

# show_failure_details COPY PART : diffs and log tails after PART failed.
# (Printed right away: the TAP part starts by deleting tmp_check/.)
show_failure_details() {
    local copy=$1 part=$2 f diffs logdir
    case $part in
    # pg_regress keeps its temporary instance's logs in OUTPUTDIR/log.
    regress) diffs=regression.diffs logdir=log ;;
    isolation) diffs=output_iso/regression.diffs logdir=output_iso/log ;;
    tap) diffs='' logdir=tmp_check/log ;;
    esac
    if [[ -n $diffs && -s $copy/$diffs ]]; then
        printf '\n===== %s =====\n' "$diffs"
        cat "$copy/$diffs"
    fi
    # Server logs (*.log) and TAP logs (regress_log_*).
    local d
    for d in $logdir; do
        [[ -d $copy/$d ]] || continue
        while IFS= read -r -d '' f; do
            printf '\n===== tail of %s =====\n' "${f#"$copy"/}"
            tail -n 80 "$f"
        done < <(find "$copy/$d" -type f \( -name '*.log' -o -name 'regress_log_*' \) ! -name initdb.log \
            -print0 | sort -z)
    done
}

# failed_checks COPY PART LOG : one line per failing test of PART (at most
# 40), for the end of the output, where a CI log's tail shows it: TAP
# subtests from the TAP logs ("t/050_sentinel: not ok 38 - ..."), test
# files that died, regress and isolation files.
failed_checks() {
    local copy=$1 part=$2 log=$3
    {
        if [[ $part == tap ]]; then
            local f
            for f in "$copy"/tmp_check/log/regress_log_*; do
                [[ -f $f ]] || continue
                sed -nE 's/^(\[[^]]*\]\([^)]*\) )?(not ok [0-9]+.*)$/\2/p' "$f" |
                    sed "s|^|  t/${f##*/regress_log_}: |"
            done
            sed -nE 's/^(t\/[^ ]+) +\((Wstat: .*)\)$/  \1: \2/p' "$log"
        else
            grep -E '(^| )(FAILED|failed)( |$)|^not ok ' "$log" | sed 's/^/  /'
        fi
    } | head -n 40 || true
}

# count_results PART LOG : print "PASSED FAILED" for one part's output.
# regress/isolation count test files, in PostgreSQL 15's format ("test foo
# ... ok", "     foo ... FAILED") and 16+'s ("ok 1 - foo", "not ok 2 + foo");
# tap counts prove's subtests, and a test file that failed without a failing
# subtest (it died, or ran fewer tests than planned) counts as one failure.
count_results() {
    local part=$1 log=$2 passed=0 failed=0
    if [[ $part == tap ]]; then
        local total bad
        total=$(sed -nE 's/^Files=[0-9]+, Tests=([0-9]+),.*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
        # "t/x.pl (Wstat: 256 (exited 1) Tests: 22 Failed: 1)"
        bad=$(sed -nE 's/^t\/[^ ]+ +\(Wstat: .*Tests: ([0-9]+) Failed: ([0-9]+)\)$/\2/p' "$log" |
            awk '{s += ($1 > 0 ? $1 : 1); f += $1} END {print s + 0, f + 0}')
        read -r failed bad <<<"$bad"
        passed=$((total - bad))
    else
        local v15='^(test +| +)[A-Za-z0-9_./-]+ +\.\.\. +'
        local v16='^(ok|not ok) +[0-9]+ +[-+] +[A-Za-z0-9_./-]+'
        passed=$(grep -cE "${v15}ok( |\$)|^ok +[0-9]+ +[-+] " "$log" || true)
        failed=$(grep -cE "${v15}FAILED( |\$)|^not ok +[0-9]+ +[-+] " "$log" || true)
        : "$v16"
    fi
    printf '%s %s\n' "$passed" "$failed"
}

# run_part COPY DIR PART LOG : "make installcheck" for one part, as postgres
# in the copy, with the private Redis advertised to the TAP tests. Output is
# shown and appended to LOG; returns make's status.
run_part() {
    local copy=$1 dir=$2 part=$3 log=$4 overrides status template=
    [[ ! -d $dir/initdb-template ]] || template=$dir/initdb-template
    mapfile -t overrides < <(part_overrides "$part")
    redsem_log "make installcheck ($part) as postgres in $copy"
    set +e
    (
        cd "$copy" || exit 1
        redsem_as_postgres \
            REDSEM_TEST_REDIS_SOCKET="$dir/redis.sock" \
            REDSEM_TEST_REDIS_SERVER="$REDSEM_TMPDIR/bin/redis-server" \
            REDSEM_TEST_REDIS_LOCALE="$REDSEM_TEST_REDIS_LOCALE" \
            REDSEM_TEST_CONNECTION_MODE="${REDSEM_TEST_CONNECTION_MODE:-}" \
            ${template:+INITDB_TEMPLATE="$template"} \
            make installcheck PG_CONFIG="$REDSEM_PG_CONFIG" \
            PROVE_FLAGS="${REDSEM_PROVE_FLAGS:---timer -j4}" "${overrides[@]}"
    ) 2>&1 | tee -a "$log"
    status=${PIPESTATUS[0]}
    set -e
    return "$status"
}

# make_initdb_template DIR : one initdb, as postgres and in the locale the
# TAP tests run initdb in (PostgreSQL::Test::Utils drops LC_ALL and sets
# LC_MESSAGES=C), that every test server starts as a copy of
# (INITDB_TEMPLATE; t/RedsemTest.pm). Without it each server runs initdb.
make_initdb_template() {
    redsem_as_postgres env -u LC_ALL LC_MESSAGES=C \
        "$("$REDSEM_PG_CONFIG" --bindir)/initdb" -A trust -N -D "$1" >/dev/null && return
    rm -rf "$1"
    redsem_log "could not make an initdb template in $1: every test server runs initdb"
}

FAILED_PARTS=()
FAILED_CHECKS=()

# "PostgreSQL 17.12, hiredis 1.2.0 with TLS, Redis 8.0.2": what the suite
# ran on (TLS: the installed library links hiredis_ssl).
platform_line() {
    local pg hiredis server tls=without
    pg=$("$REDSEM_PG_CONFIG" --version | awk '{print $2}')
    hiredis=$(pkg-config --modversion hiredis 2>/dev/null || echo '?')
    server=$("$REDSEM_TMPDIR/bin/redis-server" --version 2>/dev/null |
        sed -nE 's/^(Redis|Valkey) server v=([^ ]+).*/\1 \2/p')
    # (ldd's output read whole: grep -q would stop reading at the first
    # match, and a SIGPIPE to ldd then failed the pipe under pipefail)
    local libs
    libs=$(ldd "$("$REDSEM_PG_CONFIG" --pkglibdir)/redsem.so" 2>/dev/null || true)
    [[ $libs != *hiredis_ssl* ]] || tls=with
    echo "PostgreSQL $pg, hiredis $hiredis $tls TLS, ${server:-$REDSEM_REDIS ?}"
}

# The name of a part in the summary: what its count counts.
part_label() {
    case $1 in
    regress) echo regress ;;
    isolation) echo isolation ;;
    tap) echo TAP ;;
    esac
}

# flush_writes DIR: write out the dirty pages of DIR's file system (only
# that one: another mount may hang), saying how long it took.
flush_writes() {
    local t0=$SECONDS
    timeout 120 sync -f "$1" || redsem_log "sync -f $1 did not end well; going on"
    redsem_log "sync: wrote out pending writes in $((SECONDS - t0)) s"
}

# --- main --------------------------------------------------------------------

main() {
    redsem_reexec_as_root "${BASH_SOURCE[0]}" "$SUITE" "${SELECTED[@]}"
    trap redsem_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM

    if [[ ${REDSEM_NO_INSTALL:-} == 1 ]]; then
        redsem_log "REDSEM_NO_INSTALL=1: testing the redsem already installed"
    else
        redsem_install_deps
        redsem_build_install
    fi

    redsem_make_tmpdir redsem-test
    local dir=$REDSEM_TMPDIR
    local copy=$dir/src-copy
    redsem_log "copying the repository to $copy"
    copy_repo "$copy"

    redsem_make_locale "$dir/locale"
    redsem_start_redis "$dir"
    write_test_conf "$copy" "$dir/redis.sock"
    make_initdb_template "$dir/initdb-template"

    local parts=("$SUITE")
    [[ $SUITE == all ]] && parts=(regress isolation tap)
    local part rc=0 part_rc p f passed=0 failed=0 summary=()
    # Each part is its own "make installcheck", so a failing part does not
    # keep the others from running.
    for part in "${parts[@]}"; do
        : >"$dir/$part.out"
        # The TAP files time what they test: flush what apt, the build and
        # the earlier parts left to write first, so that the kernel's
        # writeback of it cannot stall their servers in the middle (in a
        # fresh root, a CI run once saw a machine-wide stall of about 15 s
        # fail two timing checks; writeback is our best guess at its cause).
        [[ $part == tap ]] && flush_writes "$dir"
        run_part "$copy" "$dir" "$part" "$dir/$part.out" && part_rc=0 || part_rc=$?
        read -r p f <<<"$(count_results "$part" "$dir/$part.out")"
        # a part that failed without a failing test (it did not run) counts
        [[ $part_rc -ne 0 && $f -eq 0 ]] && f=1
        if [[ $part_rc -ne 0 ]]; then
            show_failure_details "$copy" "$part"
            FAILED_CHECKS+=("$(failed_checks "$copy" "$part" "$dir/$part.out")")
            FAILED_PARTS+=("$part")
            rc=$part_rc
        fi
        summary+=("$(part_label "$part") $p/$((p + f))")
        passed=$((passed + p))
        failed=$((failed + f))
    done
    local platform
    platform=$(platform_line)
    # Stop Redis and remove (or keep) the temp dir now, so that the summary
    # below really is the last output.
    redsem_cleanup
    if [[ ${#FAILED_CHECKS[@]} -gt 0 ]]; then
        echo
        echo "what failed:"
        printf '%s\n' "${FAILED_CHECKS[@]}"
    fi
    echo
    if [[ $rc -eq 0 ]]; then
        echo "redsem tests: PASSED"
    else
        echo "redsem tests: FAILED (${FAILED_PARTS[*]})"
    fi
    echo "platform: $platform"
    echo "results: $(IFS=,; echo "${summary[*]}" | sed 's/,/, /g')"
    echo "tests: $passed passed, $failed failed"
    return "$rc"
}

main
