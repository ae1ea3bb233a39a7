
# 023_waiters.pl - a promoted waiter must confirm its slot.
#
#  - A waiter woken soon after its last look leaves the confirmation to
#    its server's keeper (no round trip of its own); one woken later
#    confirms itself.
#  - A waiter that died in line (here: on "another server" that is gone)
#    costs the line the promotion window, not its whole lease; three
#    with 2-s leases cost a live waiter with as short a lease about 2 s
#    each, not 5.
#  - A waiter whose line another program deleted is no holder: it queues
#    again at its next look.
#  - A waiter paused (SIGSTOP) while it was promoted, whose window ran out
#    meanwhile, never gets an id for a slot a newcomer took: it queues
#    again (or returns NULL once its wait is over), and there is never
#    more than one holder.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $WINDOW = 5;    # PROMOTION_WINDOW_MS / 1000
my $redis = RedsemTest::Redis->new;
# (the keeper's reads of the queues of Redis would show in commandstats)
my $node = create_node('wait', $redis, "redsem.queue_poll_interval = '1h'\n");
sub session { return RedsemTest::Session->new($node, name => $_[0]); }

# The holders of $sem in Redis right now (ids, not waiting)
sub holders { return holders_of($redis, $_[0]); }

###########################################################################
note 'a waiter that died in line costs the window, not its lease';

my $h = session('holder');
my $hid = $h->query_ok(q{SELECT redsem_acquire('dead', 1, '60 s');});
# "another server" queues with a 60 s lease, then is never heard from again
$redis->script('dead', 'acquire', 'gone.1', '1', '1', '60000', '1', '60000', 'elsewhere|1|db|user|app');
my $n = session('newcomer');
$n->send(q{SELECT redsem_acquire('dead', 1, '60 s', '30 s') IS NOT NULL;});
ok(defined wait_until(30, sub { $redis->zcard('dead', 'waiting') == 2 }),
	'a newcomer queues behind the dead waiter');
my $t0 = time;
is($h->query_ok(qq{SELECT redsem_release('dead', '$hid');}), 't',
	'the holder releases: the dead waiter is promoted');
my ($out, $err, $elapsed) = $n->wait_done(30);
my $took = time - $t0;
is("$out|$err", 't|', 'the newcomer gets the slot');
cmp_ok($took, '>=', $WINDOW - 1, sprintf('after the dead waiter\'s promotion window (%.1f s)', $took));
cmp_ok($took, '<', $WINDOW + 5, '... not after its 60 s lease');
is(scalar(holders('dead')), 1, 'one holder');
is($n->query_ok(q{SELECT redsem_release_all();}), '1', 'the newcomer releases');

###########################################################################
note 'three waiters that died in line with 2-s leases cost a live one about 2 s each';

# (each a promotion window of 2 s: the live waiter behind them, whose lease
# is as short, looks again within its own window, not every 5 s)
$hid = $h->query_ok(q{SELECT redsem_acquire('dead3', 1, '2 s');});
$redis->script('dead3', 'acquire', "gone.$_", '1', '1', '2000', '1', '15000', 'elsewhere|1|db|user|app')
  for 1 .. 3;
$n->send(q{SELECT redsem_acquire('dead3', 1, '2 s', '30 s') IS NOT NULL;});
ok(defined wait_until(30, sub { $redis->zcard('dead3', 'waiting') == 4 }),
	'a newcomer queues behind three dead waiters');
$t0 = time;
is($h->query_ok(qq{SELECT redsem_release('dead3', '$hid');}), 't',
	'the holder releases: the first dead waiter is promoted');
($out, $err) = $n->wait_done(30);
$took = time - $t0;
is("$out|$err", 't|', 'the newcomer gets the slot');
cmp_ok($took, '>=', 3 * 2 - 1, sprintf('after the three dead waiters\' windows (%.1f s)', $took));
cmp_ok($took, '<', 3 * 2 + 3.5, '... not 5 s each (15 s)');
is(scalar(holders('dead3')), 1, 'one holder');
is($n->query_ok(q{SELECT redsem_release_all();}), '1', 'the newcomer releases');

###########################################################################
note 'a waiter whose line another program deleted queues again: it is no holder';

# (helper-167: its next look took it for promoted, and it ran beside the
# holder until both ended, unnoticed)
$hid = $h->query_ok(q{SELECT redsem_acquire('lineless', 1, '60 s');});
$n->send(q{SELECT redsem_acquire('lineless', 1, '2 s', '30 s') IS NOT NULL;});
ok(defined wait_until(30, sub { $redis->zcard('lineless', 'waiting') == 1 }), 'a waiter queues');
$redis->cli('DEL', 'redsem:{lineless}:waiting');
sleep 3;    # (its next look comes within its 2-s window)
($out, $err) = $n->wait_done(0);
ok(!defined $out, 'after its next look it still waits');
is_deeply([ holders('lineless') ], [$hid], 'the holder alone holds');
is($redis->zcard('lineless', 'waiting'), 1, 'the waiter is back in line');
is($h->query_ok(qq{SELECT redsem_release('lineless', '$hid');}), 't', 'the holder releases');
($out, $err) = $n->wait_done(30);
is("$out|$err", 't|', 'then the waiter gets the slot');
is($n->query_ok(q{SELECT redsem_release_all();}), '1', 'and releases it');
# the same with two permits each (its permits were counted as waiting)
$hid = $h->query_ok(q{SELECT redsem_acquire('lineless2', 3, '60 s', '0', 2);});
$n->send(q{SELECT redsem_acquire('lineless2', 3, '2 s', '30 s', 2) IS NOT NULL;});
ok(defined wait_until(30, sub { $redis->zcard('lineless2', 'waiting') == 1 }), 'a waiter for two permits queues');
$redis->cli('DEL', 'redsem:{lineless2}:waiting');
sleep 3;
($out, $err) = $n->wait_done(0);
ok(!defined $out, 'after its next look it still waits');
is($h->query_ok(qq{SELECT redsem_release('lineless2', '$hid');}), 't', 'the holder releases');
($out, $err) = $n->wait_done(30);
is("$out|$err", 't|', 'then the waiter gets its two permits');
is($n->query_ok(q{SELECT redsem_release_all();}), '1', 'and releases them');
is($h->query_ok(q{SELECT permits_held || ',' || waiting FROM redsem_semaphore('lineless2');}), '0,0',
	'the counts are whole again');
is($h->query_ok(q{SELECT redsem_release('lineless2', redsem_acquire('lineless2', 3, '60 s', '0', 3));}), 't',
	'all three permits can be taken');

###########################################################################
note 'a holder another program removed by hand: the line moves at the next look';

# (helper-171: nothing promoted the waiter, which waited until its wait
# ended, 60 s; redsem_force_release could not help either)
my $z = session('zholder');
my $zid = $z->query_ok(q{SELECT redsem_acquire('zrem', 1, '60 s');});
$n->send(q{SELECT redsem_acquire('zrem', 1, '2 s', '30 s') IS NOT NULL;});
ok(defined wait_until(30, sub { $redis->zcard('zrem', 'waiting') == 1 }), 'a waiter queues');
$t0 = time;
$redis->cli('ZREM', 'redsem:{zrem}:owner', $zid);
$redis->cli('ZREM', 'redsem:{zrem}:timeout', $zid);
($out, $err) = $n->wait_done(30);
$took = time - $t0;
is("$out|$err", 't|', 'the waiter gets the slot');
cmp_ok($took, '<', 2 + 2, sprintf('at its next look, within its 2-s window (%.1f s)', $took));
is($n->query_ok(q{SELECT redsem_release_all();}), '1', 'and releases it');
$z->quit;

###########################################################################
note 'a waiter paused while it was promoted queues again';

$hid = $h->query_ok(q{SELECT redsem_acquire('paused', 1, '60 s');});
my $w = session('waiter');
$w->send(q{SELECT redsem_acquire('paused', 1, '60 s', '60 s');});
ok(defined wait_until(30, sub { $redis->zcard('paused', 'waiting') == 1 }), 'the waiter is in line');
kill 'STOP', $w->backend_pid;
is($h->query_ok(qq{SELECT redsem_release('paused', '$hid');}), 't',
	'the holder releases while the waiter is stopped: it is promoted');
sleep $WINDOW + 1.5;
my $nid = $n->query_ok(q{SELECT redsem_acquire('paused', 1, '60 s');});
like($nid, qr/^[0-9a-f]{16}\./,
	'the stopped waiter never confirmed: after its window a newcomer takes the slot');
kill 'CONT', $w->backend_pid;
ok(defined wait_until(30, sub { $redis->zcard('paused', 'waiting') == 1 }),
	'the waiter resumes and finds the slot lost: it is back in line');
($out, $err) = $w->wait_done(1);
ok(!defined $out, '... still waiting, with no id');
is_deeply([ holders('paused') ], [$nid], 'only the newcomer holds');
is($n->query_ok(qq{SELECT redsem_release('paused', '$nid');}), 't',
	'the newcomer releases a live slot');
($out, $err) = $w->wait_done(30);
like($out, qr/^[0-9a-f]{16}\./, 'then the waiter gets the slot');
is($w->query_ok(qq{SELECT redsem_release('paused', '$out');}), 't', 'and its id is a live slot');

note 'a waiter paused past the end of its wait returns NULL';

$hid = $h->query_ok(q{SELECT redsem_acquire('paused2', 1, '60 s');});
$w->send(q{SELECT redsem_acquire('paused2', 1, '60 s', '3 s') IS NULL;});
ok(defined wait_until(30, sub { $redis->zcard('paused2', 'waiting') == 1 }), 'the waiter is in line');
kill 'STOP', $w->backend_pid;
is($h->query_ok(qq{SELECT redsem_release('paused2', '$hid');}), 't', 'the holder releases');
sleep $WINDOW + 1.5;
$nid = $n->query_ok(q{SELECT redsem_acquire('paused2', 1, '60 s');});
like($nid, qr/^[0-9a-f]{16}\./, 'a newcomer takes the slot');
kill 'CONT', $w->backend_pid;
($out, $err) = $w->wait_done(30);
is("$out|$err", 't|', 'the waiter, whose wait is over, returns NULL');
is_deeply([ holders('paused2') ], [$nid], 'only the newcomer holds');
is($w->query_ok(q{SELECT count(*) FROM redsem_held();}), '0', 'the waiter holds nothing');
is($n->query_ok(qq{SELECT redsem_release('paused2', '$nid');}), 't', 'the newcomer releases');

###########################################################################
note 'a waiter woken in good time leaves the confirmation to the keeper';

# Redis's clock, and the ms left of a member's deadline
sub redis_ms
{
	my ($sec, $usec) = split /\n/, $redis->cli('TIME');
	return $sec * 1000 + int($usec / 1000);
}
sub ms_left
{
	my ($sem, $id) = @_;
	my $dl = $redis->cli('ZSCORE', "redsem:{$sem}:timeout", $id);
	return defined $dl && $dl ne '' ? $dl - redis_ms() : -1;
}
# FCALLs Redis ran since the last CONFIG RESETSTAT (a BLPOP that blocked
# is counted when it was sent, so it is left out)
sub fcalls_since
{
	foreach (split /\n/, $redis->cli('INFO', 'commandstats'))
	{
		return $1 if /^cmdstat_fcall:calls=(\d+)/;
	}
	return 0;
}

$hid = $h->query_ok(q{SELECT redsem_acquire('lazy', 1, '60 s');});
$w->send(q{SELECT redsem_acquire('lazy', 1, '60 s', '60 s');});
ok(defined wait_until(30, sub { $redis->zcard('lazy', 'waiting') == 1 }), 'the waiter is in line');
$redis->cli('CONFIG', 'RESETSTAT');
is($h->query_ok(qq{SELECT redsem_release('lazy', '$hid');}), 't', 'the holder releases at once');
($out, $err) = $w->wait_done(30);
like($out, qr/^[0-9a-f]{16}\./, 'the waiter gets the slot');
is(fcalls_since(), 1,
	'and the hand-off took one script call, the release: the waiter sent no confirmation');
my $left = ms_left('lazy', $out);
ok($left > 0 && $left <= $WINDOW * 1000, "Redis keeps it for the promotion window at first ($left ms)");
ok(defined wait_until(10, sub { ms_left('lazy', $out) > $WINDOW * 1000 }),
	'the keeper confirms it within the window: its 60 s lease runs');
sleep $WINDOW + 1 - 2;
is_deeply([ holders('lazy') ], [$out], 'past the window, the waiter still holds the slot');
is($n->query_ok(q{SELECT redsem_acquire('lazy', 1, '60 s') IS NULL;}), 't', 'and a newcomer is refused');
is($w->query_ok(qq{SELECT redsem_release('lazy', '$out');}), 't', 'the waiter releases a live slot');

note 'a waiter woken long after its last look confirms the slot itself';

$hid = $h->query_ok(q{SELECT redsem_acquire('late', 1, '60 s');});
$w->send(q{SELECT redsem_acquire('late', 1, '60 s', '60 s');});
ok(defined wait_until(30, sub { $redis->zcard('late', 'waiting') == 1 }), 'the waiter is in line');
sleep 2.5;    # past a third of the window since its look, before its next one
$redis->cli('CONFIG', 'RESETSTAT');
is($h->query_ok(qq{SELECT redsem_release('late', '$hid');}), 't', 'the holder releases');
($out, $err) = $w->wait_done(30);
like($out, qr/^[0-9a-f]{16}\./, 'the waiter gets the slot');
is(fcalls_since(), 2, 'it confirmed the slot itself (a second script call)');
$left = ms_left('late', $out);
ok($left > $WINDOW * 1000, "its 60 s lease runs at once ($left ms)");
is($w->query_ok(qq{SELECT redsem_release('late', '$out');}), 't', 'the waiter releases');

note 'a short redsem.command_timeout: a wait that runs out is not obtained, not a Redis that did not answer';

# (Redis ends a BLPOP at its next timer tick, up to 100 ms late at the
# default hz of 10: with a command timeout of 10 ms that was reported as
# 08006 and the connection dropped)
$hid = $h->query_ok(q{SELECT redsem_acquire('tick', 1, '60 s');});
my @got = map {
	my ($o, $e) = $w->query(q{SET redsem.command_timeout = 10; SELECT redsem_acquire('tick', 1, '60 s', '200 ms') IS NULL;});
	($e // '') =~ /ERROR:  (\w+)/ ? $1 : $o;
} 1 .. 5;
is("@got", 't t t t t', 'five waits of 200 ms with a 10 ms command timeout return NULL');
$w->query_ok(q{RESET redsem.command_timeout;});
is($h->query_ok(qq{SELECT redsem_release('tick', '$hid');}), 't', 'the holder releases');

$_->quit foreach ($h, $n, $w);
node_log_is_clean($node);
$node->stop;
$redis->stop;
done_testing();
