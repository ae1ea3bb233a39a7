
# 029_grant_lease_left.pl - redsem.grant_replicas: a grant that comes back
# from a slow WAIT is returned only with enough lease left for the keeper to
# keep it (two thirds of it, src/timing.h), or refreshed first (issue 48,
# E6).  A replica that acknowledges late makes a 1 s grant come back with
# some 400 ms left; the keeper is held up a little (as a busy machine may)
# right then.  The session must not be handed a slot whose lease runs out
# before anybody can refresh it: a second session is never admitted beside
# it on a semaphore of 1.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

# The process id of $node's keeper (it is not in pg_stat_activity)
sub keeper_pid
{
	my ($node) = @_;
	my $postmaster = $node->{_pid};
	for my $dir (glob '/proc/[0-9]*')
	{
		open(my $fh, '<', "$dir/cmdline") or next;
		my $cmd = do { local $/; <$fh> } // '';
		close $fh;
		next unless $cmd =~ /redsem keeper/;
		open($fh, '<', "$dir/stat") or next;
		my $stat = <$fh> // '';
		close $fh;
		my ($pid, $ppid) = $stat =~ /^(\d+) \(.*\) \S+ (\d+)/;
		return $pid if defined $ppid && $ppid == $postmaster;
	}
	return undef;
}

my ($primary, $replica) = primary_and_replica();
my $node = create_node('lease_left', $primary,
	"redsem.grant_replicas = 1\nredsem.grant_replica_timeout = 10000\n");
my $keeper = keeper_pid($node);
ok(defined $keeper, 'the keeper is found');

my $sa = RedsemTest::Session->new($node, name => 'a');
is($sa->query_ok(q{SELECT redsem_release('gl', redsem_acquire('gl', 1, '1 s'));}), 't',
	'with the replica up, a grant is acknowledged and used');
my $sb = RedsemTest::Session->new($node, name => 'b');
$sb->query_ok(q{SET redsem.grant_replicas = 0;});

$replica->freeze;
$sa->send(q{SELECT redsem_acquire('gl', 1, '1 s') IS NOT NULL;});
ok(defined wait_until(10, sub { $primary->zcard('gl', 'owner') == 1 }), 'a is granted; its WAIT runs');
# a's deadline in Redis (ms of the wall clock the test shares): the WAIT
# ends 0.4 s before it (less than the two thirds the keeper needs are
# left: a's grant is refreshed before it is returned), while the keeper is
# held up; reckoned from the deadline, not from when the test saw the
# grant, which a loaded machine puts later
my (undef, $deadline_ms) = split /\n/, scalar $primary->cli('ZRANGE', 'redsem:{gl}:timeout', 0, 0, 'WITHSCORES');
ok(defined $deadline_ms && $deadline_ms =~ /^\d+$/, 'a\'s deadline is read from Redis');
my $deadline = ($deadline_ms // 0) / 1000.0;
usleep(int(1_000_000 * ($deadline - 0.4 - time))) if $deadline - 0.4 > time;
kill 'STOP', $keeper;
$replica->thaw;
my $thawed = time;
note sprintf('thawed %.3f s before the deadline', $deadline - $thawed);
my ($out, $err) = $sa->wait_done(10);
is($err, '', 'the replica acknowledges late');
is($out, 't', 'a gets its slot');
my $admitted = 0;
my $probes = 0;
# (a grant returned without its refresh is over at the deadline, and b is
# admitted then; a refreshed one runs to 0.6 s past it, and the keeper has
# 0.4 s left to refresh it once it goes on)
while (time < $deadline + 0.2)
{
	$probes++;
	$admitted++
	  if $sb->query_ok(q{SELECT redsem_acquire('gl', 1, '60 s') IS NOT NULL;}) eq 't';
	last if $admitted;
	usleep(20_000);
}
kill 'CONT', $keeper;
note "$probes tries of b while the keeper was held up";
is($admitted, 0, 'b is never admitted beside a: a\'s slot had enough lease left for the keeper');
usleep(1_500_000);
is($sb->query_ok(q{SELECT redsem_acquire('gl', 1, '60 s') IS NOT NULL;}), 'f',
	'nor once the keeper goes on: it keeps a\'s slot');
is($sa->query_ok(q{SELECT count(*) FROM redsem_held() WHERE kept_alive AND lease_expires_at > clock_timestamp();}),
	'1', 'a holds its slot, kept alive');
is($node->safe_psql('postgres', q{SELECT count(*) FROM redsem_holders('gl');}), '1', 'a is the only holder');

$_->quit foreach ($sa, $sb);
$node->stop;
node_log_is_clean($node);
$replica->stop;
$primary->stop;
done_testing();
