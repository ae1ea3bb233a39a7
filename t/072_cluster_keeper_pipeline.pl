
# 072_cluster_keeper_pipeline.pl - in a Redis Cluster the keeper refreshes
# a node's holds in one pipeline per round, not one round trip per
# semaphore (issue 48, E1).
#
# Three primaries on loopback; one of them is 10 ms away: it announces the
# port of bench/delay_proxy.pl, which holds each of its replies back 10 ms,
# so every MOVED and every slot map names the proxy.  One session holds a
# slot with a 3 s lease on each of 300 one-slot semaphores served by that
# node.  The keeper used to send one FCALL per semaphore, each a round trip,
# all charged to the node's share of a round (a third of the leases left):
# 300 round trips of 10 ms and more do not fit, so most refreshes were
# never sent and most slots ran out while the session still held them.
# Now each node's commands of a batch go out in one write: after three
# lease periods another session still gets none of the 300 slots, and
# redsem_held() shows every hold kept without error.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use IO::Socket::INET;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time);

my $HOLDS = 300;
my $DELAY_MS = 10;

my @nodes = cluster_of_primaries('pnode');

# the far node: the second one, behind the delay proxy, announced there
my $far = $nodes[1];
my $proxy_port = PostgreSQL::Test::Cluster::get_free_port();
my $proxy = IPC::Run::start(
	[ 'perl', "$FindBin::RealBin/../bench/delay_proxy.pl", "127.0.0.1:$proxy_port", $far->address, $DELAY_MS ],
	'<', '/dev/null', '>', "$PostgreSQL::Test::Utils::log_path/072_proxy.log", '2>&1');
# the proxy goes however the test ends (it holds the test's files open)
END { local $?; $proxy->kill_kill if $proxy; }
ok(defined wait_until(10, sub { IO::Socket::INET->new(PeerAddr => "127.0.0.1:$proxy_port") }),
	'the delay proxy listens');
$far->cli('CONFIG', 'SET', 'cluster-announce-port', $proxy_port);
ok(defined wait_until(30, sub { ($nodes[0]->cli('CLUSTER', 'NODES') // '') =~ /127\.0\.0\.1:$proxy_port\@/ }),
	"the far node is known at the proxy's port ($proxy_port) across the cluster");

# the slot ranges the far node serves
my ($mine) = grep { /myself/ } split /\n/, ($far->cli('CLUSTER', 'NODES') // '');
my @fields = split / /, ($mine // '');
my @ranges = map { /^(\d+)(?:-(\d+))?$/ ? [ $1, $2 // $1 ] : () } @fields[ 8 .. $#fields ];
ok(@ranges, 'the far node serves slots');

# CRC16 (XModem) of a string: Redis Cluster's key slot, mod 16384
sub slot_of
{
	my $crc = 0;
	foreach my $c (unpack 'C*', $_[0])
	{
		$crc ^= $c << 8;
		$crc = ($crc & 0x8000) ? (($crc << 1) ^ 0x1021) & 0xffff : ($crc << 1) & 0xffff for 1 .. 8;
	}
	return $crc % 16384;
}
my @names;
for (my $i = 0; @names < $HOLDS; $i++)
{
	my $s = slot_of("e1_$i");
	push @names, "e1_$i" if grep { $s >= $_->[0] && $s <= $_->[1] } @ranges;
}

my $pg = create_cluster_node('pipeline', $nodes[0]);

my $list = join(',', map { "'$_'" } @names);
my $h = RedsemTest::Session->new($pg, name => 'holder');
is($h->query_ok(qq{SELECT count(redsem_acquire(n, 1, lease => '3 s')) FROM unnest(ARRAY[$list]) n;}), $HOLDS,
	"$HOLDS slots with a 3 s lease, one per semaphore, all on the far node");
is($far->cli('DBSIZE') > 0 ? 'keys' : 'none', 'keys', 'their keys live on the far node');

my $t0 = time;
sleep 9;    # three lease periods
my $probe = RedsemTest::Session->new($pg, name => 'probe');
is($probe->query_ok(qq{SELECT count(*) FROM unnest(ARRAY[$list]) n WHERE redsem_acquire_xact(n, 1) IS NOT NULL;}), '0',
	'after three lease periods another session gets none of them: the keeper kept every slot');
is($h->query_ok(q{SELECT count(*) FROM redsem_held() WHERE keeper_error IS NULL;}), $HOLDS,
	'redsem_held shows every hold kept, none with a keeper error');

$_->quit foreach ($h, $probe);
$pg->stop;
node_log_is_clean($pg);
$_->stop foreach @nodes;
done_testing();
