
# 127_sentinel_host_names.pl - sentinels that announce host names
# (resolve-hostnames and announce-hostnames yes, names served by the
# t/fault resolver shim).  The keeper notes the primary as named
# ("host:port"); a backend's link, whose connection (hiredis) holds the
# address redsem resolved, compares the name it was opened for, so a waiter
# whose latch is set keeps its link (helper-147: every wake dropped it).

use strict;
use warnings FATAL => 'all';
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $tmp = PostgreSQL::Test::Utils::tempdir();
my $shim = dns_fault_shim($tmp);

my $primary = RedsemTest::TcpServer->new(name => 'hn_a');
my $sentinel;
{
	local $ENV{LD_PRELOAD} = $shim;
	$sentinel = RedsemTest::TcpServer->new(
		name => 'hn_sentinel',
		sentinel => 1,
		conf => [
			'sentinel resolve-hostnames yes',
			'sentinel announce-hostnames yes',
			'sentinel monitor mymaster hn-a.here.redsem.test ' . $primary->port . ' 1',
			'sentinel down-after-milliseconds mymaster 1000',
		]);
}
my $named;
ok(wait_until(30, sub { $named = $sentinel->cli('SENTINEL', 'get-master-addr-by-name', 'mymaster') // ''; $named =~ /here/ }),
	'the sentinel names the primary by its host name') or diag $named;
note "named: $named";

my $node;
{
	local $ENV{LD_PRELOAD} = $shim;
	$node = PostgreSQL::Test::Cluster->new('hn');
	$node->init;
	$node->append_conf('postgresql.conf', "shared_preload_libraries = 'redsem'\n"
		  . connection_mode_conf()
		  . "redsem.sentinels = '" . $sentinel->address . "'\nredsem.connect_timeout = '1s'\n");
	$node->start;
}
$node->safe_psql('postgres', 'CREATE EXTENSION redsem');
$node->safe_psql('postgres', "SELECT redsem_set_limit('hn_line', 1)");
my $h = RedsemTest::Session->new($node, name => 'holder');
ok($h->query_ok(q{SELECT redsem_acquire('hn_line', lease => '3 s') IS NOT NULL;}) eq 't', 'a holder');
usleep(1_500_000);    # (the keeper asked the sentinels)
my $w = RedsemTest::Session->new($node, name => 'waiter');
$w->send(q{SELECT redsem_acquire('hn_line', lease => '3 s', wait => '30 s') IS NOT NULL;});
ok(wait_until(10, sub { $node->safe_psql('postgres', q{SELECT waiting FROM redsem_semaphore('hn_line')}) eq '1' }),
	'a waiter is in line');
usleep(1_000_000);
my $wpid = $node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity WHERE query LIKE '%wait => ''30 s''%' AND pid <> pg_backend_pid()});
my $conns = sub { (($primary->cli('INFO', 'stats') // '') =~ /total_connections_received:(\d+)/)[0] };
my $logpos = -s $node->logfile;
my $before = $conns->();
for (1 .. 3)
{
	$node->safe_psql('postgres', "SELECT pg_log_backend_memory_contexts($wpid)");
	usleep(1_000_000);
}
my $after = $conns->();
my $log = substr(slurp_file($node->logfile), $logpos);
my @lost = $log =~ /(the sentinels now name another primary than \S+)/g;
note "lost lines: " . scalar(@lost) . ' ' . ($lost[0] // '');
note "new connections to the primary during 3 pokes: " . ($after - $before);
is(scalar(@lost), 0, 'no failover: a poked waiter keeps its link to the one primary');
ok($after - $before <= 1, 'no reconnections for the pokes');
is($h->query_ok(q{SELECT redsem_release_all();}), '1', 'the holder releases');
my ($out, $err) = $w->wait_done(20);
is($out, 't', 'the waiter gets the slot') or diag $err;
my @klog = slurp_file($node->logfile) =~ /(redsem keeper[^\n]*)/g;
note "keeper lines: @klog[0..($#klog < 5 ? $#klog : 5)]";
$_->quit for ($h, $w);
done_testing();
