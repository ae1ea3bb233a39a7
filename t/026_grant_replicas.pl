
# 026_grant_replicas.pl - redsem.grant_replicas: a grant is used only once
# a replica has it, and only if its lease is still running then.  Nobody
# refreshes a grant while its WAIT runs, so a WAIT that outlasts the lease
# (a replica paused for longer) must not hand the caller a slot that
# another session has taken meanwhile: the grant is dropped as stale.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

my ($primary, $replica) = primary_and_replica();

my $node = create_node('replicated', $primary, "redsem.grant_replicas = 1\nredsem.grant_replica_timeout = 10000\n");

my $sa = RedsemTest::Session->new($node, name => 'a');
is($sa->query_ok(q{SELECT redsem_release('gr', redsem_acquire('gr', 1, '1 s'));}), 't',
	'with the replica up, a grant is acknowledged and used');

$replica->freeze;
$sa->send(q{SELECT redsem_acquire('gr', 1, '1 s') IS NULL;});
my $sb = RedsemTest::Session->new($node, name => 'b');
$sb->query_ok(q{SET redsem.grant_replicas = 0;});
# a's grant is pending in its WAIT, which nobody refreshes: once its 1 s
# lease has run out, b gets the slot (tried until then, each try once)
ok(defined wait_until(15, sub {
			$sb->query_ok(q{SELECT redsem_acquire('gr', 1, '60 s') IS NOT NULL;}) eq 't' }),
	"while a's WAIT runs, its 1 s lease runs out unrefreshed: b gets the slot");
usleep(300_000);
$replica->thaw;
my ($out, $err) = $sa->wait_done(30);
is($err, '', 'the replica acknowledges late');
is($out, 't', 'a does not use a grant whose lease ran out during the WAIT: no slot (wait 0)');
is($node->safe_psql('postgres', q{SELECT count(*) FROM redsem_holders('gr');}), '1', 'b is the only holder');
is($sa->query_ok(q{SELECT count(*) FROM redsem_held();}), '0', 'and a holds nothing');

$_->quit foreach ($sa, $sb);
$node->stop;
node_log_is_clean($node);
$replica->stop;
$primary->stop;
done_testing();
