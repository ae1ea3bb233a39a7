
# 003_session_exit.pl - a session that ends, or a wait that is interrupted,
# gives its slots and its place in line back at once, not when a lease or a
# keepalive runs out.
#
# Every lease here is 60 s and every waiter's keepalive 15 s, so anything
# left behind in Redis would keep the next waiter out far longer than the
# few seconds these checks allow.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use IPC::Run;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

# Generous bounds: only a leftover (60 s lease, 15 s keepalive) could
# exceed them.
my $PROMPT = 5;

my $redis = RedsemTest::Redis->new;
my $node = create_node('main', $redis);
my $ctl = RedsemTest::Session->new($node, name => 'ctl');

sub session { return RedsemTest::Session->new($node, name => $_[0]); }

# A session holding one session-scoped slot of $sem.
sub holder
{
	my ($label, $sem, $limit) = @_;
	my $s = session($label);
	is($s->query_ok(qq{SELECT redsem_acquire('$sem', $limit, '60 s') IS NOT NULL;}),
		't', "$label holds a slot of $sem");
	return $s;
}

# A session waiting in line for $sem; returns once it is in line.
sub waiter
{
	my ($label, $sem, $limit, $wait, $in_line) = @_;
	my $s = session($label);
	$s->send(qq{SELECT redsem_acquire('$sem', $limit, '60 s', '$wait') IS NOT NULL;});
	ok(defined wait_until(30, sub { $redis->zcard($sem, 'waiting') >= $in_line }),
		"$label is waiting in line for $sem");
	# the wait shows in pg_stat_activity as an Extension wait event, named
	# RedsemSlot since PostgreSQL 17 (custom wait event names)
	my $pid = $s->backend_pid;
	ok($node->poll_query_until('postgres',
			"SELECT wait_event_type = 'Extension' AND wait_event =
			        CASE WHEN current_setting('server_version_num')::int >= 170000
			             THEN 'RedsemSlot' ELSE 'Extension' END
			   FROM pg_stat_activity WHERE pid = $pid"),
		"$label shows the redsem wait event while in line");
	return $s;
}

# Wait for a waiter's acquire to return; check it got the slot promptly
# after $since.  A waiter stuck behind a leftover is cancelled after a while,
# so that a failure does not hold up the whole run for a minute.
sub gets_in
{
	my ($s, $since, $what) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my ($out, $err) = $s->wait_done(3 * $PROMPT);
	my $elapsed = time - $since;
	unless (defined $out)
	{
		fail("$s->{name} gets the slot $what: still waiting after "
			  . 3 * $PROMPT . " s");
		$ctl->query_ok('SELECT pg_cancel_backend(' . $s->backend_pid . ');');
		$s->wait_done(60);
		return;
	}
	is($out, 't', "$s->{name} gets the slot $what");
	is($err, '', "$s->{name}: no error");
	note sprintf("%s got in %.3f s %s", $s->{name}, $elapsed, $what);
	cmp_ok($elapsed, '<', $PROMPT, "$s->{name} got in promptly ($what)");
}

sub in_redis
{
	my ($sem, $owner, $waiting, $label) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my $ok = wait_until(
		$PROMPT,
		sub {
			$redis->zcard($sem, 'owner') == $owner
			  && $redis->zcard($sem, 'waiting') == $waiting;
		});
	ok(defined $ok,
		"$label: $owner in owner and $waiting waiting for $sem") or diag(
		sprintf("owner=%d waiting=%d",
			$redis->zcard($sem, 'owner'),
			$redis->zcard($sem, 'waiting')));
	return $ok;
}

# pg_terminate_backend, then wait until the backend is gone.
sub terminate
{
	my ($s) = @_;
	my $pid = $s->backend_pid;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	is($ctl->query_ok("SELECT pg_terminate_backend($pid);"),
		't', "terminate $s->{name}");
	my $gone = wait_until(
		30,
		sub {
			$ctl->query_ok(
				"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid;") eq
			  '0';
		});
	ok(defined $gone, "$s->{name}'s backend is gone");
	note sprintf("%s's backend exited %.3f s after pg_terminate_backend",
		$s->{name}, $gone // -1);
}

sub cancel
{
	my ($s) = @_;
	is($ctl->query_ok('SELECT pg_cancel_backend(' . $s->backend_pid . ');'),
		't', "cancel $s->{name}");
}

# --- (a) normal disconnect, holding session- and xact-scoped slots ---------
{
	my $h = session('holder_a');
	is( $h->query_ok(
			q{SELECT redsem_acquire('exit_a', 2, '60 s') IS NOT NULL;
BEGIN;
SELECT redsem_acquire_xact('exit_a', 2, '60 s') IS NOT NULL;}),
		"t\nt",
		'holder_a holds a session slot and, in an open transaction, an xact slot');
	my $w1 = waiter('waiter_a1', 'exit_a', 2, '30 s', 1);
	my $w2 = waiter('waiter_a2', 'exit_a', 2, '30 s', 2);
	in_redis('exit_a', 4, 2, 'before disconnect');

	my $t0 = time;
	$h->quit;
	gets_in($w1, $t0, 'after the holder disconnected');
	gets_in($w2, $t0, 'after the holder disconnected');
	in_redis('exit_a', 2, 0, 'after disconnect');

	$t0 = time;
	$w1->quit;
	$w2->quit;
	in_redis('exit_a', 0, 0, 'after the waiters disconnected too');
	note sprintf("slots freed %.3f s after disconnect", time - $t0);
}

# --- (b) pg_terminate_backend of a holder ----------------------------------
{
	my $h = session('holder_b');
	is( $h->query_ok(
			q{SELECT redsem_acquire('exit_b', 2, '60 s') IS NOT NULL;
BEGIN;
SELECT redsem_acquire_xact('exit_b', 2, '60 s') IS NOT NULL;}),
		"t\nt",
		'holder_b holds a session slot and an xact slot');
	my $w1 = waiter('waiter_b1', 'exit_b', 2, '30 s', 1);
	my $w2 = waiter('waiter_b2', 'exit_b', 2, '30 s', 2);

	my $t0 = time;
	terminate($h);
	gets_in($w1, $t0, 'after the holder was terminated');
	gets_in($w2, $t0, 'after the holder was terminated');
	in_redis('exit_b', 2, 0, 'after terminate');
	$h->quit;
	$w1->quit;
	$w2->quit;
	in_redis('exit_b', 0, 0, 'after the waiters disconnected');
}

# --- (c) pg_terminate_backend of a waiter in line --------------------------
{
	my $h = holder('holder_c', 'exit_c', 1);
	my $v = waiter('victim_c', 'exit_c', 1, '60 s', 1);
	my $w = waiter('waiter_c', 'exit_c', 1, '60 s', 2);
	in_redis('exit_c', 3, 2, 'holder and two waiters');

	my $t0 = time;
	terminate($v);
	note sprintf("terminated waiter's place gone %.3f s after terminate",
		time - $t0)
	  if in_redis('exit_c', 2, 1, 'terminated waiter left the line');

	$t0 = time;
	is($h->query_ok('SELECT redsem_release_all();'), '1', 'holder_c releases');
	gets_in($w, $t0, 'behind the terminated waiter, as soon as the holder released');
	in_redis('exit_c', 1, 0, 'only the new holder left');
	is($w->query_ok('SELECT redsem_release_all();'), '1', 'waiter_c releases');
	in_redis('exit_c', 0, 0, 'nothing left');
	$_->quit for ($h, $v, $w);
}

# --- (d) pg_cancel_backend of a waiter -------------------------------------
{
	my $h = holder('holder_d', 'exit_d', 1);
	my $v = waiter('victim_d', 'exit_d', 1, '60 s', 1);
	my $w = waiter('waiter_d', 'exit_d', 1, '60 s', 2);

	my $t0 = time;
	cancel($v);
	my ($out, $err) = $v->wait_done(60);
	my $elapsed = time - $t0;
	like($err, qr/ERROR:  57014: canceling statement due to user request/,
		'cancelled waiter gets 57014');
	note sprintf("cancelled wait ended %.3f s after the cancel", $elapsed);
	cmp_ok($elapsed, '<', 2, 'the cancelled wait ends quickly');
	in_redis('exit_d', 2, 1, 'cancelled waiter left the line');
	is($v->query_ok('SELECT 1;'), '1', 'the cancelled session goes on');

	$t0 = time;
	is($h->query_ok('SELECT redsem_release_all();'), '1', 'holder_d releases');
	gets_in($w, $t0, 'behind the cancelled waiter, as soon as the holder released');
	in_redis('exit_d', 1, 0, 'only the new holder left');
	is($v->query_ok('SELECT redsem_release_all();'),
		'0', 'the cancelled session holds nothing');
	$_->quit for ($h, $v, $w);
	in_redis('exit_d', 0, 0, 'nothing left');
}

# --- (e) statement_timeout during a wait -----------------------------------
{
	my $h = holder('holder_e', 'exit_e', 1);
	my $v = session('victim_e');
	$v->query_ok(q{SET statement_timeout = '1s';});
	$v->send(q{SELECT redsem_acquire('exit_e', 1, '60 s', '60 s');});
	ok(defined wait_until(30, sub { $redis->zcard('exit_e', 'waiting') >= 1 }),
		'victim_e is in line');
	my $w = waiter('waiter_e', 'exit_e', 1, '60 s', 1);

	my ($out, $err, $elapsed) = $v->wait_done(60);
	like($err, qr/ERROR:  57014: canceling statement due to statement timeout/,
		'statement_timeout ends the wait with 57014');
	note sprintf("wait with statement_timeout 1s ended after %.3f s", $elapsed);
	cmp_ok($elapsed, '<', 3, 'the wait ends soon after statement_timeout');
	in_redis('exit_e', 2, 1, 'timed-out waiter left the line');

	my $t0 = time;
	is($h->query_ok('SELECT redsem_release_all();'), '1', 'holder_e releases');
	gets_in($w, $t0, 'behind the timed-out waiter, as soon as the holder released');
	in_redis('exit_e', 1, 0, 'only the new holder left');
	$_->quit for ($h, $v, $w);
	in_redis('exit_e', 0, 0, 'nothing left');
}

# --- (f) the wait runs out --------------------------------------------------
{
	my $h = holder('holder_f', 'exit_f', 1);
	my $v = session('victim_f');
	my ($out, $err, $elapsed) = $v->query(
		q{SELECT redsem_acquire('exit_f', 1, '60 s', '300 ms') IS NULL;});
	is($out, 't', 'a wait that runs out returns NULL');
	is($err, '', 'and raises nothing');
	note sprintf("300 ms wait returned after %.3f s", $elapsed);
	cmp_ok($elapsed, '<', 3, 'the wait ends soon after it runs out');
	in_redis('exit_f', 1, 0, 'the waiter left the line');
	$_->quit for ($h, $v);
	in_redis('exit_f', 0, 0, 'nothing left');
}

# --- (h) the waiter's client is gone ---------------------------------------
# Its psql is killed: the kernel closes the connection, and nobody will read
# the result.  Without client_connection_check_interval (not set here) the
# waiter leaves the line at once all the same: its backend ends as that
# setting's check ends one ("connection to client lost"), and the waiter
# behind it is next.
{
	my $h = holder('holder_h', 'exit_h', 1);
	my $dead = waiter('dead_h', 'exit_h', 1, '60 s', 1);
	my $next = waiter('next_h', 'exit_h', 1, '60 s', 2);
	my $pid = $dead->backend_pid;
	$dead->{h}->signal('KILL');
	$dead->{finished} = 1;
	ok(defined wait_until($PROMPT, sub { $redis->zcard('exit_h', 'waiting') == 1 }),
		'the waiter whose client is gone leaves the line');
	ok(defined wait_until($PROMPT, sub {
				$ctl->query_ok("SELECT count(*) FROM pg_stat_activity WHERE pid = $pid;") eq "0" }),
		'... and its backend ends')
	  or diag $ctl->query_ok("SELECT state, wait_event_type, wait_event, backend_type FROM pg_stat_activity WHERE pid = $pid;");
	like(slurp_file($node->logfile), qr/connection to client lost/,
		'... saying that its client was lost');
	is($h->query_ok('SELECT redsem_release_all();'), '1', 'holder_h releases');
	my ($out) = $next->wait_done(3 * $PROMPT);
	is($out, 't', 'the live waiter behind it gets the slot');
	$_->quit for ($h, $next);
	in_redis('exit_h', 0, 0, 'nothing left');
}

# --- (i) a transaction sent whole, then the client gone ---------------------
# PostgreSQL runs it to its COMMIT (no client_connection_check_interval);
# so does redsem: only a wait in line ends for a client that is gone
# (helper-147: the first version of (h) rolled this back).
{
	$ctl->query_ok('CREATE TABLE exit_i (k text);');
	my ($in, $out, $err) = ('', '', '');
	my $h = IPC::Run::start([ 'psql', '-X', '-d', $node->connstr('postgres'), '-c',
			q{BEGIN; INSERT INTO exit_i VALUES ('a'); SELECT pg_sleep(1);
			  SELECT redsem_acquire_xact('exit_i', 2, wait => '0') IS NOT NULL;
			  INSERT INTO exit_i VALUES ('b'); COMMIT;} ], \$in, \$out, \$err);
	usleep(400_000);
	$h->signal('KILL');
	eval { $h->finish; 1 };
	ok(defined wait_until($PROMPT, sub { $ctl->query_ok('SELECT count(*) FROM exit_i;') eq '2' }),
		'a transaction whose client left after sending it whole commits, its acquire included');
	in_redis('exit_i', 0, 0, 'its slot went with the commit');
}

# Released semaphores keep their keys for GRACE (1 s) at most.
ok(defined wait_until(10, sub { !$redis->scan_keys('redsem:{*') }),
	'every redsem key expires once nothing is held')
  or diag(join(' ', $redis->scan_keys('redsem:{*')));

$ctl->quit;
node_log_is_clean($node);

# --- (g) the postmaster dies while a session's exit waits on Redis ----------
# The exit callback waits (at most 1 s) for a frozen Redis and cannot be
# cancelled.  Once the postmaster is gone, that wait gives up at once rather
# than waking again and again until its deadline, burning a core.
{
	my $h = holder('holder_g', 'exit_g', 1);
	my $pid = $h->backend_pid;
	$redis->freeze;
	$h->quit;
	sleep_full(0.1);
	$node->kill9;
	my $before = cpu_ticks($pid);
	sleep_full(0.4);
	my $after = cpu_ticks($pid);
	my $used = (defined $before && defined $after) ? $after - $before : 0;
	note sprintf('backend %d after the postmaster died: %s, %d ticks in 0.4 s',
		$pid, defined $after ? 'still there' : 'gone', $used);
	cmp_ok($used, '<', 10,
		'a backend waiting on Redis at exit does not spin once the postmaster is gone');
	ok(defined wait_until(10, sub { !defined cpu_ticks($pid) }),
		'and it exits');
	$redis->thaw;
}

$redis->stop;
done_testing();
