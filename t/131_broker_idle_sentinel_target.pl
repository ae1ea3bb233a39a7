
# 131_broker_idle_sentinel_target.pl - the broker asks the sentinels where
# the primary is every second also while no backend is linked (t/130), but
# such an ask is no use of the target: a target no backend used for 30 s
# (BROKER_TARGET_IDLE_MS) still ends, its connections closed.  helper-153
# saw the first version keep an idle target's connections open for good.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

plan skip_all => 'the broker\'s targets (broker mode)' unless broker_mode();

my ($primary, undef, $sentinels) = sentinel_deployment('it');
my $node = sentinel_node('it', $sentinels, "redsem.connect_timeout = '1s'\n");

# the broker's connections to the primary (its keeper's have their own name)
my $broker_links = sub {
	scalar(grep { /name=\S*:broker/ } split /\n/, ($primary->cli('CLIENT', 'LIST') // ''));
};
$node->safe_psql('postgres', q{SELECT redsem_release('it_one', redsem_acquire('it_one', 1, lease => '2 s'))});
cmp_ok($broker_links->(), '>=', 1, 'the broker has a connection to the primary');
my $t0 = time;
ok(wait_until(60, sub { $broker_links->() == 0 }),
	'a target no backend used for 30 s ends, though its sentinels are asked meanwhile');
note sprintf('ended %.1f s after its last use', time - $t0);
cmp_ok(time - $t0, '>=', 25, '... not before its 30 s');
node_log_is_clean($node);
done_testing();
