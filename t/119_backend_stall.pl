# 119_backend_stall.pl - a backend stalled (SIGSTOP here; in life starved of
# CPU, or swapping) between starting a call and sending it does not blame a
# Redis that answers at once: Redis gets at least REDIS_ANSWER_FLOOR_MS
# from the write (src/timing.h).  From helper-134's fault-injection probe:
# before, about half of 1.3-s pauses of a try-acquire loop (command
# timeout 1 s) ended in 08006 "did not answer within 1000 ms".
#
# A broker stopped past its own deadline for Redis's answer
# (redsem.command_timeout plus BROKER_TIMEOUT_MARGIN_MS; broker mode, its
# polling off so that the stop finds it in its wait) reads what Redis
# answered meanwhile instead of calling it silence: before, it closed its
# connection to Redis ("no answer within redsem.command_timeout") and with
# it the link of every backend of that Redis.  (The backend whose call was
# under way when the broker stopped has its own 08006 by then: it waits
# for the broker only redsem.command_timeout, and cannot tell a stopped
# broker from a frozen path to Redis.)  Once at random moments under a
# loop, once in a fixed order with an answer larger than one read waiting
# (helper-137: the look reads it whole, at once).

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

# Stop process $pid for $secs at random moments (up to 0.3 s apart) for
# about $for seconds
sub pause_at_random
{
	my ($pid, $secs, $for) = @_;
	my ($pauses, $end) = (0, time + $for);
	while (time < $end)
	{
		usleep(int(rand(300_000)));
		kill 'STOP', $pid;
		sleep_full($secs);
		kill 'CONT', $pid;
		$pauses++;
	}
	note("$pauses pauses of $secs s");
	return;
}

my $redis = RedsemTest::Redis->new;
my $node = create_node('stall', $redis, "redsem.command_timeout = 1000\n");
my $stall_loop = <<'SQL';
CREATE PROCEDURE stall_loop(n int) LANGUAGE plpgsql AS $$
DECLARE id text;
BEGIN
  FOR i IN 1 .. n LOOP
    BEGIN
      id := redsem_acquire('st', 3, '2 s', wait => '0');
      IF id IS NOT NULL THEN PERFORM redsem_release('st', id); END IF;
    EXCEPTION WHEN OTHERS THEN
      RAISE WARNING 'stall_loop: % %', SQLSTATE, SQLERRM;
    END;
  END LOOP;
END $$;
SQL
$node->safe_psql('postgres', $stall_loop);

my $s = RedsemTest::Session->new($node, name => 'stalled');
$s->send("CALL stall_loop(100000000);");
my $pid = $s->backend_pid;
pause_at_random($pid, 1.3, 12);
$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
$s->wait_done(30);
my @errors = slurp_file($node->logfile) =~ /WARNING:  stall_loop: ([^\n]{0,160})/g;
is(join("\n", @errors), '', 'a backend paused past its command timeout never reports a healthy Redis as silent');
# (the cancel may land between an acquire and its release: the session
# holds that slot until it ends)
$s->quit;
ok(defined wait_until(10, sub { $redis->zcard('st', 'owner') == 0 }), 'no slot left taken once the session ended')
  or diag(join(' ', $redis->cli('ZRANGE', 'redsem:{st}:owner', 0, -1, 'WITHSCORES')));
node_log_is_clean($node, 'no crash, no assertion failure');
$node->stop;

###########################################################################
note 'a broker stopped past its deadline reads what Redis answered';

my $bnode = create_node('bstall', $redis, <<'EOC');
redsem.command_timeout = 1000
redsem.connection_mode = broker
redsem.broker_poll = 0
EOC
$bnode->safe_psql('postgres', $stall_loop);
my $idle = RedsemTest::Session->new($bnode, name => 'idle');
is($idle->query_ok(q{SELECT redsem_acquire('st2', 1, '60 s') IS NOT NULL;}), 't',
	'an idle session holds a slot through the broker');
my $bs = RedsemTest::Session->new($bnode, name => 'looping');
$bs->send("CALL stall_loop(100000000);");
my $broker = broker_pid_of($bnode);
ok(defined $broker, 'the broker runs');
my $off = -s $bnode->logfile;
pause_at_random($broker, 2.3, 10);
is(broker_pid_of($bnode), $broker, 'the same broker all along');
$bnode->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $bs->backend_pid . ')');
$bs->wait_done(30);
my $log = slurp_file($bnode->logfile, $off);
my @closed = $log =~ /(redsem broker closed its connection to Redis[^\n]*)/g;
is(join("\n", @closed), '', 'the broker kept its connection to Redis: what Redis answered was read');
# (the broker paused at random: a call timed out while it was stopped says so)
@errors = grep { !/^08006 (?:Redis at .* did not answer within 1000 ms$|the redsem broker \(process $broker\) passed on no answer of Redis at )/ }
  $log =~ /WARNING:  stall_loop: ([^\n]{0,160})/g;
is(join("\n", @errors), '', 'the looping session saw nothing but its own 08006 while the broker was stopped');

# The same with an answer larger than one read (16 kB) waiting, in a fixed
# order: Redis stopped, a call sent on to it, the broker stopped, Redis
# let go (it answers), the broker let go past its deadline
$bnode->safe_psql('postgres', q{DO $$ BEGIN FOR i IN 1 .. 600 LOOP
	PERFORM redsem_set_limit('a_semaphore_with_a_rather_long_name_to_fill_the_index_' || i, 1);
END LOOP; END $$;});
my $big = RedsemTest::Session->new($bnode, name => 'big');
is($big->query_ok(q{SELECT count(*) >= 600 FROM redsem_semaphores();}), 't',
	'600 stored limits: the index that redsem_semaphores() reads first is some 40 kB');
$off = -s $bnode->logfile;
$redis->freeze;
$big->send(q{SELECT count(*) FROM redsem_semaphores();});
usleep(300_000);
kill 'STOP', $broker;
$redis->thaw;
sleep_full(2.3);
kill 'CONT', $broker;
my (undef, $err) = $big->wait_done(30);
like($err, qr/08006|did not answer/, 'the call under way got its own 08006 (it waited 1 s for the broker)');
$log = slurp_file($bnode->logfile, $off);
@closed = $log =~ /(redsem broker closed its connection to Redis[^\n]*)/g;
is(join("\n", @closed), '', 'the broker read the large answer that waited: it kept its connection to Redis');
is($big->query_ok(q{SELECT count(*) >= 600 FROM redsem_semaphores();}), 't', 'the next call is served');
$big->quit;
is($idle->query_ok(q{SELECT redsem_release('st2', (SELECT id FROM redsem_held() WHERE name = 'st2'));}), 't',
	'the idle session gives its slot back on its link of before');
$bs->quit;
$idle->quit;
ok(defined wait_until(10, sub { $redis->zcard('st', 'owner') == 0 }), 'no slot left taken once the session ended');
node_log_is_clean($bnode, 'no crash, no assertion failure');
$bnode->stop;
$redis->stop;
done_testing();
