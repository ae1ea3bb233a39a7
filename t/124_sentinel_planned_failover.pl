
# 124_sentinel_planned_failover.pl - a planned failover (SENTINEL FAILOVER)
# leaves the old primary a primary, taking writes, until the sentinels
# demote it about 10 s later.  The keeper must refresh its holds on the new
# primary (where the failover's copy of them lives, and runs out), not on
# the old one; and a waiter in the old primary's line must follow to the
# new one within its wait.  helper-144 saw a fresh session take the only
# slot of a holder 3 s after the failover (its 3-s lease ran out on the new
# primary while the keeper refreshed it on the old one), in both modes.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

my (undef, undef, $sentinels) = sentinel_deployment('pf');
my @sentinels = @$sentinels;
my $node = sentinel_node('pf', \@sentinels, "redsem.grant_replicas = 1\nredsem.connect_timeout = '1s'\n");
$node->safe_psql('postgres', "SELECT redsem_set_limit('pf_held', 1), redsem_set_limit('pf_line', 1)");

my $h1 = RedsemTest::Session->new($node, name => 'holder');
ok($h1->query_ok(q{SELECT redsem_acquire('pf_held', lease => '3 s') IS NOT NULL;}) eq 't',
	'a holder takes the only slot of pf_held (3-s lease, kept by the keeper)');
my $h2 = RedsemTest::Session->new($node, name => 'holder2');
ok($h2->query_ok(q{SELECT redsem_acquire('pf_line', lease => '3 s') IS NOT NULL;}) eq 't',
	'another holds the only slot of pf_line');
my $w = RedsemTest::Session->new($node, name => 'waiter');
$w->send(q{SELECT redsem_acquire('pf_line', lease => '3 s', wait => '12 s') IS NOT NULL;});
ok(wait_until(10, sub { $node->safe_psql('postgres', q{SELECT waiting FROM redsem_semaphore('pf_line')}) eq '1' }),
	'a waiter is in line for pf_line, 12 s of wait');
usleep(1_200_000);    # (the keeper has asked the sentinels once)

my $t0 = time;
is($sentinels[0]->cli('SENTINEL', 'FAILOVER', 'mymaster'), 'OK', 'SENTINEL FAILOVER');
my ($stolen, $released) = (0, 0);
while (time - $t0 < 9)    # (three leases; the old primary is demoted at about 10 s)
{
	my ($rc, $out) = $node->psql('postgres',
		q{SET redsem.command_timeout = '2s'; SELECT redsem_acquire_xact('pf_held', wait => '0') IS NOT NULL;});
	if (($out // '') eq 't')
	{
		$stolen++;
		note sprintf('a fresh session took the holder\'s slot %.1f s after the failover', time - $t0);
	}
	if (!$released && time - $t0 > 4)
	{
		is($h2->query_ok(q{SELECT redsem_release_all();}), '1', 'pf_line\'s holder releases, 4 s after the failover');
		$released = 1;
	}
	usleep(250_000);
}
is($stolen, 0, 'no fresh session takes the slot the keeper keeps alive through the failover');
my ($out, $err) = $w->wait_done(20);
is($out, 't', 'the waiter gets pf_line within its wait, on the new primary') or diag $err;
is($h1->query_ok(q{SELECT count(*) FROM redsem_held() WHERE keeper_error IS NULL;}), '1',
	'the holder still holds, the keeper without trouble');
is($h1->query_ok(q{SELECT redsem_release_all();}), '1', 'the holder releases its slot');
like(slurp_file($node->logfile), qr/the sentinels now name \S+ the primary/,
	'the keeper logged that the sentinels named another primary');
$_->quit for ($h1, $h2, $w);
node_log_is_clean($node);
done_testing();
