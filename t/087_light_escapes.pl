
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
$_->quit foreach ($h, $admin);
$node->stop;
$redis->stop;
done_testing();
