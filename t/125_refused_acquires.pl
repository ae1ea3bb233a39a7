
# 125_refused_acquires.pl - an acquire that Redis refused as a whole, before
# running anything (its memory full under noeviction), leaves no entry in
# the server's hold table: nothing to release and nothing to watch for a late
# grant.  helper-146 saw each such acquire kept as a role's hold, so that a
# role looping through a longer fault met 53400 ("already holds or waits for
# 1024 redsem slots") instead of the fault's own error, holding nothing.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $redis = RedsemTest::Redis->new;
my $node = create_node('refused', $redis);
$node->safe_psql('postgres', q{CREATE ROLE app LOGIN; ALTER ROLE app SET redsem.max_holds_per_role = 3;});

my $app = RedsemTest::Session->new($node, name => 'app', user => 'app');
is($app->query_ok(q{SELECT redsem_acquire_xact('rf', 2, wait => '0') IS NOT NULL;}), 't',
	'the role takes a slot while Redis has room');

$redis->cli('CONFIG', 'SET', 'maxmemory', '1');
my %codes;
for my $i (1 .. 8)
{
	my ($out, $err) = $app->query(qq{SELECT redsem_acquire('rf$i', 2, wait => '0') IS NOT NULL;});
	my ($code) = $err =~ /ERROR:  (\w{5}):/;
	$codes{ $code // 'none' }++;
}
is(join(',', sort keys %codes), '53200', 'every acquire fails with 53200 (Redis out of memory), none with 53400')
  or diag explain \%codes;
is($node->safe_psql('postgres', 'SELECT count(*) FROM redsem_server_holds() WHERE pid = ' . $app->backend_pid), '0',
	'and none is left in the hold table, to release or to watch');
$redis->cli('CONFIG', 'SET', 'maxmemory', '0');
is($app->query_ok(q{SELECT redsem_acquire_xact('rf', 2, wait => '0') IS NOT NULL;}), 't',
	'with room again, the role takes a slot at once');
$app->quit;
node_log_is_clean($node);
done_testing();
