
# 099_ride_wait_edges.pl - a failover ridden through within a caller's wait
# (issue 48 C), at the edges of the wait, through Redis Sentinel with two
# replicas and redsem.grant_replicas = 1:
#
# - a waiter whose wait runs out while the primary it waited on is dead
#   returns within its wait (plus ACQUIRE_CALL_SLACK_MS): the calls of a
#   wait end with it, where each retry used to take up to a
#   redsem.command_timeout (a 3 s wait returned after 6 s);
# - with REDSEM_RIDE_LONG=1 (bench/failover.sh runs it: it takes over a
#   minute), a waiter with wait => '5 min' that has been in line for over a
#   minute rides a SENTINEL FAILOVER and gets its slot, after riding a
#   SIGKILL of the primary earlier in the same wait: the ride used to be
#   capped at a minute from the start of the acquire, not of the ride.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time);

my $LONG = $ENV{REDSEM_RIDE_LONG} // 0;
my @fast = ('repl-diskless-sync-delay 0');

sub role
{
	my ($srv) = @_;
	return (($srv->cli('INFO', 'replication') // '') =~ /^role:(\w+)/m)[0] // '';
}

###########################################################################
note 'a primary, two replicas and a sentinel on loopback';

my $primary = RedsemTest::TcpServer->new(name => 'edge_a', conf => [@fast]);
my @replicas = map {
	RedsemTest::TcpServer->new(name => "edge_$_", conf => [ @fast, 'replicaof 127.0.0.1 ' . $primary->port ])
} qw(b c);
my @data = ($primary, @replicas);
ok(wait_until(30, sub { !grep { ($_->cli('INFO', 'replication') // '') !~ /master_link_status:up/ } @replicas }),
	'both replicas replicate');
# (3 s before the sentinel sees a dead primary down: longer than the wait
# below, so that the wait runs out before the failover ends)
my $sentinel = RedsemTest::TcpServer->new(name => 'edge_sentinel', sentinel => 1, conf => [
	'sentinel monitor mymaster 127.0.0.1 ' . $primary->port . ' 1',
	'sentinel down-after-milliseconds mymaster 3000',
	'sentinel failover-timeout mymaster 4000']);
ok(wait_until(30, sub {
			my $r = $sentinel->cli('SENTINEL', 'replicas', 'mymaster') // '';
			!grep { my $p = $_->port; $r !~ /\b$p\b/ } @replicas;
		}), 'the sentinel knows both replicas');

my $node = PostgreSQL::Test::Cluster->new('edges');
$node->init;
$node->append_conf('postgresql.conf', connection_mode_conf() . "shared_preload_libraries = 'redsem'\n"
	  . "redsem.grant_replicas = 1\n"
	  . "redsem.sentinels = '" . $sentinel->address . "'\n"
	  . "redsem.sentinel_master = 'mymaster'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION redsem');

my $h = RedsemTest::Session->new($node, name => 'holder');
my $long;
if ($LONG)
{
	is($h->query_ok(q{SELECT redsem_acquire('long', 1, '60 s') IS NOT NULL;}), 't', 'long: a holder');
	$long = RedsemTest::Session->new($node, name => 'long');
	$long->send(q{SELECT redsem_acquire('long', 1, '60 s', wait => '5 min') IS NOT NULL;});
}
my $started = time;

###########################################################################
note 'a wait that runs out while the primary is dead';

is($h->query_ok(q{SELECT redsem_acquire('edge', 1, '60 s') IS NOT NULL;}), 't', 'edge: a holder');
my $w = RedsemTest::Session->new($node, name => 'edge');
$w->send(q{SELECT redsem_acquire('edge', 1, '60 s', wait => '3 s') IS NOT NULL;});
sleep_full(2);
$primary->kill9;
my ($out, $err, $took) = $w->wait_done(60);
note "edge: the waiter of 3 s, primary killed 2 s in: '$out' '$err' after $took s";
# (3 s and half a second for its last look, and what psql, the test's poll
# and timers late on a loaded machine add; the fault this guards against
# returned after 6 s)
cmp_ok($took, '<', 3 + 0.5 + 1.3, 'edge: the waiter returns within its wait, plus half a second for its last look');
like(($out // '') . ($err // ''), qr/^f$|08006/, 'edge: with no slot (NULL), or the failover\'s error');
$w->quit;

my $new;
ok(wait_until(30, sub { ($new) = grep { role($_) eq 'master' } @replicas; defined $new }),
	'the sentinel promotes a replica');
ok(wait_until(30, sub { (($sentinel->cli('SENTINEL', 'get-master-addr-by-name', 'mymaster') // '') =~ /\b(\d+)\s*$/)[0] == $new->port }),
	'and names it');
$primary->start;
ok(wait_until(60, sub { role($primary) eq 'slave' && ($primary->cli('INFO', 'replication') // '') =~ /master_link_status:up/ }),
	'the killed primary is back, as a replica');

if ($LONG)
{
	###########################################################################
	note 'a waiter in line for over a minute rides a SENTINEL FAILOVER';

	sleep_full(62 - (time - $started)) if time - $started < 62;
	my $trigger = time;
	$sentinel->cli('SENTINEL', 'FAILOVER', 'mymaster');
	ok(wait_until(30, sub { grep { $_ != $new && role($_) eq 'master' } @data }), 'long: SENTINEL FAILOVER promotes another');
	sleep_full(2);
	ok(wait_until(30, sub { my (undef, $e) = $h->query('SELECT redsem_release_all();'); ($e // '') eq '' }),
		'long: the holder gives its slots back');
	my ($o, $e, $t) = $long->wait_done(120);
	note sprintf("long: '%s' '%s' after %.1f s, the failover %.1f s after it queued", $o, $e, $t, $trigger - $started);
	is($o, 't', 'long: the waiter in line for over a minute gets the slot, no error');
	$long->quit;
}

$h->quit;
node_log_is_clean($node, 'no crash in the server log');
$node->stop;
$_->stop foreach ($sentinel, @data);
done_testing();
