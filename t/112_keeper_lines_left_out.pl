
# 112_keeper_lines_left_out.pl - the keeper's lines about single slots are
# limited (10 per 30 s), and the ones it leaves out are counted in the log.
#
# Redis forgets every slot of 14 holders at once (FLUSHALL, as a restart
# without persistence would): the keeper stops each holder (the default
# redsem.on_slot_lost, cancel), logs the first 10 stops, and once the 30 s
# are over says that it left 4 lines out.  Before, those 4 were counted only
# in the hint of a later failed refresh, if one came.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $N = 14;
my $redis = RedsemTest::Redis->new;
my $node = create_node('leftout', $redis);

my @s = map { RedsemTest::Session->new($node, name => "h$_") } 1 .. $N;
is($s[$_ - 1]->query_ok(qq{SELECT redsem_acquire('lo$_', 1, '3 s') IS NOT NULL;}), 't', "holder $_ holds a slot")
  foreach 1 .. $N;
my $log_at = -s $node->logfile;
$redis->cli('FLUSHALL');
my $stops = sub { scalar(() = substr(slurp_file($node->logfile), $log_at) =~ /redsem keeper (?:cancelled the statement of|terminated) process \d+/g) };
ok(wait_until(15, sub { $stops->() >= 10 }),
	'Redis forgot every slot: the keeper logs its stops');
RedsemTest::sleep_full(3);
is($stops->(), 10, '... the first 10 of them');
ok(wait_until(45, sub { substr(slurp_file($node->logfile), $log_at) =~ /redsem keeper left out (\d+) lines about single slots in the last 30 s/ }),
	'once the 30 s are over, the keeper says how many lines it left out');
my ($left) = substr(slurp_file($node->logfile), $log_at) =~ /redsem keeper left out (\d+) lines about single slots/;
is($left, $N - 10, '... the other ' . ($N - 10) . ' stops');

$_->quit foreach @s;
$node->stop;
node_log_is_clean($node);
$redis->stop;
done_testing();
