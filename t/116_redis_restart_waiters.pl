
# 116_redis_restart_waiters.pl - a single Redis (no Sentinel, no Cluster)
# restarted, without persistence, while callers wait: stopped, left down
# for 6 s, started again on the same socket, as a DBA's restart does.
# A caller whose connection broke under it rides the restart within its
# wait: one with wait left when Redis is back gets the slot (Redis forgot
# its holder) instead of an error; one whose wait runs out while Redis is
# down gets 08006 when its wait ends, not before.  A caller that comes
# while Redis is down fails at once (08001), as a misconfigured address
# does: nothing says that Redis is coming back.  Before, the waiters'
# first try to connect again, 100 ms after the break, failed them with
# 08001 unless Redis was back by then.  A statement waiting in a queue
# (without max_wait: it rides a minute) runs once Redis is back.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time);

my $redis = RedsemTest::Redis->new;
my $pg = create_node('restart', $redis);

$pg->safe_psql('postgres', q{
CREATE ROLE worker LOGIN;
ALTER ROLE worker SET redsem.queue = 'rq';
CREATE TABLE t AS SELECT 1 AS x;
GRANT SELECT ON t TO worker;
SELECT redsem_create_queue('rq', 'active_statements=1');
});
my $qh = RedsemTest::Session->new($pg, name => 'queue holder', user => 'worker');
$qh->send(q{SELECT count(*) FROM t, pg_sleep(4);});
ok(defined wait_until(10, sub { $pg->safe_psql('postgres', "SELECT running FROM redsem_queues WHERE name = 'rq'") eq '1' }),
	'a statement runs in queue "rq" of one');
my $qw = RedsemTest::Session->new($pg, name => 'queue waiter', user => 'worker');
$qw->send(q{SELECT count(*) FROM t;});
ok(defined wait_until(10, sub { $pg->safe_psql('postgres', "SELECT waiting FROM redsem_queues WHERE name = 'rq'") eq '1' }),
	'another waits in its line (no max_wait)');

my $h = RedsemTest::Session->new($pg, name => 'holder');
is($h->query_ok(q{SELECT redsem_acquire('r', 1, lease => '2 s') IS NOT NULL;}), 't', 'a holder takes the only slot of "r"');
my $w = RedsemTest::Session->new($pg, name => 'long waiter');
$w->send(q{SELECT redsem_acquire('r', 1, lease => '2 s', wait => '30 s') IS NOT NULL;});
my $s = RedsemTest::Session->new($pg, name => 'short waiter');
$s->send(q{SELECT redsem_acquire('r', 1, lease => '2 s', wait => '4 s') IS NOT NULL;});
ok(defined wait_until(10, sub { $redis->zcard('r', 'waiting') == 2 }), 'two wait in its line');

ok(!$qw->wait_done(0.01), 'the queued statement still waits when Redis stops');
$redis->stop;
my $down_at = time;
my $n = RedsemTest::Session->new($pg, name => 'newcomer');
my (undef, $nerr, $nsecs) = $n->query(q{SELECT redsem_acquire('x', 1, wait => '5 s');});
like($nerr, qr/ERROR:  08001: could not connect to Redis/, 'a caller that comes while Redis is down fails: 08001');
# (a newcomer that rode the restart would take its 5 s; what a new psql,
# backend and connect take on a loaded machine is well below 2.5 s)
cmp_ok($nsecs, '<', 2.5, sprintf('at once (%.2f s), though its wait was 5 s', $nsecs));

my ($sout, $serr, $ssecs) = $s->wait_done(15);
like($serr // '', qr/ERROR:  08006: lost connection to Redis/,
	'the waiter whose wait runs out while Redis is down fails: 08006, naming the break');
cmp_ok($ssecs // 0, '>=', 3.8, sprintf('when its wait of 4 s ends (%.2f s), not at the break', $ssecs // 0));

sleep_full(6 - (time - $down_at));
# (back with its grace over: the grace after forgetting, as long as the
# longest lease known, 30 s with a queue, is t/082's)
$redis->come_back(grace_over => 1);
my ($wout, $werr, $wsecs) = $w->wait_done(40);
is($wout, 't', 'the waiter with wait left gets the slot once Redis is back (it forgot the holder)');
unlike($werr // '', qr/ERROR/, 'with no error');
cmp_ok($wsecs // 99, '<', 30, sprintf('within its wait (%.2f s)', $wsecs // 99));

my ($qout, $qerr) = $qw->wait_done(60);
is($qout, '1', 'the queued statement runs once Redis is back');
unlike($qerr // '', qr/ERROR|WARNING/, 'with no error, and not unqueued');
$qh->wait_done(20);

my (undef, $herr) = $h->query(q{SELECT 1;});
like($herr, qr/ERROR:  57014: the slot of semaphore "r" was lost/, 'the holder Redis forgot is told at its next statement');
like(slurp_file($pg->logfile), qr/redsem: a call for semaphore "r" failed as a failover would make it fail; trying again within the wait/,
	'the server log says that a call was ridden through');
is($w->query_ok(q{SELECT count(*) FROM redsem_held() WHERE name = 'r';}), '1', 'the waiter holds it');

###########################################################################
note 'a single Redis that goes silent (frozen) under waiters: they ride it within their wait';
{
	my $fh = RedsemTest::Session->new($pg, name => 'frozen holder');
	is($fh->query_ok(q{SELECT redsem_acquire('fz1', 1, lease => '30 s') IS NOT NULL;}), 't', 'a holder takes the only slot of "fz1"');
	my $fw = RedsemTest::Session->new($pg, name => 'frozen long waiter');
	$fw->send(q{SET redsem.command_timeout = 500; SELECT redsem_acquire('fz1', 1, lease => '5 s', wait => '20 s') IS NOT NULL;});
	my $fs = RedsemTest::Session->new($pg, name => 'frozen short waiter');
	$fs->send(q{SET redsem.command_timeout = 500; SELECT redsem_acquire('fz1', 1, lease => '5 s', wait => '3 s') IS NOT NULL;});
	ok(defined wait_until(10, sub { $redis->zcard('fz1', 'waiting') == 2 }), 'two wait in its line (command_timeout 500 ms)');
	$redis->freeze;
	my $frozen_at = time;
	my ($fsout, $fserr, $fssecs) = $fs->wait_done(15);
	like($fserr // '', qr/ERROR:  08006: /, 'the waiter whose wait runs out while Redis is silent fails: 08006');
	cmp_ok($fssecs // 0, '>=', 2.8, sprintf('when its wait of 3 s ends (%.2f s), not at its command\'s timeout', $fssecs // 0));
	sleep_full(4 - (time - $frozen_at));
	ok(!$fw->wait_done(0.01), 'the other still waits, 4 s into the silence');
	$redis->thaw;
	is($fh->query_ok(q{SELECT redsem_release_all();}), '1', 'the holder gives its slot back');
	my ($fwout, $fwerr) = $fw->wait_done(25);
	is($fwout // '', 't', 'the waiter with wait left gets the slot');
	unlike($fwerr // '', qr/ERROR/, 'with no error');
	is($fw->query_ok(q{SELECT redsem_release_all();}), '1', 'and gives it back');
	$_->quit foreach ($fh, $fw, $fs);
}

$_->quit foreach ($h, $w, $s, $n, $qh, $qw);
node_log_is_clean($pg, 'no crash');
$pg->stop;
$redis->stop;
done_testing();
