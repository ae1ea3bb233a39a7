# 065_priorities.pl - priorities across servers: two PostgreSQL servers share
# a Redis and a semaphore with one slot.  Checked: a waiter of higher
# priority is served before earlier waiters of lower priority, whichever
# server they are on; aging: a waiter of priority 1 that came more than a
# second after one of priority 0 is served after it, one of priority 5 that
# came 2.4 s after (and less than 5 s: a loaded machine has margin) before; fencing tokens rise in
# grant order whatever the line's order; a statement queue serves the
# sessions of a role with a higher redsem.queue_priority first; a priority
# out of range is refused.  Reserved capacity across the two servers: with
# 1 of 4 permits kept for priority 5, priority-0 sessions of both servers
# hold at most 3, a priority-5 caller that does not wait gets in at once on
# either server, and redsem_guard says a reserve kept a caller out.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(usleep);

my $redis = RedsemTest::Redis->new;
my $queues = "redsem.queues = 'q1: active_statements=1; "
  . "q2: active_statements=1 application_name=dash*|batch* application_priority=dash*:10|batch*:-5; "
  . "q3: active_statements=1 application_name=*a*a*a*a*a*a*a*a*a*a*a*a*b application_priority=*a*a*a*a*a*a*a*a*a*a*a*a*b:1'\n";
my $na = create_node('prio_a', $redis, $queues);
my $nb = create_node('prio_b', $redis, $queues);

# a turn: wait for the slot, note when it came and its token, hold it 200 ms
my $turn = q{
CREATE FUNCTION turn(sem text, prio int) RETURNS text LANGUAGE plpgsql AS $$
DECLARE t float8; tok bigint;
BEGIN
    IF redsem_acquire_xact(sem, 1, wait => '60 s', priority => prio) IS NULL THEN
        RAISE EXCEPTION 'no turn';
    END IF;
    t := extract(epoch FROM clock_timestamp());
    SELECT token INTO tok FROM redsem_held() WHERE name = sem;
    PERFORM pg_sleep(0.2);
    RETURN t || ' ' || tok;
END $$;
};
$_->safe_psql('postgres', $turn) foreach ($na, $nb);

# Waiters named by their server and priority, queued in this order while a
# holder keeps the slot; then the holder leaves.  Returns the names in the
# order they were served, and their tokens in that order.
sub serve_order
{
	my ($sem, $pause_ms, @waiters) = @_;
	my $holder = RedsemTest::Session->new($na, name => 'holder');
	$holder->query(qq{SELECT redsem_acquire('$sem', 1, '60 s');});
	my %s;
	my $n = 0;
	foreach my $w (@waiters)
	{
		my ($node, $name, $prio) = @$w;
		$s{$name} = RedsemTest::Session->new($node, name => $name);
		$s{$name}->send(qq{SELECT turn('$sem', $prio);});
		$n++;
		wait_until(20, sub { $redis->zcard($sem, 'waiting') == $n })
		  or diag("$name did not queue");
		usleep($pause_ms * 1000);
	}
	$holder->query(q{SELECT redsem_release_all();});
	my %at;
	foreach my $name (keys %s)
	{
		my ($out) = $s{$name}->wait_done(60);
		$at{$name} = [ split / /, $out // '' ];
	}
	my @order = sort { ($at{$a}[0] // 9e9) <=> ($at{$b}[0] // 9e9) } keys %at;
	return (\@order, [ map { $at{$_}[1] // 0 } @order ]);
}

my ($order, $tokens) = serve_order('pr_x', 50,
	[ $nb, 'b0', 0 ], [ $na, 'a0', 0 ], [ $nb, 'b5', 5 ], [ $na, 'a9', 9 ]);
is("@$order", 'a9 b5 b0 a0',
	'priority 9 (server a) first, then 5 (server b), then the priority-0 waiters in arrival order');
ok($tokens->[0] < $tokens->[1] && $tokens->[1] < $tokens->[2] && $tokens->[2] < $tokens->[3],
	"fencing tokens rise in grant order, not arrival order (@$tokens)");

($order) = serve_order('pr_age', 1200, [ $nb, 'early0', 0 ], [ $na, 'late1', 1 ], [ $nb, 'late5', 5 ]);
is("@$order", 'late5 early0 late1',
	'aging, a second per level: priority 5 coming 2.4 s after priority 0 passes it, priority 1 coming 1.2 s after does not');

like(($na->psql('postgres', q{SELECT redsem_acquire('pr_bad', 1, priority => 101);}))[2],
	qr/argument "priority" is out of range/, 'a priority of 101 is refused');
is($na->safe_psql('postgres', q{SELECT redsem_acquire('pr_null', 1, priority => NULL) IS NOT NULL;}), 't',
	'a NULL priority is 0');

# statement queues: roles mapped to priorities
$na->safe_psql('postgres', q{
CREATE ROLE q_low LOGIN; CREATE ROLE q_high LOGIN;
ALTER ROLE q_low SET redsem.queue = 'q1';
ALTER ROLE q_high SET redsem.queue = 'q1';
ALTER ROLE q_high SET redsem.queue_priority = 10;
GRANT EXECUTE ON FUNCTION pg_sleep(float8) TO PUBLIC;
});
# A statement that fills a queue until the test lets it go: it waits for
# an advisory lock the test holds (in no queue: a superuser session of its
# own), not for a sleep that a slow machine could outlast
my $locker = RedsemTest::Session->new($na, name => 'locker');
sub fill_from { $locker->query_ok('SELECT pg_advisory_lock(6506);'); return q{SELECT pg_advisory_xact_lock(6506) IS NULL;}; }
sub fill_end { $locker->query_ok('SELECT pg_advisory_unlock(6506);'); }

# queue_race(QUEUE, BUSY, LOW, HIGH, CHECK): BUSY fills the queue of one
# slot, LOW queues, then HIGH; CHECK runs while both wait.  When LOW and
# HIGH started their statements.  (Sessions are made first: their own
# first statement goes through the queue too.)
sub queue_race
{
	my ($queue, $busy, $low, $high, $check) = @_;
	$busy->send(fill_from());
	wait_until(20, sub { $redis->zcard("queue:$queue", 'owner') == 1 }) or diag("$queue did not fill");
	$low->send(q{SELECT extract(epoch FROM clock_timestamp()), pg_sleep(0.3);});
	wait_until(20, sub { $redis->zcard("queue:$queue", 'waiting') == 1 }) or diag('the first did not queue');
	$high->send(q{SELECT extract(epoch FROM clock_timestamp()), pg_sleep(0.3);});
	wait_until(20, sub { $redis->zcard("queue:$queue", 'waiting') == 2 }) or diag('the second did not queue');
	$check->() if $check;
	fill_end();
	my ($t_low) = $low->wait_done(60);
	my ($t_high) = $high->wait_done(60);
	$busy->wait_done(60);
	$_->quit foreach ($busy, $low, $high);
	return ((split /\|/, $t_low // '9e9')[0], (split /\|/, $t_high // '9e9')[0]);
}

my ($t_low, $t_high) = queue_race('q1',
	map { RedsemTest::Session->new($na, name => $_->[0], user => $_->[1]) }
	  ([ 'busy', 'q_low' ], [ 'low', 'q_low' ], [ 'high', 'q_high' ]));
cmp_ok($t_high, '<', $t_low, 'in a statement queue, the role with redsem.queue_priority = 10 runs before an earlier one with 0');

my ($ret, $out, $err) = $na->psql('postgres', q{SET redsem.queue_priority = 5;}, extra_params => [ '-U', 'q_low' ]);
like($err, qr/permission denied to set parameter "redsem.queue_priority"/, 'a role cannot raise its own queue priority');

# statement queues: application names mapped to priorities (the sessions
# join q2 by their application_name too)
($t_low, $t_high) = queue_race('q2',
	RedsemTest::Session->new($na, name => 'abusy', app => 'batch0'),
	RedsemTest::Session->new($na, name => 'alow', app => 'batch1'),
	RedsemTest::Session->new($nb, name => 'ahigh', app => 'dashboard'),
	sub {
		my %prio = map { (split /\|/)[0, 1] } split /\n/,
		  $na->safe_psql('postgres', q{SELECT application_name, priority FROM redsem_holders('queue:q2');});
		is(join(' ', map { "$_:$prio{$_}" } sort keys %prio), 'batch0:-5 batch1:-5 dashboard:10',
			'redsem_holders: the batch statements have priority -5, the dashboard\'s 10 (application_priority)');
	});
cmp_ok($t_high, '<', $t_low, 'in a queue, application_name "dashboard" (priority 10) runs before an earlier "batch1" (-5)');

# a pattern with many stars against the longest application_name a client
# can give costs no more than a pass over both (a backtracking match would
# never end, and could not be interrupted)
my $stars = RedsemTest::Session->new($na, name => 'stars', app => 'a' x 63);
is(($stars->query(q{SELECT 42;}))[0], '42', 'an application_name of 63 "a" against the pattern *a*a*...*b: no match, at once');
$stars->quit;

# a cap on the priority a role may ask for
$na->safe_psql('postgres', q{CREATE ROLE capped LOGIN; ALTER ROLE capped SET redsem.max_priority = 0;});
my $acap = RedsemTest::Session->new($na, name => 'acap', user => 'capped', app => 'dashboard');
$acap->send(fill_from());
wait_until(20, sub { $redis->zcard('queue:q2', 'owner') == 1 }) or diag('capped did not enter q2');
is($na->safe_psql('postgres', q{SELECT priority FROM redsem_holders('queue:q2');}), '0',
	'a role capped by redsem.max_priority = 0 naming itself "dashboard" gets priority 0, not 10');
fill_end();
$acap->wait_done(20);
$acap->quit;
($ret, $out, $err) = $na->psql('postgres', q{SELECT redsem_acquire('pr_cap', 1, priority => 5);},
	extra_params => [ '-U', 'capped' ]);
like($err, qr/priority 5 is above this session's redsem.max_priority of 0/,
	'a role capped by redsem.max_priority = 0 cannot ask for priority 5');
($ret, $out, $err) = $na->psql('postgres', q{SET redsem.max_priority = 100;}, extra_params => [ '-U', 'capped' ]);
like($err, qr/permission denied to set parameter "redsem.max_priority"/, 'nor raise its own cap');
is($na->safe_psql('postgres', q{SELECT redsem_acquire('pr_cap', 1, priority => -3) IS NOT NULL;},
	extra_params => [ '-U', 'capped' ]), 't', 'but it may ask for less');

# reserved capacity: 1 of 4 permits kept for priority 5 and up
$na->safe_psql('postgres', q{SELECT redsem_set_limit('pr_res', 4); SELECT redsem_set_reserve('pr_res', 1, 5);});
my @flood = map { RedsemTest::Session->new($_->[0], name => $_->[1]) }
  ([ $na, 'fa1' ], [ $nb, 'fb1' ], [ $na, 'fa2' ], [ $nb, 'fb2' ]);
$_->send(q{SELECT redsem_acquire('pr_res', wait => '60 s') IS NOT NULL;}) foreach @flood;
wait_until(20, sub { $redis->zcard('pr_res', 'owner') == 4 }) or diag('the flood did not arrive');
is($nb->safe_psql('postgres', q{SELECT permits_held || ' ' || waiting FROM redsem_semaphore('pr_res');}), '3 1',
	'four priority-0 sessions of two servers: 3 hold, the 4th waits (1 of 4 permits reserved)');
is($nb->safe_psql('postgres', q{SELECT redsem_acquire('pr_res', priority => 5) IS NOT NULL;}), 't',
	'a priority-5 caller on the other server that does not wait gets in at once');
wait_until(20, sub { $redis->zcard('pr_res', 'owner') == 4 }) or diag('the priority-5 caller did not leave');
my $hi = RedsemTest::Session->new($na, name => 'hi');
is(($hi->query(q{SELECT redsem_acquire('pr_res', priority => 7) IS NOT NULL;}))[0], 't', 'a priority-7 session takes the reserve');
is($na->safe_psql('postgres', q{SELECT permits || ' ' || min_priority || ' ' || permits_held_by_class FROM redsem_reserve('pr_res');}),
	'1 5 1', 'the reserve read on the first server: 1 permit for priority 5 and up, held');
is($nb->safe_psql('postgres', q{SELECT redsem_acquire('pr_res', priority => 5) IS NULL;}), 't', 'then the limit is reached');
($ret, $out, $err) = $nb->psql('postgres', q{SELECT redsem_guard('pr_res');});
like($err, qr/DETAIL:  The semaphore keeps a reserve \(redsem_set_reserve\) for higher priorities: callers of priority 0 share 3 of its permits/,
	'redsem_guard says the reserve kept a priority-0 caller out');
$hi->query(q{SELECT redsem_release_all();});
# the three holding sessions' acquires have ended; the fourth waits
my (@holding, @in_line);
foreach my $s (@flood)
{
	my ($o) = $s->wait_done(2);
	if (defined $o) { push @holding, $s; } else { push @in_line, $s; }
}
is(scalar(@in_line), 1, 'one priority-0 session is still in line');
is(($holding[0]->query(q{SELECT redsem_release_all();}))[0], '1', 'a priority-0 holder leaves');
my ($got) = $in_line[0]->wait_done(20);
is($got, 't', 'the waiting priority-0 session gets in');
is($nb->safe_psql('postgres', q{SELECT permits_held || ' ' || waiting FROM redsem_semaphore('pr_res');}), '3 0',
	'the waiting priority-0 session gets the freed permit, not the reserved one');
$_->quit foreach @flood, $hi, $locker;
$na->safe_psql('postgres', q{SELECT redsem_set_reserve('pr_res', NULL); SELECT redsem_set_limit('pr_res', NULL);});

node_log_is_clean($_, $_->name . "'s log shows no crash") foreach ($na, $nb);
$_->stop foreach ($na, $nb);
$redis->stop;
done_testing();
