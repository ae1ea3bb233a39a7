
# 087_light_escapes.pl - statements a hostile role of a queue could make
# "light" (issue 49 item 5, src/queue_light.c) although they read the
# users' tables, write, call the role's own code or run for as long as it
# likes.  Each of them queues: with the queue full (max_wait=300ms) it
# fails with 55P03.  (An adversarial review found them; every case below
# escaped the queue at 291e542.)

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $redis = RedsemTest::Redis->new;
my $node = create_node('escapes', $redis,
	"redsem.queues = 'rep: active_statements=1 max_wait=300ms'\n");
$node->safe_psql('postgres', q{
CREATE ROLE hostile LOGIN;
ALTER ROLE hostile SET redsem.queue = 'rep';
CREATE TABLE facts AS SELECT g AS id, md5(g::text) AS body FROM generate_series(1, 1000) g;
GRANT SELECT ON facts TO hostile;
GRANT CREATE ON SCHEMA public TO hostile;
CREATE SEQUENCE seq;
GRANT USAGE ON SEQUENCE seq TO hostile;
SELECT lo_from_bytea(4242, 'secret'::bytea);
});

my $report = RedsemTest::Session->new($node, name => 'report', user => 'hostile');
$report->send(q{SELECT pg_sleep(60) FROM facts LIMIT 1;});
my $admin = RedsemTest::Session->new($node, name => 'admin');
ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'rep';}) eq '1' }),
	'a report holds the only slot of "rep"');

my $h = RedsemTest::Session->new($node, name => 'hostile', user => 'hostile');
# DDL is a utility statement: it does not queue with utility=off
$h->query_ok(q{
CREATE FUNCTION reads_facts(int) RETURNS boolean LANGUAGE plpgsql AS
  $$ BEGIN PERFORM count(*) FROM facts; RETURN true; END $$;
CREATE DOMAIN checked AS int CHECK (reads_facts(VALUE));
CREATE PROCEDURE reads_facts_proc() LANGUAGE plpgsql AS
  $$ BEGIN PERFORM count(*) FROM facts; END $$;
SET statement_timeout = '5s';
});

my %escapes = (
	'table_to_xml (stable built-in, reads a table by regclass)' =>
	  q{SELECT length(table_to_xml('facts', true, false, '')::text) > 0;},
	'database_to_xml (stable built-in, reads every table)' =>
	  q{SELECT length(database_to_xml(true, false, '')::text) > 0;},
	'query_to_xml in FROM (volatile built-in running SQL)' =>
	  q{SELECT length(x::text) > 0 FROM query_to_xml('SELECT * FROM facts', true, false, '') x;},
	'ts_stat in FROM (volatile built-in running SQL)' =>
	  q{SELECT count(*) > 0 FROM ts_stat('SELECT to_tsvector(body) FROM facts');},
	'pg_sleep in FROM' => q{SELECT * FROM pg_sleep(0.1);},
	'lo_create in FROM (writes)' => q{SELECT * FROM lo_create(0);},
	'a domain whose CHECK calls the role\'s function' => q{SELECT 1::checked;},
	'a volatile window frame offset' =>
	  q{SELECT count(*) OVER (ROWS BETWEEN CURRENT ROW AND length(pg_sleep(0.1)::text) FOLLOWING) FROM pg_database;},
	'CREATE TABLE AS (writes)' => q{CREATE TABLE ctas AS SELECT oid FROM pg_class;},
	'SELECT INTO (writes)' => q{SELECT oid INTO sinto FROM pg_class;},
	'nextval in FROM' => q{SELECT * FROM nextval('seq');},
	'TABLESAMPLE with a volatile argument' =>
	  q{SELECT count(*) FROM pg_class TABLESAMPLE SYSTEM (length(pg_sleep(0.1)::text));},
	'lo_get of a large object' => q{SELECT length(lo_get(4242)) > 0;},
	# (a CALL or DO, utility statements, took no slot in a queue without
	# utility=on, and neither did the queries nested in them)
	'a DO block running a query' => q{DO $$ BEGIN PERFORM count(*) FROM facts; END $$;},
	'a DO block that catches the wait and runs the query again' =>
	  q{DO $$ BEGIN BEGIN PERFORM count(*) FROM facts; EXCEPTION WHEN lock_not_available THEN NULL; END;
		PERFORM count(*) FROM facts; END $$;},
	'a DO block running a query by EXECUTE' => q{DO $$ BEGIN EXECUTE 'SELECT count(*) FROM facts'; END $$;},
	'a CALL of the role\'s procedure running a query' => q{CALL reads_facts_proc();},
	'pg_advisory_lock in FROM' => q{SELECT * FROM pg_advisory_lock(42);},
	'an EXISTS over a huge catalog join' =>
	  q{SELECT EXISTS (SELECT 1 FROM pg_attribute a, pg_attribute b, pg_class c
		WHERE a.attname::text || b.attname::text || c.relname::text = 'zz');},
	'a LIMIT over a huge catalog join that finds nothing (cost 5.5)' =>
	  q{SELECT 1 FROM pg_attribute a, pg_attribute b, pg_class c
		WHERE a.attname::text || b.attname::text || c.relname::text = 'zz' LIMIT 1;},
);
foreach my $what (sort keys %escapes)
{
	my ($out, $err) = $h->query($escapes{$what}, 30);
	like($err, qr/55P03/, "$what queues");
}

# A plan made with lowered cost settings by EXPLAIN (which never queues,
# and does not look at the settings in a queue without min_cost), run after
# RESET from the plan cache
$h->query_ok(q{SET cpu_tuple_cost = 0; SET cpu_operator_cost = 0; SET seq_page_cost = 0;
PREPARE p AS SELECT count(*) FROM pg_attribute a, pg_attribute b, (SELECT * FROM pg_class LIMIT 3) c;
EXPLAIN EXECUTE p;
RESET cpu_tuple_cost; RESET cpu_operator_cost; RESET seq_page_cost;});
my ($out, $err) = $h->query(q{EXECUTE p;}, 30);
like($err, qr/55P03/, 'a catalog cross join planned with lowered costs by EXPLAIN EXECUTE queues');

# and what stays light
foreach my $light ('SELECT 1;', 'SELECT count(*) > 0 FROM pg_locks;', 'SELECT count(*) > 0 FROM pg_stat_activity;',
	'SELECT count(*) > 0 FROM pg_settings;')
{
	my $s2 = RedsemTest::Session->new($node, name => 'light', user => 'hostile');
	($out, $err) = $s2->query($light, 30);
	is($err, '', "$light still runs at once");
	$s2->quit;
}

# (its statement would run on: quitting waits for it)
$admin->query_ok('SELECT pg_cancel_backend(' . $report->backend_pid . ');');
$report->quit;

# A statement that gives back its own queue slot (redsem_held() shows its
# id) and runs on: refused, and the slot still counts (a review found that
# three such statements ran at once in a queue of one)
my $run = RedsemTest::Session->new($node, name => 'giver', user => 'hostile');
foreach my $what ('release', 'refresh')
{
	my $call = $what eq 'release' ? 'redsem_release(h.name, h.id)' : q{redsem_refresh(h.name, h.id, '1 s')};
	($out, $err) = $run->query("SELECT $call, pg_sleep(0.3) FROM facts f, redsem_held() h
		WHERE h.name = 'queue:rep' AND f.id = 1;", 30);
	like($err, qr/42501.*permission denied to $what the slot of statement queue/s,
		"a statement cannot $what its own queue slot");
}
# (one that catches the refusal runs on under its slot)
$run->query_ok(q{CREATE FUNCTION give_back() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  PERFORM redsem_release(h.name, h.id) FROM redsem_held() h WHERE h.name = 'queue:rep';
  RETURN true;
EXCEPTION WHEN insufficient_privilege THEN RETURN false;
END $$;});
$run->send(q{SELECT give_back(), pg_sleep(2) FROM facts WHERE id = 1;});
ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'rep';}) eq '1' }),
	'a statement that caught the refusal runs ...');
sleep_full(0.5);
is($admin->query_ok(q{SELECT permits_held FROM redsem_semaphore('queue:rep');}), '1', '... and its slot still counts');
$run->quit;
ok(wait_until(10, sub { $admin->query_ok(q{SELECT permits_held FROM redsem_semaphore('queue:rep');}) eq '0' }),
	'... and is given back when it ends');
# A cursor opened inside a function or a DO block (nested: no slot of its
# own) and fetched by a top-level FETCH ran its query under no slot (an
# adversarial review: two ran at once in a queue of one).  It is judged
# when it first runs at the top level, as a statement started then.
my $cur = RedsemTest::Session->new($node, name => 'cursors', user => 'hostile');
$cur->query_ok(q{CREATE FUNCTION opencur(name text) RETURNS refcursor LANGUAGE plpgsql AS $$
DECLARE c refcursor := name;
BEGIN
  OPEN c FOR SELECT count(*) FROM facts a, facts b WHERE a.id <= 100;
  RETURN c;
END $$;});
$cur->query_ok(q{BEGIN; SELECT opencur('c1');});
my $blocker = RedsemTest::Session->new($node, name => 'blocker', user => 'hostile');
$blocker->send(q{SELECT pg_sleep(60) FROM facts LIMIT 1;});
ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'rep';}) eq '1' }),
	'a statement holds the only slot again');
($out, $err) = $cur->query(q{FETCH ALL FROM c1;}, 30);
like($err, qr/55P03/, 'a cursor a function opened, fetched at the top level, queues');
$cur->query_ok(q{ROLLBACK;});
($out, $err) = $cur->query(q{BEGIN;
DO $$ DECLARE c refcursor := 'c2'; BEGIN OPEN c FOR SELECT count(*) FROM facts a, facts b WHERE a.id <= 100; END $$;
FETCH ALL FROM c2;}, 30);
like($err, qr/55P03/, 'so does one a DO block opened (the DO itself, at the OPEN)');
$cur->query_ok(q{ROLLBACK;});
$admin->query_ok('SELECT pg_cancel_backend(' . $blocker->backend_pid . ');');
$blocker->quit;
ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'rep';}) eq '0' }),
	'the queue is free');
# with room: it takes the slot at its first FETCH and keeps it while open
$cur->query_ok(q{BEGIN;
DO $$ DECLARE c refcursor := 'c3'; BEGIN OPEN c FOR SELECT a.id FROM facts a, facts b WHERE a.id <= 100; END $$;});
is($admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'rep';}), '0', 'opened: no slot yet');
is($cur->query_ok(q{FETCH 1 FROM c3;}), '1', 'fetched at the top level ...');
is($admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'rep';}), '1', '... it holds a slot while open');
$cur->query_ok(q{FETCH 1 FROM c3; CLOSE c3;});
is($admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'rep';}), '0', '... given back when closed');
$cur->query_ok(q{COMMIT;});
# a cursor opened and never fetched is closed at COMMIT without a slot
# (its ExecutorFinish there runs nothing of the user's): a full queue does
# not fail the COMMIT (a review found it did)
$cur->query_ok(q{BEGIN; SELECT opencur('c5');});
my $fill = sub {
	my $b = RedsemTest::Session->new($node, name => 'blocker2', user => 'hostile');
	$b->send(q{SELECT pg_sleep(60) FROM facts LIMIT 1;});
	ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'rep';}) eq '1' }),
		'the queue is full');
	return $b;
};
my $unfill = sub {
	my ($b) = @_;
	$admin->query_ok('SELECT pg_cancel_backend(' . $b->backend_pid . ');');
	$b->quit;
	ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'rep';}) eq '0' }),
		'the queue is free');
};
my $b2 = $fill->();
($out, $err) = $cur->query(q{COMMIT;}, 30);
is($err, '', 'a cursor never fetched: COMMIT closes it without a slot, the queue full');
$unfill->($b2);
# a slot taken at a FETCH in a savepoint rolled back: the cursor, open
# still, is judged again at its next FETCH (it ran under no slot after)
$cur->query_ok(q{BEGIN; SELECT opencur('c6'); SAVEPOINT s; FETCH 1 FROM c6;});
is($admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'rep';}), '1', 'fetched in a savepoint: a slot');
$cur->query_ok(q{ROLLBACK TO s;});
is($admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'rep';}), '0', '... which ends with the savepoint');
$b2 = $fill->();
($out, $err) = $cur->query(q{FETCH 1 FROM c6;}, 30);
like($err, qr/55P03/, '... and the next FETCH of the cursor queues again');
$cur->query(q{ROLLBACK;});
$unfill->($b2);
# a cursor WITH HOLD declared in a DO block (which took a slot and gave it
# back) is filled at COMMIT: it queues there
$cur->query_ok(q{BEGIN;
DO $$ BEGIN EXECUTE 'DECLARE c4 CURSOR WITH HOLD FOR SELECT count(*) FROM facts a, facts b WHERE a.id <= 100'; END $$;});
$b2 = $fill->();
($out, $err) = $cur->query(q{COMMIT;}, 30);
like($err, qr/55P03/, 'a cursor WITH HOLD that COMMIT fills queues (the COMMIT fails)');
$unfill->($b2);
# a cursor one DO block opened (with room), fetched by a later DO block:
# that one takes its slot at the FETCH (a review found it ran under none)
$cur->query_ok(q{BEGIN;
DO $$ DECLARE c refcursor := 'c8'; BEGIN OPEN c FOR SELECT count(*) FROM facts a, facts b WHERE a.id <= 100; END $$;});
$b2 = $fill->();
($out, $err) = $cur->query(q{DO $$ DECLARE c refcursor := 'c8'; r record; BEGIN FETCH c INTO r; END $$;}, 30);
like($err, qr/55P03/, 'a cursor an earlier DO opened, fetched in a later DO: it queues');
$cur->query(q{ROLLBACK;});
$unfill->($b2);
$cur->quit;

$_->quit foreach ($h, $admin);
$node->stop;
$redis->stop;
done_testing();
