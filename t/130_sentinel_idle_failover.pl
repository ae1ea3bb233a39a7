
# 130_sentinel_idle_failover.pl - a planned failover (SENTINEL FAILOVER)
# while a server holds nothing.  The old primary takes writes until the
# sentinels demote it about 10 s later.  A session linked to it before the
# failover must not take a slot there once the sentinels name another
# primary: a session that links after the failover takes the same
# semaphore on the new primary, and with grant_replicas = 0 (the default)
# nothing else stops the two from holding its only slot at once.  The
# keeper asked the sentinels only while its server held or waited for
# slots, so an idle server's links stayed with the old primary.  And the
# first primary a keeper heard named was taken as no move: its own link,
# opened to the old primary before (server A: its keeper linked at start,
# its first hold comes after the failover), stayed there, so it refreshed
# the new primary's holder there and started a grace on the old primary.  (A session
# of the same server as the new primary's holder is kept off the old one by
# the generation its server saw there; one of another server is not.)

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

my ($primary, undef, $sentinels) = sentinel_deployment('if');
my @sentinels = @$sentinels;
my $conf = "redsem.connect_timeout = '1s'\n";
my $node = sentinel_node('if_a', \@sentinels, $conf);
my $other = sentinel_node('if_b', \@sentinels, $conf);
$node->safe_psql('postgres', "SELECT redsem_set_limit('if_one', 1)");

# a session of server B linked to the primary, then idle: B holds nothing
my $idle = RedsemTest::Session->new($other, name => 'idle');
is($idle->query_ok(q{SELECT redsem_release('if_one', redsem_acquire('if_one', lease => '2 s'));}), 't',
	'an idle session of server B took and gave back a slot (its link stays open)');
usleep(1_500_000);

my $old = '127.0.0.1:' . $primary->port;
my $gen_before = $primary->cli('GET', 'redsem:gen') // '';
my $t0 = time;
is($sentinels[0]->cli('SENTINEL', 'FAILOVER', 'mymaster'), 'OK', 'SENTINEL FAILOVER');
ok(wait_until(15, sub {
			my $m = $sentinels[0]->cli('SENTINEL', 'get-master-addr-by-name', 'mymaster') // '';
			$m =~ s/\n/:/;
			$m ne '' && $m ne $old;
		}), 'the sentinels name another primary');
usleep(1_500_000);    # (more than one of the keeper's rounds)

# (the new primary starts a grace as long as the longest lease known, 2 s)
my $fresh = RedsemTest::Session->new($node, name => 'fresh');
is($fresh->query_ok(q{SELECT redsem_acquire('if_one', lease => '30 s', wait => '6 s') IS NOT NULL;}), 't',
	'a session of server A linked after the failover takes the only slot, on the new primary');
my $role = $primary->cli('ROLE') // '';
note sprintf('%.1f s after the failover the old primary says ROLE %s', time - $t0, (split /\n/, $role)[0] // '?');
is($idle->query_ok(q{SELECT redsem_acquire_xact('if_one', wait => '0') IS NOT NULL;}), 'f',
	'the idle session of B, linked to the old primary before, does not take it too');
is($primary->cli('GET', 'redsem:gen') // '', $gen_before,
	'nothing wrote to the old primary after the failover (A\'s keeper, linked to it before, did not)');
usleep(1_500_000);    # (a round of A's keeper, linked to the old primary before)
is($fresh->query_ok(q{SELECT count(*) FROM redsem_held() WHERE keeper_error IS NULL;}), '1',
	'A\'s keeper keeps the slot on the new primary, without trouble');
is($fresh->query_ok(q{SELECT redsem_release_all();}), '1', 'the holder gives it back');
is($idle->query_ok(q{SELECT redsem_acquire_xact('if_one', wait => '5 s') IS NOT NULL;}), 't',
	'then the idle session takes it, on the new primary');
SKIP:
{
	skip 'behind the broker, the broker follows the sentinels for B\'s sessions', 1 if broker_mode();
	like(slurp_file($other->logfile), qr/the sentinels now name \S+ the primary/,
		'B\'s keeper logged that the sentinels named another primary, with nothing held');
}
$_->quit for ($idle, $fresh);
node_log_is_clean($_) for ($node, $other);
done_testing();
