
# 136_queue_sessions.pl - a statement queue's slots are taken under
# the key prefix its definitions are read under (the server's), whatever
# the session's own redsem.key_prefix (helper-168: a database with its own
# prefix stored the queue's cap there once and kept it, so that
# redsem_alter_queue and redsem_drop_queue never reached it, and the queue
# had one cap per prefix).  Checked, in the mode of the run: the cap a
# changed definition gives holds for statements of such a database; no key
# is made under its prefix; redsem_queues in that database shows them.
# And a session whose role is dropped while it runs, with the role as its
# queue tenant, still queues its statements (they failed with 42704).

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
my $node = create_node('qprefix', $redis, "redsem.queue_poll_interval = '200ms'\n");
$node->safe_psql('postgres', q{
CREATE ROLE pr LOGIN;
CREATE DATABASE dp;
ALTER DATABASE dp SET redsem.key_prefix = 'dp:';
});
$node->safe_psql('dp', 'CREATE EXTENSION redsem');
$node->safe_psql('postgres', q{SELECT redsem_create_queue('qpc', 'active_statements=3')});
$node->safe_psql('postgres', q{ALTER ROLE pr SET redsem.queue = 'qpc'});
ok(defined wait_until(10, sub { $node->safe_psql('postgres', q{SELECT count(*) FROM redsem_queues WHERE name = 'qpc'}) eq '1' }),
	'the queue is applied');

# a first statement of the prefixed database, then the cap lowered to 1
$node->safe_psql('dp', 'SELECT pg_sleep(0.1)', extra_params => [ '-U', 'pr' ]);
$node->safe_psql('postgres', q{SELECT redsem_alter_queue('qpc', 'active_statements=1')});
# (and stored in Redis by the keeper: the test raced it under load, 1 in
# about 10 runs)
ok(defined wait_until(10, sub { $node->safe_psql('dp', q{SELECT cap FROM redsem_queues WHERE name = 'qpc'}) eq '1'
	  && ($redis->cli('HGET', 'redsem:{queue:qpc}:state', 'limit') // '') eq '1' }),
	'the lowered cap is applied');

# three statements at once in the prefixed database: one at a time
my @s = map { RedsemTest::Session->new($node, name => "p$_", dbname => 'dp', user => 'pr') } 1 .. 3;
$_->send('SELECT pg_sleep(1.5);') for @s;
my ($most, $shown) = (0, 0);
my %done;
my $until = time + 15;
while (time < $until && keys %done < 3)
{
	my $n = () = holders_of($redis, 'queue:qpc');
	$most = $n if $n > $most;
	my $r = $node->safe_psql('dp', q{SELECT running FROM redsem_queues WHERE name = 'qpc'});
	$shown = $r if $r > $shown;
	for my $i (0 .. 2)
	{
		$done{$i} = 1 if !$done{$i} && $s[$i]->wait_done(0);
	}
	usleep(100_000);
}
is(scalar(keys %done), 3, 'the three statements ended');
is($most, 1, 'at most one statement of the prefixed database ran at a time (the cap of the changed definition)');
is($shown, '1', 'redsem_queues in the prefixed database shows the running statement');
is_deeply([ $redis->scan_keys('dp:*') ], [], 'no key under the database\'s own prefix');
# (helper-169: the functions that name a semaphore acted, from such a
# session, on keys no queue uses)
my ($ret, $o, $e) = $node->psql('dp', q{SELECT redsem_set_limit('queue:qpc', 3)});
like($e, qr/semaphore "queue:qpc" is a statement queue's, whose slots are under key prefix "redsem:", not this session's "dp:"/,
	'an administrator\'s redsem_set_limit on the queue from the prefixed database is refused, saying why');
($ret, $o, $e) = $node->psql('dp', q{SELECT count(*) FROM redsem_holders('queue:qpc')});
like($e, qr/is a statement queue's/, '... as is redsem_holders');
is_deeply([ $redis->scan_keys('dp:*') ], [], '... and nothing is left under its prefix');

# dropped: its statements run at once, and nothing is left under either prefix
$node->safe_psql('postgres', q{SELECT redsem_drop_queue('qpc')});
ok(defined wait_until(10, sub { $node->safe_psql('dp', q{SELECT count(*) FROM redsem_queues}) eq '0' }),
	'the drop is applied');
my $t0 = time;
$_->send('SELECT pg_sleep(1);') for @s;
$_->wait_done(30) for @s;
cmp_ok(time - $t0, '<', 2.5, 'the statements ran at once');
is_deeply([ $redis->scan_keys('dp:*') ], [], 'still no key under the database\'s own prefix');
$_->quit for @s;

# right after a reload that reaches the same Redis another way (a symlink to
# its socket), before the keeper read the definitions with the new
# settings: still the server's prefix (helper-170: the session's own, for a
# moment, so that the cap split; 26 over the cap in 10 reloads)
$node->safe_psql('postgres', q{SELECT redsem_create_queue('qrl', 'active_statements=1')});
$node->safe_psql('postgres', q{ALTER ROLE pr SET redsem.queue = 'qrl'});
ok(defined wait_until(10, sub { $node->safe_psql('postgres', q{SELECT count(*) FROM redsem_queues WHERE name = 'qrl'}) eq '1' }),
	'another queue is applied');
my $alias = $redis->socket . '.alias';
symlink($redis->socket, $alias) or die "symlink: $!";
my $keeper = keeper_pid_of($node);
kill 'STOP', $keeper;
$node->safe_psql('postgres', "ALTER SYSTEM SET redsem.unix_socket = '$alias'");
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
usleep(300_000);
$node->safe_psql('dp', 'SELECT pg_sleep(0.1)', extra_params => [ '-U', 'pr' ]);
my @left = $redis->scan_keys('dp:*');
kill 'CONT', $keeper;
is_deeply(\@left, [], 'a statement right after a reload to the same Redis another way, the keeper not caught up: no key under the database\'s own prefix');
$node->safe_psql('postgres', 'ALTER SYSTEM RESET redsem.unix_socket');
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
$node->safe_psql('postgres', q{ALTER ROLE pr RESET redsem.queue; SELECT redsem_drop_queue('qrl')});

# a session whose role is dropped meanwhile, with the role as its tenant:
# its statements still queue (helper-168: each failed with 42704)
$node->safe_psql('postgres', q{
CREATE ROLE gone LOGIN;
SELECT redsem_create_queue('qt', 'active_statements=2');
ALTER ROLE gone SET redsem.queue = 'qt';
ALTER ROLE gone SET redsem.queue_tenant = '%u';
});
ok(defined wait_until(10, sub { $node->safe_psql('postgres', q{SELECT count(*) FROM redsem_queues WHERE name = 'qt'}) eq '1' }),
	'a queue with the role as tenant is applied');
my $g = RedsemTest::Session->new($node, name => 'gone', user => 'gone');
is($g->query_ok('SELECT 1 FROM pg_sleep(0.1);'), '1', 'its session runs a queued statement');
$node->safe_psql('postgres', 'DROP ROLE gone');
my ($gout, $gerr) = $g->query('SELECT 2 FROM pg_sleep(0.1);');
is("$gout|$gerr", '2|', 'after DROP ROLE, its next statement still runs, queued');
is($node->safe_psql('postgres', q{SELECT admitted FROM redsem_queues WHERE name = 'qt'}), '2',
	'both statements were admitted by the queue');
$g->quit;

# a queue removed from redsem.queues: its cap leaves Redis (helper-170: it
# stayed there for good, with no TTL)
$node->append_conf('postgresql.conf', "redsem.queues = 'cfgq: active_statements=2'\n");
$node->reload;
ok(defined wait_until(10, sub { ($redis->cli('HGET', 'redsem:{queue:cfgq}:state', 'limit') // '') eq '2' }),
	'a queue of redsem.queues: the keeper stores its cap');
$node->append_conf('postgresql.conf', "redsem.queues = ''\n");
$node->reload;
ok(defined wait_until(15, sub { ($redis->cli('HGET', 'redsem:{queue:cfgq}:state', 'limit') // '') eq '' }),
	'removed from redsem.queues: its cap leaves Redis');
like(slurp_file($node->logfile), qr/LOG:  redsem: statement queue "cfgq" is no longer in this server's redsem.queues: its cap of 2 was removed from Redis/,
	'... and the server log says so');

node_log_is_clean($node);
$node->stop;
done_testing();
