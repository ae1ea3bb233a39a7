
# 080_slot_lost.pl - a holder whose slot is lost is stopped (issue 48, A).
#
# A slot is lost when the keeper's refresh finds it gone (its keys deleted
# here, as a Redis that forgot would), when an administrator force-releases
# it, or when Redis has not confirmed its lease for so long that it may be
# another holder's (this server cut off from Redis: a proxy in between that
# stops forwarding).  redsem.on_slot_lost says what becomes of the holder:
# cancel (the default: its statement is cancelled with an error naming the
# semaphore, or its next statement fails, once), terminate, or warn.
#
# Timing rule: leases are 3 s; every bound checked is one the design gives
# (a stop comes at the keeper's next refresh, a third of the lease, or
# before the lease ends in Redis), with slack for a slow machine, and a
# statement the stop must cut short sleeps far longer (30 s).

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use File::Basename ();
use IO::Socket::UNIX;
use Time::HiRes qw(time usleep);

my $redis = RedsemTest::Redis->new;

# A proxy between the server and Redis that a test can freeze (SIGSTOP):
# connections stay open, nothing is forwarded, as a network path that hangs
my ($proxy_sock, $proxy_pid) = cut_proxy($redis);

my $node = create_node('slot_lost', $redis,
	"redsem.unix_socket = '$proxy_sock'\nredsem.command_timeout = 1000\nredsem.queues = 'q80: active_statements=1'\n");
$node->safe_psql('postgres', 'CREATE ROLE app LOGIN; CREATE TABLE done(t text); GRANT ALL ON done TO app');
$node->safe_psql('postgres', "CREATE ROLE queued LOGIN; ALTER ROLE queued SET redsem.queue = 'q80'");

sub session { return RedsemTest::Session->new($node, name => $_[0], @_[ 1 .. $#_ ]); }

# Delete every key of semaphore $sem, as a Redis that lost them
sub forget
{
	my ($sem) = @_;
	$redis->cli('DEL', $_) foreach $redis->scan_keys("redsem:{$sem}:*");
	return;
}

# The lost-slot error, with its SQLSTATE (psql runs with VERBOSITY verbose)
sub lost_error { my ($sem) = @_; return qr/ERROR:  57014: the slot of semaphore "\Q$sem\E" was lost/; }

# Stall the keeper while session $s runs, until its watchdog stopped it and
# its code caught that (stderr matching $caught), then $after_us more;
# resume the keeper, and return when
sub stall_keeper_until_caught
{
	my ($s, $caught, $after_us) = @_;
	my $keeper = keeper_pid_of($node);
	usleep(300_000);
	kill 'STOP', $keeper;
	ok(defined $s->wait_stderr($caught, 15), 'its watchdog stopped it; the code caught that');
	usleep($after_us);
	kill 'CONT', $keeper;
	return time;
}

###########################################################################
note 'a slot whose keys are deleted: the running statement is cancelled at the next refresh';
{
	my $s = session('holder');
	$s->send("BEGIN; SELECT redsem_acquire_xact('gone', 1, '3 s') IS NOT NULL; INSERT INTO done VALUES ('gone'); SELECT pg_sleep(30); COMMIT;");
	ok(defined wait_until(10, sub { $redis->zcard('gone', 'owner') == 1 }), 'gone: it holds');  # (not a fixed sleep: a slow first call)
	forget('gone');
	my $deleted = time;
	my ($out, $err, $elapsed) = $s->wait_done(20);
	ok(defined $err, 'the statement ended');
	like($err, lost_error('gone'), 'with the error that names the semaphore (57014)');
	like($err, qr/DETAIL:  Redis no longer had the slot when it was refreshed, though its lease of 3000 ms had \d+ ms left: Redis lost it \(a restart without persistence/,
		'and says why: with lease left, Redis lost it (helper-167 F6: the keeper\'s log said so, the holder not)');
	cmp_ok(time - $deleted, '<', 3, 'at the next refresh, within the lease');
	is($node->safe_psql('postgres', "SELECT count(*) FROM done WHERE t = 'gone'"), '0',
		'the transaction did not commit');
	is($s->query_ok('SELECT 1;'), '1', 'the session goes on');
	$s->quit;
}

###########################################################################
note 'the keeper stalled, the holder stopped itself and caught the cancel: the keeper, back, terminates it';
{
	my $s = session('watchdog_catcher');
	$s->query_ok("SELECT redsem_acquire('wdc', 1, '3 s') IS NOT NULL;");
	$s->send(q{DO $$ DECLARE n int := 0; BEGIN LOOP BEGIN LOOP PERFORM pg_sleep(0.1); n := n + 1; EXIT WHEN n > 300; END LOOP; EXIT;
		EXCEPTION WHEN query_canceled THEN RAISE WARNING 'caught: %', SQLERRM; END; END LOOP; END $$;});
	my $back = stall_keeper_until_caught($s, qr/caught: the slot of semaphore "wdc" was lost/, 0);
	ok($s->wait_exit(20), 'the session ended');
	like($s->stderr_so_far, qr/terminating connection because it ran on after its statement was stopped for the lost slot of semaphore "/, 'it was terminated, and told why');
	cmp_ok(time - $back, '<', 10, 'within the escalation delay of the keeper\'s return');
	like(slurp_file($node->logfile), qr/redsem keeper terminated process \d+: it ran on after its statement was stopped for the lost slot of semaphore "wdc"/,
		'the server log says why');
}

###########################################################################
note 'the same in a tight loop: its watchdog\'s cancel is told as the lost slot, never a bare cancel after it';
{
	# (its statements start so often that one of them may find the stop
	# between the watchdog's claim and the cancel it set pending: the
	# session then tells the stop itself, and the pending cancel, when it
	# comes, is told as the same stop, src/stop.c)
	my $s = session('watchdog_tight');
	$s->query_ok("SELECT redsem_acquire('wdt', 1, '3 s') IS NOT NULL;");
	$s->send(q{DO $$ BEGIN LOOP BEGIN LOOP PERFORM 1; END LOOP;
		EXCEPTION WHEN query_canceled THEN RAISE WARNING 'caught: %', SQLERRM; END; END LOOP; END $$;});
	stall_keeper_until_caught($s, qr/caught: the slot of semaphore "wdt" was lost/, 500_000);
	ok($s->wait_exit(20), 'the session ended (the keeper, back, terminated it)');
	check_told_once($s->stderr_so_far, 'watchdog_tight');
}

###########################################################################
note 'its watchdog\'s stop caught, the DO ends; the next statement of its Query runs long: left alone';
{
	# (the keeper, back, must see that the statement told ended, though the
	# next one of the same Query has its query_start: src/escalate.c)
	my $s = session('watchdog_then_long');
	$s->query_ok("SELECT redsem_acquire('wdl', 1, '3 s') IS NOT NULL;");
	$s->send(q{DO $$ BEGIN BEGIN LOOP PERFORM pg_sleep(0.05); END LOOP;
		EXCEPTION WHEN query_canceled THEN RAISE WARNING 'caught: %', SQLERRM; END; END $$ \; SELECT pg_sleep(6) \; SELECT 'done';});
	stall_keeper_until_caught($s, qr/caught: the slot of semaphore "wdl" was lost/, 500_000);
	my ($out, $err) = $s->wait_done(30);
	unlike($err // '', qr/terminating connection/, 'the session was not terminated');
	like($out // "", qr/done/, "the statement after the DO ran to its end") or diag $err;
	$s->quit;
}

###########################################################################
note 'the same with a transaction\'s slot, and its statement a function that catches the cancel';
{
	my $s = session('watchdog_catcher_xact');
	$node->safe_psql('postgres', q{CREATE FUNCTION stubborn() RETURNS int LANGUAGE plpgsql AS $$
		DECLARE n int := 0; BEGIN LOOP BEGIN LOOP PERFORM pg_sleep(0.1); n := n + 1; EXIT WHEN n > 300; END LOOP; EXIT;
		EXCEPTION WHEN query_canceled THEN RAISE WARNING 'caught: %', SQLERRM; END; END LOOP; RETURN n; END $$;});
	$s->send(q{BEGIN; SELECT redsem_acquire_xact('wdx', 1, '3 s') IS NOT NULL; SELECT stubborn(); COMMIT;});
	ok(defined wait_until(10, sub { $redis->zcard('wdx', 'owner') == 1 }), 'wdx: it holds');
	my $back = stall_keeper_until_caught($s, qr/caught: the slot of semaphore "wdx" was lost/, 3_000_000);
	ok($s->wait_exit(20), 'the session ended');
	like($s->stderr_so_far, qr/terminating connection because it ran on after its statement was stopped for the lost slot of semaphore "/, 'it was terminated, and told why');
	cmp_ok(time - $back, '<', 10, 'within the escalation delay of the keeper\'s return');
}

###########################################################################
note 'six slots lost at once while the keeper stalls, the loop catches: the keeper, back, terminates it';
{
	# (its session tells the six stops itself and asks the keeper to watch
	# each: four have room in its AskSlot, the two beyond are asked for
	# aside, and watched by their statement, until it ends: src/escalate.c)
	my $s = session('watchdog_six');
	$s->query_ok("SELECT redsem_acquire('wd6_$_', 1, '3 s') IS NOT NULL;") foreach 1 .. 6;
	$s->send(q{DO $$ BEGIN LOOP BEGIN LOOP PERFORM 1; END LOOP;
		EXCEPTION WHEN query_canceled THEN RAISE WARNING 'caught: %', SQLERRM; END; END LOOP; END $$;});
	# (all six past their valid_until, and told, before the keeper is back)
	my $back = stall_keeper_until_caught($s, qr/caught: the slot of semaphore "wd6_\d" was lost/, 1_500_000);
	ok($s->wait_exit(20), 'the session ended');
	my $err = $s->stderr_so_far;
	like($err, qr/terminating connection because it ran on after its statement was stopped for the lost slot of semaphore "wd6_\d"/, 'it was terminated, and told why');
	cmp_ok(time - $back, '<', 10, 'within the escalation delay of the keeper\'s return');
	like(slurp_file($node->logfile),
		qr/redsem keeper watches process \d+ for more than 4 lost slots at once: its statement is watched until it ends/,
		'the slots beyond its room were watched by their statement');
}

###########################################################################
note 'a statement queue slot and a plain cancel';
{
	my $q = session('queued', user => 'queued');
	$q->send('SELECT pg_sleep(40);');
	ok(wait_until(10, sub { $redis->zcard('queue:q80', 'owner') == 1 }), 'a queued statement runs under its slot');
	forget('queue:q80');
	my ($qo, $qe) = $q->wait_done(20);
	like($qe, lost_error('queue:q80'), 'the statement is cancelled when the keeper finds the queue\'s slot gone (30 s lease: within 10 s)');
	is($q->query_ok('SELECT 7;'), '7', 'and the next statement of the queue runs');
	$q->quit;

	my $s = session('canceller');
	$s->send("SELECT pg_sleep(30);");
	usleep(300_000);
	$node->safe_psql('postgres', "SELECT pg_cancel_backend(" . $s->backend_pid . ")");
	my ($out, $err) = $s->wait_done(10);
	like($err, qr/canceling statement due to user request/, 'a cancel of ours is not a lost slot');
	$s->quit;
}

###########################################################################
note 'an idle session: its next statement fails once, then it goes on without the slot';
{
	my $s = session('idle');
	$s->query_ok("SELECT redsem_acquire('idle', 1, '3 s') IS NOT NULL;");
	forget('idle');
	ok(wait_until(10, sub {
		$node->safe_psql('postgres', "SELECT count(*) FROM redsem_server_holds() WHERE name = 'idle' AND state = 'lost'") eq '1' }),
		'the keeper finds the slot gone');
	my ($out, $err) = $s->query('SELECT 1;');
	like($err, lost_error('idle'), 'the next statement fails with the error');
	($out, $err) = $s->query('SELECT 2;');
	is($err, '', 'once');
	is($out, '2', 'then the session goes on');
	is($s->query_ok("SELECT count(*) FROM redsem_held() WHERE name = 'idle';"), '0',
		'without the slot');
	is($node->safe_psql('postgres', "SELECT redsem_acquire('idle', 1, '3 s') IS NOT NULL"), 't',
		'which another session can take');
	$s->quit;
}

###########################################################################
note 'idle in a transaction: COMMIT fails, the work is rolled back';
{
	my $s = session('in_xact');
	$s->query_ok("BEGIN; SELECT redsem_acquire_xact('tx', 1, '3 s') IS NOT NULL; INSERT INTO done VALUES ('tx');");
	forget('tx');
	ok(wait_until(10, sub {
		$node->safe_psql('postgres', "SELECT count(*) FROM redsem_server_holds() WHERE name = 'tx' AND state = 'lost'") eq '1' }),
		'the keeper finds the slot gone');
	my ($out, $err) = $s->query('COMMIT;');
	like($err, lost_error('tx'), 'COMMIT fails with the error');
	is($node->safe_psql('postgres', "SELECT count(*) FROM done WHERE t = 'tx'"), '0',
		'nothing was committed');
	is($s->query_ok('SELECT 3;'), '3', 'the session goes on');
	$s->quit;
}

###########################################################################
note 'an administrator force-releases a slot';
{
	my $s = session('forced');
	$s->send("SELECT redsem_acquire('forced', 1, '3 s') IS NOT NULL; SELECT pg_sleep(30);");
	ok(defined wait_until(10, sub { $redis->zcard('forced', 'owner') == 1 }), 'forced: it holds');  # (not a fixed sleep: a slow first call)
	my $id = $node->safe_psql('postgres', "SELECT id FROM redsem_holders('forced')");
	$node->safe_psql('postgres', "SELECT redsem_force_release('forced', '$id')");
	my ($out, $err) = $s->wait_done(10);
	like($err, lost_error('forced'), 'the holder is cancelled');
	like($err, qr/force-released/, 'and told an administrator did it');
	$s->quit;
}

###########################################################################
note 'cut off from Redis: every holder is stopped before its lease ends in Redis';
{
	my @s = map { session("cut$_") } 1 .. 3;
	my @sems = map { "cut$_" } 1 .. 3;
	for my $i (0 .. 2)
	{
		$s[$i]->query_ok("SELECT redsem_acquire('$sems[$i]', 1, '3 s') IS NOT NULL;");
	}
	# (each says when it was stopped, by the backend's clock: psql's answer
	# and the test's poll come later, on a loaded machine much later)
	$_->send(q{DO $$ BEGIN PERFORM pg_sleep(30); EXCEPTION WHEN query_canceled THEN
		RAISE WARNING 'stopped at %', extract(epoch FROM clock_timestamp()); RAISE; END $$;})
	  foreach @s;
	usleep(1_200_000);
	kill 'STOP', $proxy_pid;
	my $frozen = time;
	# Redis's deadlines, read around the proxy (ms of Redis's clock)
	my @deadline = map {
		my $id = $redis->cli('ZRANGE', "redsem:{$_}:timeout", 0, 0);
		$redis->cli('ZSCORE', "redsem:{$_}:timeout", $id) / 1000.0
	} @sems;
	for my $i (0 .. 2)
	{
		my ($out, $err) = $s[$i]->wait_done(20);
		my $ended = time;
		($ended) = $err =~ /stopped at ([\d.]+)/ if defined $err && $err =~ /stopped at [\d.]+/;
		like($err, lost_error($sems[$i]), "holder $i is stopped");
		like($err, qr/had not confirmed its lease of 3000 ms/, 'because its lease went unconfirmed');
		cmp_ok($ended, '<', $deadline[$i], sprintf('%.0f ms before Redis would give its slot away', 1000 * ($deadline[$i] - $ended)));
	}
	kill 'CONT', $proxy_pid;
	my $free = $node->safe_psql('postgres', 'SELECT ' . join(', ', map { "redsem_acquire('$_', 1, '3 s', wait => '5 s') IS NOT NULL" } @sems));
	is($free, 't|t|t', 'when the cut heals, each slot goes to one newcomer');
	$_->quit foreach @s;
}

###########################################################################
note 'cut off while giving the slot back: the release is not cancelled, it fails as a release';
{
	# (before, the keeper stopped the slot being given back when its lease
	# ran out during redsem_release's wait: PostgreSQL's bare "canceling
	# statement due to user request", nothing naming the semaphore)
	# (the server's setting: in broker mode the broker gives up at it)
	$node->safe_psql('postgres', 'ALTER SYSTEM SET redsem.command_timeout = 5000; SELECT pg_reload_conf();');
	usleep(1_000_000);
	my $s = session('cut_release');
	my $id = $s->query_ok("SELECT redsem_acquire('cutrel', 1, '3 s');");
	usleep(1_200_000);
	kill 'STOP', $proxy_pid;
	my ($out, $err, $secs) = $s->query("SELECT redsem_release('cutrel', '$id');");
	kill 'CONT', $proxy_pid;
	unlike($err // '', qr/canceling statement due to user request/, 'the release is not cancelled when its lease runs out under it');
	like($err // '', qr/ERROR:  08006: /, 'it fails as a release that Redis did not answer (08006)');
	like($err // '', qr/giving back slot \Q$id\E of redsem semaphore "cutrel"/, 'naming the slot it gives back');
	cmp_ok($secs, '>=', 4.5, sprintf('at its command timeout (%.2f s), past the lease of 3 s', $secs));
	is($s->query_ok('SELECT 1;'), '1', 'the session goes on, told of nothing else');
	is($node->safe_psql('postgres', "SELECT redsem_acquire('cutrel', 1, '3 s', wait => '10 s') IS NOT NULL"), 't',
		'the slot is free again once the cut heals (the keeper gave it back)');
	my ($rout, $rerr) = $s->query("SELECT redsem_release('cutrel', '$id');");
	is($rout, 'f', 'a retry of the release finds nothing left to give back');
	is($rerr, '', 'and is not told the slot was never its own');
	$s->quit;
	$node->safe_psql('postgres', 'ALTER SYSTEM RESET redsem.command_timeout; SELECT pg_reload_conf();');
	usleep(1_000_000);
}

###########################################################################
note 'a grant whose answer came after its valid time: confirmed before it is returned';
{
	# (the path to Redis holds the request for 1.85 s of a 2 s lease: the
	# grant is live, but past the time redsem counts on it, src/timing.h;
	# returned as it was, the next statement was told the slot was lost)
	$node->safe_psql('postgres', 'ALTER SYSTEM SET redsem.command_timeout = 5000; SELECT pg_reload_conf();');
	usleep(1_000_000);
	my $s = session('slow_grant');
	$s->query_ok("SELECT redsem_release('slowgr', redsem_acquire('slowgr', 1, '2 s'));");
	kill 'STOP', $proxy_pid;
	$s->send("SELECT redsem_acquire('slowgr', 1, '2 s') IS NOT NULL;");
	usleep(1_850_000);
	kill 'CONT', $proxy_pid;
	my ($out, $err) = $s->wait_done(20);
	is($out, 't', 'the acquire returns the slot') or diag $err;
	my ($out2, $err2) = $s->query('SELECT 1;');
	unlike($err2 // '', qr/was lost/, 'the next statement is not told it was lost');
	is($out2, '1', 'and runs');
	is($s->query_ok('SELECT count(*) FROM redsem_held();'), '1', 'the session holds the slot');
	$s->quit;
	$node->safe_psql('postgres', 'ALTER SYSTEM RESET redsem.command_timeout; SELECT pg_reload_conf();');
	usleep(1_000_000);
}

###########################################################################
note 'the keeper stopped: a backend finds its own hold past its valid time';
{
	my $keeper = keeper_pid_of($node);
	my $s = session('unkept');
	$s->query_ok("SELECT redsem_acquire('unkept', 1, '3 s') IS NOT NULL;");
	kill 'STOP', $keeper;
	sleep_full(3);
	my ($out, $err) = $s->query('SELECT 1;');
	kill 'CONT', $keeper;
	like($err, lost_error('unkept'), 'its next statement fails');
	like($err, qr/had not confirmed its lease/, 'as unconfirmed');
	$s->quit;
}

###########################################################################
note 'the keeper stalled: a running holder stops itself, before its lease ends in Redis';
{
	# (a keeper stopped, or starved of CPU, is alive: nothing restarts it;
	# the backend's watchdog, src/watchdog.c, stops the statement instead)
	my $keeper = keeper_pid_of($node);
	my $s = session('watchdog');
	$s->query_ok("SELECT redsem_acquire('wd', 1, '3 s') IS NOT NULL;");
	$s->send(q{DO $$ BEGIN PERFORM pg_sleep(30); EXCEPTION WHEN query_canceled THEN
		RAISE WARNING 'stopped at %', extract(epoch FROM clock_timestamp()); RAISE; END $$;});
	usleep(300_000);
	kill 'STOP', $keeper;
	my $id = $redis->cli('ZRANGE', 'redsem:{wd}:timeout', 0, 0);
	my $deadline = $redis->cli('ZSCORE', 'redsem:{wd}:timeout', $id) / 1000.0;
	my ($out, $err) = $s->wait_done(20);
	kill 'CONT', $keeper;
	my ($ended) = ($err // '') =~ /stopped at ([\d.]+)/;
	like($err, lost_error('wd'), 'the statement is stopped though the keeper does not run');
	like($err, qr/had not confirmed its lease of 3000 ms/, 'because its lease went unconfirmed');
	ok(defined $ended && $ended < $deadline,
		sprintf('before Redis would give its slot away (%.0f ms before)', 1000 * ($deadline - ($ended // 0))));
	is($s->query_ok('SELECT 1;'), '1', 'the session goes on');
	$s->quit;
}

###########################################################################
note 'policies: terminate and warn, set by a superuser only';
{
	my ($ret, $out, $err) = $node->psql('postgres', 'SET redsem.on_slot_lost = warn', extra_params => [ '-U', 'app' ]);
	like($err, qr/permission denied to set parameter "redsem.on_slot_lost"/, 'an ordinary role cannot choose its own policy');

	$node->safe_psql('postgres', 'ALTER ROLE app SET redsem.on_slot_lost = terminate');
	my $s = session('terminated', user => 'app');
	$s->send("SELECT redsem_acquire('term', 1, '3 s') IS NOT NULL; SELECT pg_sleep(30);");
	ok(defined wait_until(10, sub { $redis->zcard('term', 'owner') == 1 }), 'term: it holds');  # (not a fixed sleep: a slow first call)
	forget('term');
	ok($s->wait_exit(10), 'terminate: the session ends');
	like($s->stderr_so_far,
		qr/FATAL:  57P01: terminating connection because the slot of semaphore "term" was lost\nDETAIL:  Redis no longer had the slot when it was refreshed, though its lease of 3000 ms had \d+ ms left: Redis lost it.*\nHINT:  redsem.on_slot_lost is terminate/,
		'as an administrator ends it (57P01), saying why');
	ok(wait_until(5, sub { slurp_file($node->logfile) =~ /redsem keeper terminated process \d+: the slot of semaphore "term" was lost/ }),
		'and the log says why');

	# its own watchdog ends it (the keeper stalled): the same words, in
	# the session and in the server log
	my $keeper = keeper_pid_of($node);
	my $off = -s $node->logfile;
	$s = session('terminated_self', user => 'app');
	$s->send("SELECT redsem_acquire('termw', 1, '3 s') IS NOT NULL; SELECT pg_sleep(30);");
	ok(defined wait_until(10, sub { $redis->zcard('termw', 'owner') == 1 }), 'termw: it holds');
	kill 'STOP', $keeper;
	my $ended = $s->wait_exit(10);
	kill 'CONT', $keeper;
	ok($ended, 'its keeper stalled: its watchdog ends the session');
	like($s->stderr_so_far,
		qr/FATAL:  57P01: terminating connection because the slot of semaphore "termw" was lost\nDETAIL:  Redis had not confirmed its lease of 3000 ms for \d+ ms/,
		'saying why');
	like(slurp_file($node->logfile, $off), qr/FATAL:  (?:57P01: )?terminating connection because the slot of semaphore "termw" was lost/,
		'so does the server log');
	# an administrator's own pg_terminate_backend of a session whose slots
	# are fine keeps PostgreSQL's words
	$s = session('terminated_by_dba', user => 'app');
	$s->send("SELECT redsem_acquire('termd', 1, '60 s') IS NOT NULL; SELECT pg_sleep(30);");
	ok(defined wait_until(10, sub { $redis->zcard('termd', 'owner') == 1 }), 'termd: it holds');
	$node->safe_psql('postgres', "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'app' AND state = 'active' AND query LIKE '%pg_sleep(30)%'");
	ok($s->wait_exit(10), 'a session ended by pg_terminate_backend');
	like($s->stderr_so_far, qr/FATAL:  57P01: terminating connection due to administrator command/, 'says what PostgreSQL says');

	$node->safe_psql('postgres', 'ALTER ROLE app SET redsem.on_slot_lost = warn');
	$s = session('warned', user => 'app');
	$s->send("SELECT redsem_acquire('warn', 1, '3 s') IS NOT NULL; SELECT pg_sleep(2); SELECT 'ran';");
	ok(defined wait_until(10, sub { $redis->zcard('warn', 'owner') == 1 }), 'warn: it holds');  # (not a fixed sleep: a slow first call)
	forget('warn');
	my ($o, $e) = $s->wait_done(10);
	like($o, qr/^t\n\nran$/, 'warn: the statement runs on, and so does the next');
	like($e, qr/WARNING:  01000: the slot of semaphore "warn" was lost/, 'which gets a WARNING');
	($o, $e) = $s->query('SELECT 4;');
	is($e, '', 'once');
	$s->quit;
	$node->safe_psql('postgres', 'ALTER ROLE app RESET redsem.on_slot_lost');
}

###########################################################################
note 'a lost transaction slot whose error was caught (a savepoint): the transaction still cannot commit';
{
	my $s = session('sp');
	$s->query_ok("\\set ON_ERROR_ROLLBACK on\nBEGIN; SELECT redsem_acquire_xact('sp', 1, '3 s') IS NOT NULL;");
	$s->send('SELECT pg_sleep(30);');
	usleep(300_000);
	forget('sp');
	my ($o, $e) = $s->wait_done(20);
	like($e, lost_error('sp'), 'the statement is stopped');
	($o, $e) = $s->query("INSERT INTO done VALUES ('sp-after-loss');");
	is($e, '', 'psql rolled back to its savepoint, and the transaction went on');
	($o, $e) = $s->query('COMMIT;');
	like($e, lost_error('sp'), 'but COMMIT fails, telling the loss again');
	is($node->safe_psql('postgres', "SELECT count(*) FROM done WHERE t = 'sp-after-loss'"), '0',
		'and nothing done after the loss is committed');

	# nor once the lost slot was given back or refreshed in the transaction
	for my $how ('release', 'refresh')
	{
		$s->query_ok("BEGIN; SELECT redsem_acquire_xact('sp2', 1, '3 s') AS id \\gset");
		$s->send('SELECT pg_sleep(30);');
		usleep(300_000);
		forget('sp2');
		($o, $e) = $s->wait_done(20);
		like($e, lost_error('sp2'), "$how: the statement is stopped");
		$s->query("INSERT INTO done VALUES ('sp2-$how'); SELECT redsem_$how('sp2', :'id');");
		($o, $e) = $s->query('COMMIT;');
		like($e, lost_error('sp2'), "$how: COMMIT still fails");
		like($e, qr/HINT:  The transaction cannot commit: roll it back/, "$how: saying the transaction must roll back");
		is($node->safe_psql('postgres', "SELECT count(*) FROM done WHERE t = 'sp2-$how'"), '0',
			"$how: nothing done after the loss is committed");
	}
	$s->quit;
}

###########################################################################
note 'the keeper stopped: a short slot taken after a long one is looked at in time';
{
	my $keeper = keeper_pid_of($node);
	my $s = session('stale');
	$s->query_ok("SELECT redsem_acquire('long', 1, '1 h') IS NOT NULL;");
	$s->query_ok("BEGIN; SELECT redsem_acquire_xact('short', 1, '3 s') IS NOT NULL;");
	kill 'STOP', $keeper;
	sleep_full(3);
	my ($o, $e) = $s->query("INSERT INTO done VALUES ('stale'); SELECT 'ran';");
	kill 'CONT', $keeper;
	like($e, lost_error('short'), 'the next statement fails (the backend\'s own look)');
	$s->query('ROLLBACK;');
	$s->quit;
}

###########################################################################
note 'a portal run again by a protocol-level Execute after the loss';
{
	my $sock = $node->host . '/.s.PGSQL.' . $node->port;
	my $c = IO::Socket::UNIX->new(Peer => $sock) or die "connect $sock: $!";
	$c->autoflush(1);
	my $params = "user\0postgres\0database\0postgres\0\0";
	print $c pack('NN', 8 + length($params), 196608) . $params;
	my $read = sub {
		my ($t, $len, $body);
		read($c, $t, 1) == 1 or return;
		read($c, $len, 4);
		$len = unpack('N', $len) - 4;
		$body = '';
		read($c, $body, $len) if $len > 0;
		return ($t, $body);
	};
	my $until = sub {
		my ($want) = @_;
		my @msgs;
		while (my ($t, $b) = $read->()) { push @msgs, [ $t, $b ]; last if index($want, $t) >= 0; }
		return @msgs;
	};
	my $msg = sub { my ($t, $b) = @_; print $c $t . pack('N', 4 + length($b)) . $b; };
	my $simple = sub { $msg->('Q', "$_[0]\0"); return $until->('Z'); };
	$until->('Z');
	$simple->('BEGIN');
	$simple->("SELECT redsem_acquire_xact('portal', 1, '3 s')");
	$msg->('P', "\0SELECT g FROM generate_series(1, 100000) g\0\0\0");
	$msg->('B', "cur\0\0\0\0\0\0\0\0");
	$msg->('E', "cur\0" . pack('N', 10));
	$msg->('H', '');
	my @r = $until->('s');
	is(scalar(grep { $_->[0] eq 'D' } @r), 10, 'a portal gives its first 10 rows');
	forget('portal');
	ok(wait_until(10, sub {
		$node->safe_psql('postgres', "SELECT count(*) FROM redsem_server_holds() WHERE name = 'portal' AND state = 'lost'") eq '1' }),
		'the keeper finds the slot gone');
	$msg->('E', "cur\0" . pack('N', 10));
	$msg->('H', '');
	@r = $until->('sCE');
	my ($err) = map { $_->[1] } grep { $_->[0] eq 'E' } @r;
	is(scalar(grep { $_->[0] eq 'D' } @r), 0, 'the next Execute gives no row');
	like($err // '', qr/the slot of semaphore "portal" was lost/, 'but the error');
	$msg->('S', '');
	$until->('Z');
	$simple->('ROLLBACK');
	$msg->('X', '');
	close $c;
}

###########################################################################
note 'policy warn: a lease that went unconfirmed is told, once, and the slot kept';
{
	my $s = session('warn_cut');
	$s->query_ok("SET redsem.on_slot_lost = warn; SELECT redsem_acquire('warn_cut', 1, '3 s') IS NOT NULL;");
	kill 'STOP', $proxy_pid;
	sleep_full(4);
	my ($o, $e) = $s->query('SELECT 5;');
	kill 'CONT', $proxy_pid;
	like($e, qr/WARNING:  01000: the slot of semaphore "warn_cut" was lost\nDETAIL:  Redis had not confirmed its lease/,
		'the next statement gets a WARNING');
	is($o, '5', 'and runs');
	($o, $e) = $s->query('SELECT 6;');
	unlike($e, qr/had not confirmed/, 'once');
	$s->quit;
}

node_log_is_clean($node, 'no crash, no assertion failure');
$node->stop;
$redis->stop;
done_testing();
