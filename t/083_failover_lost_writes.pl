
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

sub role
{
	my ($srv) = @_;
	return (($srv->cli('INFO', 'replication') // '') =~ /^role:(\w+)/m)[0] // '';
}

# A primary, a replica that replicates through a proxy the test can
# freeze, and a sentinel: (primary, replica, sentinel, proxy pid)

sub sentinel_set
{
	my ($tag) = @_;
	my $primary = RedsemTest::TcpServer->new(name => "lw_${tag}_a", conf => [@fast]);
	my $proxy_port = PostgreSQL::Test::Cluster::get_free_port();
	my $proxy_pid = cut_proxy_at("127.0.0.1:$proxy_port", $primary->address);
	my $replica = RedsemTest::TcpServer->new(name => "lw_${tag}_b", conf => [ @fast, "replicaof 127.0.0.1 $proxy_port" ]);
	ok(wait_until(30, sub { ($replica->cli('INFO', 'replication') // '') =~ /master_link_status:up/ }),
		"$tag: the replica is in sync, through the proxy");
	my $sentinel = RedsemTest::TcpServer->new(
		name => "lw_${tag}_sentinel",
		sentinel => 1,
		conf => [
			'sentinel monitor mymaster 127.0.0.1 ' . $primary->port . ' 1',
			'sentinel down-after-milliseconds mymaster 1000',
			'sentinel failover-timeout mymaster 4000',
		]);
	my $rport = $replica->port;
	ok(wait_until(30, sub { ($sentinel->cli('SENTINEL', 'replicas', 'mymaster') // '') =~ /\b$rport\b/ }),
		"$tag: the sentinel knows the replica");
	return ($primary, $replica, $sentinel, $proxy_pid);
}

my @nodes = map {
	my $n = PostgreSQL::Test::Cluster->new("lw_$_");
	$n->init;
	$n->append_conf('postgresql.conf', connection_mode_conf() . "shared_preload_libraries = 'redsem'\nredsem.connect_timeout = '1s'\n"
		  . "redsem.command_timeout = '2s'\nlog_min_messages = warning\n");
	$n->start;
	$n->safe_psql('postgres', 'CREATE EXTENSION redsem');
	RedsemHistory::install($n);
	$n
} qw(a b);
my ($a, $b) = @nodes;

# The servers ask the sentinel of a set (sentinel_set's list) from now on;
# returns the list
sub servers_use
{
	my @set = @_;
	foreach my $n (@nodes)
	{
		$n->append_conf('postgresql.conf', "redsem.sentinels = '" . $set[2]->address . "'\n");
		$n->reload;
	}
	sleep_full(0.5);
	return @set;
}

# One case: the servers use a new sentinel set; server A's session takes
# the slot of $sem on the primary alone and works 20 s; server B's two
# loop on it; the primary dies.  Returns the checker's result.
sub run_case
{
	my ($sem, $policy) = @_;
	my ($primary, $replica, $sentinel, $proxy_pid) = servers_use(sentinel_set($sem));

	# a first grant and its release reach the replica: the generation
	# there counts the lease of grants that wait for no replica, and the
	# primary it was checked on
	$a->safe_psql('postgres', "SELECT redsem_release('$sem', redsem_acquire('$sem', 1, '$LEASE'));");
	my $gen = '';
	ok(defined wait_until(10, sub { ($gen = $replica->cli('GET', 'redsem:gen') // '') =~ /:6000:\d+:[0-9a-f]{16}$/ }),
		"$sem: the replica has the generation, with the 6 s lease of a grant that waited for no replica and its era ($gen)");

	# the replica is cut off: what the primary grants now, it keeps alone
	kill 'STOP', $proxy_pid;
	my $setup = "SET redsem.on_slot_lost = $policy;";
	my @wa = RedsemHistory::start($a, $sem, 1, limit => 1, lease => $LEASE, hold => 20,
		wait => '40 s', run => 1, setup => $setup);
	ok(defined wait_until(10, sub {
				$a->safe_psql('postgres', "SELECT count(*) FROM redsem_server_holds() WHERE name = '$sem' AND state = 'holding'") eq '1'
			}), "$sem: server A holds the slot, on the primary alone");
	my @wb = RedsemHistory::start($b, $sem, 2, limit => 1, lease => $LEASE, hold => 0.3,
		wait => '40 s', run => 22, setup => $setup);
	sleep_full(1);

	# the primary dies; the sentinel promotes the replica that missed the grant
	my $at = RedsemHistory::uptime();
	$primary->kill9;
	my $t0 = time;
	ok(defined wait_until(30, sub { role($replica) eq 'master' }), "$sem: the sentinel promotes the replica");
	note sprintf('%s: promoted %.1f s after the primary died', $sem, time - $t0);
	kill 'CONT', $proxy_pid;

	RedsemHistory::finish(@wa, @wb);
	my $r = RedsemHistory::check(\@nodes, $sem, 1, fault_at => $at);
	note(RedsemHistory::line($sem, $r) . " max_inside=$r->{max_inside} errors=$r->{errors}");
	$_->stop foreach ($sentinel, $replica);
	return $r;
}

my $r = run_case('lw', 'cancel');
is($r->{over}, 0, "never two at once ($r->{grants} works, $r->{lost} stopped)");
is($r->{lost}, 1, 'the holder whose grant the failover lost was stopped');
cmp_ok($r->{grants}, '>=', 3, 'the waiters got in after it');
is($r->{errors}, 0, 'no caller saw an error: the failover and the grace fit in their wait');

# A backend that used the primary before the failover reconnects inside
# its next acquire (found by review): that try checks the era too, so it
# gets no slot beside the holder whose grant the failover lost
{
	my ($primary, $replica, $sentinel, $proxy_pid) = servers_use(sentinel_set('old'));
	my $p = RedsemTest::Session->new($b, name => 'old-backend');
	$p->query_ok("SELECT redsem_release('old', redsem_acquire('old', 1, '60 s'));");
	ok(defined wait_until(10, sub { ($replica->cli('GET', 'redsem:gen') // '') =~ /:60000:\d+:[0-9a-f]{16}$/ }),
		'old: the replica has the generation');
	kill 'STOP', $proxy_pid;
	my $h = RedsemTest::Session->new($a, name => 'old-holder');
	ok($h->query_ok("SELECT redsem_acquire('old', 1, '60 s');") ne '', 'old: server A holds, on the primary alone');
	$primary->kill9;
	ok(defined wait_until(30, sub { role($replica) eq 'master' }), 'old: the sentinel promotes the replica');
	kill 'CONT', $proxy_pid;
	sleep_full(1.5);
	is($p->query_ok("SELECT redsem_acquire('old', 1, '60 s', wait => '0') IS NOT NULL;"), 'f',
		'old: the backend that reconnects inside its acquire gets NULL (the grace), not the slot A holds');
	like($replica->cli('GET', 'redsem:gen') // '', qr/^g/, 'old: and started the grace for everybody');
	$_->quit foreach ($p, $h);
	$_->stop foreach ($sentinel, $replica);
}

# A planned failover (SENTINEL FAILOVER, nothing cut): the line survives on
# the promoted replica, and its waiters, who ride the failover out within
# their wait, get the slot in the order they came (after the grace, since
# they waited for no replica)
{
	my ($primary, $replica, $sentinel, $proxy_pid) = servers_use(sentinel_set('ord'));
	my $h = RedsemTest::Session->new($a, name => 'ord-holder');
	is($h->query_ok("SELECT redsem_acquire('ord', 1, '$LEASE') IS NOT NULL;"), 't', 'ord: a holder');
	my @w;
	for my $i (1 .. 3)
	{
		my $w = RedsemTest::Session->new($b, name => "ord-w$i");
		$w->send("SELECT redsem_acquire('ord', 1, '$LEASE', wait => '40 s') IS NOT NULL, hist_uptime();"
			  . " SELECT pg_sleep(0.3); SELECT redsem_release_all();");
		ok(defined wait_until(10, sub { $replica->cli('ZCARD', 'redsem:{ord}:waiting') == $i }),
			"ord: waiter $i is in line, on the replica too");
		push @w, $w;
	}
	$sentinel->cli('SENTINEL', 'FAILOVER', 'mymaster');
	ok(defined wait_until(30, sub { role($replica) eq 'master' }), 'ord: SENTINEL FAILOVER promotes the replica');
	$h->query_ok('SELECT redsem_release_all();');
	my @at;
	for my $i (0 .. 2)
	{
		my ($out, $err) = $w[$i]->wait_done(60);
		my ($got, $when) = split /\|/, ($out // '') =~ s/\n.*//sr;
		is($got, 't', 'ord: waiter ' . ($i + 1) . ' got the slot, no error' . ($err ? " ($err)" : ''));
		push @at, $when // 0;
	}
	ok($at[0] < $at[1] && $at[1] < $at[2], "ord: in the order they came (@at)");
	$_->quit foreach ($h, @w);
	$_->stop foreach ($sentinel, $replica, $primary);
}

# bench/history.sh: the same without the stop (warn), whose holder works on
# past the grace: the overlaps the stop prevents
if ($ENV{REDSEM_HISTORY_BENCH})
{
	my $w = run_case('lw-warn', 'warn');
	diag(join("\n", RedsemHistory::line('Sentinel failover to a replica cut off first (cancel)', $r),
		RedsemHistory::line('the same (warn)', $w)));
}

$_->stop foreach @nodes;
done_testing();
