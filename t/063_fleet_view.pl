
# 063_fleet_view.pl - redsem_semaphores(): every semaphore in use under the
# key prefix, from any server, as Redis sees it now.  Two servers share a
# Redis; the view, asked on either, shows the semaphores both use and one
# that only has a stored limit, with their figures.  It reads the index the
# keepers keep (never KEYS or SCAN), is bounded by max_semaphores, and the
# index forgets what nobody uses.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes;

my $redis = RedsemTest::Redis->new;
my $a = create_node('fleet_a', $redis);
my $b = create_node('fleet_b', $redis);

my $ha = RedsemTest::Session->new($a, name => 'ha');
my $hb = RedsemTest::Session->new($b, name => 'hb');
my $wb = RedsemTest::Session->new($b, name => 'wb');
$ha->query_ok(q{SELECT redsem_acquire('fl_x', 2, '60 s');});
$hb->query_ok(q{SELECT redsem_acquire('fl_x', 2, '60 s'); SELECT redsem_acquire('fl_y', 5, '60 s', permits => 3);});
$wb->send(q{SELECT redsem_acquire('fl_x', 2, '60 s', '60 s') IS NOT NULL;});
ok(defined wait_until(20, sub { $redis->zcard('fl_x', 'waiting') == 1 }), 'a session of b waits for fl_x');
$a->safe_psql('postgres', q{SELECT redsem_set_limit('fl_cfg', 7);});

my $view = q{SELECT name, coalesce(stored_limit::text, '-'), coalesce(limit_in_effect::text, '-'),
                    permits_held, holders, waiting, oldest_wait_started IS NOT NULL
               FROM redsem_semaphores() ORDER BY name};
my $want = "fl_cfg|7|7|0|0|0|f\nfl_x|-|2|2|2|1|t\nfl_y|-|5|3|1|0|f";
my $got;
ok(defined wait_until(30, sub { ($got = $a->safe_psql('postgres', $view)) eq $want }),
	'seen from a: both servers\' semaphores and the stored limit, with their figures (the keepers note them within 10 s)')
  or diag("got:\n$got");
is($b->safe_psql('postgres', $view), $want, 'the same seen from b');
is($a->safe_psql('postgres',
		q{SELECT oldest_wait_started BETWEEN clock_timestamp() - interval '1 min' AND clock_timestamp() FROM redsem_semaphores() WHERE name = 'fl_x'}),
	't', 'oldest_wait_started is when the waiter asked');

my ($ret, $out, $err) = $a->psql('postgres', q{SELECT count(*) FROM redsem_semaphores(max_semaphores => 1);});
is($out, '1', 'max_semaphores bounds the rows');
like($err, qr/NOTICE:  redsem_semaphores shows 1 semaphore in use, and did not look at 2 more names of the index/,
	'... saying how many names it did not look at');

# helper-162: names of semaphores that ended stay in the index for up to a
# minute, ahead of the live ones; a small max_semaphores showed none of
# the live ones (it counted the ended names against the bound).  The index
# is read latest expiry first: the live ones, noted for a minute at each
# note, come before names that ended earlier.
my $soon = int(1000 * Time::HiRes::time()) + 30000;
$redis->cli('ZADD', 'redsem:index', map { ($soon, "fl_ended$_") } 1 .. 5);
($ret, $out, $err) = $a->psql('postgres', q{SELECT string_agg(name, ',' ORDER BY name) FROM redsem_semaphores(max_semaphores => 3);});
is($out, 'fl_cfg,fl_x,fl_y', 'ended names in the index: max_semaphores => 3 shows the 3 live semaphores');
like($err, qr/shows 3 semaphores in use, and did not look at 5 more names/, '... and says what it did not look at');
($ret, $out, $err) = $a->psql('postgres', q{SELECT count(*) FROM redsem_semaphores();});
is($out, '3', 'all three live ones, none twice, by default');
is($err, '', '... with no NOTICE');
$redis->cli('ZREM', 'redsem:index', map { "fl_ended$_" } 1 .. 5);
($ret, $out, $err) = $a->psql('postgres', q{SELECT count(*) FROM redsem_semaphores(0);});
like($err, qr/max_semaphores must be between 1 and 100000/, 'a bad max_semaphores is refused');

my $stats = $redis->cli('INFO', 'commandstats') // '';
unlike($stats, qr/^cmdstat_(keys|scan):/m, 'Redis was never asked KEYS or SCAN');
is($redis->cli('PTTL', 'redsem:index'), '-1', 'a pinned name (a stored limit) keeps the index key');
is($redis->cli('ZSCORE', 'redsem:index', 'fl_cfg'), 'inf', '... pinned');

note 'a Redis that may evict keys is reported';
$redis->cli('CONFIG', 'SET', 'maxmemory', '1gb');
$redis->cli('CONFIG', 'SET', 'maxmemory-policy', 'allkeys-lru');
my $off = -s $b->logfile;
ok(defined wait_until(30, sub { slurp_file($b->logfile, $off) =~
	  /WARNING:  redsem's Redis may evict its keys \(maxmemory-policy allkeys-lru\)\n.*DETAIL:  An evicted key forgets its semaphore's holders/s }),
	'the keeper of a server with holds warns in its log that Redis may evict keys');
($ret, $out, $err) = $a->psql('postgres', q{SELECT count(*) FROM redsem_semaphores();});
like($err, qr/WARNING:  redsem's Redis may evict its keys \(maxmemory-policy allkeys-lru\).*HINT:  Set maxmemory-policy to noeviction/s,
	'redsem_semaphores() warns too');
$redis->cli('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
($ret, $out, $err) = $a->psql('postgres', q{SELECT count(*) FROM redsem_semaphores();});
is($err, '', '... and says nothing once the policy is noeviction');
$redis->cli('CONFIG', 'SET', 'maxmemory-policy', 'volatile-ttl');
$redis->cli('CONFIG', 'SET', 'maxmemory', '0');
($ret, $out, $err) = $a->psql('postgres', q{SELECT count(*) FROM redsem_semaphores();});
is($err, '', '... nor without a maxmemory (nothing is evicted then)');
$redis->cli('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');

note 'what nobody uses goes';
$ha->query_ok(q{SELECT redsem_release_all();});
$hb->query_ok(q{SELECT redsem_release_all();});
$wb->wait_done(30);
$wb->query_ok(q{SELECT redsem_release_all();});
$a->safe_psql('postgres', q{SELECT redsem_set_limit('fl_cfg', NULL);});
is($a->safe_psql('postgres', q{SELECT count(*) FROM redsem_semaphores();}), '0',
	'once released (and the limit removed), nothing is shown');
my $score = $redis->cli('ZSCORE', 'redsem:index', 'fl_cfg') // '';
ok($score ne 'inf', 'the unpinned name is no longer pinned');
my $ttl = $redis->cli('PTTL', 'redsem:index') // -2;
ok($ttl > 0 && $ttl <= 60_000, "the index key expires a minute after the last use at most ($ttl ms)");

$_->quit foreach ($ha, $hb, $wb);
node_log_is_clean($_) foreach ($a, $b);
$_->stop foreach ($a, $b);
done_testing();
