
# 070_keeper_wake_during_touch.pl - a hold taken while the keeper is busy
# with Redis (here: its touch of the fleet index, held up by a proxy) is
# refreshed in time.  The backend that takes it asks the keeper to wake by
# setting its latch; the keeper's own Redis waits reset that latch, so the
# request used to be lost and the keeper slept on as its old copy of the
# holds said (up to a second): a 1 s lease ran out and a second session got
# the only slot of a semaphore of 1.  Now the request is also counted in
# shared memory and the keeper looks again at once (src/timing.h); and a
# touch whose late reply has not come by the connection's next use does
# not hold the next refreshes up behind it: the connection is dropped then.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(usleep time);

my $dir = PostgreSQL::Test::Utils::tempdir_short();
my $marker = "$dir/touching";
my $delayfile = "$dir/delay";

# How long the proxy holds a touch up, in microseconds
sub set_touch_delay
{
	my ($us) = @_;
	open(my $f, '>', $delayfile) or die "cannot write $delayfile: $!";
	print $f "$us\n";
	close($f);
}
set_touch_delay(0);

my $redis = RedsemTest::Redis->new;
my $proxy = RedsemTest::Proxy->new($redis, sub {
		if (grep { $_ eq 'index_touch' } @_)
		{
			open(my $d, '<', $delayfile) or die "cannot read $delayfile: $!";
			my $us = <$d>;
			close($d);
			chomp $us;
			open(my $m, '>', $marker) or die "cannot write $marker: $!";
			print $m time(), "\n";
			close($m);
			usleep($us);
		}
		return undef;
	});
my $node = create_node('wake', $redis,
	"redsem.unix_socket = '" . $proxy->socket . "'\n");

my $a = RedsemTest::Session->new($node, name => 'a');
is($a->query_ok(q{SELECT redsem_acquire('wake_long', 5, '1 hour') IS NOT NULL;}), 't',
	'a holds a slot with a 1 hour lease (the touch budget is then the longest)');

# A touch held up 3 s (far beyond its budget) and one held up 0.3 s (within it)
for my $case ([ 'hung', 3_000_000 ], [ 'slow', 300_000 ])
{
	my ($tag, $us) = @$case;
	set_touch_delay($us);
	unlink $marker;
	ok(defined wait_until(25, sub { -e $marker }), "$tag: the keeper's touch is in flight");
	my $b = RedsemTest::Session->new($node, name => "b_$tag");
	is($b->query_ok(qq{SELECT redsem_acquire('wake_$tag', 1, '1 s') IS NOT NULL;}), 't',
		"$tag: b takes the only slot of a semaphore of 1 (a 1 s lease) during the touch");
	usleep(1_300_000);
	my $c = RedsemTest::Session->new($node, name => "c_$tag");
	is($c->query_ok(qq{SELECT redsem_acquire('wake_$tag', 1, '1 s') IS NOT NULL;}), 'f',
		"$tag: c does not get the slot b holds, 1.3 s later");
	is($b->query_ok(q{SELECT count(*) FROM redsem_held() WHERE kept_alive AND lease_expires_at > clock_timestamp();}),
		'1', "$tag: b's hold is kept alive");
	$c->quit;
	$b->quit;
	set_touch_delay(0);
}
unlike(slurp_file($node->logfile), qr/already gone/, 'no slot was found gone');

$a->quit;
$node->stop;
node_log_is_clean($node);
$proxy->stop;
$redis->stop;
done_testing();
