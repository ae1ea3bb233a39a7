# 132_keeper_short_stall.pl - a stall shorter than a lease's last two thirds
# stops no holder.
#
# The keeper refreshes a hold when a third of its lease has passed, so that
# two thirds are left for tries that fail (src/timing.h).  A refresh that
# connection trouble left unanswered (Redis did not answer within the
# batch's share of the time) used to be tried again only a round later, a
# second, capped at the moment its holder had to be stopped: with 2-s
# leases, one stall of 0.8 s at the wrong moment stopped every holder
# (helper-152).  Now it is tried again within half the time the lease has
# left, with back-off over the batches in a row that met trouble.
#
# Timing rule: leases are 2 s, whose last two thirds (minus the clock and
# stop margins) are about 1.1 s; each stall is 0.8 s, at a random moment of
# the refresh cycle, so that most of them catch a refresh in flight.  Every
# pause is sleep_full's: a signal (a child's end) cuts a plain sleep short,
# and a stall with it (one CI run in a Debian 13 root).

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $redis = RedsemTest::Redis->new;
my $node = create_node('short_stall', $redis, "redsem.command_timeout = 1500\n");

my @s = map { RedsemTest::Session->new($node, name => "holder$_") } 1 .. 3;
$_->query_ok(q{SELECT redsem_acquire('stall', 3, '2 s');}) foreach @s;
is($node->safe_psql('postgres', q{SELECT count(*) FROM redsem_server_holds() WHERE name = 'stall' AND state = 'holding'}),
	'3', 'three sessions hold a slot of "stall" each, with 2-s leases');
ok(defined wait_until(10, sub { !grep { $_->query_ok(q{SELECT bool_and(kept_alive) FROM redsem_held();}) ne 't' } @s }),
	'the keeper keeps all three');

my $off = -s $node->logfile;
my $stalls = 6;
for my $i (1 .. $stalls)
{
	# a random moment of the 667-ms refresh cycle
	RedsemTest::sleep_full(rand(0.7));
	$redis->freeze;
	RedsemTest::sleep_full(0.8);
	$redis->thaw;
	RedsemTest::sleep_full(2);
}
my $log = slurp_file($node->logfile, $off);
like($log, qr/redsem keeper: Redis at .* did not answer/,
	"the keeper met the stalls ($stalls of 0.8 s)");
unlike($log, qr/was lost/, 'no holder was stopped');
for my $x (@s)
{
	my ($out) = $x->query(q{SELECT count(*) FILTER (WHERE kept_alive) || '/' || count(*) FROM redsem_held();});
	is($out, '1/1', 'holder ' . $x->backend_pid . ' still holds its slot, kept alive');
}
is($node->safe_psql('postgres', q{SELECT count(*) FROM redsem_server_holds() WHERE name = 'stall' AND state = 'holding'}),
	'3', 'and the server still counts three holders');
$_->query(q{SELECT redsem_release_all();}) foreach @s;
$_->quit foreach @s;

# While Redis answers the refreshes with trouble (a replica now: READONLY),
# the rounds back off as when it does not answer (250 ms, 500 ms, then a
# round), and the trouble is logged (helper-156: a round answered so
# counted as no trouble, every try came 250 ms after the last, unlogged)
my $r = RedsemTest::Session->new($node, name => 'readonly');
$r->query_ok(q{SELECT redsem_acquire('readonly', 3, '30 s');});
sub rejected_fcalls
{
	my ($n) = ($redis->cli('INFO', 'commandstats') // '') =~ /cmdstat_fcall:.*rejected_calls=(\d+)/;
	return $n // 0;
}
$off = -s $node->logfile;
$redis->cli('REPLICAOF', '127.0.0.1', '1');
my $r0 = rejected_fcalls();
ok(defined wait_until(20, sub { rejected_fcalls() > $r0 }), 'a refresh met READONLY');
my $r1 = rejected_fcalls();
RedsemTest::sleep_full(8);
my $tries = rejected_fcalls() - $r1;
cmp_ok($tries, '<=', 16, "the keeper's writes were refused $tries times in 8 s (its refreshes back off: 250 ms, 500 ms, then every second; 13 here, 21 when every try came 250 ms after the last)");
like(slurp_file($node->logfile, $off), qr/LOG:  redsem keeper: .*READONLY/, 'and logged the trouble');
$redis->cli('REPLICAOF', 'NO', 'ONE');
$r->query(q{SELECT redsem_release_all();});
$r->quit;

node_log_is_clean($node);
$node->stop;
$redis->stop;
done_testing();
