
# 113_queue_own_timeouts.pl - a role cannot make its statement queue's Redis
# "fail" with its own timeouts.  With on_redis_error=run a statement runs
# without a slot when Redis cannot be used; redsem.connect_timeout and
# redsem.command_timeout are settable by any session, and a wait in line
# (a BLPOP answered a little after its own timeout) under a command
# timeout of 1 ms looked like a Redis that does not answer: the statement
# ran unqueued, and those after it for 5 s too (review helper-60).  Now a
# queue's acquire uses at least the server's values.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $redis = RedsemTest::Redis->new;
# Redis 20 ms away (bench/delay_proxy.pl): a connection's set-up takes more
# than 1 ms, less than the server's redsem.connect_timeout
my $sock = PostgreSQL::Test::Utils::tempdir_short() . '/far.sock';
my $proxy = IPC::Run::start(
	[ 'perl', "$FindBin::RealBin/../bench/delay_proxy.pl", $sock, $redis->socket, 20 ],
	'<', '/dev/null', '>', "$PostgreSQL::Test::Utils::log_path/113_proxy.log", '2>&1');
ok(defined wait_until(10, sub { -S $sock }), 'the delay proxy listens');
my $node = create_node('qot', $redis, "redsem.unix_socket = '$sock'\n");
my $admin = RedsemTest::Session->new($node, name => 'admin');
$admin->query_ok(q{SELECT redsem_create_queue('qrun', 'active_statements=1 max_wait=2s on_redis_error=run');
	CREATE ROLE mallory LOGIN; ALTER ROLE mallory SET redsem.queue = 'qrun';});
my $slot = $admin->query_ok(q{SELECT redsem_acquire('queue:qrun', lease => '60 s');});
ok($slot ne '', 'the queue is full (its one slot taken)');

my $m = RedsemTest::Session->new($node, name => 'mallory', user => 'mallory');
# Its link (to Redis, or to the broker) made under a connect_timeout of
# 1 ms, by a call outside the queue (a DO block is a utility statement, and
# what runs inside it is nested): behind the broker, the broker opens what
# that link's calls need within the link's connect_timeout, so a queue's
# acquire must raise it there too (REDSEM.TIMEOUT)
# Every link cut (behind the broker a new broker, with no connection to
# Redis yet); the admin's next call opens the broker's shared one again, so
# mallory's call outside the queue finds it, and its wait in line needs the
# broker to open a connection for it
drop_links($redis, $node);
ok(wait_until(15, sub { my ($out) = $admin->query(q{SELECT redsem_release('warm', redsem_acquire('warm', 5));}, 10); ($out // '') eq 't' }),
	'the admin reaches Redis again');
$m->query_ok(q{SET redsem.connect_timeout = 1;});
# (in direct mode its own connection cannot be made within 1 ms: the
# queue's acquire makes it)
$m->query_ok(q{DO $$ BEGIN PERFORM redsem_release('elsewhere', redsem_acquire('elsewhere', 5));
	EXCEPTION WHEN OTHERS THEN NULL; END $$;});
$m->query_ok(q{SET redsem.command_timeout = 1;});
for my $i (1 .. 2)
{
	my ($out, $err) = $m->query(q{SELECT pg_sleep(0.01);}, 30);
	unlike($err, qr/runs without a slot/, "statement $i with the session's timeouts at 1 ms: not run unqueued");
	like($err, qr/55P03.*could not enter redsem queue "qrun"/s, "... it waited its max_wait and was refused (55P03)");
}
is($admin->query_ok(q{SELECT ran_unqueued FROM redsem_queues WHERE name = 'qrun';}) // '', '0',
	'no statement of the queue ran unqueued');
is($m->query_ok(q{SHOW redsem.command_timeout;}), '1ms', "the session's own value is left as it set it");

$admin->query_ok(qq{SELECT redsem_release('queue:qrun', '$slot');});
is($m->query_ok(q{SELECT 1 FROM (SELECT pg_sleep(0)) s;}), '1', 'once the slot is free, its statement runs (queued)');

$m->quit;
$admin->quit;
$node->stop;
$proxy->kill_kill;
done_testing();
