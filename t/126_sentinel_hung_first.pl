
# 126_sentinel_hung_first.pl - t/124's planned failover with the first
# sentinel of redsem.sentinels hung (SIGSTOP: its host powered off; the
# kernel accepts, nothing answers).  Each sentinel asked gets a fair share
# of the time left, and the one that answered last is asked first, so the
# keeper still follows the failover within its 250 ms ask (helper-147: the
# hung sentinel took all of it, and the slot was taken from 2.6 s on).  Then
# a waiter on the new primary, its latch set again and again
# (pg_log_backend_memory_contexts), keeps its link: a read's wake drops it
# only after the sentinels named another primary (helper-147: every wake
# dropped it while the keeper's name was stale).

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

my ($primary, $replicas, $sentinels) = sentinel_deployment('hf');
my @replicas = @$replicas;
my @sentinels = @$sentinels;
my $node = sentinel_node('hf', \@sentinels, "redsem.grant_replicas = 1\nredsem.connect_timeout = '1s'\n");
$node->safe_psql('postgres', "SELECT redsem_set_limit('pf_held', 1), redsem_set_limit('pf_line', 1)");

my $h1 = RedsemTest::Session->new($node, name => 'holder');
ok($h1->query_ok(q{SELECT redsem_acquire('pf_held', lease => '3 s') IS NOT NULL;}) eq 't',
	'a holder takes the only slot of pf_held (3-s lease, kept by the keeper)');
my $h2 = RedsemTest::Session->new($node, name => 'holder2');
usleep(1_500_000);    # (the keeper has asked the sentinels: it names the first primary)

# The first listed sentinel hangs (a host powered off, or a stopped process:
# the connection is accepted by the kernel, nothing answers)
kill 'STOP', $sentinels[0]->pid;
END { kill 'CONT', $sentinels[0]->pid if $sentinels[0] && $sentinels[0]->pid; }
my $logpos = -s $node->logfile;

my $t0 = time;
is($sentinels[1]->cli('SENTINEL', 'FAILOVER', 'mymaster'), 'OK', 'SENTINEL FAILOVER (through the second sentinel)');
my $stolen = 0;
while (time - $t0 < 9)
{
	my ($rc, $out) = $node->psql('postgres',
		q{SET redsem.command_timeout = '3s'; SELECT redsem_acquire_xact('pf_held', wait => '0') IS NOT NULL;});
	if (($out // '') eq 't')
	{
		$stolen++;
		note sprintf('a fresh session took the holder\'s slot %.1f s after the failover', time - $t0);
	}
	usleep(250_000);
}
is($stolen, 0, 'no fresh session takes the slot the keeper keeps alive (first sentinel hung)');
my $log = substr(slurp_file($node->logfile), $logpos);
like($log, qr/the sentinels now name \S+ the primary/, 'the keeper noticed the move');

# Wait for the old primary's demotion; then everything runs on the new one
usleep(4_000_000);
my $newaddr = $sentinels[1]->cli('SENTINEL', 'get-master-addr-by-name', 'mymaster');
note "new primary: $newaddr";
my ($newport) = $newaddr =~ /(\d+)\s*$/;
my ($newsrv) = grep { $_->port == $newport } ($primary, @replicas);
note 'old primary role: ' . ($primary->cli('ROLE') // '');

ok($h2->query_ok(q{SELECT redsem_acquire('pf_line', lease => '5 s') IS NOT NULL;}) eq 't',
	'another holds the only slot of pf_line (on the new primary)');
my $w = RedsemTest::Session->new($node, name => 'waiter');
$w->send(q{SELECT redsem_acquire('pf_line', lease => '3 s', wait => '30 s') IS NOT NULL;});
ok(wait_until(10, sub { $node->safe_psql('postgres', q{SELECT waiting FROM redsem_semaphore('pf_line')}) eq '1' }),
	'a waiter is in line for pf_line');
usleep(2_000_000);
my $wpid = $node->safe_psql('postgres', q{SELECT pid FROM pg_stat_activity WHERE query LIKE '%wait => ''30 s''%' AND pid <> pg_backend_pid()});
note "waiter pid $wpid";
my $conns = sub { (($newsrv->cli('INFO', 'stats') // '') =~ /total_connections_received:(\d+)/)[0] };
$logpos = -s $node->logfile;
my $before = $conns->();
for (1 .. 4)
{
	$node->safe_psql('postgres', "SELECT pg_log_backend_memory_contexts($wpid)");
	usleep(1_500_000);
}
my $after = $conns->();
$log = substr(slurp_file($node->logfile), $logpos);
my @lost = $log =~ /(the sentinels now name another primary than \S+)/g;
note "lines: @lost[0..($#lost < 3 ? $#lost : 3)]";
note "connections to the new primary during the pokes: " . ($after - $before);
is(scalar(@lost), 0, 'a poked waiter on the primary the sentinels name keeps its link');
ok($after - $before <= 1, 'no new connections to the new primary for the pokes');
is($h2->query_ok(q{SELECT redsem_release_all();}), '1', 'pf_line\'s holder releases');
my ($out, $err) = $w->wait_done(20);
is($out, 't', 'the waiter gets pf_line') or diag $err;
eval { note "holder: " . $h1->query_ok(q{SELECT count(*) FROM redsem_held();}); 1 } or note "holder session: $@";
kill 'CONT', $sentinels[0]->pid;
$_->quit for ($h1, $h2, $w);
done_testing();
