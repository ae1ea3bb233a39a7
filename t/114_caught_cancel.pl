
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
      LOOP
        PERFORM pg_sleep(0.1);
      END LOOP;
    EXCEPTION WHEN query_canceled THEN
      RAISE WARNING 'caught: %', SQLERRM;
    END;
  END LOOP;
END $$;
CREATE TABLE deferred_t(x int);
CREATE TABLE esc_gate(tag text);
GRANT SELECT ON esc_gate TO app;
CREATE FUNCTION deferred_catcher() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
  LOOP
    BEGIN
      LOOP
        PERFORM pg_sleep(0.1);
      END LOOP;
    EXCEPTION WHEN query_canceled THEN
      RAISE WARNING 'caught: %', SQLERRM;
    END;
  END LOOP;
END $$;
CREATE CONSTRAINT TRIGGER deferred_catcher AFTER INSERT ON deferred_t DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION deferred_catcher();
GRANT ALL ON deferred_t TO app;
CREATE FUNCTION plan_catcher(sem text) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$ BEGIN
  PERFORM redsem_acquire(sem, 1, '3 s');
  LOOP
    BEGIN
      LOOP
        PERFORM pg_sleep(0.05);
      END LOOP;
    EXCEPTION WHEN query_canceled THEN
      RAISE WARNING 'caught: %', SQLERRM;
    END;
  END LOOP;
END $$;
CREATE FUNCTION catch_once(sem text) RETURNS text LANGUAGE plpgsql AS $$ BEGIN
  PERFORM redsem_acquire(sem, 1, '3 s');
  PERFORM pg_sleep(30);
  RETURN 'slept';
EXCEPTION WHEN query_canceled THEN
  RAISE WARNING 'caught: %', SQLERRM;
  RETURN 'caught';
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

# Start $sql in session $s, wait until it holds $sem, and make Redis forget
# $sem; when it forgot
sub run_and_forget
{
	my ($s, $sql, $sem) = @_;
	$s->send($sql);
	ok(held($sem), "the holder runs under its slot of $sem");
	forget($sem);
	return time;
}

# Check that session $s caught the cancel for $sem and was terminated for
# running on, soon after $forgot
sub check_terminated
{
	my ($s, $sem, $forgot, $tight) = @_;
	ok($s->wait_exit(20), 'the session ended');
	my $err = $s->stderr_so_far;
	# (a tight loop's cancel may land between two of its statements, outside
	# any executor call: PostgreSQL's own bare cancel, caught as such)
	my $bare = $tight ? '|caught: canceling statement due to user request' : '';
	like($err, qr/caught: the slot of semaphore "\Q$sem\E" was lost$bare/, 'the code caught the cancel');
	like($err, qr/FATAL:  57P01: terminating connection because it ran on after its statement was stopped for the lost slot of semaphore "\Q$sem\E"/,
		'it was terminated, and told why');
	cmp_ok(time - $forgot, '<', 10, 'within the lease and the escalation delay');
	return;
}

# Check that session $s caught the cancel for $sem, was left alone and
# printed what matches $done
sub check_left_alone
{
	my ($s, $sem, $done) = @_;
	my ($out, $err) = $s->wait_done(30);
	like($err // '', qr/caught: the slot of semaphore "\Q$sem\E" was lost/, 'the code caught the cancel');
	unlike($err // '', qr/terminating connection/, 'the session was not terminated');
	like($out // '', $done, 'the statement after the catch ran to its end');
	return;
}

# A DO block that takes $sems (name => limit) and sleeps in a loop that
# catches the cancel, at most $rounds rounds of 0.1 s (0: for ever);
# $on_catch runs after the catch.  (The loop is inside the block that
# catches: PL/pgSQL checks for interrupts before each statement, so a
# cancel that lands between two sleeps is raised there; with the block
# inside the loop, one raised between two rounds, before the block is
# entered, ended the DO uncaught, about once in 25 runs of this file)
sub catch_loop
{
	my ($sems, $rounds, $on_catch) = @_;
	my $takes = join('', map { "  PERFORM redsem_acquire('$_->[0]', $_->[1], '3 s');\n" } @$sems);
	my $exit = $rounds ? "        n := n + 1;\n        EXIT WHEN n > $rounds;\n" : '';
	return "DO \$\$ DECLARE n int := 0; BEGIN\n$takes  LOOP\n    BEGIN\n      LOOP\n        PERFORM pg_sleep(0.1);\n$exit"
	  . "      END LOOP;\n      EXIT;\n"
	  . "    EXCEPTION WHEN query_canceled THEN\n      RAISE WARNING 'caught: %', SQLERRM;\n"
	  . ($on_catch // '') . "    END;\n  END LOOP;\nEND \$\$;";
}

# A DO block that takes $sems (name => limit) and runs a tight loop of
# statements in a block that catches the cancel, for ever; $on_catch runs
# after the catch (the block holds the loop, so that a cancel lands in it,
# not between two tries)
sub tight_loop
{
	my ($sems, $on_catch) = @_;
	my $takes = join('', map { "  PERFORM redsem_acquire('$_->[0]', $_->[1], '3 s');\n" } @$sems);
	return "DO \$\$ BEGIN\n$takes  LOOP\n    BEGIN\n      LOOP\n        PERFORM 1;\n      END LOOP;\n"
	  . "    EXCEPTION WHEN query_canceled THEN\n      RAISE WARNING 'caught: %', SQLERRM;\n"
	  . ($on_catch // '') . "    END;\n  END LOOP;\nEND \$\$;";
}

# A DO block that takes $sem and runs a tight loop of statements in a
# block that catches the cancel once, then $after (no semicolon after it)
sub tight_once
{
	my ($sem, $after) = @_;
	return "DO \$\$ BEGIN\n  PERFORM redsem_acquire('$sem', 1, '3 s');\n  BEGIN\n    LOOP\n      PERFORM 1;\n"
	  . "    END LOOP;\n  EXCEPTION WHEN query_canceled THEN\n    RAISE WARNING 'caught: %', SQLERRM;\n  END;\n"
	  . ($after // '') . "END \$\$";
}

###########################################################################
note 'catch the cancel and run on: terminated';
{
	my $s = session('runs_on');
	my $forgot = run_and_forget($s, catch_loop([ [ 'esc_on', 1 ] ], 0), 'esc_on');
	my $pid = $s->backend_pid;
	check_terminated($s, 'esc_on', $forgot);
	like(slurp_file($node->logfile),
		qr/redsem keeper terminated process $pid: it ran on after its statement was stopped for the lost slot of semaphore "esc_on"/,
		'the server log says why');
}

###########################################################################
note 'catch the cancel, back off, take the slot again: left alone';
{
	my $s = session('retries');
	run_and_forget($s, catch_loop([ [ 'esc_retry', 1 ] ], 60,
		"      PERFORM pg_sleep(0.5);\n      PERFORM redsem_acquire('esc_retry', 1, '3 s');\n")
		  . " SELECT 'done';", 'esc_retry');
	check_left_alone($s, 'esc_retry', qr/^done$/);
	is($s->query_ok('SELECT 1;'), '1', 'the session goes on');
	$s->quit;
}

###########################################################################
note 'catch the cancel and end the statement; the next one runs long: left alone';
{
	my $s = session('ends');
	run_and_forget($s, q{DO $$ BEGIN
  PERFORM redsem_acquire('esc_end', 1, '3 s');
  PERFORM pg_sleep(30);
EXCEPTION WHEN query_canceled THEN
  RAISE WARNING 'caught: %', SQLERRM;
END $$; SELECT pg_sleep(5); SELECT 'done';}, 'esc_end');
	check_left_alone($s, 'esc_end', qr/done/);
	$s->quit;
}

###########################################################################
note 'the same, in one Query message with the statement after it: left alone';
{
	my $s = session('one_query');
	# (psql sends statements joined by \; as one Query: one query_start)
	run_and_forget($s, q{DO $$ BEGIN
  PERFORM redsem_acquire('esc_one', 1, '3 s');
  PERFORM pg_sleep(30);
EXCEPTION WHEN query_canceled THEN
  RAISE WARNING 'caught: %', SQLERRM;
END $$ \; SELECT pg_sleep(5) \; SELECT 'done';}, 'esc_one');
	check_left_alone($s, 'esc_one', qr/done/);
	$s->quit;
}

###########################################################################
note 'a SELECT whose function catches the cancel and returns; the next statement of its Query runs long: left alone';
{
	# (a query's end, not only a utility statement's, tells the keeper's
	# watch that the statement cancelled ended, src/guard.c)
	my $s = session('one_query_select');
	run_and_forget($s, q{SELECT catch_once('esc_sel') \; SELECT pg_sleep(5) \; SELECT 'done';}, 'esc_sel');
	check_left_alone($s, 'esc_sel', qr/done/);
	$s->quit;
}

###########################################################################
note 'a trigger fired at commit catches the cancel and runs on: terminated';
{
	# (the statement's own executor ended before the commit fired the
	# trigger: the queries the trigger runs end outside any other's call,
	# but the client's statement still runs)
	my $s = session('deferred');
	$s->query_ok("SELECT redsem_acquire('esc_deferred', 1, '3 s') IS NOT NULL;");
	my $forgot = run_and_forget($s, q{INSERT INTO deferred_t VALUES (1);}, 'esc_deferred');
	check_terminated($s, 'esc_deferred', $forgot);
}

###########################################################################
note 'a function the planner runs catches the cancel and runs on: terminated';
{
	# (an immutable function with a constant argument runs while the
	# statement is planned: its queries end inside the planning, not as
	# statements of the client's)
	my $s = session('planned');
	my $forgot = run_and_forget($s, q{SELECT plan_catcher('esc_plan');}, 'esc_plan');
	check_terminated($s, 'esc_plan', $forgot);
}

###########################################################################
note 'a second slot of the semaphore, held from before, does not end the watch: terminated';
{
	my $s = session('second');
	$s->send(q{DO $$ BEGIN
  RAISE WARNING 'lost id: %', redsem_acquire('esc_second', 2, '3 s');
  PERFORM redsem_acquire('esc_second', 2, '3 s');
  LOOP
    BEGIN
      LOOP
        PERFORM pg_sleep(0.1);
      END LOOP;
    EXCEPTION WHEN query_canceled THEN
      RAISE WARNING 'caught: %', SQLERRM;
    END;
  END LOOP;
END $$;});
	ok(defined $s->wait_stderr(qr/lost id: \S+/, 10), 'the holder runs under two slots of esc_second');
	ok(wait_until(10, sub { $redis->zcard('esc_second', 'owner') == 2 }), 'both taken');
	my ($id) = $s->stderr_so_far =~ /lost id: (\S+)/;
	$node->safe_psql('postgres', "SELECT redsem_force_release('esc_second', '$id')");
	check_terminated($s, 'esc_second', time);
}

###########################################################################
note "a statement queue's statement that catches the cancel: terminated";
{
	my $s = session('queued', 'queued');
	my $forgot = run_and_forget($s, q{SELECT catcher();}, 'queue:q114');
	check_terminated($s, 'queue:q114', $forgot);
}

###########################################################################
note 'a slot of another semaphore held on does not count: terminated';
{
	my $s = session('two');
	my $forgot = run_and_forget($s,
		catch_loop([ [ 'esc_two', 2 ], [ 'esc_two_other', 1 ] ], 300) . " SELECT 'done';",
		'esc_two_other');
	check_terminated($s, 'esc_two_other', $forgot);
}

###########################################################################
note 'a tight loop that catches: the stop is told once, never a bare cancel after it';
{
	# (its statements start so often that it finds the keeper's stop at one
	# of them, between the keeper's mark and its signal: the signal is then
	# not sent, and the escalation still ends the session; the block holds
	# the loop, so that a cancel lands in it, not between two tries; one
	# that lands between two of its statements is PostgreSQL's bare cancel,
	# caught as such: check_told_once)
	my $s = session('tight');
	my $forgot = run_and_forget($s, tight_loop([ [ 'esc_tight', 1 ] ]), 'esc_tight');
	check_terminated($s, 'esc_tight', $forgot, 'tight');
	check_told_once($s->stderr_so_far, 'tight');
}

###########################################################################
note 'the tight loop ends after the catch; the next statement of its Query runs long: left alone';
{
	# (its session told the stop itself: the keeper, which watches it from
	# a moment later, must see that the DO ended though the long statement
	# after it has the same query_start)
	my $s = session('tight_ends');
	run_and_forget($s, tight_once('esc_tight_end') . q{ \; SELECT pg_sleep(5) \; SELECT 'done';}, 'esc_tight_end');
	check_left_alone($s, 'esc_tight_end', qr/done/);
	$s->quit;
}

###########################################################################
note "a transaction's slot: the loop catches its loss and the statement runs on: terminated";
{
	# (whether its session told the stop first or the keeper's cancel came
	# first, the slot's release at the rollback of the block must not end
	# the watch)
	my $s = session('tight_xact');
	my $forgot = run_and_forget($s, q{DO $$ BEGIN
  BEGIN
    PERFORM redsem_acquire_xact('esc_tight_x', 1, '3 s');
    LOOP
      PERFORM 1;
    END LOOP;
  EXCEPTION WHEN query_canceled THEN
    RAISE WARNING 'caught: %', SQLERRM;
  END;
  PERFORM pg_sleep(12);
END $$;}, 'esc_tight_x');
	check_terminated($s, 'esc_tight_x', $forgot, 'tight');
}

###########################################################################
note 'after five slots lost while idle (each told at the next statement), a tight catching loop: terminated';
{
	# (each told stop asks the keeper for a watch, which it declines: the
	# statement told had ended; the ask must leave no name behind, or the
	# backend's room for asks fills up and the loop is never watched)
	my $s = session('leaky');
	for my $i (1 .. 5)
	{
		$s->query_ok("SELECT redsem_acquire('leak$i', 1, '3 s') IS NOT NULL;");
		forget("leak$i");
		ok(wait_until(10, sub {
			$node->safe_psql('postgres',
				"SELECT count(*) FROM redsem_server_holds() WHERE name = 'leak$i' AND state = 'lost'") eq '1' }),
			"leak$i: the keeper finds the slot gone");
		my ($out, $err) = $s->query('SELECT 1;');
		like($err // '', qr/the slot of semaphore "leak$i" was lost/, "leak$i: the next statement is told");
	}
	my $forgot = run_and_forget($s, tight_loop([ [ 'esc_leaky', 1 ] ]), 'esc_leaky');
	check_terminated($s, 'esc_leaky', $forgot, 'tight');
}

###########################################################################
note 'five slots lost at once; the code takes each back, gives it back and works on: left alone';
{
	# (the AskSlot names four; the fifth is watched aside, and its grant,
	# given back at once, must end its watch as the named ones' do)
	my @sems = map { [ "esc_five$_", 1 ] } 1 .. 5;
	my $s = session('five');
	my $retake = join('', map { "      PERFORM redsem_release('$_->[0]', redsem_acquire('$_->[0]', 1, '3 s'));
" } @sems);
	$s->send(catch_loop(\@sems, 0, $retake . "      PERFORM pg_sleep(3);
      EXIT;
") . " SELECT 'done';");
	ok(wait_until(10, sub { (grep { $redis->zcard($_->[0], 'owner') == 1 } @sems) == 5 }),
		'the holder runs under five slots');
	# (all five forgotten at one instant: one DEL, between two refreshes)
	$redis->cli('DEL', map { $redis->scan_keys("redsem:{$_->[0]}:*") } @sems);
	my ($out, $err) = $s->wait_done(30);
	$err //= $s->stderr_so_far;    # (ended: terminated)
	like($err // '', qr/caught: the slot of semaphore "esc_five\d" was lost/, 'the code caught the cancel');
	unlike($err // '', qr/terminating connection/, 'the session was not terminated');
	like($out // '', qr/done/, 'the statement ran to its end');
	is($s->query_ok('SELECT count(*) FROM redsem_held();'), '0', 'and gave every slot back');
	$s->quit;
}

###########################################################################
note 'a sixth slot lost later does not take the fifth out of its count by name: terminated';
{
	# (five lost at once, a sixth 0.8 s later, told by the session; the code
	# takes back all but the fifth and loops on an unrelated semaphore: the
	# fifth's watch, counted by name aside, must not fall back to counting
	# any semaphore's tries when the sixth's tell comes; helper-109's B-2)
	my $s = session('sixth');
	$s->send(<<'EOS' . " SELECT 'done';");
DO $$ DECLARE first timestamptz; retaken timestamptz; BEGIN
  PERFORM redsem_acquire('esc_sx1', 1, '3 s');
  PERFORM redsem_acquire('esc_sx2', 1, '3 s');
  PERFORM redsem_acquire('esc_sx3', 1, '3 s');
  PERFORM redsem_acquire('esc_sx4', 1, '3 s');
  PERFORM redsem_acquire('esc_sx5', 1, '3 s');
  PERFORM redsem_acquire('esc_sx6', 1, '3 s');
  LOOP
    BEGIN
      LOOP
        PERFORM pg_sleep(0.1);
        IF first IS NOT NULL AND retaken IS NULL AND clock_timestamp() > first + interval '1.5 s' THEN
          PERFORM redsem_release('esc_sx1', redsem_acquire('esc_sx1', 1, '3 s'));
          PERFORM redsem_release('esc_sx2', redsem_acquire('esc_sx2', 1, '3 s'));
          PERFORM redsem_release('esc_sx3', redsem_acquire('esc_sx3', 1, '3 s'));
          PERFORM redsem_release('esc_sx4', redsem_acquire('esc_sx4', 1, '3 s'));
          PERFORM redsem_release('esc_sx6', redsem_acquire('esc_sx6', 1, '3 s'));
          retaken := clock_timestamp();
          RAISE WARNING 'retaken at %', retaken;
        END IF;
        IF retaken IS NOT NULL THEN PERFORM redsem_release('other', redsem_acquire('other', 1, '3 s')); PERFORM pg_sleep(0.4); END IF;
        EXIT WHEN retaken IS NOT NULL AND clock_timestamp() > retaken + interval '9 s';
      END LOOP;
      EXIT;
    EXCEPTION WHEN query_canceled THEN
      RAISE WARNING 'caught at %: %', clock_timestamp(), SQLERRM;
      IF first IS NULL THEN first := clock_timestamp(); END IF;
    END;
  END LOOP;
END $$;
EOS
	ok(wait_until(10, sub { (grep { $redis->zcard("esc_sx$_", 'owner') == 1 } 1 .. 6) == 6 }),
		'the holder runs under six slots');
	my $forgot = time;
	$redis->cli('DEL', map { $redis->scan_keys("redsem:{esc_sx$_}:*") } 1 .. 5);
	# (the sixth only once the five's stop came, and 0.7 s more: a DEL a
	# fixed time after theirs could fall before the keeper's next refresh,
	# which then found all six at once, and which of the fifth and sixth
	# took the place aside was the hold table's order; holds taken a few
	# ms apart may be refreshed in two passes up to half a refresh period
	# apart, which the 0.7 s waits out; helper-116)
	ok(defined $s->wait_stderr(qr/caught at/, 10), 'the code caught the stop of the five');
	usleep(700_000);
	$redis->cli('DEL', $redis->scan_keys('redsem:{esc_sx6}:*'));
	ok($s->wait_exit(20), 'the session ended');
	like($s->stderr_so_far, qr/terminating connection because it ran on after its statement was stopped for the lost slot of semaphore "/, 'it was terminated, and told why');
	like(slurp_file($node->logfile), qr/terminated process \d+: it ran on after its statement was stopped for the lost slot of semaphore "esc_sx5"/,
		'for the fifth slot, never taken again');
}

###########################################################################
note 'a keeper restarted while it watched four: the names of its watches go with it; two lost later are each counted by name: terminated';
{
	# (the old keeper watches esc_kr1..4 in the AskSlot's four names (armed
	# with its cancel, or at its look after the session's tell) and is
	# restarted; the code takes those back once the new keeper is up (esc_gate).  Then esc_kr5
	# and esc_kr6 are lost at once: the code takes back esc_kr5 alone and
	# loops on an unrelated semaphore.  Names left by the dead keeper's
	# watches left no room: esc_kr6 was counted by any semaphore's try, and
	# the loop ran on; helper-110's E-2)
	my $s = session('keeper_restart');
	$s->send(<<'EOS' . " SELECT 'done';");
DO $$ DECLARE first timestamptz; retaken timestamptz; lost5 timestamptz; took5 timestamptz; BEGIN
  PERFORM redsem_acquire('esc_kr1', 1, '3 s');
  PERFORM redsem_acquire('esc_kr2', 1, '3 s');
  PERFORM redsem_acquire('esc_kr3', 1, '3 s');
  PERFORM redsem_acquire('esc_kr4', 1, '3 s');
  PERFORM redsem_acquire('esc_kr5', 1, '6 s');
  PERFORM redsem_acquire('esc_kr6', 1, '6 s');
  LOOP
    BEGIN
      LOOP
        PERFORM pg_sleep(0.1);
        IF first IS NOT NULL AND retaken IS NULL AND EXISTS (SELECT FROM esc_gate WHERE tag = 'kr') THEN
          PERFORM redsem_release('esc_kr1', redsem_acquire('esc_kr1', 1, '3 s'));
          PERFORM redsem_release('esc_kr2', redsem_acquire('esc_kr2', 1, '3 s'));
          PERFORM redsem_release('esc_kr3', redsem_acquire('esc_kr3', 1, '3 s'));
          PERFORM redsem_release('esc_kr4', redsem_acquire('esc_kr4', 1, '3 s'));
          retaken := clock_timestamp();
          RAISE WARNING 'retaken at %', retaken;
        END IF;
        IF lost5 IS NOT NULL AND took5 IS NULL AND clock_timestamp() > lost5 + interval '1.2 s' THEN
          PERFORM redsem_release('esc_kr5', redsem_acquire('esc_kr5', 1, '6 s'));
          took5 := clock_timestamp();
        END IF;
        IF took5 IS NOT NULL THEN PERFORM redsem_release('esc_krother', redsem_acquire('esc_krother', 1, '3 s')); PERFORM pg_sleep(0.4); END IF;
        EXIT WHEN took5 IS NOT NULL AND clock_timestamp() > took5 + interval '9 s';
      END LOOP;
      EXIT;
    EXCEPTION WHEN query_canceled THEN
      RAISE WARNING 'caught at %: %', clock_timestamp(), SQLERRM;
      IF first IS NULL THEN first := clock_timestamp(); END IF;
      IF lost5 IS NULL AND SQLERRM ~ 'esc_kr[56]' THEN lost5 := clock_timestamp(); END IF;
    END;
  END LOOP;
END $$;
EOS
	ok(wait_until(10, sub { (grep { $redis->zcard("esc_kr$_", 'owner') == 1 } 1 .. 6) == 6 }),
		'the holder runs under six slots');
	$redis->cli('DEL', map { $redis->scan_keys("redsem:{esc_kr$_}:*") } 1 .. 4);
	ok(defined $s->wait_stderr(qr/caught at/, 10), 'the code caught the stop of the first four');
	# (restarted before it would escalate)
	usleep(300_000);
	my $old = keeper_pid_of($node);
	kill 'TERM', $old;
	ok(wait_until(15, sub { my $k = keeper_pid_of($node); defined $k && $k != $old }), 'the keeper was restarted');
	$node->safe_psql('postgres', "INSERT INTO esc_gate VALUES ('kr')");    # (the code takes them back now)
	ok(defined $s->wait_stderr(qr/retaken at/, 10), 'the code took the first four back');
	usleep(500_000);
	$redis->cli('DEL', map { $redis->scan_keys("redsem:{esc_kr$_}:*") } 5 .. 6);
	ok($s->wait_exit(25), 'the session ended');
	like($s->stderr_so_far, qr/terminating connection because it ran on after its statement was stopped for the lost slot of semaphore "/, 'it was terminated, and told why');
	like(slurp_file($node->logfile), qr/terminated process \d+: it ran on after its statement was stopped for the lost slot of semaphore "esc_kr6"/,
		'for the sixth slot, never taken again');
}

###########################################################################
note 'a slot lost while the keeper restarts, its ask kept aside, taken back before the new keeper looks: left alone';
{
	# (the old keeper's watches of esc_hx1..4 fill the AskSlot's names; with
	# the keeper away, esc_hx5's lease is not refreshed and the session's
	# watchdog stops it: its ask finds no room and is counted aside; the
	# code takes it back and gives it back at once.  The new keeper frees
	# the old names and arms that ask in a name: the grant since its tell
	# must be seen there, or well-behaved code is terminated; helper-111)
	my $s = session('hx');
	$s->send(<<'EOS' . " SELECT 'done';");
DO $$ DECLARE lost5 timestamptz; took5 timestamptz; retaken timestamptz; BEGIN
  PERFORM redsem_acquire('esc_hx1', 1, '3 s');
  PERFORM redsem_acquire('esc_hx2', 1, '3 s');
  PERFORM redsem_acquire('esc_hx3', 1, '3 s');
  PERFORM redsem_acquire('esc_hx4', 1, '3 s');
  PERFORM redsem_acquire('esc_hx5', 1, '1 s');
  LOOP
    BEGIN
      LOOP
        PERFORM pg_sleep(0.05);
        IF lost5 IS NOT NULL AND took5 IS NULL THEN
          PERFORM redsem_release('esc_hx5', redsem_acquire('esc_hx5', 1, '1 s', '3 s'));
          took5 := clock_timestamp();
          RAISE WARNING 'took5 at %', took5;
        END IF;
        IF retaken IS NULL AND EXISTS (SELECT FROM esc_gate WHERE tag = 'hx') THEN
          PERFORM redsem_release('esc_hx1', redsem_acquire('esc_hx1', 1, '3 s'));
          PERFORM redsem_release('esc_hx2', redsem_acquire('esc_hx2', 1, '3 s'));
          PERFORM redsem_release('esc_hx3', redsem_acquire('esc_hx3', 1, '3 s'));
          PERFORM redsem_release('esc_hx4', redsem_acquire('esc_hx4', 1, '3 s'));
          retaken := clock_timestamp();
        END IF;
        EXIT WHEN took5 IS NOT NULL AND retaken IS NOT NULL AND clock_timestamp() > retaken + interval '5 s';
      END LOOP;
      EXIT;
    EXCEPTION WHEN query_canceled THEN
      RAISE WARNING 'caught at %: %', clock_timestamp(), SQLERRM;
      IF lost5 IS NULL AND SQLERRM ~ 'esc_hx5' THEN lost5 := clock_timestamp(); END IF;
    END;
  END LOOP;
END $$;
EOS
	ok(wait_until(10, sub { (grep { $redis->zcard("esc_hx$_", 'owner') == 1 } 1 .. 5) == 5 }),
		'the holder runs under five slots');
	$redis->cli('DEL', map { $redis->scan_keys("redsem:{esc_hx$_}:*") } 1 .. 4);
	ok(defined $s->wait_stderr(qr/caught at/, 10), 'the code caught the stop of the first four');
	usleep(300_000);
	my $old = keeper_pid_of($node);
	kill 'TERM', $old;
	ok(defined $s->wait_stderr(qr/took5 at/, 10), 'the fifth, stopped while the keeper was away, was taken back');
	ok(wait_until(15, sub { my $k = keeper_pid_of($node); defined $k && $k != $old }), 'the keeper was restarted');
	$node->safe_psql('postgres', "INSERT INTO esc_gate VALUES ('hx')");    # (the code takes back the four)
	my ($out, $err) = $s->wait_done(30);
	$err //= $s->stderr_so_far;    # (ended: terminated)
	unlike($err // '', qr/terminating connection/, 'the session was not terminated');
	like($out // '', qr/done/, 'the statement ran to its end');
	is($s->query_ok('SELECT count(*) FROM redsem_held();'), '0', 'and gave every slot back');
	$s->quit;
}

###########################################################################
note 'track_activities off: a tight loop catches the stop once, never a bare cancel after it';
{
	# (the keeper cannot tell its statements apart and does not watch it;
	# its session, telling the stop itself, must still not get the keeper's
	# cancel after its own error: the block after the catch would catch it)
	$node->safe_psql('postgres', 'CREATE ROLE untracked LOGIN; ALTER ROLE untracked SET track_activities = off');
	my $s = session('untracked', 'untracked');
	run_and_forget($s, tight_once('esc_untracked', "  BEGIN\n    PERFORM pg_sleep(1);\n"
		  . "  EXCEPTION WHEN query_canceled THEN\n    RAISE WARNING 'caught later: %', SQLERRM;\n  END;\n")
		  . q{; SELECT 'done';}, 'esc_untracked');
	my ($out, $err) = $s->wait_done(30);
	# (as in check_terminated: a tight loop's cancel may land between two of
	# its statements, caught as PostgreSQL's own bare cancel; under load it
	# did, 2 of about 30 full runs)
	like($err // '', qr/caught: (?:the slot of semaphore "esc_untracked" was lost|canceling statement due to user request)/,
		'the code caught the stop');
	unlike($err // '', qr/caught later|ERROR:  .*canceling statement due to user request/, 'no cancel came after it');
	like($out // '', qr/done/, 'the statements after it ran');
	$s->quit;
}

$node->stop;
done_testing();
