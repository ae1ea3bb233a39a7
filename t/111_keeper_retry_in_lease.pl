
# 111_keeper_retry_in_lease.pl - the keeper's back-off after failed
# refreshes never outlasts the lease.
#
# A refresh that fails is tried again after a back-off that doubles (250 ms,
# 500 ms, 1 s, 2 s, 4 s, ... up to 30 s).  Redis here refuses the refreshes
# of one semaphore for 24 s (the proxy answers an error in their place),
# from before the first refresh of a 30 s lease is due (at about 6 s): the
# seventh failure comes at about 21 s, and a try 16 s later would come after
# the lease's end, which stops a holder the try would have kept.  The
# keeper tries again within half the time the lease has left instead.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $redis = RedsemTest::Redis->new;
my $dir = PostgreSQL::Test::Utils::tempdir_short();
my $refuse = "$dir/refuse";

# the refreshes of semaphore "flaky" fail while $refuse exists
my $proxy = RedsemTest::Proxy->new($redis, sub {
	my @cmd = @_;
	return undef unless -e $refuse && ($cmd[0] // '') =~ /^(?:EVAL|FCALL)/i;
	return "-ERR refused by the test\r\n"
	  if grep({ $_ eq 'refresh' || $_ eq 'refresh_many' } @cmd) && grep { /\{flaky\}/ } @cmd;
	return undef;
});
my $psock = $proxy->socket;
my $node = RedsemTest::start_node('retry', <<"EOC");
shared_preload_libraries = 'redsem'
redsem.unix_socket = '$psock'
max_connections = 20
log_min_messages = warning
EOC

my $s = RedsemTest::Session->new($node, name => 'holder');
my $t0 = time;
is($s->query_ok(q{SELECT redsem_acquire('flaky', 1, '30 s') IS NOT NULL;}), 't', 'a session holds a slot with a 30 s lease');
PostgreSQL::Test::Utils::append_to_file($refuse, "1\n");
note 'Redis refuses its refreshes from ' . sprintf('%.1f', time - $t0) . ' s';
usleep(1_000_000 * (24 - (time - $t0)));
unlink $refuse;
note 'and takes them again from ' . sprintf('%.1f', time - $t0) . ' s';
ok(wait_until(8, sub {
			$s->query_ok(q{SELECT count(*) FROM redsem_held() WHERE keeper_error IS NULL;}) eq '1' }),
	'the keeper refreshes it again once Redis takes refreshes');
RedsemTest::sleep_full(33 - (time - $t0)) if time - $t0 < 33;
is($node->safe_psql('postgres', q{SELECT permits_held FROM redsem_semaphore('flaky');}), '1',
	'past the end of the lease it had when the refreshes failed, the slot is still held');
is($s->query_ok(q{SELECT redsem_release_all();}), '1', '... and its session releases it, never stopped');
my $log = slurp_file($node->logfile);
like($log, qr/redsem keeper could not refresh the slot of semaphore "flaky"/, 'the failed refreshes were logged');
note $_ foreach grep { /flaky|tries again/ } split /\n/, $log;

$s->quit;
$node->stop;
node_log_is_clean($node);
$proxy->stop;
$redis->stop;
done_testing();
