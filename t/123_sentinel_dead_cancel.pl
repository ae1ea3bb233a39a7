
# 123_sentinel_dead_cancel.pl - a waiter cancelled while its Sentinel primary
# is dead and still named by the sentinels (before down-after-milliseconds).
# The cancel's clean-up (the waiter's place in line, in the abort callback,
# with REDSEM_XACT_CLEANUP_MS, 50 ms) finds nothing serving at the named
# address: it must give up at once, not pause SENTINEL_RETRY_MS for a try
# that cannot begin before its deadline (it took 52-55 ms: helper-140).

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

# (down-after long enough that the dead primary stays named for the test)
my ($primary, undef, $sentinels) = sentinel_deployment('dc', replicas => 1, down_after => 60000,
	failover_timeout => 120000);
my $node = sentinel_node('dc', $sentinels, "redsem.connect_timeout = '1s'\n");

my $h = RedsemTest::Session->new($node, name => 'holder');
ok($h->query_ok(q{SELECT redsem_acquire('dc', 1) IS NOT NULL;}) eq 't', 'a holder takes the only slot');

my @w = map { RedsemTest::Session->new($node, name => "waiter$_") } 1 .. 3;
$_->send(q{DO $$ BEGIN PERFORM redsem_acquire('dc', 1, wait => '60 s');
	  EXCEPTION WHEN query_canceled THEN RAISE NOTICE 'canceled at %', extract(epoch FROM clock_timestamp()); END $$;})
  foreach @w;
ok(wait_until(10, sub { $node->safe_psql('postgres', q{SELECT waiting FROM redsem_semaphore('dc')}) eq '3' }),
	'three waiters are in line');
$primary->kill9;
note 'the primary is dead; the sentinels still name it';
usleep(300_000);    # (the waiters ride: their connections broke)
my @took;
foreach my $w (@w)
{
	my $at = $node->safe_psql('postgres',
		'SELECT extract(epoch FROM clock_timestamp()) FROM (SELECT pg_cancel_backend(' . $w->backend_pid . ')) c');
	my ($out, $err) = $w->wait_done(30);
	my ($done) = ($err // '') =~ /canceled at ([\d.]+)/;
	ok(defined $done, "$w->{name} was cancelled") or diag $err;
	push @took, ($done // 99) - $at;
	note sprintf('%s: the cancel took %.1f ms', $w->{name}, 1000 * $took[-1]);
	$w->quit;
}
my @sorted = sort { $a <=> $b } @took;
cmp_ok($sorted[1], '<', 0.045, 'the median cancel ends before the 50-ms clean-up budget runs out')
	or diag join(', ', map { sprintf '%.1f ms', 1000 * $_ } @took);

$h->quit;
done_testing();
