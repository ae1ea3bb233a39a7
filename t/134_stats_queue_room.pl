
# 134_stats_queue_room.pl - statement queues' rows in redsem_stats have room
# of their own (64, beyond redsem.max_tracked_semaphores), and a dropped
# queue's row gives its room up when another queue needs it (helper-161: the
# room of 64 queues created and dropped over a server's life was never
# given back, and every later queue counted in the NULL row, its
# redsem_queues counts at 0).  The dropped queue's counts go to the NULL
# row: nothing counted is lost.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $redis = RedsemTest::Redis->new;
my $node = create_node('qroom', $redis, "redsem.max_tracked_semaphores = 16\nredsem.queue_poll_interval = '100ms'\n");
$node->safe_psql('postgres', q{CREATE ROLE quser LOGIN});

# the ordinary names fill their room (16 rows, the rest in the NULL row)
$node->safe_psql('postgres',
	q{SELECT count(redsem_release('n' || i, redsem_acquire('n' || i, 1, '5 s'))) FROM generate_series(1, 20) i});
is($node->safe_psql('postgres', q{SELECT count(*) FROM redsem_stats WHERE name IS NOT NULL}), '16',
	'ordinary names have 16 rows');

# 64 queues, each counted once (their room is full), then dropped
$node->safe_psql('postgres',
	q{SELECT count(redsem_create_queue('q' || i, 'active_statements=5')) FROM generate_series(1, 64) i});
ok(defined wait_until(10, sub { $node->safe_psql('postgres', q{SELECT count(*) FROM redsem_queues}) eq '64' }),
	'the 64 queues are applied');
$node->safe_psql('postgres',
	q{SELECT count(redsem_release('queue:q' || i, redsem_acquire('queue:q' || i, 5, '5 s'))) FROM generate_series(1, 64) i});
is($node->safe_psql('postgres', q{SELECT count(*) FROM redsem_stats WHERE name LIKE 'queue:%'}), '64',
	'each queue has a row of its own');
my $before = $node->safe_psql('postgres', q{SELECT sum(acquired) FROM redsem_stats});
$node->safe_psql('postgres', q{SELECT count(redsem_drop_queue('q' || i)) FROM generate_series(1, 64) i});
ok(defined wait_until(10, sub { $node->safe_psql('postgres', q{SELECT count(*) FROM redsem_queues}) eq '0' }),
	'the queues are dropped');

# a queue made later, run by a role it governs: a row of its own, and
# redsem_queues counts its statements
$node->safe_psql('postgres', q{SELECT redsem_create_queue('later', 'active_statements=2')});
$node->safe_psql('postgres', q{ALTER ROLE quser SET redsem.queue = 'later'});
ok(defined wait_until(10, sub { $node->safe_psql('postgres', q{SELECT count(*) FROM redsem_queues WHERE name = 'later'}) eq '1' }),
	'a later queue is applied');
my $stmt = q{SELECT count(*) FROM generate_series(1, 1000) g WHERE pg_sleep(0) IS NOT NULL;};
$node->safe_psql('postgres', "$stmt $stmt", extra_params => [ '-U', 'quser' ]);
is($node->safe_psql('postgres', q{SELECT admitted FROM redsem_queues WHERE name = 'later'}), '2',
	'redsem_queues counts the later queue\'s 2 statements');
is($node->safe_psql('postgres', q{SELECT acquired FROM redsem_stats WHERE name = 'queue:later'}), '2',
	'and it has a row of its own in redsem_stats');
is($node->safe_psql('postgres', q{SELECT sum(acquired) FROM redsem_stats}), $before + 2,
	'the dropped queue whose room it took gave its counts to the NULL row: nothing counted is lost');
cmp_ok($node->safe_psql('postgres', q{SELECT count(*) FROM redsem_stats}), '<=', 16 + 64 + 1,
	'the table stays within its room');

# a session in a long statement whose view of the queues predates a queue
# counted since never gives that queue's row away (helper-164): the room
# is full (live queues and one dropped queue's row, which the new queue
# takes), and the session, needing room for a queue it knows, finds none
$node->safe_psql('postgres',
	q{SELECT count(redsem_create_queue('r' || i, 'active_statements=5')) FROM generate_series(1, 62) i});
$node->safe_psql('postgres', q{SELECT redsem_create_queue('x', 'active_statements=5')});
ok(defined wait_until(10, sub { $node->safe_psql('postgres', q{SELECT count(*) FROM redsem_queues}) eq '64' }),
	'62 more queues and x are applied');
$node->safe_psql('postgres',
	q{SELECT count(redsem_release('queue:r' || i, redsem_acquire('queue:r' || i, 5, '5 s'))) FROM generate_series(1, 62) i});
is($node->safe_psql('postgres', q{SELECT count(*) FROM redsem_stats WHERE name LIKE 'queue:%'}), '64',
	'the queues\' room is full: later, r1-r62 and one dropped queue\'s row');
my $stale = RedsemTest::Session->new($node, name => 'stale');
$stale->send(q{SELECT pg_sleep(4), redsem_release('queue:x', redsem_acquire('queue:x', 5, '5 s'));});
sleep 1;
# (64 queues at most: r62 goes, its row with it for the sessions that saw
# the drop, but not for the stale one)
$node->safe_psql('postgres', q{SELECT redsem_drop_queue('r62')});
$node->safe_psql('postgres', q{SELECT redsem_create_queue('y', 'active_statements=5')});
ok(defined wait_until(10, sub { $node->safe_psql('postgres', q{SELECT count(*) FROM redsem_queues WHERE name = 'y'}) eq '1' }),
	'y is made while the stale session sleeps');
$node->safe_psql('postgres', q{SELECT redsem_release('queue:y', redsem_acquire('queue:y', 5, '5 s'))});
is($node->safe_psql('postgres', q{SELECT acquired FROM redsem_stats WHERE name = 'queue:y'}), '1',
	'y takes the dropped queue\'s room');
my ($out, $err) = $stale->wait_done(30);
like($out // '', qr/\|t$/, 'the stale session counts x') or diag($err);
is($node->safe_psql('postgres', q{SELECT acquired FROM redsem_stats WHERE name = 'queue:y'}), '1',
	'y, unknown to the stale session but counted since its view was made, keeps its row');
is($node->safe_psql('postgres', q{SELECT count(*) FROM redsem_stats WHERE name = 'queue:x'}), '0',
	'x, with no room left, counted in the NULL row');
node_log_is_clean($node);
$node->stop;
done_testing();
