
# 042_deferred_release.pl - releases at the end of a statement or of a
# transaction go to Redis without waiting for the reply; the session reads
# it on its next call.
#
# Checked: the slot is free in Redis as soon as the statement or COMMIT
# returns, while this server's table says "releasing" until the session's
# next call reads the reply (then the release is counted and the entry
# gone); several releases at one COMMIT; redsem.await_release = on waits
# as before; the next command goes out behind a release whose reply is
# still owed (Redis paused), and both replies are read in order; a release
# lost with its connection (Redis paused, the connection killed before
# Redis ran it) is given again by the keeper long before the lease would
# end, and the session's next call goes on without an error; a connection
# Redis closed after answering the release is replaced by the next command
# without an error; a session that exits or is terminated with a reply
# unread leaves nothing behind; a fault before the send hands the slot to
# the keeper; a failed release is never retried under other connection
# settings (another Redis).

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $redis = RedsemTest::Redis->new;
my $node = create_node('dr', $redis, <<'EOC');
redsem.queues = 'one: active_statements=1 max_wait=30s'
redsem.command_timeout = 1000
EOC
$node->safe_psql('postgres', q{
CREATE ROLE queued LOGIN;
ALTER ROLE queued SET redsem.queue = 'one';
GRANT pg_monitor TO queued;
});

# Holders of a semaphore, as Redis has them
sub holders { return $redis->zcard($_[0], 'owner'); }

# This server's table entries of process $pid, as "name:state" lines
sub table_of { return server_holds_of($node, $_[0]); }

# released count of a semaphore in redsem_stats
sub released
{
	my ($sem) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce(sum(released), 0) FROM redsem_stats WHERE name = '$sem'");
}

###########################################################################
note 'a statement queue: the release goes out with the end of the statement';

my $q = RedsemTest::Session->new($node, name => 'queued', user => 'queued');
$q->query_ok('SELECT pg_sleep(0);');
my $qpid = $q->backend_pid;
is(holders('queue:one'), 0, 'the queue\'s semaphore is free as soon as the statement returned');
is(table_of($qpid), 'queue:one:releasing',
	'the table says releasing until the session reads the reply');
$q->query_ok('SELECT pg_sleep(0);');
is(table_of($qpid), 'queue:one:releasing', 'the next statement read it, and sent its own');
my $before = released('queue:one');
cmp_ok($before, '>=', 1, 'the releases read so far are counted');

###########################################################################
note 'COMMIT: every transaction-scoped slot, at once';

my $s = RedsemTest::Session->new($node, name => 's');
my $spid = $s->backend_pid;
$s->query_ok(q{
	BEGIN;
	SELECT redsem_acquire_xact('dr_a', 1, '60 s') IS NOT NULL;
	SELECT redsem_acquire_xact('dr_b', 2, '60 s') IS NOT NULL;
	SELECT redsem_acquire_xact('dr_c', 3, '60 s') IS NOT NULL;
	COMMIT;});
is(holders('dr_a') + holders('dr_b') + holders('dr_c'), 0,
	'the three slots are free in Redis when COMMIT returns');
is(table_of($spid), 'dr_a:releasing,dr_b:releasing,dr_c:releasing',
	'three replies still to read');
$s->query_ok('SELECT redsem_release_all();');
is(table_of($spid), '', 'the next call read them');
is(released('dr_a') + released('dr_b') + released('dr_c'), 3, 'and counted three releases');

###########################################################################
note 'redsem.await_release = on';

$s->query_ok(q{
	SET redsem.await_release = on;
	BEGIN;
	SELECT redsem_acquire_xact('dr_wait', 1, '60 s') IS NOT NULL;
	COMMIT;});
is(table_of($spid), '', 'the reply was read before COMMIT returned');
is(released('dr_wait'), 1, 'and counted');
$s->query_ok('RESET redsem.await_release;');

###########################################################################
note 'a connection setting changed between the release and its reply';

$s->query_ok(q{
	BEGIN;
	SELECT redsem_acquire_xact('dr_set', 1, '60 s') IS NOT NULL;
	COMMIT;
	SET redsem.database = 1;
	SELECT redsem_acquire('dr_set2', 1, '60 s') IS NOT NULL;
	SELECT redsem_release_all();
	RESET redsem.database;});
is(table_of($spid), '', 'the reply was read on the old connection before the new one');
is(released('dr_set'), 1, 'and counted');

###########################################################################
note 'a command goes out behind a release whose reply is still owed';

# Redis holds the release sent at COMMIT (CLIENT PAUSE WRITE), so its reply
# is still owed when the next call sends its acquire: that goes out at
# once, behind it (said at DEBUG2), instead of waiting for the reply first;
# once Redis runs both, the two replies are read in order.
$s->query_ok(q{
	BEGIN;
	SELECT redsem_acquire_xact('dr_behind', 1, '60 s') IS NOT NULL;});
$redis->cli('CLIENT', 'PAUSE', '5000', 'WRITE');
$s->query_ok('COMMIT;');
$s->send(q{SET client_min_messages = debug2;
	SELECT redsem_acquire('dr_behind2', 1, '60 s') IS NOT NULL;
	RESET client_min_messages;});
ok(defined $s->wait_stderr(qr/goes out behind 1 replies still owed/, 10),
	'the acquire is sent behind the owed release, without waiting for its reply');
$redis->cli('CLIENT', 'UNPAUSE');
my ($out, $err) = $s->wait_done(10);
is($out, 't', 'once Redis runs both, the acquire is served');
is(holders('dr_behind') . holders('dr_behind2'), '01', 'Redis has the one slot and not the other');
$s->query_ok('SELECT redsem_release_all();');
is(released('dr_behind'), 1, 'the release\'s reply was read and counted');
is(table_of($spid), '', 'nothing is left in the table');

###########################################################################
note 'a release lost with its connection';

$s->query_ok(q{
	BEGIN;
	SELECT redsem_acquire_xact('dr_lost', 1, '60 s') IS NOT NULL;});
$redis->cli('CLIENT', 'PAUSE', '3000', 'WRITE');
my $t0 = time;
$s->query_ok('COMMIT;');
cmp_ok(time - $t0, '<', 1, 'COMMIT did not wait for paused Redis');
# Redis holds the paused FCALL unread; killing the connection loses it
$redis->cli('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
$redis->cli('CLIENT', 'UNPAUSE');
is(holders('dr_lost'), 1, 'the release never ran: Redis still has the slot');
my $freed = wait_until(20, sub { holders('dr_lost') == 0 });
ok(defined $freed, 'the keeper released it again');
cmp_ok($freed // 99, '<', 10, 'within seconds (command_timeout + settle), not the 60 s lease');
($out, $err) = $s->query('SELECT redsem_release_all();');
is($err, '', 'the session\'s next call reads the broken connection without an error');
is($out, '0', 'and had nothing to release');
ok(defined wait_until(10, sub { table_of($spid) eq '' }), 'nothing is left in the table');
ok(slot_is_free('dr_lost'), 'the semaphore takes a new holder');

###########################################################################
note 'Redis closed the connection after it answered the release';

$s->query_ok(q{
	BEGIN;
	SELECT redsem_acquire_xact('dr_closed', 1, '60 s') IS NOT NULL;
	COMMIT;});
ok(defined wait_until(10, sub { holders('dr_closed') == 0 }), 'Redis ran the release');
$redis->cli('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
($out, $err) = $s->query(q{SELECT redsem_acquire('dr_closed2', 1, '60 s') IS NOT NULL;});
is($err, '', 'the next command reconnects without an error (the reply came, then the close)');
is($out, 't', 'and is served');
is(released('dr_closed'), 1, 'the release\'s reply was read and counted');
$s->query_ok('SELECT redsem_release_all();');
is(table_of($spid), '', 'nothing is left in the table');

sub slot_is_free
{
	my ($sem) = @_;
	return $node->safe_psql('postgres',
		"SELECT redsem_release('$sem', redsem_acquire('$sem', 1, '60 s', wait => '0 s'))") eq 't';
}

###########################################################################
note 'a session that ends with a reply unread';

my $e = RedsemTest::Session->new($node, name => 'exits');
my $epid = $e->backend_pid;
$e->query_ok(q{
	BEGIN;
	SELECT redsem_acquire_xact('dr_exit', 1, '60 s') IS NOT NULL;
	COMMIT;});
is(table_of($epid), 'dr_exit:releasing', 'a reply unread when the session quits');
$e->quit;
ok(defined wait_until(10, sub { table_of($epid) eq '' }), 'the exit read it');
is(released('dr_exit'), 1, 'and counted the release');

my $k = RedsemTest::Session->new($node, name => 'killed');
my $kpid = $k->backend_pid;
$k->query_ok(q{
	BEGIN;
	SELECT redsem_acquire_xact('dr_kill', 1, '60 s') IS NOT NULL;
	COMMIT;});
$node->safe_psql('postgres', "SELECT pg_terminate_backend($kpid)");
$k->wait_exit(10);
ok(defined wait_until(10, sub { table_of($kpid) eq '' }), 'a terminated session leaves no entry');
is(holders('dr_kill'), 0, 'nor a slot');

###########################################################################
note 'a fault before the release is sent';

($out, $err) = $s->query(q{
	BEGIN;
	SELECT redsem_acquire_xact('dr_fault', 1, '60 s') IS NOT NULL;
	SET redsem.inject_fault = 'release';
	COMMIT;
	RESET redsem.inject_fault;});
like($err, qr/WARNING:  01000: redsem could not release slots at the end of the transaction/,
	'the fault is a WARNING');
ok(defined wait_until(15, sub { holders('dr_fault') == 0 }), 'the keeper released the slot');
ok(defined wait_until(10, sub { table_of($spid) eq '' }), 'and nothing is left in the table');

###########################################################################
note 'a failed release is never retried on another Redis';

# taken in database 1, where the keeper (database 0) does not reach
($out, $err) = $s->query(q{
	SET redsem.database = 1;
	BEGIN;
	SELECT redsem_acquire_xact('dr_target', 1, '60 s') IS NOT NULL;
	SET redsem.inject_fault = 'release';
	COMMIT;
	RESET redsem.inject_fault;
	RESET redsem.database;
	SELECT redsem_release_all();});
like($err, qr/could not release slots at the end of the transaction/, 'the release failed');
is($redis->cli('-n', '1', 'ZCARD', 'redsem:{dr_target}:owner'), '1',
	'the next call, under database 0, did not release it there and forget it');
$s->query_ok(q{SET redsem.database = 1; SELECT redsem_release_all(); RESET redsem.database;});
is($redis->cli('-n', '1', 'ZCARD', 'redsem:{dr_target}:owner'), '0',
	'back under database 1, the next call releases it');
ok(defined wait_until(10, sub { table_of($spid) eq '' }), 'and nothing is left in the table');

###########################################################################
note 'a slot on another Redis is refused by release and refresh, not forgotten';

$s->query_ok(q{SET redsem.database = 1;
	SELECT redsem_acquire('dr_other', 1, '60 s') IS NOT NULL;
	RESET redsem.database;});
my $held_other = q{SELECT count(*) FROM redsem_held() WHERE name = 'dr_other';};
my $other_id = q{(SELECT id FROM redsem_held() WHERE name = 'dr_other')};
($out, $err) = $s->query("SELECT redsem_release('dr_other', $other_id);");
like($err, qr/ERROR:  55000: cannot release a slot of redsem semaphore "dr_other" taken on another Redis/,
	'under database 0, releasing the slot taken in database 1 is refused');
like($err, qr/HINT:  Set the connection settings back to release it/, 'with a hint');
($out, $err) = $s->query("SELECT redsem_refresh('dr_other', $other_id);");
like($err, qr/ERROR:  55000: cannot refresh a slot of redsem semaphore "dr_other" taken on another Redis/,
	'and so is refreshing it');
($out, $err) = $s->query('SELECT redsem_release_all();');
is($out, '0', 'redsem_release_all() releases nothing');
like($err, qr/WARNING:  55000: 1 redsem slot was taken on another Redis and is kept/, 'and says why');
is($s->query_ok($held_other), '1', 'the session still has the slot');
is($redis->cli('-n', '1', 'ZCARD', 'redsem:{dr_other}:owner'), '1', 'and Redis still counts it');
is($s->query_ok("SET redsem.database = 1; SELECT redsem_release('dr_other', $other_id); RESET redsem.database;"),
	't', 'back under database 1, it is released');
is($redis->cli('-n', '1', 'ZCARD', 'redsem:{dr_other}:owner'), '0', 'in Redis too');
is($s->query_ok($held_other), '0', 'and the session no longer has it');

$q->quit;
$s->quit;
node_log_is_clean($node, 'no crash');
$node->stop;
$redis->stop;
done_testing();
