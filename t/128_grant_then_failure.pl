
# 128_grant_then_failure.pl - an acquire whose grant Redis made (the script
# ran) and that then fails with a status that alone would say Redis ran
# nothing (RS_UNAVAILABLE: the WAIT of redsem.grant_replicas answered
# -UNBLOCKED, as an operator's CLIENT UNBLOCK or a demotion ends it).  The
# hold must stay to be given back (helper-148: e2743ca forgot it, and the
# granted slot was lost for its whole lease).

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(usleep);

my $redis = RedsemTest::Redis->new;
my $node = create_node('unblk', $redis,
	"redsem.grant_replicas = 1\nredsem.grant_replica_timeout = 10000\n");

my $a = RedsemTest::Session->new($node, name => 'a');
my $b = RedsemTest::Session->new($node, name => 'b');
$b->query_ok(q{SET redsem.grant_replicas = 0;});

$a->send(q{SELECT redsem_acquire('ub', 1, lease => '600 s', wait => '0') IS NOT NULL;});
my $id;
ok(defined wait_until(10, sub {
	foreach my $l (split /\n/, ($redis->cli('CLIENT', 'LIST') // ''))
	{
		if ($l =~ /\bid=(\d+)\b.*\bcmd=wait\b/) { $id = $1; return 1; }
	}
	return undef;
}), 'the grant waits for a replica (WAIT blocks: there is none)');
is($redis->cli('ZCARD', 'redsem:{ub}:owner'), '1', 'Redis granted the slot');
$redis->cli('CLIENT', 'UNBLOCK', $id, 'ERROR');
my ($out, $err) = $a->wait_done(20);
note "a: out=$out err=$err";
like($err, qr/ERROR/, 'the acquire fails (UNBLOCKED)');
usleep(3_000_000);    # end of transaction, keeper passes
note 'server holds: ' . $node->safe_psql('postgres', 'SELECT count(*) FROM redsem_server_holds()');
note 'owner now: ' . $redis->cli('ZCARD', 'redsem:{ub}:owner');
is($b->query_ok(q{SELECT redsem_acquire('ub', 1, lease => '10 s', wait => '0') IS NOT NULL;}), 't',
	'the failed acquire\'s grant was given back: another session gets the slot');

$_->quit foreach ($a, $b);
$node->stop;
done_testing();
