
# 054_sentinel_hung_primary.pl - a Sentinel primary that hangs (SIGSTOP)
# rather than dies.  The sentinels fail over to the replica; the keeper,
# whose server sets redsem.command_timeout to 30 s, must not spend that on
# the hung primary: it gives up in a share of time derived from the leases
# it keeps, asks the sentinels again and refreshes the holds on the new
# primary before their 10 s leases run out, so another session never gets
# their slots.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

my @fast = ('repl-diskless-sync-delay 0');
my $primary = RedsemTest::TcpServer->new(name => 'hang_a', conf => [@fast]);
my $replica = RedsemTest::TcpServer->new(name => 'hang_b',
	conf => [ @fast, 'replicaof 127.0.0.1 ' . $primary->port ]);

sub role
{
	my ($srv) = @_;
	return (($srv->cli('INFO', 'replication') // '') =~ /^role:(\w+)/m)[0] // '';
}
ok(wait_until(30, sub { ($replica->cli('INFO', 'replication') // '') =~ /master_link_status:up/ }),
	'the replica is in sync');

my @sentinels = map {
	RedsemTest::TcpServer->new(
		name => "hang_sentinel$_",
		sentinel => 1,
		conf => [
			'sentinel monitor mymaster 127.0.0.1 ' . $primary->port . ' 2',
			'sentinel down-after-milliseconds mymaster 1000',
			'sentinel failover-timeout mymaster 4000',
		])
} 1 .. 3;
ok(wait_until(60, sub {
			!grep { ((($_->cli('SENTINEL', 'master', 'mymaster') // '') =~ /num-other-sentinels\n(\d+)/)[0] // 0) != 2 } @sentinels
		}), 'three sentinels watch the primary');

my $node = PostgreSQL::Test::Cluster->new('hang');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'redsem'\n"
	  . connection_mode_conf()
	  . "redsem.sentinels = '" . join(',', map { $_->address } @sentinels) . "'\n"
	  . "redsem.command_timeout = '30s'\nredsem.connect_timeout = '1s'\nlog_min_messages = warning\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION redsem');

my $h = RedsemTest::Session->new($node, name => 'holder');
is($h->query_ok(q{SELECT count(redsem_acquire('sh' || i, 1, lease => '10 s')) FROM generate_series(1, 3) i;}), '3',
	'three slots with a 10 s lease, kept alive by the keeper');
is($primary->cli('WAIT', 1, 5000), '1', 'the replica has them');

my $probe = RedsemTest::Session->new($node, name => 'probe');
$probe->query_ok(q{SET redsem.command_timeout = '500ms';});
my $probe_sql = q{SELECT count(*) FROM generate_series(1, 3) i WHERE redsem_acquire_xact('sh' || i, 1) IS NOT NULL;};
is($probe->query_ok($probe_sql), '0', 'another session finds them taken');

kill 'STOP', $primary->pid;
my $t0 = time;
ok(defined wait_until(30, sub { role($replica) eq 'master' }), 'the sentinels promote the replica');
note sprintf('failed over %.1f s after the primary hung', time - $t0);
my ($stolen, $answered) = (0, 0);
while (time - $t0 < 16)    # longer than the leases
{
	my ($out) = $probe->query($probe_sql);
	if ($out =~ /^\d+$/)
	{
		$stolen += $out;
		$answered++;
	}
	usleep(250_000);
}
cmp_ok($answered, '>', 5, "the new primary answered the other session $answered times");
is($stolen, 0, 'and it never got a slot: the keeper refreshed them on the new primary in time');
is($h->query_ok(q{SELECT count(*) FROM redsem_held();}), '3', 'none was lost');
kill 'CONT', $primary->pid;

$_->quit foreach ($h, $probe);
$node->stop;
node_log_is_clean($node);
$_->stop foreach (@sentinels, $replica, $primary);
done_testing();
