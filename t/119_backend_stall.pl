# 119_backend_stall.pl - a backend stalled (SIGSTOP here; in life starved of
# CPU, or swapping) between starting a call and sending it does not blame a
# Redis that answers at once: Redis gets at least REDIS_ANSWER_FLOOR_MS
# from the write (src/timing.h).  From helper-134's fault-injection probe:
# before, about half of 1.3-s pauses of a try-acquire loop (command
# timeout 1 s) ended in 08006 "did not answer within 1000 ms".

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
my $node = create_node('stall', $redis, "redsem.command_timeout = 1000\n");
$node->safe_psql('postgres', <<'SQL');
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

my $s = RedsemTest::Session->new($node, name => 'stalled');
$s->send("CALL stall_loop(100000000);");
my $pid = $s->backend_pid;
my ($pauses, $end) = (0, time + 12);
while (time < $end)
{
	usleep(int(rand(300_000)));
	kill 'STOP', $pid;
	sleep_full(1.3);
	kill 'CONT', $pid;
	$pauses++;
}
$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
$s->wait_done(30);
my @errors = slurp_file($node->logfile) =~ /WARNING:  stall_loop: ([^\n]{0,160})/g;
note("$pauses pauses of 1.3 s");
is(join("\n", @errors), '', 'a backend paused past its command timeout never reports a healthy Redis as silent');
# (the cancel may land between an acquire and its release: the session
# holds that slot until it ends)
$s->quit;
ok(defined wait_until(10, sub { $redis->zcard('st', 'owner') == 0 }), 'no slot left taken once the session ended')
  or diag(join(' ', $redis->cli('ZRANGE', 'redsem:{st}:owner', 0, -1, 'WITHSCORES')));
node_log_is_clean($node, 'no crash, no assertion failure');
$node->stop;
$redis->stop;
done_testing();
