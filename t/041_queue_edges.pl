
# 041_queue_edges.pl - statement queues and waits at their edges: a
# procedure that commits keeps its statement's slot to the end of the CALL;
# a waiter whose own locks keep the slot's holder from finishing ends with
# 40P01 instead of waiting forever (statement queues and redsem_acquire
# alike); the release at the end of a statement does not wait for Redis,
# and with redsem.await_release it waits but serves cancel while Redis is
# frozen; a function the planner evaluates ahead of time takes no slot
# of its own.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $redis = RedsemTest::Redis->new;
my $node = create_node('edges', $redis,
	"redsem.queues = 'procs: active_statements=1 utility=on; dl: active_statements=1; plain: active_statements=1'\n"
	  . "deadlock_timeout = '200ms'\n"
	  # (the keeper's reads of the queues of Redis would show in commandstats)
	  . "redsem.queue_poll_interval = '1h'\n");
$node->safe_psql('postgres', q{
CREATE UNLOGGED TABLE p_log (who text, t1 float8, t2 float8);
-- a procedure that commits after each of its two steps, writing down when
-- each step ran (query_first: a query before the time is taken, at which a
-- CALL in a queue without utility=on takes its slot)
CREATE PROCEDURE p_commits(who text, secs float8, query_first boolean DEFAULT false) LANGUAGE plpgsql AS $$
DECLARE t float8;
BEGIN
    FOR i IN 1 .. 2 LOOP
        IF query_first THEN
            PERFORM pg_sleep(0);
        END IF;
        t := extract(epoch FROM clock_timestamp());
        PERFORM pg_sleep(secs);
        INSERT INTO p_log VALUES (who, t, extract(epoch FROM clock_timestamp()));
        COMMIT;
    END LOOP;
END $$;
CREATE PROCEDURE p_rolls_back() LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep(0.1);
    ROLLBACK;
    PERFORM pg_sleep(0.1);
END $$;
CREATE PROCEDURE p_fails() LANGUAGE plpgsql AS $$
BEGIN
    COMMIT;
    RAISE EXCEPTION 'failing after a commit';
END $$;
CREATE TABLE rows (id int PRIMARY KEY, v int);
INSERT INTO rows VALUES (1, 0), (2, 0);
-- the planner evaluates an immutable function of constants ahead of time:
-- its query runs while the top-level statement is being planned
CREATE FUNCTION p_const() RETURNS bigint LANGUAGE sql IMMUTABLE AS
  'SELECT count(*) FROM generate_series(1, 3)';
});

my $admin = RedsemTest::Session->new($node, name => 'admin');
sub running
{
	my ($queue) = @_;
	return $admin->query_ok(qq{SELECT running FROM redsem_queues WHERE name = '$queue';});
}

###########################################################################
note 'a procedure that commits keeps its slot until the CALL ends';

# (procs: utility=on, the CALL takes its slot at its start; plain: at its
# first query)
foreach my $case ([ 'procs', 'false' ], [ 'plain', 'true' ])
{
my ($queue, $query_first) = @$case;
$admin->query_ok(q{TRUNCATE p_log;});
my @callers = map { RedsemTest::Session->new($node, name => "caller$_") } 1 .. 3;
$_->query_ok(qq{SET redsem.queue = '$queue';}) foreach @callers;
$callers[$_]->send(qq{CALL p_commits('c$_', 0.3, $query_first);}) foreach 0 .. 2;
my $peak = 0;
my $t_end = time + 15;
while (time < $t_end)
{
	my $r = running($queue);
	$peak = $r if $r > $peak;
	last if $admin->query_ok(q{SELECT count(*) FROM p_log;}) == 6;
	usleep(50_000);
}
my @errs = map { (($_->wait_done(30))[1]) } @callers;
is(join('', @errs), '', 'three sessions called the committing procedure');
my @periods = map { [ split /\|/ ] } split /\n/,
  $admin->query_ok(q{SELECT who, min(t1), max(t2) FROM p_log GROUP BY who ORDER BY 2;});
is(scalar(@periods), 3, 'each ran both of its steps');
my $overlap = 0;
for my $i (1 .. $#periods)
{
	$overlap++ if $periods[$i][1] < $periods[ $i - 1 ][2];
}
is($overlap, 0, "$queue: one CALL at a time, from its first step to its last, across its COMMITs (limit 1)")
  or diag(explain(\@periods));
is($peak, 1, 'and redsem_queues showed it running meanwhile');
is(running($queue), 0, 'the slot is free once the CALLs ended');

my $c = $callers[0];
is(($c->query(q{CALL p_rolls_back();}))[1], '', 'a procedure that rolls back ends');
is(running($queue), 0, 'and gives its slot back');
like(($c->query(q{CALL p_fails();}))[1], qr/failing after a commit/, 'a procedure failing after a commit');
is(running($queue), 0, 'gives its slot back with the failed transaction');
is($c->query_ok(q{SELECT count(*) FROM redsem_held() WHERE scope <> 'statement';}), '0',
	'and the session holds nothing (but the slot of this very statement)');
is(($c->query(q{DO $$ BEGIN COMMIT; PERFORM pg_sleep(0.05); END $$;}))[1], '', 'a DO block that commits');
is(running($queue), 0, 'gives its slot back at its end');
$_->quit foreach @callers;
}

###########################################################################
note 'a statement waiting for a slot whose holder waits for its locks: 40P01';

my $w = RedsemTest::Session->new($node, name => 'waiter');
my $h = RedsemTest::Session->new($node, name => 'holder');
$_->query_ok(q{SET redsem.queue = 'dl';}) foreach ($w, $h);
$w->query_ok(q{BEGIN; UPDATE rows SET v = v + 1 WHERE id = 1;});
$h->send(q{UPDATE rows SET v = v + 10 WHERE id = 1;});
ok(wait_until(10, sub { $admin->query_ok(q{SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock';}) eq '1' }),
	'the holder took the queue slot and waits for the row the waiter locked');
my ($out, $err, $secs) = $w->query(q{SELECT pg_sleep(0);}, 20);
like($err, qr/ERROR:  40P01: deadlock detected while waiting for a slot of redsem semaphore "queue:dl"/,
	"the waiter's next statement would wait for the slot forever: 40P01");
like($err, qr/DETAIL:  Process \d+ holds a slot of it and waits for a lock held by this transaction/, 'saying who');
cmp_ok($secs, '<', 10, "within a few deadlock_timeouts ($secs s)");
$w->query_ok(q{ROLLBACK;});
is(($h->wait_done(20))[1], '', 'the rollback freed the row: the holder finishes');
is($admin->query_ok(q{SELECT v FROM rows WHERE id = 1;}), '10', 'with only its own update');

note 'the same with redsem_acquire';
$_->query_ok(q{RESET redsem.queue;}) foreach ($w, $h);
$w->query_ok(q{BEGIN; UPDATE rows SET v = 0 WHERE id = 2;});
$h->query_ok(q{BEGIN; SELECT redsem_acquire_xact('dl_sem', 1) IS NOT NULL;});
$h->send(q{UPDATE rows SET v = 1 WHERE id = 2; COMMIT;});
ok(wait_until(10, sub { $admin->query_ok(q{SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock';}) eq '1' }),
	'a slot holder waits for a row the waiter locked');
($out, $err, $secs) = $w->query(q{SELECT redsem_acquire_xact('dl_sem', 1, wait => NULL);}, 20);
like($err, qr/ERROR:  40P01: deadlock detected while waiting for a slot of redsem semaphore "dl_sem"/,
	'redsem_acquire with no wait limit: 40P01 instead of waiting forever');
$w->query_ok(q{ROLLBACK;});
is(($h->wait_done(20))[1], '', 'the holder goes on');

note 'no false alarm: a holder that waits for somebody else, or a limit with room for others';
$w->query_ok(q{BEGIN; SELECT redsem_acquire_xact('dl_two', 2) IS NOT NULL; UPDATE rows SET v = 5 WHERE id = 2;});
$h->query_ok(q{BEGIN; SELECT redsem_acquire_xact('dl_two', 2) IS NOT NULL;});
$h->send(q{UPDATE rows SET v = 6 WHERE id = 2; COMMIT;});
ok(wait_until(10, sub { $admin->query_ok(q{SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock';}) eq '1' }),
	'a holder of "dl_two" (limit 2) waits for the row');
my $third = RedsemTest::Session->new($node, name => 'third');
$third->query_ok(q{BEGIN; UPDATE rows SET v = 7 WHERE id = 1;});
$third->send(q{SELECT redsem_acquire_xact('dl_two', 2, wait => '1.5 s') IS NULL; ROLLBACK;});
($out, $err) = $third->wait_done(20);
is($err, '', 'a third session waits for "dl_two" whose holders wait for somebody else: no deadlock');
is($out, 't', 'it just runs out of wait time');
$w->query_ok(q{COMMIT;});
is(($h->wait_done(20))[1], '', 'and both holders finish');

$third->quit;

###########################################################################
note 'a statement waiting for Redis to take its slot back serves cancel (redsem.await_release)';

my $p = RedsemTest::Session->new($node, name => 'plain');
$p->query_ok(q{SET redsem.queue = 'plain'; SET redsem.command_timeout = '60s'; SET redsem.await_release = on;});
$p->send(q{SELECT pg_sleep(0.5);});
usleep(200_000);
$redis->freeze;
my $t0 = time;
sleep_full(1);    # the statement ended meanwhile: its release waits
$node->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $p->backend_pid . ')');
($out, $err, $secs) = $p->wait_done(30);
like($err, qr/57014/, 'a cancel ends the release at ExecutorEnd');
cmp_ok(time - $t0, '<', 10, 'at once, not after redsem.command_timeout (60 s)');
$redis->thaw;
ok(wait_until(15, sub { running('plain') eq '0' }), 'the slot is given back (by the keeper, or the next call)');
is($p->query_ok(q{SELECT 'again';}), 'again', 'and the session goes on');

note 'without redsem.await_release, the statement does not wait for the release at all';
$p->query_ok(q{RESET redsem.await_release;});
$p->send(q{SELECT pg_sleep(0.5);});
usleep(200_000);
$redis->freeze;
($out, $err, $secs) = $p->wait_done(30);
is($err, '', 'the statement ends while Redis is frozen');
cmp_ok($secs, '<', 5, 'without waiting for the reply of its release');
$redis->thaw;
ok(wait_until(15, sub { running('plain') eq '0' }), 'Redis takes the release once it runs again');
is($p->query_ok(q{SELECT 'again';}), 'again', 'and the session goes on, reading the reply first');
$p->quit;

###########################################################################
note 'the queries of functions evaluated by the planner take no slot of their own';

my $f = RedsemTest::Session->new($node, name => 'planner');
$f->query_ok(q{SET redsem.queue = 'plain';});
$f->query_ok(q{SELECT pg_sleep(0);});
# (script calls counted in Redis, where the keeper may call too: a
# window without one of its calls, of three, shows it)
my $calls;
for my $try (1 .. 3)
{
	my ($before) = $redis->cli('INFO', 'commandstats') =~ /cmdstat_fcall:calls=(\d+)/;
	is($f->query_ok(q{SELECT p_const() WHERE random() >= 0;}), '3', 'a statement whose function the planner runs')
	  if $try == 1;
	$f->query_ok(q{SELECT p_const() WHERE random() >= 0;}) if $try > 1;
	my ($after) = $redis->cli('INFO', 'commandstats') =~ /cmdstat_fcall:calls=(\d+)/;
	$calls = $after - $before;
	last if $calls == 4;
}
is($calls, 4, 'costs two acquires and two releases: its planning\'s (it calls a function of the users the planner runs), then its run\'s');
$f->quit;

###########################################################################
note 'a keeper that starts replaces the open limit a dropped fleet queue of the name left';

# (a fleet queue's drop raises its semaphore's limit to 1,000,000 for some
# seconds, and the keepers that saw it remove it; if they all restarted
# meanwhile, it stays: a server whose redsem.queues defines the name then
# puts its own cap there when its keeper starts)
$_->quit foreach ($w, $h, $admin);
my ($lib) = RedsemTest::redsem_library();
$redis->cli('FCALL', $lib, '1', 'redsem:{queue:plain}:owner', 'set_limit', '1000000');
is($node->safe_psql('postgres', "SELECT redsem_limit('queue:plain')"), '1000000', 'an open limit is stored');
$node->restart;
ok(defined wait_until(15, sub { $node->safe_psql('postgres', "SELECT redsem_limit('queue:plain')") eq '1' }),
	'the restarted keeper puts the cap of its redsem.queues back');
$node->stop;
node_log_is_clean($node);
$redis->stop;
done_testing();
