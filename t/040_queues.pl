
# 040_queues.pl - statement queues: at most N statements of a queued role
# run at once across servers, with no change to their SQL.
#
# Two independent primaries (a, b) and a hot standby of a, all sharing one
# Redis and defining the queue "analysts" (active_statements=2); the role
# analyst belongs to it (ALTER ROLE ... SET redsem.queue).  Clients of the
# analyst on all three servers run SELECT q_interval(...), a function that
# returns the clock at its start and at its end: both lie inside the time
# the statement held its slot, so if more than 2 statements ever ran at
# once, more than 2 such periods would overlap (checked independently of
# redsem, as in 011_many_servers).  Then, on one server: first come first
# served, cancel, statement_timeout and max_wait leave the line, errors give
# the slot back, cheap statements pass, nested queries take no slot, EXPLAIN
# never waits, utility statements pass unless utility=on, a cursor keeps its
# slot, an ordinary role cannot leave its queue, the wait shows in
# pg_stat_activity, and Redis failing makes statements fail or run as the
# queue says.

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

my $ACTIVE = 2;
my $redis = RedsemTest::Redis->new;
my $sock = $redis->socket;
my $QUEUES = "analysts: active_statements=$ACTIVE max_wait=30s; "
  . 'cheap: active_statements=1 min_cost=1e9; '
  . 'strict: active_statements=1 max_wait=300ms; '
  . 'utilities: active_statements=1 utility=on max_wait=300ms; '
  . 'tools: active_statements=1 max_wait=300ms application_name=tableau*|metabase; '
  . 'lenient: active_statements=1 on_redis_error=run; '
  . 'fifo: active_statements=1 max_wait=30s; '
  . 'mincost: active_statements=1 min_cost=1000';

sub make_node
{
	my ($name, %init) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%init);
	$node->append_conf('postgresql.conf', <<"EOC");
shared_preload_libraries = 'redsem'
redsem.unix_socket = '$sock'
redsem.queues = '$QUEUES'
# (the keepers' reads of the queues of Redis would show in commandstats)
redsem.queue_poll_interval = '1h'
max_connections = 50
log_min_messages = warning
EOC
	$node->append_conf('postgresql.conf', connection_mode_conf());
	$node->start;
	$node->safe_psql('postgres', q{
CREATE EXTENSION redsem;
CREATE ROLE analyst LOGIN;
ALTER ROLE analyst SET redsem.queue = 'analysts';
CREATE ROLE tool LOGIN;
GRANT pg_read_all_stats TO analyst;
-- the clock at its start and at its end, in one top-level statement
CREATE FUNCTION q_interval(secs float8) RETURNS text LANGUAGE plpgsql AS $$
DECLARE t1 float8 := extract(epoch FROM clock_timestamp());
BEGIN
    PERFORM pg_sleep(secs);
    RETURN t1 || ' ' || extract(epoch FROM clock_timestamp());
END $$;
-- a function whose body runs queries of its own
CREATE FUNCTION q_nested() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
    SELECT count(*) INTO n FROM generate_series(1, 10);
    SELECT n + count(*) INTO n FROM pg_class;
    RETURN n;
END $$;
CREATE PROCEDURE q_proc() LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.01); END $$;
-- the same, writing the period down (primaries only)
CREATE UNLOGGED TABLE q_log (t1 float8, t2 float8);
GRANT INSERT, SELECT ON q_log TO analyst;
CREATE FUNCTION q_logged(secs float8) RETURNS void LANGUAGE plpgsql AS $$
DECLARE t1 float8 := extract(epoch FROM clock_timestamp());
BEGIN
    PERFORM pg_sleep(secs);
    INSERT INTO q_log VALUES (t1, extract(epoch FROM clock_timestamp()));
END $$;
});
	return $node;
}

my $node_a = make_node('a', allows_streaming => 1);
$node_a->backup('bk');
my $standby = PostgreSQL::Test::Cluster->new('a_standby');
$standby->init_from_backup($node_a, 'bk', has_streaming => 1);
$standby->start;
$node_a->wait_for_catchup($standby, 'replay', $node_a->lsn('insert'));
my $node_b = make_node('b');
my @servers = ($node_a, $node_b, $standby);

# The most periods [t1, t2] of @$intervals ([t1, t2, server]) that overlap,
# and whether periods of different servers overlapped.
sub max_overlap
{
	my ($intervals) = @_;
	my @events = sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] }
	  ((map { [ $_->[0], +1, $_ ] } @$intervals), (map { [ $_->[1], -1, $_ ] } @$intervals));
	my ($inside, $max, $cross) = (0, 0, 0);
	my %open;
	foreach my $e (@events)
	{
		if ($e->[1] > 0)
		{
			$open{ $e->[2] } = $e->[2];
			$inside++;
			my %srv = map { $_->[2] => 1 } values %open;
			$cross = 1 if keys %srv > 1;
		}
		else
		{
			delete $open{ $e->[2] };
			$inside--;
		}
		$max = $inside if $inside > $max;
	}
	return ($max, $cross);
}

###########################################################################
note "pgbench on two primaries: at most $ACTIVE analyst statements at once";

my @benches;
foreach my $node ($node_a, $node_b)
{
	my $file = $node->basedir . '/q_bench.sql';
	PostgreSQL::Test::Utils::append_to_file($file, "SELECT q_logged(0.01);\n");
	my %b = (name => $node->name, out => '', err => '');
	$b{h} = IPC::Run::start(
		[
			$node->installed_command('pgbench'), '-n', '-f', $file, '-c', 4, '-j', 2,
			'-t', 40, '-h', $node->host, '-p', $node->port, '-U', 'analyst', 'postgres'
		],
		'<', '/dev/null', '>', \$b{out}, '2>', \$b{err},
		IPC::Run::timeout(180));
	push @benches, \%b;
}
foreach my $b (@benches)
{
	my $ok = eval { $b->{h}->finish; 1 } && $b->{h}->result == 0;
	ok($ok, "pgbench on $b->{name} succeeded") or diag($b->{err});
	like($b->{out}, qr{number of transactions actually processed: 160/160}, "every pgbench transaction on $b->{name} ran");
}
my @logged;
foreach my $node ($node_a, $node_b)
{
	foreach my $line (split /\n/, $node->safe_psql('postgres', 'SELECT t1, t2 FROM q_log'))
	{
		my ($t1, $t2) = split /\|/, $line;
		push @logged, [ $t1, $t2, $node->name ];
	}
}
is(scalar(@logged), 320, 'every statement wrote its period down');
my ($pmax, $pcross) = max_overlap(\@logged);
cmp_ok($pmax, '<=', $ACTIVE, "never more than $ACTIVE pgbench statements at once across both servers (max $pmax)");
cmp_ok($pmax, '>=', $ACTIVE, 'the queue really was full at times');
ok($pcross, 'statements of both servers ran at the same time');

###########################################################################
note "the limit holds across two primaries and a standby: at most $ACTIVE analyst statements at once";

my @clients;
foreach my $node (@servers)
{
	foreach my $i (1 .. 3)
	{
		my $name = $node->name . "_$i";
		my $file = $node->basedir . "/client_$i.sql";
		PostgreSQL::Test::Utils::append_to_file($file,
			"SELECT '$name ' || q_interval(0.02);\n" x 40);
		my %c = (name => $name, server => $node->name, out => '', err => '');
		$c{h} = IPC::Run::start(
			[
				$node->installed_command('psql'), '-XAtq', '-v', 'ON_ERROR_STOP=1',
				'-d', $node->connstr('postgres') . ' user=analyst', '-f', $file
			],
			'<', '/dev/null', '>', \$c{out}, '2>', \$c{err},
			IPC::Run::timeout(180));
		push @clients, \%c;
	}
}
my @intervals;
foreach my $c (@clients)
{
	my $ok = eval { $c->{h}->finish; 1 } && $c->{h}->result == 0;
	ok($ok, "client $c->{name} finished without error") or diag($c->{err});
	foreach my $line (split /\n/, $c->{out})
	{
		push @intervals, [ $2, $3, $1 ] if $line =~ /^(\S+)_\d+ ([\d.]+) ([\d.]+)$/;
	}
}
is(scalar(@intervals), 9 * 40, 'every statement ran');
my ($max, $cross) = max_overlap(\@intervals);
cmp_ok($max, '<=', $ACTIVE, "never more than $ACTIVE analyst statements at once across the three servers (max $max)");
cmp_ok($max, '>=', $ACTIVE, 'the queue really was full at times');
ok($cross, 'statements of different servers ran at the same time');
my $row = $node_a->safe_psql('postgres',
	q{SELECT running || ' ' || waiting || ' ' || admitted || ' ' || (waited > 0) FROM redsem_queues WHERE name = 'analysts'});
like($row, qr/^0 0 \d+ true$/, "redsem_queues on a: nothing running or waiting now, statements admitted after waiting ($row)");

###########################################################################
note 'first come, first served; the wait shows in pg_stat_activity';

sub analyst { return RedsemTest::Session->new($_[0] // $node_a, name => $_[1] // 'analyst', user => 'analyst'); }
my $admin = RedsemTest::Session->new($node_a, name => 'admin');

# A statement of $s that holds its queue's slot until unfill() (not a
# sleep: on a loaded machine a second was sometimes over before the
# checks that need the queue full were)
sub fill
{
	my ($s) = @_;
	$admin->query_ok(q{SELECT pg_advisory_lock(4040);});
	$s->send(q{SELECT pg_advisory_xact_lock(4040) IS NULL;});
	return;
}

# Let the statement of fill($s) end, and collect it
sub unfill
{
	my ($s) = @_;
	$admin->query_ok(q{SELECT pg_advisory_unlock(4040);});
	return $s->wait_done(10);
}

sub waiting_count
{
	my ($queue) = @_;
	return $admin->query_ok(qq{SELECT waiting FROM redsem_queues WHERE name = '$queue';});
}

# (a queue of 1, so that each waiter starts alone; sessions are opened
# first: their first statement would queue too)
my @fifo = map { RedsemTest::Session->new($node_a, name => "fifo$_") } 0 .. 3;
$_->query_ok(q{SET redsem.queue = 'fifo';}) foreach @fifo;
fill($fifo[0]);
ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'fifo';}) eq '1' }),
	'a long statement fills the queue "fifo"');
foreach my $i (1 .. 3)
{
	$fifo[$i]->send(q{SELECT extract(epoch FROM clock_timestamp()) FROM pg_sleep(0.05);});
	ok(wait_until(10, sub { waiting_count('fifo') eq $i }), "waiter $i is in line");
}
my $pids = join(',', map { $_->backend_pid } @fifo[ 1 .. 3 ]);
is($admin->query_ok(qq{SELECT string_agg(DISTINCT wait_event_type, ',') FROM pg_stat_activity WHERE pid IN ($pids);}),
	'Extension', 'pg_stat_activity shows the waiters waiting on an extension event');
unfill($fifo[0]);
my @started = map { ($_->wait_done(20))[0] } @fifo[ 1 .. 3 ];
ok($started[0] < $started[1] && $started[1] < $started[2],
	'they ran one by one, in the order they came: ' . join(' < ', @started));
my @holders = map { analyst($node_a, "holder$_") } 1 .. 2;
my @waiters = map { analyst($node_a, "waiter$_") } 1 .. 3;

###########################################################################
note 'cancel, statement_timeout and max_wait leave the line; errors give the slot back';

$_->send(q{SELECT q_interval(3);}) foreach @holders;
ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'analysts';}) eq '2' }),
	'the queue is full again');
my $w = $waiters[0];
$w->send(q{SELECT pg_sleep(0);});
ok(wait_until(10, sub { waiting_count('analysts') eq '1' }), 'a statement waits');
$admin->query_ok('SELECT pg_cancel_backend(' . $w->backend_pid . ');');
my (undef, $err) = $w->wait_done(10);
like($err, qr/canceling statement due to user request/, 'cancelled, it ends with the usual error');
# (a leave at abort is sent without waiting for its reply: Redis has it a
# moment after the error reaches the client)
ok(wait_until(5, sub { waiting_count('analysts') eq '0' }), 'and left the line');

my ($out, $e2) = $waiters[1]->query(q{SET statement_timeout = '300ms'; SELECT pg_sleep(0); RESET statement_timeout;});
like($e2, qr/canceling statement due to statement timeout/, 'statement_timeout ends a wait in line');
ok(wait_until(5, sub { waiting_count('analysts') eq '0' }), 'and it left the line');
$_->wait_done(20) foreach @holders;

my $strict = RedsemTest::Session->new($node_a, name => 'strict');
$strict->query_ok(q{SET redsem.queue = 'strict';});     # (superuser: may)
my $other = RedsemTest::Session->new($node_a, name => 'other');
$other->query_ok(q{SET redsem.queue = 'strict';});
fill($other);
ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'strict';}) eq '1' }),
	'a statement fills the queue "strict" (max_wait=300ms)');
($out, $err) = $strict->query(q{SELECT pg_sleep(0);});
like($err, qr/55P03: statement could not enter redsem queue "strict" within 300 ms/, 'a statement that waited max_wait fails with 55P03');
unfill($other);
($out, $err) = $strict->query(q{SELECT x / 0 FROM generate_series(1, 3) x;});
like($err, qr/division by zero/, 'a statement fails');
is($admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'strict';}), '0', 'and its slot is back');
is($strict->query_ok(q{SELECT 42;}), '42', 'the next statement runs');

###########################################################################
note 'what passes without a slot, and what keeps one';

my $cheap = RedsemTest::Session->new($node_a, name => 'cheap');
$cheap->query_ok(q{SET redsem.queue = 'cheap';});
# (script calls counted in Redis, where the servers' keepers may call
# too: a window without one of theirs, of three, shows it)
my $calls;
for my $try (1 .. 3)
{
	my ($evalsha_before) = $redis->cli('INFO', 'commandstats') =~ /cmdstat_fcall:calls=(\d+)/;
	$cheap->query_ok(q{SELECT count(*) FROM generate_series(1, 1000) x WHERE random() >= 0;}) foreach 1 .. 5;
	my ($evalsha_after) = $redis->cli('INFO', 'commandstats') =~ /cmdstat_fcall:calls=(\d+)/;
	$calls = ($evalsha_after // 0) - ($evalsha_before // 0);
	last if $calls == 0;
}
is($calls, 0, 'statements below min_cost pass without a Redis round trip');
is($admin->query_ok(q{SELECT bypassed >= 5 FROM redsem_queues WHERE name = 'cheap';}), 't', 'and are counted as bypassed');

# min_cost counts the planner's estimate only while the role cannot lower it
my $mc = RedsemTest::Session->new($node_a, name => 'mincost');
$mc->query_ok(q{SET redsem.queue = 'mincost';});
my $heavy = q{SELECT count(*) FROM generate_series(1, 1000000) x WHERE x % 7 = 3;};
my $counts = q{SELECT admitted || '/' || bypassed FROM redsem_queues WHERE name = 'mincost';};
my $plan_cost = sub { ($mc->query_ok("EXPLAIN $heavy") =~ /cost=[\d.]+\.\.([\d.]+)/)[0] };
cmp_ok($plan_cost->(), '>', 1000, 'mincost: the statement costs more than min_cost');
my $c0 = $admin->query_ok($counts);
$mc->query_ok($heavy);
my ($adm0, $byp0) = split m{/}, $c0;
is($admin->query_ok($counts), ($adm0 + 1) . "/$byp0", '... and is queued');
$mc->query_ok(q{SET cpu_tuple_cost = 0; SET cpu_operator_cost = 0;});
cmp_ok($plan_cost->(), '<', 1000, 'SET cpu_tuple_cost = 0 and cpu_operator_cost = 0 make it look cheap');
$mc->query_ok($heavy);
is($admin->query_ok($counts), ($adm0 + 2) . "/$byp0", '... but it is still queued: settings the session lowered do not count');
$mc->query_ok(q{RESET cpu_tuple_cost; RESET cpu_operator_cost;});
$mc->query_ok(q{SELECT pg_sleep(0);});
is($admin->query_ok($counts), ($adm0 + 3) . "/$byp0", 'once seen, for the rest of the session: even a cheap statement is queued');
$mc->quit;
# a LIMIT (or EXISTS) costs its rows only: the costliest node counts
$mc = RedsemTest::Session->new($node_a, name => 'mincost_limit');
$mc->query_ok(q{SET redsem.queue = 'mincost';});
my $limited = q{SELECT x FROM generate_series(1, 1000000) x WHERE x % 7 = 3 LIMIT 1;};
cmp_ok(($mc->query_ok("EXPLAIN $limited") =~ /^Limit\s+\(cost=[\d.]+\.\.([\d.]+)/)[0], '<', 1000,
	'mincost: a LIMIT over a costly scan');
($adm0, $byp0) = split m{/}, $admin->query_ok($counts);
$mc->query_ok($limited);
is($admin->query_ok($counts), ($adm0 + 1) . "/$byp0", '... is queued: its costliest node counts, not the LIMIT');
$mc->quit;
# a plan made while the costs were lowered, kept by PREPARE after RESET
$mc = RedsemTest::Session->new($node_a, name => 'mincost2');
$mc->query_ok(q{SET redsem.queue = 'mincost';});
$mc->query_ok(q{SELECT pg_sleep(0);});
($adm0, $byp0) = split m{/}, $admin->query_ok($counts);
is($byp0 > 0 ? 'passes' : 'queued', 'passes', 'a new session: a cheap statement passes');
$mc->query_ok(q{SET plan_cache_mode = force_generic_plan; SET cpu_tuple_cost = 0; SET cpu_operator_cost = 0;}
	  . qq{ PREPARE heavy AS $heavy});
$mc->query_ok(q{EXECUTE heavy;});
$mc->query_ok(q{RESET cpu_tuple_cost; RESET cpu_operator_cost;});
like($mc->query_ok(q{EXPLAIN EXECUTE heavy;}), qr/cost=0\.00\.\.0\.00/, 'the plan kept for it is the cheap one');
$mc->query_ok(q{EXECUTE heavy;});
is($admin->query_ok($counts), ($adm0 + 2) . "/$byp0", 'a statement prepared with lowered costs is still queued after they are reset');
$mc->quit;
# ... or inside a DO block, whose settings are gone when it ends (found by review)
$mc = RedsemTest::Session->new($node_a, name => 'mincost-do');
$mc->query_ok(q{SET redsem.queue = 'mincost';} . qq{ PREPARE heavy AS $heavy});
($adm0, $byp0) = split m{/}, $admin->query_ok($counts);
$mc->query_ok(q{DO $$ BEGIN SET LOCAL cpu_tuple_cost = 0; SET LOCAL cpu_operator_cost = 0; EXECUTE 'EXPLAIN EXECUTE heavy'; END $$;});
like($mc->query_ok(q{EXPLAIN EXECUTE heavy;}), qr/cost=0\.00\.\.0\.00/, 'a plan made cheap inside a DO block is kept');
$mc->query_ok(q{EXECUTE heavy;});
is($admin->query_ok($counts), ($adm0 + 1) . "/$byp0", '... and its statement is queued');
$mc->quit;
# ... or by a function the planner evaluates, the settings reset before the
# statement runs (found by review: the settings were looked at only before
# the plan was made, and at ExecutorStart), or even before the plan is done
# (RESET, or set_config with a null value, give the trusted source back)
$admin->query_ok(q{CREATE FUNCTION lowerer() RETURNS boolean IMMUTABLE LANGUAGE sql AS $$
  SELECT set_config('cpu_tuple_cost', '0', false) IS NOT NULL AND set_config('cpu_operator_cost', '0', false) IS NOT NULL $$;
CREATE FUNCTION unset() RETURNS boolean IMMUTABLE LANGUAGE sql AS $$
  SELECT set_config('cpu_tuple_cost', NULL, false) IS NULL AND set_config('cpu_operator_cost', NULL, false) IS NULL $$;
CREATE FUNCTION do_reset() RETURNS boolean VOLATILE LANGUAGE plpgsql AS $$
  BEGIN RESET cpu_tuple_cost; RESET cpu_operator_cost; RETURN true; END $$;
CREATE FUNCTION resetter() RETURNS boolean IMMUTABLE LANGUAGE sql AS $$ SELECT do_reset() $$;});
my $admitted = q{SELECT admitted FROM redsem_queues WHERE name = 'mincost';};
for my $case (['after', 'lowerer()', 1], ['unset', 'lowerer() AND unset()', 0], ['reset', 'lowerer() AND resetter()', 0])
{
	my ($name, $quals, $cheap) = @$case;
	(my $sql = $heavy) =~ s/;$/ AND $quals;/;
	$mc = RedsemTest::Session->new($node_a, name => "mincost-$name");
	$mc->query_ok(q{SET redsem.queue = 'mincost';} . qq{ PREPARE heavy AS $sql});
	my $plan = $mc->query_ok(q{EXPLAIN EXECUTE heavy;});
	like($plan, qr/cost=0\.00\.\.0\.00/, "$name: a plan made cheap by a function the planner evaluates") if $cheap;
	$mc->query_ok(q{RESET cpu_tuple_cost; RESET cpu_operator_cost;});
	# (the query of a function the planner evaluates is judged as a statement of its own)
	my $adm = $admin->query_ok($admitted);
	$mc->query_ok(q{EXECUTE heavy;});
	is($admin->query_ok($admitted), $adm + 1, "$name: ... its statement is queued, the settings reset");
	$mc->query_ok(q{SELECT pg_sleep(0);});
	is($admin->query_ok($admitted), $adm + 2, "$name: ... and so are the session's statements after it");
	$mc->quit;
}
# a setting changed and reset in the transaction counts (it may have been
# lowered for part of a plan)
$mc = RedsemTest::Session->new($node_a, name => 'mincost-txn');
$mc->query_ok(q{SET redsem.queue = 'mincost';});
my $adm = $admin->query_ok($admitted);
$mc->query_ok(q{BEGIN; SET LOCAL cpu_tuple_cost = 0; RESET cpu_tuple_cost; SELECT pg_sleep(0); COMMIT;});
is($admin->query_ok($admitted), $adm + 1, 'a cost setting changed and reset in the transaction: the statement is queued');
$mc->quit;
like(PostgreSQL::Test::Utils::slurp_file($node_a->logfile),
	qr/DETAIL:  These planner settings come from the session or the role, which could lower a statement's estimated cost: cpu_tuple_cost \(changed in this transaction\)\./,
	'the server log names a setting changed and reset so');
$admin->query_ok(q{DROP FUNCTION lowerer(); DROP FUNCTION unset(); DROP FUNCTION resetter(); DROP FUNCTION do_reset();});
$mc = RedsemTest::Session->new($node_a, name => 'mincost3');
$mc->query_ok(q{SET redsem.queue = 'mincost'; SET work_mem = '4GB';});
($adm0, $byp0) = split m{/}, $admin->query_ok($counts);
$mc->query_ok(q{SELECT pg_sleep(0);});
is($admin->query_ok($counts), ($adm0 + 1) . "/$byp0", 'work_mem set by the session: even a cheap statement is queued');
$mc->quit;
# (off by default, turned on it lets the planner find a cheaper plan over
# partitions)
$mc = RedsemTest::Session->new($node_a, name => 'mincost4');
$mc->query_ok(q{SET redsem.queue = 'mincost'; SET enable_partitionwise_aggregate = on;});
($adm0, $byp0) = split m{/}, $admin->query_ok($counts);
$mc->query_ok(q{SELECT pg_sleep(0);});
is($admin->query_ok($counts), ($adm0 + 1) . "/$byp0", 'enable_partitionwise_aggregate turned on by the session: even a cheap statement is queued');
$mc->quit;
$admin->query_ok(q{ALTER ROLE analyst SET cpu_tuple_cost = 0; ALTER ROLE analyst SET redsem.queue = 'mincost';});
my $ar = RedsemTest::Session->new($node_a, name => 'mincost-role', user => 'analyst');
my ($adm1, $byp1) = split m{/}, $admin->query_ok($counts);
$ar->query_ok(q{SELECT pg_sleep(0);});
is($admin->query_ok($counts), ($adm1 + 1) . "/$byp1", 'a value from ALTER ROLE (which a role may set for itself) does not count either');
$ar->quit;
$admin->query_ok(q{ALTER ROLE analyst RESET cpu_tuple_cost;});
# ALTER DATABASE counts as trusted only for roles that cannot act as the
# database's owner: a NOINHERIT member of its role can SET ROLE to it and
# lower the costs there (counted as trusted before: pg_database_ownercheck
# looks at inherited privileges only)
$admin->query_ok(q{CREATE ROLE dbo; CREATE DATABASE rep OWNER dbo; ALTER DATABASE rep SET cpu_tuple_cost = 0;
	ALTER ROLE analyst NOINHERIT; GRANT dbo TO analyst;});
$ar = RedsemTest::Session->new($node_a, name => 'mincost-dbo', user => 'analyst', dbname => 'rep');
($adm1, $byp1) = split m{/}, $admin->query_ok($counts);
$ar->query_ok(q{SELECT pg_sleep(0);});
is($admin->query_ok($counts), ($adm1 + 1) . "/$byp1",
	'a value from ALTER DATABASE, for a NOINHERIT member of the owner\'s role: does not count either');
$ar->quit;
$admin->query_ok(q{ALTER ROLE analyst INHERIT; REVOKE dbo FROM analyst; DROP DATABASE rep WITH (FORCE); DROP ROLE dbo;
	ALTER ROLE analyst SET redsem.queue = 'analysts';});
like(PostgreSQL::Test::Utils::slurp_file($node_a->logfile),
	qr/statements of this session count as costly for statement queues from now on\n.*DETAIL:  These planner settings come from the session or the role, which could lower a statement's estimated cost: cpu_tuple_cost \(session\), cpu_operator_cost \(session\)\./,
	'the server log says why, once per session, naming the settings');

fill($other);
ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'strict';}) eq '1' }),
	'"strict" is full again');
like($strict->query_ok(q{EXPLAIN SELECT count(*) FROM generate_series(1, 10);}), qr/Aggregate/, 'EXPLAIN does not wait');
($out, $err) = $strict->query(q{EXPLAIN ANALYZE SELECT pg_sleep(0);});
like($err, qr/55P03/, 'EXPLAIN ANALYZE does (it runs the query)');
unfill($other);

is($strict->query_ok(q{SELECT q_nested() > 0;}), 't', 'queries nested in a function take no slot of their own (limit 1: no self-wait)');
is($strict->query_ok(q{BEGIN; DECLARE c CURSOR FOR SELECT x FROM generate_series(1, 3) x WHERE random() >= 0; FETCH 1 FROM c;}), '1', 'a cursor is opened');
($out, $err) = $other->query(q{SELECT pg_sleep(0);});
like($err, qr/55P03/, 'while it is open, its slot stays taken');
is($strict->query_ok(q{SELECT count(*) FROM redsem_held() WHERE scope = 'statement';}), '1',
	'the session runs other statements under the cursor\'s slot');
$strict->query_ok(q{CLOSE c; COMMIT;});
is($other->query_ok(q{SELECT 2;}), '2', 'closed, the slot is free');

my $util = RedsemTest::Session->new($node_a, name => 'util');
$util->query_ok(q{SET redsem.queue = 'utilities';});
$other->query_ok(q{SET redsem.queue = 'utilities';});
fill($other);
ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'utilities';}) eq '1' }),
	'"utilities" (utility=on) is full');
($out, $err) = $util->query(q{CALL q_proc();});
like($err, qr/55P03/, 'in a queue with utility=on, CALL waits too');
is($util->query_ok(q{SET work_mem = '8MB'; SHOW work_mem;}), '8MB', 'but SET and SHOW never do');
unfill($other);
$other->query_ok(q{SET redsem.queue = 'strict';});
fill($other);
ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'strict';}) eq '1' }), '"strict" is full');
($out, $err) = $strict->query(q{CREATE TEMP TABLE t1 (x int); DROP TABLE t1;
DO $$ DECLARE x int; BEGIN x := 1 + 1; RAISE DEBUG 'x %', x; END $$;});
is($err, '', 'in a queue with utility=off, utility statements pass, and a DO that runs no query');
# (a CALL or DO that runs a query takes a slot at that query: its queries
# took none, nested, and ran beside the cap before)
($out, $err) = $strict->query(q{CALL q_proc();});
like($err, qr/55P03/, '... but a CALL whose procedure runs a query waits, at that query');
unfill($other);

###########################################################################
note 'assignment: roles cannot leave their queue; applications by name';

my $an = analyst($node_a, 'escapee');    # (the queue is free: its first statement runs)
($out, $err) = $an->query(q{SET redsem.queue = '';});
like($err, qr/permission denied to set parameter "redsem.queue"/, 'an ordinary role cannot SET redsem.queue');
($out, $err) = $an->query(q{RESET redsem.queue;});
like($err, qr/permission denied/, 'nor RESET it');
is($an->query_ok(q{SHOW redsem.queue;}), 'analysts', 'it stays in its queue');

my $tool = RedsemTest::Session->new($node_a, name => 'tool', user => 'tool');
$other->query_ok(q{SET redsem.queue = 'tools';});
fill($other);
ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'tools';}) eq '1' }), '"tools" is full');
is($tool->query_ok(q{SELECT 'free';}), 'free', 'a session of another application runs');
($out, $err) = $tool->query(q{SET application_name = 'tableau-desktop'; SELECT pg_sleep(0);});
like($err, qr/55P03: statement could not enter redsem queue "tools"/, 'one whose application_name matches tableau* queues in "tools"');
unfill($other);

###########################################################################
note 'Redis unusable: on_redis_error=fail fails (08001), =run runs with a WARNING';

my $len = RedsemTest::Session->new($node_a, name => 'lenient');
$len->query_ok(q{SET redsem.queue = 'lenient';});
$redis->freeze;
$strict->query_ok(q{SET redsem.command_timeout = '300ms'; SET redsem.queue = 'analysts';});
$len->query_ok(q{SET redsem.command_timeout = '300ms';});
($out, $err) = $strict->query(q{SELECT pg_sleep(0);});
like($err, qr/08006|08001/, 'in a queue with on_redis_error=fail, a statement fails with a connection error');
like($err, qr/CONTEXT:  entering redsem queue "analysts"/, '... whose context names the queue');
($out, $err) = $len->query(q{SELECT 'ran' FROM (SELECT pg_sleep(0)) s;});
is($out, 'ran', 'in a queue with on_redis_error=run, it runs');
like($err, qr/WARNING: .*statement runs without a slot of redsem queue "lenient"/, 'with a WARNING');
$redis->thaw;
is($admin->query_ok(q{SELECT ran_unqueued FROM redsem_queues WHERE name = 'lenient';}), '1', 'and is counted');

# (helper-167 F7: the WARNING said 08006 for every failure)
my $len2 = RedsemTest::Session->new($node_a, name => 'lenient2');
$len2->query_ok(q{SET redsem.queue = 'lenient';});
$redis->cli('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
$redis->cli('CONFIG', 'SET', 'maxmemory', '1');
($out, $err) = $len2->query(q{SELECT 'ran' FROM (SELECT pg_sleep(0)) s;});
$redis->cli('CONFIG', 'SET', 'maxmemory', '0');
is($out, 'ran', 'a Redis out of memory: it runs too');
like($err, qr/WARNING:  53200: statement runs without a slot of redsem queue "lenient"/, '... warned with the SQLSTATE of the failure, 53200');
($out, $err) = $len2->query(q{SELECT 'ran' FROM (SELECT pg_sleep(0)) s;});
like($err, qr/WARNING:  53200: statement runs without a slot .*\n.*DETAIL:  Redis failed an earlier statement/,
	'... as is the next one, which does not try Redis again for a while');
$len2->quit;

$_->quit foreach (@holders, @waiters, @fifo, $admin, $strict, $other, $cheap, $util, $an, $tool, $len);
node_log_is_clean($_) foreach @servers;
$_->stop foreach ($standby, $node_a, $node_b);
$redis->stop;
done_testing();
