
# 030_upgrade.pl - ALTER EXTENSION redsem UPDATE from the first release.
#
# A database gets 0.1.0 (CREATE EXTENSION redsem VERSION '0.1.0'), sessions
# hold slots and wait in line, statistics count, a role has a grant and a
# view uses redsem_stats; then ALTER EXTENSION redsem UPDATE.  Nothing may be
# lost: the holds stay held and kept alive, the waiter is served, the
# counters and grants remain, and the SQL objects are exactly those of a
# fresh 0.2.0 install.  Also: the extension installs into any schema.

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
my $node = create_node('up', $redis);
$node->safe_psql('postgres', 'DROP EXTENSION redsem');
$node->safe_psql('postgres', q{CREATE EXTENSION redsem VERSION '0.1.0'});
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'redsem'}),
	'0.1.0', 'installed 0.1.0');

###########################################################################
note 'state under 0.1.0';

my $s = RedsemTest::Session->new($node, name => 's');
my $w = RedsemTest::Session->new($node, name => 'w');
my $id = $s->query_ok(q{SELECT redsem_acquire('up', 1, '3 s');});
like($id, qr/^[0-9a-f]{16}\./, 'a session holds a slot (3 s lease, kept alive)');
is($s->query_ok(q{SELECT count(*) FROM redsem_held();}), '1',
	'0.1.0\'s redsem_held() (8 columns) works with the new library');
is($s->query_ok(q{SELECT kept_alive FROM redsem_held();}), 't', '... kept alive');
$w->send(q{SELECT redsem_acquire('up', 1, '60 s', '60 s') IS NOT NULL;});
ok(defined wait_until(30, sub { $redis->zcard('up', 'waiting') == 1 }), 'another session waits in line');
$node->safe_psql('postgres', q{
	CREATE ROLE reporter;
	GRANT EXECUTE ON FUNCTION redsem_stats_reset(text) TO reporter;
	CREATE VIEW my_stats AS SELECT name, acquired FROM redsem_stats;
	CREATE VIEW my_held AS SELECT name FROM redsem_held();
});
my $stats_before = $node->safe_psql('postgres', q{SELECT acquired, waited FROM redsem_stats WHERE name = 'up'});

###########################################################################
note 'the update';

my ($ret, $out, $err) = $node->psql('postgres', 'ALTER EXTENSION redsem UPDATE');
like($err, qr/redsem 0.2.0 replaces functions that objects outside the extension use: view my_held\n/,
	'a view over redsem_held() stops the update with a clear error naming it');
like($err, qr/HINT:  Save the definitions .* drop them, run ALTER EXTENSION redsem UPDATE, and create them again/,
	'... whose hint is to recreate the view');
unlike($err, qr/HINT:  Use DROP \.\.\. CASCADE/, '... not to drop with CASCADE');
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'redsem'}),
	'0.1.0', '... and nothing changed');
$node->safe_psql('postgres', 'DROP VIEW my_held');
$node->safe_psql('postgres', 'ALTER EXTENSION redsem UPDATE');
is($node->safe_psql('postgres', q{SELECT extversion FROM pg_extension WHERE extname = 'redsem'}),
	'0.2.0', 'ALTER EXTENSION redsem UPDATE: 0.2.0');
sleep 4;

###########################################################################
note 'nothing was lost';

is($s->query_ok(q{SELECT name, id, kept_alive, keeper_error IS NULL FROM redsem_held();}),
	"up|$id|t|t", 'the hold is still held and kept alive 4 s later (3 s lease), with the new column');
is($node->safe_psql('postgres', q{SELECT acquired, waited FROM redsem_stats WHERE name = 'up'}),
	$stats_before, 'the statistics are kept');
is($node->safe_psql('postgres', 'SELECT count(*) FROM my_stats'), '1', 'the view over redsem_stats still works');
is($node->safe_psql('postgres',
		q{SELECT has_function_privilege('reporter', 'redsem_stats_reset(text)', 'EXECUTE')}),
	't', 'the grant to reporter is kept');
is($s->query_ok(qq{SELECT redsem_release('up', '$id');}), 't', 'the hold releases: it was live');
($out, $err) = $w->wait_done(30);
is("$out|$err", 't|', 'and the waiter, in line since 0.1.0, is served');
is($w->query_ok(q{SELECT redsem_release_all();}), '1', 'it releases');
($ret, $out, $err) = $node->psql('postgres', q{SET ROLE reporter; SELECT redsem_force_release('up', 'x.1');});
like($err, qr/permission denied to force-release a slot of a redsem semaphore\n.*DETAIL:  Only superusers and members of role redsem_admin may\.\n.*HINT:  An administrator can run: GRANT redsem_admin TO reporter;/,
	'redsem_force_release: refused to others than redsem_admin, saying how to get the right');

###########################################################################
note 'the same objects as a fresh install';

my $objects = q{
	SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') -> '
	       || pg_get_function_result(p.oid) || ' ' || p.provolatile::text || p.proparallel::text
	       || ' acl=' || (SELECT string_agg(g, ',' ORDER BY g)
	                        FROM (SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END
	                                     || ':' || a.privilege_type AS g
	                                FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a) x)
	       || ' comment=' || coalesce(obj_description(p.oid, 'pg_proc'), '-')
	  FROM pg_proc p
	  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
	  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'redsem'
	UNION ALL
	SELECT c.relname || ' ' || c.relkind::text || ' acl='
	       || (SELECT string_agg(g, ',' ORDER BY g)
	             FROM (SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END
	                          || ':' || a.privilege_type AS g
	                     FROM aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a) x)
	       || ' def=' || pg_get_viewdef(c.oid)
	       || ' comment=' || coalesce(obj_description(c.oid, 'pg_class'), '-')
	  FROM pg_class c
	  JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'
	  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'redsem'
	ORDER BY 1};
$node->safe_psql('postgres', 'REVOKE EXECUTE ON FUNCTION redsem_stats_reset(text) FROM reporter');
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION redsem');
my $fresh = $node->safe_psql('fresh', $objects);
my $upgraded = $node->safe_psql('postgres', $objects);
is($upgraded, $fresh, 'the upgraded extension has exactly the functions, views, grants and comments of a fresh 0.2.0');
cmp_ok(scalar(split /\n/, $fresh), '>=', 15, '(' . scalar(split /\n/, $fresh) . ' objects compared)');

###########################################################################
note 'any schema';

$node->safe_psql('postgres', 'CREATE DATABASE schemed');
$node->safe_psql('schemed', 'CREATE SCHEMA sem; CREATE EXTENSION redsem SCHEMA sem');
is($node->safe_psql('schemed',
		q{SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE extname = 'redsem'}),
	'sem', 'CREATE EXTENSION redsem SCHEMA sem');
is($node->safe_psql('schemed',
		q{SELECT sem.redsem_release('sch', sem.redsem_acquire('sch', 1)); SELECT count(*) >= 0 FROM sem.redsem_stats;}),
	"t\nt", 'its functions and view work there, schema-qualified');
$node->safe_psql('schemed', 'CREATE SCHEMA other; ALTER EXTENSION redsem SET SCHEMA other');
is($node->safe_psql('schemed',
		q{SELECT other.redsem_release('sch', other.redsem_acquire('sch', 1)); SELECT count(*) >= 0 FROM other.redsem_stats;}),
	"t\nt", 'ALTER EXTENSION redsem SET SCHEMA other: still works');

###########################################################################
note 'two databases install it at once, with no redsem_admin yet';

# (helper-168: the one that met the other's new role failed with 23505)
$node->safe_psql('postgres', q{ALTER ROLE redsem_admin RENAME TO redsem_admin_was});
$node->safe_psql('postgres', 'CREATE DATABASE cx1');
$node->safe_psql('postgres', 'CREATE DATABASE cx2');
my $c1 = RedsemTest::Session->new($node, name => 'cx1', dbname => 'cx1');
my $c2 = RedsemTest::Session->new($node, name => 'cx2', dbname => 'cx2');
$c1->query_ok('BEGIN; CREATE EXTENSION redsem;');
$c2->send('CREATE EXTENSION redsem;');
sleep 1;    # (it waits for the first one's redsem_admin)
$c1->query_ok('COMMIT;');
my ($c2out, $c2err) = $c2->wait_done(30);
is($c2err // 'no end', '', 'the second CREATE EXTENSION, which met the first one\'s new redsem_admin, succeeds');
is($node->safe_psql('cx2', q{SELECT count(*) FROM pg_extension WHERE extname = 'redsem'}), '1', '... and is installed');
$c1->quit;
$c2->quit;

###########################################################################
note 'a redsem_admin that a CREATEROLE role made first is not adopted';

# (helper-168 F5: it was, and its maker chose who administers redsem)
$node->safe_psql('postgres', q{
	ALTER ROLE redsem_admin RENAME TO redsem_admin_cx;
	CREATE ROLE mallory CREATEROLE;
	SET ROLE mallory;
	CREATE ROLE redsem_admin;
	CREATE ROLE accomplice;
	GRANT redsem_admin TO accomplice;
	RESET ROLE;
	CREATE DATABASE cx3;
});
($ret, $out, $err) = $node->psql('cx3', 'CREATE EXTENSION redsem');
like($err, qr/ERROR:  role "redsem_admin" exists and redsem cannot adopt it\nDETAIL:  A role that is not a superuser \(or no longer exists\) granted it, directly or through a role that is a member of it, to accomplice\. Its members may force-release any slot and change any limit or statement queue\.\nHINT:  If redsem did not make it/,
	'CREATE EXTENSION refuses a redsem_admin granted on by a role that is not a superuser, naming the grantee');
$node->safe_psql('cx3', q{CREATE EXTENSION redsem VERSION '0.1.0'});
($ret, $out, $err) = $node->psql('cx3', 'ALTER EXTENSION redsem UPDATE');
like($err, qr/ERROR:  role "redsem_admin" exists and redsem cannot adopt it/, '... and so does the update from 0.1.0');
is($node->safe_psql('cx3', q{SELECT extversion FROM pg_extension WHERE extname = 'redsem'}), '0.1.0', '... which changes nothing');
$node->safe_psql('postgres', q{
	DROP ROLE redsem_admin;
	SET ROLE mallory;
	CREATE ROLE redsem_admin LOGIN;
	RESET ROLE;
	REVOKE redsem_admin FROM mallory;
});
($ret, $out, $err) = $node->psql('cx3', 'ALTER EXTENSION redsem UPDATE');
like($err, qr/DETAIL:  It has attributes that redsem does not give it \(LOGIN,/, 'a redsem_admin that can log in is refused too');
$node->safe_psql('postgres', q{
	DROP ROLE redsem_admin;
	DROP ROLE accomplice;
	DROP ROLE mallory;
});
$node->safe_psql('cx3', 'ALTER EXTENSION redsem UPDATE');
$node->safe_psql('postgres', q{GRANT redsem_admin TO reporter; CREATE DATABASE cx4;});
$node->safe_psql('cx4', 'CREATE EXTENSION redsem');
is($node->safe_psql('cx4', q{SELECT extversion FROM pg_extension WHERE extname = 'redsem'}), '0.2.0',
	'the one redsem made, granted by a superuser, is adopted by the next database');

# (helper-172: a grant through a group role, objects it owned, and a role
# made meanwhile by a transaction a REPEATABLE READ snapshot cannot see,
# were all adopted)
$node->safe_psql('postgres', q{
	ALTER ROLE redsem_admin RENAME TO redsem_admin_cx4;
	CREATE ROLE redsem_admin;
	CREATE ROLE ops;
	CREATE ROLE lead;
	GRANT redsem_admin TO ops;
	GRANT ops TO lead WITH ADMIN OPTION;
	CREATE DATABASE cx5;
});
($ret, $out, $err) = $node->psql('cx5', 'CREATE EXTENSION redsem');
like($err, qr/DETAIL:  A role that is not a superuser may grant it on \(ADMIN OPTION on it or on a role that is a member of it\): lead\./,
	'ADMIN OPTION on a role that is a member of it: refused, naming the role');
$node->safe_psql('postgres', q{
	DROP ROLE lead;
	DROP ROLE ops;
	CREATE TABLE owned_by_it (i int);
	ALTER TABLE owned_by_it OWNER TO redsem_admin;
});
($ret, $out, $err) = $node->psql('cx5', 'CREATE EXTENSION redsem');
like($err, qr/DETAIL:  It owns objects \(in this or another database\)/, 'a role that owns objects: refused');
$node->safe_psql('postgres', q{DROP TABLE owned_by_it; DROP ROLE redsem_admin;});
my $rr = RedsemTest::Session->new($node, name => 'rr', dbname => 'cx5');
$rr->query_ok('BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_class;');
$node->safe_psql('postgres', 'CREATE ROLE redsem_admin LOGIN');
($out, $err) = $rr->query('CREATE EXTENSION redsem;');
like($err, qr/ERROR:  40001: role "redsem_admin" was made by another transaction while this one ran/,
	'one made meanwhile, which a REPEATABLE READ snapshot cannot see: refused (40001), not adopted unchecked');
$rr->query('ROLLBACK;');
$rr->quit;
$node->safe_psql('postgres', q{DROP ROLE redsem_admin; ALTER ROLE redsem_admin_cx4 RENAME TO redsem_admin;});
$node->safe_psql('cx5', 'CREATE EXTENSION redsem');
is($node->safe_psql('cx5', q{SELECT extversion FROM pg_extension WHERE extname = 'redsem'}), '0.2.0',
	'with redsem\'s own role back, it installs');

$s->quit;
$w->quit;
node_log_is_clean($node);
$node->stop;
$redis->stop;
done_testing();
