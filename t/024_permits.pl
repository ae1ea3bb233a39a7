
# 024_permits.pl - weighted permits and stored limits through SQL.
#
# 1. Twenty pgbench sessions take 1 to 3 permits of a semaphore whose limit
#    (5) is stored in Redis, half of them passing no limit, half passing
#    the same one.  Who is inside is tracked independently of redsem: a
#    session that got its permits inserts (pid, permits) into the UNLOGGED
#    table inside, records the sum of inside's permits into observed,
#    deletes its row, and only then releases.  Any observed sum above the
#    limit is an over-admission in permit units.
# 2. First come, first served with mixed sizes: a large request at the head
#    of the line is not passed by a small one that would fit.
# 3. Raising a stored limit wakes waiters at once (not when they happen to
#    look again); lowering it evicts nobody and admits nobody until the
#    holders fit; a waiter the limit fell below is told so with an error.
# 4. The stored limit holds on a second server sharing the Redis.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $LIMIT = 5;
my $CLIENTS = 20;

my $redis = RedsemTest::Redis->new;
my $node = create_node('main', $redis);

$node->safe_psql(
	'postgres', q{
CREATE UNLOGGED TABLE inside (pid int, permits int);
CREATE UNLOGGED TABLE observed (n int);
CREATE UNLOGGED TABLE outcome (permits int, got int);
});

###########################################################################
note 'twenty sessions, 1 to 3 permits each, a stored limit of 5';

$node->safe_psql('postgres', qq{SELECT redsem_set_limit('weighted', $LIMIT)});

# One pgbench transaction: wait (up to 20 s) for 1..3 permits, passing no
# limit or the stored one; when got, be "inside" for a moment, then
# release.  pgbench substitutes :p and :id (simple query protocol).
my $script = <<"EOS";
\\set p random(1, 3)
\\set explicit random(0, 1)
SELECT (x IS NOT NULL)::int AS got, coalesce(x, '-') AS id FROM redsem_acquire('weighted', CASE WHEN :explicit = 1 THEN $LIMIT END, '30 s', '20 s', :p) x \\gset
INSERT INTO outcome VALUES (:p, :got);
\\if :got
INSERT INTO inside VALUES (pg_backend_pid(), :p);
SELECT pg_sleep(0.001);
INSERT INTO observed SELECT sum(permits) FROM inside;
DELETE FROM inside WHERE pid = pg_backend_pid();
SELECT redsem_release('weighted', ':id') AS released \\gset
\\if :released
\\else
SELECT 1/0 AS "release of held permits returned false";
\\endif
\\endif
EOS
my $file = $node->basedir . '/weighted.sql';
PostgreSQL::Test::Utils::append_to_file($file, $script);
my ($out, $err) = ('', '');
my $t0 = time;
my $ok = IPC::Run::run(
	[
		$node->installed_command('pgbench'), '-n', '-f', $file,
		'-c', $CLIENTS, '-j', 4, '-t', 40, '-h', $node->host, '-p', $node->port,
		'postgres'
	],
	'<', '/dev/null', '>', \$out, '2>', \$err);
note sprintf("pgbench: %.1f s\n%s", time - $t0, $out);
note "pgbench stderr:\n$err" if $err ne '';
ok($ok, 'pgbench succeeded');
like($out, qr{number of transactions actually processed: 800/800}, 'every transaction completed');
unlike($err, qr/ERROR|FATAL|aborted/, 'no client errors');

my ($got, $max, $nobs, $sizes) = split /\|/, $node->safe_psql(
	'postgres', q{
SELECT (SELECT count(*) FILTER (WHERE got = 1) FROM outcome),
       (SELECT coalesce(max(n), 0) FROM observed),
       (SELECT count(*) FROM observed),
       (SELECT string_agg(DISTINCT permits::text, ',' ORDER BY permits::text) FROM outcome WHERE got = 1)});
note "acquired $got, most permits inside at once $max, $nobs observations, sizes $sizes";
is($got, 800, 'every waiting session got its permits');
is($nobs, $got, 'every grant was observed inside');
cmp_ok($max, '<=', $LIMIT, "never more than $LIMIT permits inside at once (max seen $max)");
cmp_ok($max, '>=', 3, 'sessions really were inside together');
is($sizes, '1,2,3', 'sessions of every size got in');
is($node->safe_psql('postgres', 'SELECT count(*) FROM inside'), '0', 'nobody left inside');
is($node->safe_psql('postgres', q{SELECT permits_held || '/' || waiting FROM redsem_semaphore('weighted')}),
	'0/0', 'nothing held, nobody in line');
is($redis->cli('HGETALL', 'redsem:{weighted}:state'), "limit\n$LIMIT",
	'in Redis only the stored limit remains');

###########################################################################
note 'first come, first served with mixed sizes';

my %s = map { $_ => RedsemTest::Session->new($node, name => $_) } qw(h a b c admin);

# Wait until the semaphore has $n members in line.
sub waiters_are
{
	my ($sem, $n) = @_;
	return wait_until(10, sub {
		$node->safe_psql('postgres', qq{SELECT waiting FROM redsem_semaphore('$sem')}) eq $n;
	});
}

$s{admin}->query_ok(q{SELECT redsem_set_limit('fifo', 4);});
my $h = $s{h}->query_ok(q{SELECT redsem_acquire('fifo', permits => 2);});
ok($h, 'h holds 2 of 4 permits');
$s{a}->send(q{SELECT redsem_acquire('fifo', permits => 3, wait => '30 s') IS NOT NULL;});
ok(waiters_are('fifo', 1), 'a waits for 3 (2 are free)');
is($s{b}->query_ok(q{SELECT redsem_acquire('fifo', permits => 1) IS NULL;}), 't',
	'b asks for 1 without waiting: refused although 1 would fit, a is first');
$s{b}->send(q{SELECT redsem_acquire('fifo', permits => 1, wait => '30 s') IS NOT NULL;});
ok(waiters_are('fifo', 2), 'b waits behind a');
$s{c}->send(q{SELECT redsem_acquire('fifo', permits => 2, wait => '30 s') IS NOT NULL;});
ok(waiters_are('fifo', 3), 'c waits for 2 behind b');
usleep(300_000);
ok(!defined $s{a}->wait_done(0.01) && !defined $s{b}->wait_done(0.01),
	'a and b are still in line while h holds');
is($s{h}->query_ok(qq{SELECT redsem_release('fifo', '$h');}), 't', 'h releases its 2');
my @ra = $s{a}->wait_done(10);
my @rb = $s{b}->wait_done(10);
is($ra[0], 't', sprintf('a gets its 3 (%.2f s after)', $ra[2] // -1));
is($rb[0], 't', 'b gets its 1 beside it: 4 of 4');
ok(!defined $s{c}->wait_done(0.3), 'c (2) still waits: only 0 of 4 are free');
is($node->safe_psql('postgres', q{SELECT string_agg(state || ':' || permits, ' ' ORDER BY position) FROM redsem_holders('fifo')}),
	'holding:3 holding:1 waiting:2', 'redsem_holders shows the permits of each, in line order');
is($s{a}->query_ok('SELECT redsem_release_all();'), 1, 'a releases its 3');
my @rc = $s{c}->wait_done(10);
is($rc[0], 't', 'c gets its 2 once they are free');
$s{$_}->query_ok('SELECT redsem_release_all();') foreach qw(b c);

###########################################################################
note 'raising a stored limit wakes waiters at once';

$s{admin}->query_ok(q{SELECT redsem_set_limit('raise', 1);});
$h = $s{h}->query_ok(q{SELECT redsem_acquire('raise');});
$s{a}->send(q{SELECT redsem_acquire('raise', wait => '60 s') IS NOT NULL;});
$s{b}->send(q{SELECT redsem_acquire('raise', wait => '60 s') IS NOT NULL;});
ok(waiters_are('raise', 2), 'two sessions wait behind a limit of 1');
usleep(500_000);
my $t_raise = time;
$s{admin}->query_ok(q{SELECT redsem_set_limit('raise', 3);});
@ra = $s{a}->wait_done(30);
@rb = $s{b}->wait_done(30);
my $took = time - $t_raise;
ok(@ra && @rb && $ra[0] eq 't' && $rb[0] eq 't', 'both get in once the limit is 3');
cmp_ok($took, '<', 2, sprintf('within %.3f s of the change: woken, not found by polling (they look again every 10 s)', $took));
$s{$_}->query_ok('SELECT redsem_release_all();') foreach qw(h a b);

###########################################################################
note 'lowering a stored limit evicts nobody and admits nobody until the holders fit';

$s{admin}->query_ok(q{SELECT redsem_set_limit('lower', 3);});
$s{$_}->query_ok(q{SELECT redsem_acquire('lower');}) foreach qw(h a b);
$s{admin}->query_ok(q{SELECT redsem_set_limit('lower', 1);});
is($node->safe_psql('postgres', q{SELECT permits_held FROM redsem_semaphore('lower')}), '3',
	'the limit is 1 and all 3 holders keep their slots');
is($s{c}->query_ok(q{SELECT redsem_acquire('lower') IS NULL;}), 't', 'a newcomer is refused');
$s{h}->query_ok('SELECT redsem_release_all();');
$s{a}->query_ok('SELECT redsem_release_all();');
is($s{c}->query_ok(q{SELECT redsem_acquire('lower') IS NULL;}), 't',
	'with 1 holder left, the limit of 1 is full: still refused');
$s{b}->query_ok('SELECT redsem_release_all();');
is($s{c}->query_ok(q{SELECT redsem_acquire('lower') IS NOT NULL;}), 't', 'once all left, one gets in');
$s{c}->query_ok('SELECT redsem_release_all();');

###########################################################################
note 'a waiter whose permits the limit fell below is told so at once';

$s{admin}->query_ok(q{SELECT redsem_set_limit('away', 4);});
$h = $s{h}->query_ok(q{SELECT redsem_acquire('away', permits => 4);});
$s{a}->send(q{SELECT redsem_acquire('away', permits => 3, wait => '60 s');});
ok(waiters_are('away', 1), 'a waits for 3 of 4');
usleep(300_000);
my $t_lower = time;
$s{admin}->query_ok(q{SELECT redsem_set_limit('away', 2);});
@ra = $s{a}->wait_done(30);
$took = time - $t_lower;
like($ra[1] // '', qr/22023: cannot take 3 permits of semaphore "away" with a limit of 2/,
	'the limit falls to 2: a gets 22023');
cmp_ok($took, '<', 2, sprintf('within %.3f s of the change', $took));
is($node->safe_psql('postgres', q{SELECT waiting FROM redsem_semaphore('away')}), '0', 'and left the line');
$s{h}->query_ok('SELECT redsem_release_all();');

###########################################################################
note 'the stored limit holds on another server sharing the Redis';

my $other = create_node('other', $redis);
$s{admin}->query_ok(q{SELECT redsem_set_limit('shared', 3);});
is($other->safe_psql('postgres', q{SELECT redsem_limit('shared')}), '3', 'the other server reads the limit');
$h = $s{h}->query_ok(q{SELECT redsem_acquire('shared', permits => 2);});
is($other->safe_psql('postgres', q{SELECT redsem_acquire('shared', permits => 2) IS NULL}), 't',
	'2 more permits are refused there (2 of 3 held here)');
is($other->safe_psql('postgres', q{SELECT redsem_acquire('shared', permits => 1) IS NOT NULL}), 't',
	'1 more is granted there');
my ($o, $e) = ('', '');
$other->psql('postgres', q{SELECT redsem_acquire('shared', 5)}, stdout => \$o, stderr => \$e);
like($e, qr/stored limit of 3, not 5/, 'and a caller there passing another limit is refused');
$s{h}->query_ok('SELECT redsem_release_all();');

$_->quit foreach values %s;
node_log_is_clean($node);
$node->stop;
$other->stop;
$redis->stop;
done_testing();
