
# 025_keeper_batches.pl - the keeper refreshes many holds in few commands
# and round trips, and one semaphore's failure stays with its holds.
#
# Three sessions hold 900 slots with 1 s leases over four semaphores.  For
# several seconds (many times the lease) every slot stays held, and the
# keeper's cycles (logged at DEBUG1) refresh them with one script call per
# semaphore and 128 holds, all in one round trip.  Then the keys of one
# semaphore are made the wrong type: its holds fail, alone, while the
# others are still refreshed in the same batches.  Then Redis forgets the
# library (FUNCTION FLUSH): the keeper loads it again and carries on.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use List::Util qw(max sum0);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $redis = RedsemTest::Redis->new;
my $node = create_node('kb', $redis, "redsem.max_tracked_holds = 2048\nlog_min_messages = debug1\n");
my %s = map { $_ => RedsemTest::Session->new($node, name => $_) } qw(s1 s2 s3);

# s1: 300 slots of kb_a; s2: 300 of kb_b; s3: 150 of kb_c and 150 of kb_d
$s{s1}->query_ok(q{SELECT count(redsem_acquire('kb_a', 1000, '1 s')) FROM generate_series(1, 300);});
$s{s2}->query_ok(q{SELECT count(redsem_acquire('kb_b', 1000, '1 s')) FROM generate_series(1, 300);});
# (kb_d's holds go bad below: watched, not stopped, so that its session
# can show them; t/080 tests the stops)
$s{s3}->query_ok('SET redsem.on_slot_lost = warn;');
$s{s3}->query_ok(q{SELECT count(redsem_acquire('kb_' || (CASE WHEN g % 2 = 0 THEN 'c' ELSE 'd' END), 1000, '1 s')) FROM generate_series(1, 300) g;});

sub held_of
{
	my ($sem) = @_;
	return $node->safe_psql('postgres', qq{SELECT permits_held FROM redsem_semaphore('$sem')});
}

my $log_from = -s $node->logfile;
usleep(4_000_000);
is(join(' ', map { held_of("kb_$_") } qw(a b c d)), '300 300 150 150',
	'after 4 s (four 1 s leases) all 900 slots are still held');

# the keeper's cycles since
my @cycles;
foreach my $line (split /\n/, slurp_file($node->logfile, $log_from))
{
	push @cycles, [ $1, $2, $3, $4 ]
	  if $line =~ /redsem keeper: (\d+) hold\(s\) refreshed or released with (\d+) command\(s\) in (\d+) round trip\(s\), (\d+) ms/;
}
note scalar(@cycles) . ' keeper cycles with Redis work: '
  . join(', ', map { "$_->[0] holds/$_->[1] cmds/$_->[2] rt/$_->[3] ms" } @cycles[ 0 .. ($#cycles < 7 ? $#cycles : 7) ]);
cmp_ok(scalar(@cycles), '>=', 8, 'the keeper refreshed in at least 8 cycles (every third of a lease)');
my @full = grep { $_->[0] == 900 } @cycles;
ok(@full >= 1, 'in some cycles all 900 holds were due at once');
ok(!(grep { $_->[1] > 10 } @full), 'those took at most 10 script calls (3 + 3 + 2 + 2, 128 holds per call): '
	  . join(' ', map { $_->[1] } @full));
ok(!(grep { $_->[2] != 1 } @full), 'in one round trip each');
ok(!(grep { $_->[0] > 0 && $_->[2] > 1 } @cycles), 'no cycle needed more than one round trip');

note 'a semaphore whose keys are the wrong type fails alone, inside the same batches';

# (the log position first: the keeper may log the failure at once)
$log_from = -s $node->logfile;
$redis->cli('DEL', 'redsem:{kb_d}:timeout');
$redis->cli('SET', 'redsem:{kb_d}:timeout', 'not a zset');
usleep(2_500_000);
is(join(' ', map { held_of("kb_$_") } qw(a b c)), '300 300 150',
	'the other 750 slots are still kept alive');
my $errors = $node->safe_psql('postgres', q{SELECT count(*) FROM redsem_stats WHERE name = 'kb_d' AND redis_errors > 0});
is($errors, '1', 'kb_d counts Redis errors');
like(slurp_file($node->logfile, $log_from), qr/could not refresh the slot of semaphore "kb_d"/,
	'and the log names kb_d');
# (watched under policy warn: told once that their leases went unconfirmed)
my (undef, $warned) = $s{s3}->query('SELECT 1;');
like($warned, qr/WARNING:  01000: the slot of semaphore "kb_d" was lost\nDETAIL:  Redis had not confirmed .*\n?.* 149 other slot\(s\) of this session were lost as well/,
	'its session is warned once, for all 150 kb_d slots');
is($s{s3}->query_ok(q{SELECT count(*) FROM redsem_held() WHERE name = 'kb_d' AND NOT kept_alive AND keeper_error LIKE '%WRONGTYPE%';}),
	'150', 'redsem_held() shows all 150 kb_d holds as not kept alive, and why');
is($s{s3}->query_ok(q{SELECT count(*) FROM redsem_held() WHERE name = 'kb_c' AND kept_alive;}),
	'150', 'while the kb_c holds of the same session are');

$redis->cli('DEL', 'redsem:{kb_d}:timeout');

note 'after FUNCTION FLUSH the keeper loads the library again and goes on';

$log_from = -s $node->logfile;
$redis->cli('FUNCTION', 'FLUSH');
usleep(1_500_000);
is(join(' ', map { held_of("kb_$_") } qw(a b c)), '300 300 150',
	'the 750 slots are still kept alive');
unlike(slurp_file($node->logfile, $log_from), qr/could not refresh the slot of semaphore "kb_[abc]"/,
	'and none of their refreshes failed');
is($s{s1}->query_ok(q{SELECT count(*) FROM redsem_held() WHERE kept_alive;}), '300',
	'redsem_held() agrees');
$_->quit foreach values %s;
ok(wait_until(15, sub { $node->safe_psql('postgres', q{SELECT count(*) FROM redsem_holders('kb_a')}) eq '0' }),
	'the sessions ended: their slots are released');
node_log_is_clean($node);
$node->stop;
$redis->stop;
done_testing();
