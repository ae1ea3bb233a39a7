
# 120_encodings.pl - names between databases of other encodings (from
# helper-141's review): semaphore and tenant names are kept in Redis in
# UTF-8 whatever the database's encoding, so one name is one semaphore for
# every database; a SQL_ASCII database cannot pass bytes that are not
# UTF-8; and what the views show is valid in the reader's encoding (a
# character it cannot represent as \uXXXX), so no invalid text reaches a
# UTF-8 database (it made prometheus-postgres-exporter panic) and no
# listing fails.

use strict;
use warnings FATAL => 'all';

use Encode ();
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $redis = RedsemTest::Redis->new;
my $node = create_node('enc', $redis);
for my $db (['u8', 'UTF8'], ['l1', 'LATIN1'], ['sa', 'SQL_ASCII'], ['ej', 'EUC_JP'])
{
	$node->safe_psql('postgres',
		"CREATE DATABASE $db->[0] ENCODING '$db->[1]' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
	$node->safe_psql($db->[0], 'CREATE EXTENSION redsem');
}

# Run $sql in $db with the client speaking UTF-8: (stdout, stderr), bytes
sub run_in
{
	my ($db, $sql) = @_;
	my ($ret, $out, $err) = $node->psql($db, "SET client_encoding = 'UTF8';\n$sql",
		extra_params => ['-v', 'VERBOSITY=verbose']);
	return ($out, $err);
}

# True if $bytes are valid UTF-8
sub valid_utf8
{
	my ($bytes) = @_;
	my $copy = $bytes;
	return defined eval { Encode::decode('UTF-8', $copy, Encode::FB_CROAK); 1 };
}

my $cafe = "caf\xc3\xa9";			# café, in UTF-8
my $kanji = "\xe5\x90\x8d\xe5\x89\x8d";	# 名前: not in LATIN1

# one name, one semaphore: taken from the LATIN1 database, seen from UTF-8
my $l1 = RedsemTest::Session->new($node, name => 'l1', dbname => 'l1');
$l1->query("SET client_encoding = 'UTF8';");
my ($out, $err) = $l1->query("SELECT redsem_acquire('$cafe', 1, '60 s') IS NOT NULL;");
is($out, 't', 'the LATIN1 database takes the only slot of café') or diag $err;
is(scalar $redis->cli('EXISTS', "redsem:{$cafe}:owner"), '1', '... kept in Redis under its UTF-8 name');
($out, $err) = run_in('u8', "SELECT redsem_acquire('$cafe', 1) IS NULL;");
is($out, 't', 'the UTF-8 database finds it full: the same semaphore') or diag $err;
($out, $err) = run_in('u8', "SELECT count(*) FROM redsem_holders('$cafe');");
is($out, '1', '... and sees its holder');

# a SQL_ASCII database may pass any bytes: only UTF-8 is taken
($out, $err) = run_in('sa', "SELECT redsem_acquire(E'evil\\xff', 2, '60 s');");
like($err, qr/22021.*semaphore name is not valid UTF-8/s, 'SQL_ASCII: a name that is not UTF-8 gets 22021');
($out, $err) = run_in('sa', "SELECT redsem_acquire('t', 2, '60 s', tenant => E'\\xff\\xfe');");
like($err, qr/22021.*tenant name is not valid UTF-8/s, '... and so does such a tenant');
is(scalar(grep { /evil/ } $redis->scan_keys('*')), 0, '... nothing of either in Redis');

# what each database reads back is valid in its encoding
($out, $err) = run_in('u8', "SELECT string_agg(name, ',' ORDER BY name) FROM redsem_stats;");
ok(valid_utf8($out), "redsem_stats in UTF-8 is valid UTF-8 ($out)") or diag $err;
# (the index of redsem_semaphores() learns a name from the keeper's note: 10 s)
my $sa = RedsemTest::Session->new($node, name => 'sa', dbname => 'sa');
$sa->query("SET client_encoding = 'UTF8';");
($out, $err) = $sa->query("SELECT redsem_acquire('$kanji', 2, '60 s') IS NOT NULL;");
is($out, 't', 'SQL_ASCII: a UTF-8 name is taken') or diag $err;
my $listed = sub {
	my ($db) = @_;
	($out, $err) = run_in($db, "SELECT string_agg(name, ',' ORDER BY name) FROM redsem_semaphores();");
	return $out;
};
wait_until(20, sub { index($listed->('u8'), $kanji) >= 0 && index($out, $cafe) >= 0 });
ok(valid_utf8($out) && index($out, $cafe) >= 0 && index($out, $kanji) >= 0,
	"redsem_semaphores() in UTF-8 names both as they are ($out)") or diag $err;
$listed->('l1');
is($err, '', 'redsem_semaphores() in LATIN1 does not fail on a name it cannot represent');
ok(index($out, $cafe) >= 0 && index($out, '\u540D\u524D') >= 0,
	"... café as itself, 名前 as \\u escapes ($out)");
($out, $err) = run_in('l1', "SELECT count(*) FROM redsem_stats WHERE name = '$cafe';");
is($out, '1', 'a LATIN1 database finds café in redsem_stats by its own name') or diag $err;

# a tenant from LATIN1 is the UTF-8 tenant too
($out, $err) = $l1->query("SELECT redsem_acquire('tq', 2, '60 s', tenant => '$cafe') IS NOT NULL;");
is($out, 't', 'LATIN1: a slot for tenant café') or diag $err;
($out, $err) = run_in('u8', "SELECT tenant FROM redsem_tenants('tq');");
is($out, $cafe, '... which UTF-8 reads as café');

# text that another server or program left in Redis, not UTF-8, is shown
# escaped (here a holder's tenant, as a server of an older version wrote it)
my $u8 = RedsemTest::Session->new($node, name => 'u8', dbname => 'u8');
my ($fid) = $u8->query("SELECT redsem_acquire('foreign', 2, '60 s', tenant => 'tt');");
my $info = $redis->cli('HGET', 'redsem:{foreign}:info', $fid);
my @f = split /\|/, $info, -1;
$f[4] = "t\xff";
$redis->cli('HSET', 'redsem:{foreign}:info', $fid, join('|', @f));
($out, $err) = $u8->query("SELECT tenant FROM redsem_holders('foreign');");
is($out, 't\xFF', "a tenant in Redis that is not UTF-8: shown as \\xFF in a UTF-8 database ($info)") or diag $err;

# messages name semaphores in UTF-8: in a database whose encoding that is
# not valid in, they are escaped instead of failing to reach the client
# (a WARNING became an ERROR 22021: helper-142)
($out, $err) = run_in('ej', "SELECT redsem_release('$kanji', 'abc');");
like($err, qr/WARNING: .*\\u540D\\u524D/, 'EUC_JP: the WARNING of a release names the semaphore escaped') or diag $err;
unlike($err, qr/ERROR/, '... and stays a WARNING');
my $ej = RedsemTest::Session->new($node, name => 'ej', dbname => 'ej');
$ej->query("SET client_encoding = 'UTF8';");
($out, $err) = $ej->query("SELECT redsem_acquire('$kanji', 2, '60 s') IS NOT NULL;");
is($out, 't', 'EUC_JP: the second slot of 名前, the same semaphore as SQL_ASCII\'s') or diag $err;
($out, $err) = run_in('ej', "SELECT redsem_guard('$kanji', 2, wait => '0');");
like($err, qr/ERROR:  55P03:/, 'EUC_JP: a guard on a full semaphore gets 55P03, not 22021') or diag $err;

# names made from templates and the origin are in UTF-8 too: a queue's
# tenant from redsem.queue_tenant, and the user's name
$node->safe_psql('u8', "SELECT redsem_create_queue('qt', 'active_statements=2')");
my $josef = "jos\xc3\xa9";
run_in('l1', qq{CREATE ROLE "$josef" LOGIN; CREATE TABLE qt_t AS SELECT 1 AS x; GRANT SELECT ON qt_t TO "$josef";
ALTER ROLE "$josef" IN DATABASE l1 SET redsem.queue = 'qt'; ALTER ROLE "$josef" IN DATABASE l1 SET redsem.queue_tenant = 'caf\xc3\xa9-%u';});
# (a role's name is stored as its database's client sent it, here LATIN1:
# the login names it so)
my $jq = RedsemTest::Session->new($node, name => 'josef', dbname => 'l1', user => "jos\xe9");
$jq->send("SELECT count(*) FROM qt_t, pg_sleep(3);");
ok(defined wait_until(10, sub { (run_in('u8', "SELECT count(*) FROM redsem_holders('queue:qt')"))[0] eq '1' }),
	'a LATIN1 role (josé) runs in queue qt');
($out, $err) = run_in('u8', "SELECT tenant || '/' || username FROM redsem_holders('queue:qt');");
is($out, "$cafe-$josef/$josef", 'UTF-8 reads its tenant (from a template) and user name as they are') or diag $err;
($out, $err) = run_in('l1', "SELECT tenant = 'caf\xc3\xa9-' || username, username FROM redsem_holders('queue:qt');");
is($out, "t|$josef", '... and so does LATIN1') or diag $err;
$jq->wait_done(20);
$jq->quit;

ok(node_log_is_clean($node), 'server log without crash');
$node->stop;
$redis->stop;
done_testing();
