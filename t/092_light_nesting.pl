
# 092_light_nesting.pl - what runs inside a light statement, or while a
# top-level statement is planned, is judged as a top-level statement
# (issue 49 item 5, after a third review): a session that holds the only
# slot (a cursor) runs such SQL under it, never waiting for itself; light
# statements that failed in a subtransaction leave nothing that lets a
# heavy one pass; a plan run by parallel workers is not light (a worker is
# in no queue: a domain CHECK's query would run unqueued there); and a
# planner-run function waiting for a slot while its statement holds a
# lock the holder needs is a deadlock found (40P01).

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
my $node = create_node('review093', $redis,
	"redsem.queues = 'rep: active_statements=1 max_wait=300ms utility=on; dl: active_statements=1 max_wait=25s'\n"
	  . "deadlock_timeout = '1s'\nmax_worker_processes = 8\nmax_parallel_workers = 8\n");
$node->safe_psql('postgres', q{
CREATE ROLE hostile LOGIN;
ALTER ROLE hostile SET redsem.queue = 'rep';
CREATE ROLE dla LOGIN;
ALTER ROLE dla SET redsem.queue = 'dl';
CREATE TABLE facts AS SELECT g AS id, md5(g::text) AS body FROM generate_series(1, 1000) g;
GRANT SELECT ON facts TO hostile, dla;
CREATE SCHEMA h AUTHORIZATION hostile;
CREATE SCHEMA d AUTHORIZATION dla;
});

my $h = RedsemTest::Session->new($node, name => 'hostile', user => 'hostile');
$h->query_ok(q{
CREATE FUNCTION h.reads_facts(int) RETURNS boolean LANGUAGE plpgsql AS
  $$ DECLARE n bigint; BEGIN SELECT count(*) INTO n FROM public.facts, public.facts f2;
     RAISE NOTICE 'reads_facts ran in pid %: % rows', pg_backend_pid(), n; RETURN true; END $$;
CREATE FUNCTION h.imm_reader() RETURNS int LANGUAGE plpgsql IMMUTABLE AS
  $$ DECLARE n bigint; BEGIN SELECT count(*) INTO n FROM public.facts, public.facts f2;
     RAISE NOTICE 'imm_reader ran: % rows', n; RETURN 1; END $$;
CREATE DOMAIN h.chk AS int CHECK (h.reads_facts(VALUE));
CREATE DOMAIN h.bad AS int CHECK (VALUE < 0);
SET statement_timeout = '20s';
});

###########################################################################
note 'self-deadlock checks: the session holds the only slot (no one else queued)';

my ($out, $err);
my $t0 = time;
($out, $err) = $h->query(q{
BEGIN;
DECLARE c CURSOR FOR SELECT * FROM facts;
FETCH 1 FROM c;
SELECT count(*) FROM facts WHERE id = h.imm_reader();
SELECT '{1}'::text::h.chk[] IS NOT NULL;
DECLARE lc CURSOR FOR SELECT ('{' || g || '}')::text::h.chk[] FROM generate_series(1, 3) g;
FETCH 1 FROM lc;
FETCH 1 FROM lc;
COMMIT;
}, 60);
diag sprintf('cursor + planner/light inner SQL: %.1f s out=[%s] err=[%s]', time - $t0, $out, $err);
unlike($err, qr/55P03|ERROR/, 'a session holding the slot by a cursor runs planner-run and light-inner SQL under it');

###########################################################################
note 'stale light_running entries after ROLLBACK TO (address reuse)';

my $report = RedsemTest::Session->new($node, name => 'report', user => 'hostile');
$report->send(q{SELECT pg_sleep(120) FROM facts LIMIT 1;});
my $admin = RedsemTest::Session->new($node, name => 'admin');
ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'rep';}) eq '1' }),
	'a report holds the only slot of "rep"');

($out, $err) = $h->query(q{
BEGIN;
SAVEPOINT s1;
SELECT 1 / g FROM generate_series(-1, 1) g;
ROLLBACK TO s1;
SAVEPOINT s2;
SELECT 1 / g FROM generate_series(-1, 1) g;
ROLLBACK TO s2;
SELECT count(*) FROM facts f1, facts f2;
ROLLBACK;
}, 60);
diag "after ROLLBACK TO: out=[$out] err=[$err]";
like($err, qr/55P03/, 'a heavy statement after light ones that failed in a subtransaction still queues');

###########################################################################
note 'parallel worker: a light statement run by a worker, SQL inside it unqueued';

($out, $err) = $h->query(q{SELECT '{1}'::text::h.chk[] IS NOT NULL;}, 60);
diag "serial: out=[$out] err=[$err]";
like($err, qr/55P03/, 'serially, the CHECK\'s query queues (and times out)');
($out, $err) = $h->query(q{SET force_parallel_mode = on;
EXPLAIN (COSTS OFF) SELECT '{1}'::text::h.chk[] IS NOT NULL;
SELECT '{1}'::text::h.chk[] IS NOT NULL;
SELECT ('{' || relnatts * 0 + 1 || '}')::text::h.chk[] IS NOT NULL FROM pg_class LIMIT 2;
RESET force_parallel_mode;}, 60);
diag "force_parallel_mode: out=[$out] err=[$err]";
unlike($err, qr/reads_facts ran/, 'with force_parallel_mode the CHECK\'s query does not run unqueued in a worker');

# (its statement would run on: quitting waits for it)
$admin->query_ok('SELECT pg_cancel_backend(' . $report->backend_pid . ');');
$report->quit;
# (query, not query_ok: a backend that ends between the read and the signal
# makes pg_cancel_backend warn that it is no backend; failed so once)
$admin->query(q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE usename = 'hostile' AND pid <> } . $h->backend_pid . ';');

###########################################################################
note 'two sessions, limit 1: a planner-run function waits while its statement holds a lock the holder needs';

my $a = RedsemTest::Session->new($node, name => 'dla', user => 'dla');
$a->query_ok(q{
CREATE TABLE d.t2 AS SELECT g AS id FROM generate_series(1, 100) g;
CREATE FUNCTION d.imm_reader() RETURNS int LANGUAGE plpgsql IMMUTABLE AS
  $$ DECLARE n bigint; BEGIN SELECT count(*) INTO n FROM public.facts; RETURN 1; END $$;
CREATE FUNCTION d.lock_later() RETURNS int LANGUAGE plpgsql AS
  $$ BEGIN PERFORM pg_sleep(3); LOCK TABLE d.t2 IN ACCESS EXCLUSIVE MODE; RETURN 1; END $$;
});
my $b = RedsemTest::Session->new($node, name => 'dlb', user => 'dla');
$b->send(q{SELECT d.lock_later() FROM facts LIMIT 1;});
ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'dl';}) eq '1' }),
	'B holds the only slot of "dl"');
$t0 = time;
($out, $err) = $a->query(q{SELECT count(*) FROM d.t2 WHERE id = d.imm_reader();}, 60);
my $ta = time - $t0;
my ($bout, $berr) = $b->wait_done(60);
diag sprintf('A: %.1f s out=[%s] err=[%s]; B: out=[%s] err=[%s]', $ta, $out, $err, $bout, $berr);
like($err . $berr, qr/40P01/, 'the deadlock is found (40P01), not left to max_wait');
ok($ta < 15, 'within a few seconds');

$_->quit foreach ($h, $admin, $a, $b);
$node->stop;
$redis->stop;
done_testing();
