#!/usr/bin/env bash
#
# bench/tenants.sh - how tenants share a semaphore, and what tenants cost
# Redis, with the baselines run side by side in the same invocation.
#
#   sudo bash bench/tenants.sh
#
# Shares (PostgreSQL, pgbench): a semaphore with a stored limit of 4.
# Each tenant is one pgbench with its own clients; a transaction is one
# redsem_acquire_xact (waiting up to 60 s) and a 20 ms job, so every
# tenant keeps callers in line.  Two setups: 2 tenants (A with 16 clients,
# B with 4), and 10 tenants (t0 with 12 clients, t1..t9 with 2 each).
# Each runs twice: with the clients naming no tenant (the baseline: one
# FIFO line, shares follow the clients), then naming their tenant.
# Printed: each tenant's share of the jobs done, and the fair share.  With
# tenants every tenant that keeps waiting should get an equal share of
# the slots (its held permits equal the others'), so of the jobs too.
#
# Redis CPU (INFO commandstats, inside Redis, redis-cli --pipe, no
# PostgreSQL in the way): on a semaphore with 4 long holders and a line of
# 200 waiters, BENCH_OPS pairs of a waiting acquire and its give-up (both
# touch the line), with the waiters naming no tenant (baseline), then
# spread over 2, 10 and 100 tenants; hand-offs on the same semaphore: a
# waiting acquire of a newcomer, then the release of the holder granted
# longest ago, which promotes the first waiter (the tenant's counts, tq
# and the tenant's last grant all change); and acquire + release pairs of a
# caller that does not wait, on an idle semaphore and on one with 2,000
# holders, naming no tenant and naming one.  Better of two runs.
# With BENCH_BEFORE=<git revision>, that revision's src/redsem.lua is
# loaded too (as library "before") and the hand-offs are run with it as
# well, each right after the same run with this script: before and after,
# each with its own no-tenant baseline, in one run (a revision whose
# script takes the owner key alone, as src/script.c sends it since issue
# 48's cost work; earlier ones want six keys and other argument places).
#
# Environment: BENCH_DURATION (seconds per run, default 8), BENCH_OPS
# (default 20000), BENCH_BEFORE, BENCH_NO_INSTALL=1, REDSEM_KEEP=1.

set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

DURATION=${BENCH_DURATION:-8}
OPS=${BENCH_OPS:-20000}

bench_init tenants

cat >"$W/job.sql" <<'EOF'
BEGIN;
SELECT redsem_acquire_xact('ts', lease => '30 s', wait => '60 s',
    tenant => CASE WHEN :ten < 0 THEN NULL ELSE 't' || :ten END) IS NOT NULL;
SELECT pg_sleep(0.02);
COMMIT;
EOF
chown postgres "$W"/*.sql
bench_sql "SELECT redsem_set_limit('ts', 4)" >/dev/null

# shares NAMED CLIENTS... : one pgbench per tenant (tenant i has the i-th
# client count; NAMED 0: they name none), side by side; prints each
# tenant's transactions, space-separated
shares() {
    local named=$1 i=0 pids=() c
    shift
    for c in "$@"; do
        local ten=$i
        [[ $named == 1 ]] || ten=-1
        bench_pgbench -n -c "$c" -j 1 -T "$DURATION" -D ten="$ten" -f "$W/job.sql" >"$W/t$i.out" 2>&1 &
        pids+=($!)
        BENCH_BG_PIDS+=($!)
        i=$((i + 1))
    done
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || { cat "$W/t$i.out" >&2; redsem_die "pgbench of tenant $i failed"; }
    done
    for i in "${!pids[@]}"; do
        sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$W/t$i.out"
    done | paste -sd' '
}

# table TITLE CLIENTS... : both runs, and each tenant's share
table() {
    local title=$1 fifo fair
    shift
    fifo=$(shares 0 "$@")
    fair=$(shares 1 "$@")
    printf '\n%s (limit 4, 20 ms jobs, %s s per run)\n' "$title" "$DURATION"
    printf '%-8s %8s %14s %14s %12s\n' tenant clients "FIFO share" "tenant share" "fair share"
    awk -v c="$*" -v a="$fifo" -v b="$fair" 'BEGIN {
        n = split(c, cl, " "); split(a, fa, " "); split(b, fb, " ")
        for (i = 1; i <= n; i++) { ta += fa[i]; tb += fb[i] }
        for (i = 1; i <= n; i++) {
            printf "%-8s %8d %13.1f%% %13.1f%% %11.1f%%\n", "t" (i - 1), cl[i],
                100 * fa[i] / (ta ? ta : 1), 100 * fb[i] / (tb ? tb : 1), 100 / n
            if (i > 1) { lo = (lo == "" || fb[i] < lo) ? fb[i] : lo; hi = (fb[i] > hi) ? fb[i] : hi }
        }
        printf "%-8s %8s %14d %14d\n", "jobs", "", ta, tb
    }'
}

bench_sql "SELECT redsem_acquire_xact('warm', 1)" >/dev/null
bench_header "redsem tenant benchmark (bench/tenants.sh)"
table "2 tenants: t0 16 clients, t1 4" 16 4
table "10 tenants: t0 12 clients, t1..t9 2 each" 12 2 2 2 2 2 2 2 2 2

# --- Redis CPU ---------------------------------------------------------
LIB=$(bench_library)
cat >"$W/gen.pl" <<'EOF'
use strict;
# gen.pl LIB SEM FROM COUNT WHAT TENANTS: RESP for COUNT operations on
# ids x<FROM>.. of SEM: hold (long holders), line (waiters), waitgive
# (a waiting acquire and its give-up), pairs (acquire + release, no wait);
# TENANTS 0: none, else tenant i mod TENANTS
my ($lib, $sem, $from, $count, $what, $tenants) = @ARGV;
my @keys = ("redsem:{$sem}:owner");    # (the script makes the others)
sub cmd { my $s = '*' . scalar(@_) . "\r\n"; $s .= '$' . length($_) . "\r\n$_\r\n" for @_; return $s; }
sub op { return cmd('FCALL', $lib, 1, @keys, @_); }
my $origin = 'bench.example:5432|4242|db|user|bench';
my $limit = $what eq 'pairs' ? 1000000 : 4;
binmode STDOUT;
for my $i ($from .. $from + $count - 1) {
    my $id = sprintf('%016x.%d', 0xfeed0000 + $i, $i);
    my @ten = $tenants ? ('', '', '', 0, 'tenant' . ($i % $tenants)) : ();
    if ($what eq 'hold') { print op('acquire', $id, $limit, 1, 600000, 0, 60000, $origin); }
    elsif ($what eq 'line') { print op('acquire', $id, $limit, 1, 600000, 1, 600000, $origin, @ten); }
    elsif ($what eq 'waitgive') {
        print op('acquire', $id, $limit, 1, 30000, 1, 60000, $origin, @ten);
        print op('give_up', $id);
    } else {
        print op('acquire', $id, $limit, 1, 30000, 0, 60000, $origin, @ten);
        print op('release', $id);
    }
}
EOF
# once SEM FROM COUNT WHAT TENANTS: feed them; usec per FCALL
once() {
    perl "$W/gen.pl" "$LIB" "$@" >"$W/ops.resp"
    bench_stats_reset
    bench_redis --pipe <"$W/ops.resp" >"$W/pipe.out" 2>&1 || { cat "$W/pipe.out" >&2; redsem_die "redis-cli --pipe failed"; }
    grep -q 'errors: 0' "$W/pipe.out" || { cat "$W/pipe.out" >&2; redsem_die "errors in $*"; }
    bench_redis INFO commandstats | tr -d '\r' |
        sed -n 's/^cmdstat_fcall:calls=\([0-9]*\),usec=\([0-9]*\),.*/\1 \2/p' |
        awk '{ if ($1 > 0) printf "%.2f\n", $2 / $1; else print "n/a" }'
}
# best SEM FROM COUNT WHAT TENANTS: the better of two runs (on new ids)
best() {
    local a b
    a=$(once "$1" "$2" "$3" "$4" "$5")
    b=$(once "$1" "$(($2 + $3))" "$3" "$4" "$5")
    awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", (a < b ? a : b) }'
}
cat >"$W/handoff.pl" <<'EOF'
use strict;
use IO::Socket::UNIX;
# handoff.pl SOCK LIB SEM TENANTS COUNT: on SEM (4 holders, a line of
# 200, tenant i mod TENANTS, 0: none), COUNT rounds of a waiting acquire
# of a newcomer and the release of the holder granted longest ago (it
# promotes the first waiter); prints usec per FCALL of the rounds
my ($sock, $lib, $sem, $tenants, $count) = @ARGV;
my $s = IO::Socket::UNIX->new(Peer => $sock) or die "connect: $!";
sub reply
{
    my $l = <$s>;
    $l =~ s/\r\n$//;
    my $t = substr($l, 0, 1, '');
    die "Redis: $l\n" if $t eq '-';
    return $l if $t eq '+' || $t eq ':';
    return undef if $l < 0;
    if ($t eq '$') { my $b = ''; read($s, $b, $l + 2); return substr($b, 0, $l); }
    return [ map { reply() } 1 .. $l ];
}
sub cmd { my $m = '*' . scalar(@_) . "\r\n"; $m .= '$' . length($_) . "\r\n$_\r\n" for @_; print $s $m; return reply(); }
my @keys = ("redsem:{$sem}:owner");    # (the script makes the others)
my ($k_owner, $k_waiting) = ("redsem:{$sem}:owner", "redsem:{$sem}:waiting");
my $origin = 'bench.example:5432|4242|db|user|bench';
sub ten { return $tenants ? ('', '', '', 0, 'tenant' . ($_[0] % $tenants)) : (); }
sub acquire { return cmd('FCALL', $lib, 1, @keys, 'acquire', $_[0], 4, 1, 600000, 1, 600000, $origin, ten($_[1])); }
acquire("h$_", $_) for 1 .. 4;
acquire("w$_", $_) for 1 .. 200;
my %since = map { ("h$_" => $_) } 1 .. 4;
my $n = 4;
cmd('CONFIG', 'RESETSTAT');
for my $i (1 .. $count)
{
    acquire("n$i", $i);
    # (the holders: members not in line; these reads are not FCALLs)
    my %line = map { $_ => 1 } @{ cmd('ZRANGE', $k_waiting, 0, -1) };
    my @held = grep { !$line{$_} } @{ cmd('ZRANGE', $k_owner, 0, -1) };
    $since{$_} //= ++$n foreach @held;
    my ($oldest) = sort { $since{$a} <=> $since{$b} } @held;
    cmd('FCALL', $lib, 1, @keys, 'release', $oldest);
}
my ($calls, $usec) = cmd('INFO', 'commandstats') =~ /cmdstat_fcall:calls=(\d+),usec=(\d+)/;
printf "%.2f\n", $usec / $calls;
EOF
# handoffs TENANTS [LIB]: the better of two runs of handoff.pl
handoffs() {
    local a b lib=${2:-$LIB}
    a=$(perl "$W/handoff.pl" "$BENCH_SOCK" "$lib" "ho$1a$lib" "$1" "$((OPS / 10))")
    b=$(perl "$W/handoff.pl" "$BENCH_SOCK" "$lib" "ho$1b$lib" "$1" "$((OPS / 10))")
    awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", (a < b ? a : b) }'
}
if [[ -n ${BENCH_BEFORE:-} ]]; then
    bench_before_library "$W/before.lua"
    bench_redis -x FUNCTION LOAD <"$W/before.lua" >/dev/null
fi
declare -A C
for t in 0 2 10 100; do
    C[ho$t]=$(handoffs "$t")
    [[ -n ${BENCH_BEFORE:-} ]] && C[bho$t]=$(handoffs "$t" before)
done
for t in 0 2 10 100; do
    sem=line$t
    once "$sem" 1 4 hold 0 >/dev/null
    once "$sem" 100 200 line "$t" >/dev/null
    C[wg$t]=$(best "$sem" 1000000 "$OPS" waitgive "$t")
done
for h in 0 2000; do
    for t in 0 1; do
        sem=idle$h.$t
        [[ $h -gt 0 ]] && once "$sem" 1 "$h" hold 0 >/dev/null
        C[p$h.$t]=$(best "$sem" 1000000 "$OPS" pairs "$t")
    done
done
printf '\nRedis CPU, usec per call inside Redis (INFO commandstats), %s pairs, better of two runs\n' "$OPS"
printf '%-58s %10s %10s\n' "" usec "ratio"
printf '%-58s %10s %10s\n' "waiting acquire + give-up, line of 200, no tenant" "${C[wg0]}" 1.00
for t in 2 10 100; do
    printf '%-58s %10s %10s\n' "  the line spread over $t tenants" "${C[wg$t]}" "$(bench_ratio "${C[wg$t]}" "${C[wg0]}")"
done
printf '%-58s %10s %10s\n' "hand-off (waiting acquire + release that promotes), no tenant" "${C[ho0]}" 1.00
for t in 2 10 100; do
    printf '%-58s %10s %10s\n' "  the line spread over $t tenants" "${C[ho$t]}" "$(bench_ratio "${C[ho$t]}" "${C[ho0]}")"
done
if [[ -n ${BENCH_BEFORE:-} ]]; then
    printf '%-58s %10s %10s\n' "hand-off with the script at $BENCH_BEFORE, no tenant" "${C[bho0]}" 1.00
    for t in 2 10 100; do
        printf '%-58s %10s %10s\n' "  the line spread over $t tenants" "${C[bho$t]}" "$(bench_ratio "${C[bho$t]}" "${C[bho0]}")"
    done
fi
printf '%-58s %10s %10s\n' "acquire + release, idle semaphore, no tenant" "${C[p0.0]}" 1.00
printf '%-58s %10s %10s\n' "  naming a tenant" "${C[p0.1]}" "$(bench_ratio "${C[p0.1]}" "${C[p0.0]}")"
printf '%-58s %10s %10s\n' "acquire + release beside 2000 holders, no tenant" "${C[p2000.0]}" "$(bench_ratio "${C[p2000.0]}" "${C[p0.0]}")"
printf '%-58s %10s %10s\n' "  naming a tenant" "${C[p2000.1]}" "$(bench_ratio "${C[p2000.1]}" "${C[p0.1]}")"
printf '\n(ratios: to the row marked 1.00 above them; the 2000-holder rows: to the idle semaphore,\n'
printf 'the same way of calling, so 1.00 means flat in the number of holders)\n'
