
# 083_failover_lost_writes.pl - a Sentinel failover that loses writes
# (issue 48, B and D): the replica is cut off from its primary first (its
# replication goes through a proxy that stops forwarding), a session takes
# the slot of a limit-1 semaphore on the primary alone, and the primary
# dies.  The sentinels promote the replica, which never saw that grant.
#
# Without the failover check of I15 (src/redsem.lua), a newcomer got the
# slot on the new primary at once, beside the holder that still ran until
# its keeper found the slot gone.  Now the first acquire a connection sends
# to the new primary finds the generation checked on another primary, and
# nobody is admitted before the leases of grants that waited for no
# replica could have ended: the holder is stopped first (A), then the
# waiters get in, in their order.  The history checker (t/RedsemHistory.pm)
# asserts that at no instant two works ran.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use RedsemHistory;
use Test::More;
use Time::HiRes qw(time);

my $LEASE = '6 s';

my @fast = ('repl-diskless-sync-delay 0');
my $primary = RedsemTest::TcpServer->new(name => 'lw_a', conf => [@fast]);

# the replica replicates through a proxy the test can freeze
my $proxy_port = PostgreSQL::Test::Cluster::get_free_port();
my $proxy_pid = fork;
die "fork: $!" unless defined $proxy_pid;
if ($proxy_pid == 0)
{
	exec('perl', "$FindBin::RealBin/../bench/delay_proxy.pl", "127.0.0.1:$proxy_port", $primary->address, 0)
	  or die "exec: $!";
}
END { if ($proxy_pid) { kill 'CONT', $proxy_pid; kill 'TERM', $proxy_pid; } }
my $replica = RedsemTest::TcpServer->new(name => 'lw_b', conf => [ @fast, "replicaof 127.0.0.1 $proxy_port" ]);

sub role
{
	my ($srv) = @_;
	return (($srv->cli('INFO', 'replication') // '') =~ /^role:(\w+)/m)[0] // '';
}
ok(wait_until(30, sub { ($replica->cli('INFO', 'replication') // '') =~ /master_link_status:up/ }),
	'the replica is in sync, through the proxy');

my $sentinel = RedsemTest::TcpServer->new(
	name => 'lw_sentinel',
	sentinel => 1,
	conf => [
		'sentinel monitor mymaster 127.0.0.1 ' . $primary->port . ' 1',
		'sentinel down-after-milliseconds mymaster 1000',
		'sentinel failover-timeout mymaster 4000',
	]);
ok(wait_until(30, sub { ($sentinel->cli('SENTINEL', 'replicas', 'mymaster') // '') =~ /\b${\ $replica->port }\b/ }),
	'the sentinel knows the replica');

my $conf = "redsem.sentinels = '" . $sentinel->address . "'\nredsem.connect_timeout = '1s'\n"
  . "redsem.command_timeout = '2s'\nlog_min_messages = warning\n";
my @nodes = map {
	my $n = PostgreSQL::Test::Cluster->new("lw_$_");
	$n->init;
	$n->append_conf('postgresql.conf', "shared_preload_libraries = 'redsem'\n$conf");
	$n->start;
	$n->safe_psql('postgres', 'CREATE EXTENSION redsem');
	RedsemHistory::install($n);
	$n
} qw(a b);
my ($a, $b) = @nodes;

# a first grant and its release reach the replica: the generation there
# counts the lease of grants that wait for no replica, and the primary it
# was checked on
$a->safe_psql('postgres', "SELECT redsem_release('lw', redsem_acquire('lw', 1, '$LEASE'));");
my $gen = '';
ok(defined wait_until(10, sub { ($gen = $replica->cli('GET', 'redsem:gen') // '') ne '' }),
	'the replica has the generation');
like($gen, qr/^n\d+:6000:0:\d+:\d+:6000:\d+:[0-9a-f]{40}$/,
	"... with the 6 s lease of a grant that waited for no replica, and its era ($gen)");

# the replica is cut off: what the primary grants now, it keeps alone
kill 'STOP', $proxy_pid;

# server A's session takes the slot and works long; server B's wait for it
my @wa = RedsemHistory::start($a, 'lw', 1, limit => 1, lease => $LEASE, hold => 20,
	wait => '40 s', run => 1);
ok(defined wait_until(10, sub {
			$a->safe_psql('postgres', "SELECT count(*) FROM redsem_server_holds() WHERE name = 'lw' AND state = 'holding'") eq '1'
		}), 'server A holds the slot, on the primary alone');
my @wb = RedsemHistory::start($b, 'lw', 2, limit => 1, lease => $LEASE, hold => 0.3,
	wait => '40 s', run => 22);
sleep_full(1);

# the primary dies; the sentinel promotes the replica that missed the grant
my $at = RedsemHistory::uptime();
$primary->kill9;
my $t0 = time;
ok(defined wait_until(30, sub { role($replica) eq 'master' }), 'the sentinel promotes the replica');
note sprintf('promoted %.1f s after the primary died', time - $t0);
kill 'CONT', $proxy_pid;

RedsemHistory::finish(@wa, @wb);
my $r = RedsemHistory::check(\@nodes, 'lw', 1, fault_at => $at);
note(RedsemHistory::line('failover, writes lost', $r) . " max_inside=$r->{max_inside} errors=$r->{errors}");
is($r->{over}, 0, "never two at once ($r->{grants} works, $r->{lost} stopped)");
is($r->{lost}, 1, 'the holder whose grant the failover lost was stopped');
cmp_ok($r->{grants}, '>=', 3, 'the waiters got in after it');
is($r->{errors}, 0, 'no caller saw an error: the failover and the grace fit in their wait');

$_->stop foreach @nodes;
done_testing();
