
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

# A holder with a 2-s lease, kept alive by the keeper, while Redis stays
# above maxmemory for three leases: refreshes and releases only keep or give
# back (the library's allow-oom function), so the holder keeps its slot.
my $kept = RedsemTest::Session->new($node, name => 'kept');
is($kept->query_ok(q{SELECT redsem_acquire('oomkept', 1, lease => '2 s') IS NOT NULL;}), 't',
	'a holder takes a slot with a 2-s lease');
my $next = RedsemTest::Session->new($node, name => 'next');
$next->send(q{SELECT redsem_acquire('oomkept', 1, lease => '2 s', wait => '30 s') IS NOT NULL;});
ok(defined wait_until(10, sub { $redis->zcard('oomkept', 'waiting') == 1 }), 'a waiter is in line behind it');
$redis->cli('CONFIG', 'SET', 'maxmemory', '1');
RedsemTest::sleep_full(6);
is($kept->query_ok(q{SELECT count(*) FROM redsem_held() WHERE keeper_error IS NULL;}), '1',
	'above maxmemory for three leases, the keeper keeps its slot alive');
is($kept->query_ok(q{SELECT redsem_release_all();}), '1', '... and it releases the slot, still above maxmemory');
my ($nout, $nerr) = $next->wait_done(30);
is($nout, 't', 'the waiter kept its place (its looks) and gets the slot, still above maxmemory') or diag $nerr;
is($next->query_ok(q{SELECT redsem_release_all();}), '1', '... and gives it back');
$_->quit for ($kept, $next);
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
# A waiter in line whose connection is closed while Redis has no room for
# another client (maxclients: another program's storm of connections) keeps
# its place and rides it within its wait, as it rides a restart; a newcomer
# fails at once (08004).  helper-146: it failed at once with 08004.
my $admin = RedsemTest::RESP->new($redis->socket);
my $holder = RedsemTest::Session->new($node, name => 'holder');
is($holder->query_ok(q{SELECT redsem_acquire('mc', 1) IS NOT NULL;}), 't', 'a holder takes the only slot of mc');
my $waiter = RedsemTest::Session->new($node, name => 'waiter');
$waiter->send(q{SELECT redsem_acquire('mc', 1, wait => '30 s') IS NOT NULL;});
ok(defined wait_until(10, sub { $redis->zcard('mc', 'waiting') == 1 }), 'a waiter is in line');
$admin->cmd('CONFIG', 'SET', 'maxclients', '1');
$admin->cmd('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
my ($out, $err) = $app->query(q{SELECT redsem_acquire('mc2', 1, wait => '0') IS NOT NULL;});
like($err, qr/08004/, 'a newcomer meets maxclients with 08004 at once');
RedsemTest::sleep_full(1.5);
$admin->cmd('CONFIG', 'SET', 'maxclients', '10000');
$waiter->{h}->pump_nb;
unlike($waiter->stderr_so_far, qr/ERROR/, 'the waiter rides it, still waiting');
is($holder->query_ok(q{SELECT redsem_release_all();}), '1', 'the holder releases');
($out, $err) = $waiter->wait_done(30);
is($out, 't', 'the waiter gets the slot in its turn') or diag $err;
$_->quit for ($holder, $waiter, $app);
node_log_is_clean($node);
done_testing();
