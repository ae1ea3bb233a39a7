
# 114_caught_cancel.pl - a holder that catches the cancel of a lost slot
# and runs on is terminated (src/escalate.c).
#
# Under redsem.on_slot_lost = cancel the keeper cancels the statement of a
# holder whose slot is lost.  PL/pgSQL that catches query_canceled by name
# could run on, beside the holder that takes the slot next.  The keeper
# watches the backends it cancelled: one whose statement still runs
# REDSEM_STOP_ESCALATE_MS (2 s) after the cancel, without taking a slot of
# that semaphore again, is terminated.  Catch and retry, and a statement
# that ends after the catch, are left alone.
#
# Timing rule: leases are 3 s, so the keeper finds the deleted keys within
# about a second; the bounds checked allow 10 s, and the statements that
# must not be cut short end by themselves within 8 s.

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
my $node = create_node('caught', $redis, "redsem.queues = 'q114: active_statements=1'\n");
$node->safe_psql('postgres', q{CREATE ROLE app LOGIN;
CREATE ROLE queued LOGIN; ALTER ROLE queued SET redsem.queue = 'q114';
CREATE FUNCTION catcher() RETURNS void LANGUAGE plpgsql AS $$ BEGIN
  LOOP
    BEGIN
      PERFORM pg_sleep(0.1);
    EXCEPTION WHEN query_canceled THEN
      RAISE WARNING 'caught: %', SQLERRM;
    END;
  END LOOP;
END $$;});

sub session { return RedsemTest::Session->new($node, name => $_[0], user => $_[1] // 'app'); }

# Delete every key of semaphore $sem, as a Redis that lost them
sub forget
{
	my ($sem) = @_;
	$redis->cli('DEL', $_) foreach $redis->scan_keys("redsem:{$sem}:*");
	return;
}

# Wait until $sem has a holder in Redis
sub held { my ($sem) = @_; return wait_until(10, sub { $redis->zcard($sem, 'owner') == 1 }); }

###########################################################################
note 'catch the cancel and run on: terminated';
{
	my $s = session('runs_on');
	$s->send(q{DO $$ BEGIN
  PERFORM redsem_acquire('esc_on', 1, '3 s');
  LOOP
    BEGIN
      PERFORM pg_sleep(0.1);
    EXCEPTION WHEN query_canceled THEN
      RAISE WARNING 'caught: %', SQLERRM;
    END;
  END LOOP;
END $$;});
	ok(held('esc_on'), 'the holder runs under its slot');
	my $pid = $s->backend_pid;
	forget('esc_on');
	my $forgot = time;
	ok($s->wait_exit(20), 'the session ended');
	my $err = $s->stderr_so_far;
	like($err, qr/caught: the slot of semaphore "esc_on" was lost/, 'the code caught the cancel');
	like($err, qr/terminating connection due to administrator command/, 'it was terminated');
	cmp_ok(time - $forgot, '<', 10, 'within the lease and the escalation delay');
	like(slurp_file($node->logfile),
		qr/redsem keeper terminated process $pid: it ran on after its statement was cancelled for the lost slot of semaphore "esc_on"/,
		'the server log says why');
}

###########################################################################
note 'catch the cancel, back off, take the slot again: left alone';
{
	my $s = session('retries');
	$s->send(q{DO $$ DECLARE n int := 0; BEGIN
  PERFORM redsem_acquire('esc_retry', 1, '3 s');
  LOOP
    BEGIN
      PERFORM pg_sleep(0.1);
      n := n + 1;
      EXIT WHEN n > 60;
    EXCEPTION WHEN query_canceled THEN
      RAISE WARNING 'caught: %', SQLERRM;
      PERFORM pg_sleep(0.5);
      PERFORM redsem_acquire('esc_retry', 1, '3 s');
    END;
  END LOOP;
END $$; SELECT 'done';});
	ok(held('esc_retry'), 'the holder runs under its slot');
	forget('esc_retry');
	my ($out, $err) = $s->wait_done(30);
	like($err // '', qr/caught: the slot of semaphore "esc_retry" was lost/, 'the code caught the cancel');
	unlike($err // '', qr/terminating connection/, 'the session was not terminated');
	is($out, 'done', 'the statement ran to its end under the slot it took again');
	is($s->query_ok('SELECT 1;'), '1', 'the session goes on');
	$s->quit;
}

###########################################################################
note 'catch the cancel and end the statement; the next one runs long: left alone';
{
	my $s = session('ends');
	$s->send(q{DO $$ BEGIN
  PERFORM redsem_acquire('esc_end', 1, '3 s');
  PERFORM pg_sleep(30);
EXCEPTION WHEN query_canceled THEN
  RAISE WARNING 'caught: %', SQLERRM;
END $$; SELECT pg_sleep(5); SELECT 'done';});
	ok(held('esc_end'), 'the holder runs under its slot');
	forget('esc_end');
	my ($out, $err) = $s->wait_done(30);
	like($err // '', qr/caught: the slot of semaphore "esc_end" was lost/, 'the code caught the cancel');
	unlike($err // '', qr/terminating connection/, 'the session was not terminated');
	like($out // '', qr/done/, 'the next statement ran to its end');
	$s->quit;
}

###########################################################################
note 'the same, in one Query message with the statement after it: left alone';
{
	my $s = session('one_query');
	# (psql sends statements joined by \; as one Query: one query_start)
	$s->send(q{DO $$ BEGIN
  PERFORM redsem_acquire('esc_one', 1, '3 s');
  PERFORM pg_sleep(30);
EXCEPTION WHEN query_canceled THEN
  RAISE WARNING 'caught: %', SQLERRM;
END $$ \; SELECT pg_sleep(5) \; SELECT 'done';});
	ok(held('esc_one'), 'the holder runs under its slot');
	forget('esc_one');
	my ($out, $err) = $s->wait_done(30);
	like($err // '', qr/caught: the slot of semaphore "esc_one" was lost/, 'the code caught the cancel');
	unlike($err // '', qr/terminating connection/, 'the session was not terminated');
	like($out // '', qr/done/, 'the statement after it ran to its end');
	$s->quit;
}

###########################################################################
note "a statement queue's statement that catches the cancel: terminated";
{
	my $s = session('queued', 'queued');
	$s->send(q{SELECT catcher();});
	ok(held('queue:q114'), 'the statement runs under its queue slot');
	forget('queue:q114');
	ok($s->wait_exit(20), 'the session ended');
	my $err = $s->stderr_so_far;
	like($err, qr/caught: the slot of semaphore "queue:q114" was lost/, 'the code caught the cancel');
	like($err, qr/terminating connection due to administrator command/, 'it was terminated');
}

###########################################################################
note 'a slot of another semaphore held on does not count: terminated';
{
	my $s = session('two');
	$s->send(q{DO $$ DECLARE n int := 0; BEGIN
  PERFORM redsem_acquire('esc_two', 2, '3 s');
  PERFORM redsem_acquire('esc_two_other', 1, '3 s');
  LOOP
    BEGIN
      PERFORM pg_sleep(0.1);
      n := n + 1;
      EXIT WHEN n > 300;
    EXCEPTION WHEN query_canceled THEN
      RAISE WARNING 'caught: %', SQLERRM;
    END;
  END LOOP;
END $$; SELECT 'done';});
	ok(held('esc_two_other'), 'the holder runs under its slots');
	forget('esc_two_other');
	my $forgot = time;
	ok($s->wait_exit(20), 'the session ended');
	my $err = $s->stderr_so_far;
	like($err, qr/caught: the slot of semaphore "esc_two_other" was lost/, 'the code caught the cancel');
	like($err, qr/terminating connection/, 'a slot of another semaphore does not count: it was terminated');
	cmp_ok(time - $forgot, '<', 10, 'within the lease and the escalation delay');
}

$node->stop;
done_testing();
