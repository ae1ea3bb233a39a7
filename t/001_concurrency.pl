
# 001_concurrency.pl - many sessions hammering one semaphore never let more
# than max_holders in, and leave every slot free behind them.
#
# Who is "inside" is tracked independently of redsem: a session that got a
# slot inserts its pid into the UNLOGGED table inside (autocommit), records
# count(*) of inside into observed, deletes its row, and only then releases.
# Since a row is only present while its session holds a slot, any observed
# count above the limit is a violation.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time);

my $LIMIT = 4;
my $CLIENTS = 16;

my $redis = RedsemTest::Redis->new;
my $node = create_node('main', $redis);

$node->safe_psql(
	'postgres', q{
CREATE UNLOGGED TABLE inside (pid int);
CREATE UNLOGGED TABLE observed (phase int, n int);
CREATE UNLOGGED TABLE outcome (phase int, got int);
});

# Run pgbench with one custom script; returns (exit ok, stdout, stderr).
sub run_pgbench
{
	my ($script_name, $script, @opts) = @_;
	my $file = $node->basedir . "/$script_name.sql";
	PostgreSQL::Test::Utils::append_to_file($file, $script);
	my @cmd = (
		$node->installed_command('pgbench'), '-n', '-f', $file,
		'-c', $CLIENTS, '-j', 4, @opts, '-h', $node->host, '-p', $node->port,
		'postgres');
	my ($out, $err) = ('', '');
	my $t0 = time;
	my $ok = IPC::Run::run(\@cmd, '<', '/dev/null', '>', \$out, '2>', \$err);
	note sprintf("pgbench %s: %.1f s", $script_name, time - $t0);
	note "pgbench stdout:\n$out";
	note "pgbench stderr:\n$err" if $err ne '';
	return ($ok, $out, $err);
}

# One pgbench transaction: try (phase 1) or wait (phase 2) for a slot; when
# got, be "inside" for a moment, then release.  pgbench substitutes :id
# inside the quotes (simple query protocol).
sub script_for
{
	my ($phase, $wait) = @_;
	return <<"EOS";
SELECT (x IS NOT NULL)::int AS got, coalesce(x, '-') AS id FROM redsem_acquire('hammer', $LIMIT, '30 s', '$wait') x \\gset
INSERT INTO outcome VALUES ($phase, :got);
\\if :got
INSERT INTO inside VALUES (pg_backend_pid());
SELECT pg_sleep(0.001);
INSERT INTO observed SELECT $phase, count(*) FROM inside;
DELETE FROM inside WHERE pid = pg_backend_pid();
SELECT redsem_release('hammer', ':id') AS released \\gset
\\if :released
\\else
SELECT 1/0 AS "release of a held slot returned false";
\\endif
\\endif
EOS
}

# Check one phase's bookkeeping; returns (acquired, refused, max inside).
sub check_phase
{
	my ($phase) = @_;
	my $row = $node->safe_psql(
		'postgres', qq{
SELECT (SELECT count(*) FILTER (WHERE got = 1) FROM outcome WHERE phase = $phase),
       (SELECT count(*) FILTER (WHERE got = 0) FROM outcome WHERE phase = $phase),
       (SELECT coalesce(max(n), 0) FROM observed WHERE phase = $phase),
       (SELECT count(*) FROM observed WHERE phase = $phase)});
	my ($got, $refused, $max, $nobs) = split /\|/, $row;
	note "phase $phase: acquired $got, refused $refused, max inside $max, $nobs observations";
	cmp_ok($max, '<=', $LIMIT,
		"phase $phase: never more than $LIMIT sessions inside (max seen $max)");
	cmp_ok($max, '>=', 2, "phase $phase: sessions really were inside together");
	is($nobs, $got, "phase $phase: every acquire was observed inside");
	is($node->safe_psql('postgres', 'SELECT count(*) FROM inside'),
		'0', "phase $phase: nobody left inside");
	return ($got, $refused, $max);
}

# Every slot is free again: LIMIT fresh acquires succeed, one more is
# refused, Redis has exactly LIMIT holders, and release_all clears them.
sub check_all_free
{
	my ($label) = @_;
	my $s = RedsemTest::Session->new($node);
	my $n = $s->query_ok(
		qq{SELECT count(redsem_acquire('hammer', $LIMIT, '30 s')) FROM generate_series(1, $LIMIT);});
	is($n, $LIMIT, "$label: $LIMIT fresh acquires succeed");
	is($s->query_ok(qq{SELECT redsem_acquire('hammer', $LIMIT, '30 s') IS NULL;}),
		't', "$label: one more is refused");
	is($redis->zcard('hammer', 'owner'), $LIMIT, "$label: $LIMIT holders in Redis");
	is($s->query_ok('SELECT redsem_release_all();'),
		$LIMIT, "$label: release_all released $LIMIT");
	is($redis->zcard('hammer', 'owner'), 0, "$label: no holder left in Redis");
	is($redis->zcard('hammer', 'waiting'), 0, "$label: nobody left in line");
	$s->quit;
}

# Phase 1: try-once acquires.
my ($ok, $out, $err) =
  run_pgbench('try_once', script_for(1, '0'), '-t', 300);
ok($ok, 'phase 1: pgbench succeeded');
like($out, qr{number of transactions actually processed: 4800/4800},
	'phase 1: every pgbench transaction completed');
unlike($err, qr/ERROR|FATAL|aborted/, 'phase 1: no client errors');
my ($got, $refused) = check_phase(1);
cmp_ok($got, '>=', 100, 'phase 1: a meaningful number of acquires succeeded');
cmp_ok($refused, '>=', 100, 'phase 1: a meaningful number of acquires were refused');
check_all_free('after phase 1');

# Phase 2: every acquire waits in line (up to 5 s) instead of giving up.
($ok, $out, $err) = run_pgbench('waiting', script_for(2, '5 s'), '-t', 40);
ok($ok, 'phase 2: pgbench succeeded');
like($out, qr{number of transactions actually processed: 640/640},
	'phase 2: every pgbench transaction completed');
unlike($err, qr/ERROR|FATAL|aborted/, 'phase 2: no client errors');
($got, $refused) = check_phase(2);
is($got, 40 * $CLIENTS, 'phase 2: every waiting acquire got its slot');
check_all_free('after phase 2');

node_log_is_clean($node);

$node->stop;
$redis->stop;
done_testing();
