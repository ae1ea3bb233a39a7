
# 086_queue_light.pl - statements that cannot be heavy never wait in a
# statement queue, nor for Redis (issue 49, item 5).  Before, a queued
# role's SELECT 1 and psql's \d waited behind its reports in a full queue,
# and failed with the rest when Redis was down (on_redis_error=fail).
# Light: SELECT 1, now(), SHOW, transaction control, catalog reads (psql
# \d), when they call no user or volatile function.  Not light: a user's
# table, a user's function, a volatile built-in (pg_sleep), ten million
# rows of generate_series and a cross join of catalogs (their cost), a
# catalog read in a session that lowered its cost settings.  Then Redis frozen:
# the light ones still run, a heavy one fails (fail) or runs unqueued
# (run), and after one failure the session's next statements of a "run"
# queue do not try Redis again for a while.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $redis = RedsemTest::Redis->new;
my $node = create_node('light', $redis,
	"redsem.queues = 'rep: active_statements=1 max_wait=300ms; soft: active_statements=1 on_redis_error=run; long: active_statements=1'\n");
$node->safe_psql('postgres', q{
CREATE ROLE analyst LOGIN;
ALTER ROLE analyst SET redsem.queue = 'rep';
CREATE ROLE softie LOGIN;
ALTER ROLE softie SET redsem.queue = 'soft';
CREATE ROLE longie LOGIN;
ALTER ROLE longie SET redsem.queue = 'long';
CREATE TABLE facts AS SELECT g AS id FROM generate_series(1, 100) g;
GRANT SELECT ON facts TO analyst, softie, longie;
CREATE FUNCTION plus_one(int) RETURNS int LANGUAGE plpgsql STABLE AS 'BEGIN RETURN $1 + 1; END';
CREATE FUNCTION folded(int) RETURNS int LANGUAGE plpgsql IMMUTABLE
	AS 'BEGIN RAISE NOTICE ''folded ran''; RETURN $1 + 1; END';
});

# The queue "rep" is full: an analyst's report holds its only slot
my $report = RedsemTest::Session->new($node, name => 'report', user => 'analyst');
$report->send(q{SELECT pg_sleep(30) FROM facts LIMIT 1;});
my $admin = RedsemTest::Session->new($node, name => 'admin');
ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'rep';}) eq '1' }),
	'a report holds the only slot of "rep"');
is($admin->query_ok(q{SELECT scope, state FROM redsem_activity WHERE name = 'queue:rep';}),
	'statement|holding', 'redsem_activity shows its scope as redsem_held() does: statement (helper-136)');

my $a = RedsemTest::Session->new($node, name => 'analyst', user => 'analyst');
my %light = (
	'SELECT 1' => q{SELECT 1;},
	'now() and version()' => q{SELECT now() IS NOT NULL AND version() IS NOT NULL;},
	'SHOW' => q{SHOW work_mem;},
	'a transaction' => q{BEGIN; SELECT current_user; COMMIT;},
	'a catalog join, as psql \d makes' => q{SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND pg_table_is_visible(c.oid) ORDER BY 1;},
	'a system view' => q{SELECT count(*) > 0 FROM pg_stat_activity;},
	'pg_locks' => q{SELECT count(*) > 0 FROM pg_locks;},
);
foreach my $what (sort keys %light)
{
	my ($out, $err) = $a->query($light{$what}, 30);
	is($err, '', "while the queue is full, $what runs at once");
}
foreach my $meta ('\dt', '\d facts', '\df')
{
	my ($ret, $out, $err) = $node->psql('postgres', $meta, extra_params => [ '-U', 'analyst' ]);
	is($ret, 0, "psql's $meta runs at once") or diag($err);
}

my %heavy = (
	'a user table' => q{SELECT count(*) FROM facts;},
	'a user function' => q{SELECT plus_one(1);},
	'a volatile built-in (pg_sleep)' => q{SELECT pg_sleep(0);},
	'ten million rows of generate_series' => q{SELECT count(*) FROM generate_series(1, 10000000);},
	'a cross join of catalogs' => q{SELECT count(*) FROM pg_attribute a, pg_attribute b, pg_class c;},
	'a recursive query' => q{WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) SELECT count(*) FROM r;},
	'a subquery over a user table' => q{SELECT (SELECT count(*) FROM facts);},
);
foreach my $what (sort keys %heavy)
{
	my ($out, $err) = $a->query($heavy{$what}, 30);
	like($err, qr/55P03: statement could not enter redsem queue "rep"/, "$what queues");
}

# An immutable function of the users called with constants runs while the
# statement is planned (folded into a constant: the plan left is a bare
# Result, as SELECT 1's): the planning waits for a slot, before it runs
foreach my $sql ('SELECT folded(1);', 'EXPLAIN SELECT folded(1);', 'SELECT 1 WHERE folded(1) > 0;')
{
	my ($out, $err) = $a->query($sql, 30);
	like($err, qr/55P03: statement could not enter redsem queue "rep"/, "$sql queues before it is planned");
	unlike($err, qr/folded ran/, '... and the function did not run');
}

# A session that lowered its cost settings: its catalog reads queue (their
# estimate could be made to look small), SELECT 1 still does not
$a->query_ok(q{SET cpu_tuple_cost = 0;});
my ($out, $err) = $a->query($light{'a catalog join, as psql \d makes'}, 30);
like($err, qr/55P03/, 'after SET cpu_tuple_cost = 0, a catalog join queues');
($out, $err) = $a->query(q{SELECT 1;}, 30);
is($err, '', 'and SELECT 1 still runs at once');
$a->query_ok(q{RESET cpu_tuple_cost;});

# redsem's own functions and views, and signals to other processes, are
# light: an administrator in a session the full queue governs can look at
# it, change it and cancel its blocker (helper-136: each waited and failed
# with 55P03).  A user's look-alikes, and taking a slot, are not.
$node->safe_psql('postgres', q{
CREATE SCHEMA evil;
GRANT USAGE ON SCHEMA evil TO analyst;
CREATE VIEW evil.redsem_queues AS SELECT count(*) FROM facts;
CREATE FUNCTION evil.redsem_holders(text) RETURNS bigint LANGUAGE sql
	AS 'SELECT count(*) FROM facts';
GRANT SELECT ON evil.redsem_queues TO analyst;
CREATE OPERATOR evil.=!> (FUNCTION = redsem_release, LEFTARG = text, RIGHTARG = text);
});
my $dba = RedsemTest::Session->new($node, name => 'dba');
$dba->query_ok(q{SET redsem.queue = 'rep'; SET client_min_messages = warning;});
my %own = (
	'redsem_queues' => q{SELECT count(*) > 0 FROM redsem_queues;},
	'redsem_activity' => q{SELECT count(*) > 0 FROM redsem_activity;},
	'redsem_stats' => q{SELECT count(*) >= 0 FROM redsem_stats;},
	'redsem_holders' => q{SELECT count(*) FROM redsem_holders('queue:rep');},
	'redsem_limit and redsem_semaphore' => q{SELECT redsem_limit('queue:rep') > 0, (SELECT count(*) FROM redsem_semaphore('queue:rep'));},
	'redsem_set_limit' => q{SELECT redsem_set_limit('other', 3), redsem_set_limit('other', NULL);},
	'redsem_semaphores' => q{SELECT count(*) > 0 FROM redsem_semaphores();},
	'pg_reload_conf' => q{SELECT pg_reload_conf();},
);
foreach my $what (sort keys %own)
{
	my ($out, $err) = $dba->query($own{$what}, 30);
	is($err, '', "while the queue is full, an administrator it governs runs $what at once");
}
my $a2 = RedsemTest::Session->new($node, name => 'analyst2', user => 'analyst');
($out, $err) = $a2->query(q{SELECT count(*) FROM redsem_holders('queue:rep');}, 30);
is($err, '', '... so does an analyst, redsem_holders');
$a2->quit;
my %lookalike = (
	'a user view named redsem_queues' => q{SELECT * FROM evil.redsem_queues;},
	'a user function named redsem_holders' => q{SELECT evil.redsem_holders('x');},
	'redsem_acquire (it may wait)' => q{SELECT redsem_acquire('other', 1, wait => '0') IS NOT NULL;},
	'redsem_holders beside a user table' => q{SELECT count(*) FROM redsem_holders('queue:rep'), facts;},
	# (helper-138: a call of redsem's once per row of a series the planner
	# cannot count would load Redis without bound beside the queue)
	'redsem_limit once per row' => q{SELECT count(redsem_limit('x' || g)) FROM generate_series(1, (SELECT 3000)) g;},
	'redsem_semaphore in LATERAL' => q{SELECT count(*) FROM generate_series(1, (SELECT 3000)) g, LATERAL redsem_semaphore('x' || g) s;},
	'redsem_limit beside a set-returning function' => q{SELECT redsem_limit('x'), generate_series(1, (SELECT 3000));},
	# (helper-139: an operator over one runs once per element of an array;
	# a DO that has no slot yet could loop over light calls)
	'an operator over redsem_release in ANY' => q{SELECT 'x' OPERATOR(evil.=!>) ANY (array_fill('y'::text, ARRAY[3000]));},
	'a DO looping over redsem_limit' => q{DO $$BEGIN FOR i IN 1 .. 3000 LOOP PERFORM redsem_limit('x'); END LOOP; END$$;},
);
# (a session whose cost settings are its own: $a lowered one above)
my $a3 = RedsemTest::Session->new($node, name => 'analyst3', user => 'analyst');
($out, $err) = $a3->query(q{SELECT count(*) FROM redsem_holders('queue:rep');}, 30);
is($err, '', 'a fresh analyst session runs redsem_holders at once');
foreach my $what (sort keys %lookalike)
{
	my ($out, $err) = $a3->query($lookalike{$what}, 30);
	like($err, qr/55P03: statement could not enter redsem queue "rep"/, "$what queues");
}
$a3->quit;

# (its statement would run on: quitting waits for it)
is($dba->query_ok('SELECT pg_cancel_backend(' . $report->backend_pid . ');', 30), 't',
	'the administrator in the queue cancels its blocker at once');
$report->wait_done(30);

# a queued statement whose slot an administrator frees is told to run again
$report->send(q{SELECT pg_sleep(30) FROM facts LIMIT 1;});
ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'rep';}) eq '1' }),
	'another report holds the only slot');
my $rid = $dba->query_ok(q{SELECT id FROM redsem_holders('queue:rep') WHERE state = 'holding';}, 30);
is($dba->query_ok(qq{SELECT redsem_force_release('queue:rep', '$rid');}, 30),
	't', 'the administrator in the queue force-releases it at once');
my (undef, $rerr) = $report->wait_done(30);
like($rerr, qr/57014: the slot of semaphore "queue:rep" was lost.*HINT:  It was the slot of the statement's queue: run the statement again/s,
	'the report is stopped, with a hint that fits a queued statement (helper-136)');
$dba->query_ok(q{RESET redsem.queue;});
$report->quit;
ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'rep';}) eq '0' }),
	'the report ended');

###########################################################################
note 'Redis frozen: light statements still run; "fail" fails, "run" runs unqueued';

# (a new session: the one that lowered its cost settings stays distrusted)
$a->quit;
$a = RedsemTest::Session->new($node, name => 'analyst2', user => 'analyst');
my $s = RedsemTest::Session->new($node, name => 'softie', user => 'softie');
$_->query_ok(q{SET redsem.command_timeout = '300ms'; SET redsem.connect_timeout = '300ms';}) foreach ($a, $s);
$redis->freeze;
foreach my $what (sort keys %light)
{
	($out, $err) = $a->query($light{$what}, 30);
	is($err, '', "with Redis frozen, $what runs (on_redis_error=fail)");
}
my ($ret, $pout, $perr) = $node->psql('postgres', '\d facts', extra_params => [ '-U', 'analyst' ]);
is($ret, 0, "with Redis frozen, psql's \\d facts runs") or diag($perr);
($out, $err) = $a->query(q{SELECT count(*) FROM facts;}, 30);
like($err, qr/08006|08001/, 'a heavy statement of "rep" fails with a connection error');

($out, $err) = $s->query(q{SELECT count(*) FROM facts;}, 30);
is($out, '100', 'a heavy statement of "soft" (on_redis_error=run) runs');
like($err, qr/WARNING: .*statement runs without a slot of redsem queue "soft": Redis cannot be used/,
	'with a WARNING');
($out, $err) = $s->query(q{SELECT count(*) FROM facts;}, 30);
is($out, '100', 'so does the next one');
like($err, qr/DETAIL:  Redis failed an earlier statement of this server process .* again 5 s after that\./,
	'without trying Redis again: the WARNING says so');
$redis->thaw;
is($admin->query_ok(q{SELECT ran_unqueued FROM redsem_queues WHERE name = 'soft';}), '2',
	'both are counted as run unqueued');
sleep_full(5.5);
($out, $err) = $s->query(q{SELECT count(*) FROM facts;}, 30);
is($err, '', 'once the spell is over, Redis is tried again: the statement is queued, no WARNING');

###########################################################################
note 'a statement waiting in a queue holds its locks: redsem_activity shows who waits for them';

my $holder = RedsemTest::Session->new($node, name => 'holder', user => 'longie');
$holder->send(q{SELECT pg_sleep(30) FROM facts LIMIT 1;});
ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'long';}) eq '1' }),
	'a statement holds the only slot of "long"');
my $waiter = RedsemTest::Session->new($node, name => 'waiter', user => 'longie');
$waiter->send(q{SELECT count(*) FROM facts;});
ok(wait_until(10, sub { $admin->query_ok(q{SELECT waiting FROM redsem_queues WHERE name = 'long';}) eq '1' }),
	'another waits for it, holding its plan\'s lock on facts');
my $ddl = RedsemTest::Session->new($node, name => 'ddl');
$ddl->send(q{ALTER TABLE facts ADD COLUMN extra int;});
my $reader = RedsemTest::Session->new($node, name => 'reader');
$reader->send(q{SELECT count(*) FROM facts;});
ok(wait_until(10, sub { $admin->query_ok(q{SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock';}) eq '2' }),
	'an ALTER TABLE waits for their locks, and a reader behind it');
is($admin->query_ok(q{SELECT pg_blocking_pids(} . $waiter->backend_pid . q{)::text;}), '{}',
	'pg_blocking_pids shows nothing for the waiting statement: it waits for a slot, not a lock');
is($admin->query_ok(q{SELECT state, relation_locks > 0, blocking_pids::text FROM redsem_activity WHERE pid = }
		  . $waiter->backend_pid . ';'),
	'waiting|t|{' . $ddl->backend_pid . '}',
	'redsem_activity: the waiting statement holds relation locks, and the ALTER TABLE waits for them');
is($admin->query_ok(q{SELECT count(*) FROM redsem_activity WHERE name = 'queue:long' AND cardinality(blocking_pids) > 0;}),
	'2', 'the root of the pile-up in one query: the queue\'s holder and waiter');
$admin->query_ok(q{SELECT pg_cancel_backend(} . $holder->backend_pid . q{);});
$_->wait_done(30) foreach ($holder, $waiter, $ddl, $reader);

$_->quit foreach ($a, $s, $admin, $holder, $waiter, $ddl, $reader);
node_log_is_clean($node);
$node->stop;
$redis->stop;
done_testing();
