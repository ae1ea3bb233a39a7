
# 094_queue_fleet.pl - statement queues defined once for the fleet, in
# Redis, with SQL (issue 49, item 7): redsem_create_queue on one server
# applies on the other within a second or two; redsem_alter_queue moves a
# busy queue's cap 2 -> 3 -> 1 -> 4 on two servers with no statement
# error and the cap holding; options other than the cap reach the other
# server; bad input and ordinary roles are refused with nothing left in
# Redis; a redsem.queues that disagrees is not applied and says so; Redis
# forgetting the definitions (FLUSHALL) gets them back from a server's
# copy, and a server restarted while Redis is away applies its copy from
# the data directory; a definition a direct writer garbled is refused
# loudly; a dropped queue stops queueing, and the statements waiting in
# its line when it is dropped run at once.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use RedsemHistory;
use Test::More;
use Time::HiRes qw(time);

my $redis = RedsemTest::Redis->new;
my $a = create_node('fleet_a', $redis);
my $b = create_node('fleet_b', $redis, "redsem.queues = 'other: active_statements=9'\n");
foreach my $n ($a, $b)
{
	RedsemHistory::install($n);
	$n->safe_psql('postgres', q{
CREATE ROLE analyst LOGIN;
CREATE ROLE mallory LOGIN;
CREATE TABLE tq AS SELECT 1 AS x;
GRANT SELECT ON tq TO analyst;
CREATE FUNCTION qwork(hold float8) RETURNS int LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
  RAISE WARNING 'hist rep start % %', hist_uptime(), pg_backend_pid();
  PERFORM pg_sleep(hold);
  RAISE WARNING 'hist rep end % %', hist_uptime(), pg_backend_pid();
  RETURN 1;
END $$;
});
}

# --- refused, with nothing left behind ---
my ($ret, $out, $err) = $a->psql('postgres', "SELECT redsem_create_queue('rep', 'active_statements=0')");
like($err, qr/invalid options for statement queue "rep".*\n.*active_statements must be an integer/s,
	'a bad option is refused, saying which');
($ret, $out, $err) = $a->psql('postgres', "SELECT redsem_create_queue('rep', 'min_cost=5')");
like($err, qr/active_statements is required/, 'active_statements is required');
($ret, $out, $err) = $a->psql('postgres', "SELECT redsem_create_queue('rep', 'active_statements=2; x: active_statements=1')");
like($err, qr/separated by blanks, not ";"/, 'one queue per call');
($ret, $out, $err) = $a->psql('postgres', "SELECT redsem_create_queue('re p', 'active_statements=2')");
like($err, qr/invalid statement queue name/, 'a bad name is refused');
($ret, $out, $err) = $a->psql('postgres', "SELECT redsem_create_queue('rep', 'active_statements=2')",
	extra_params => [ '-U', 'mallory' ]);
like($err, qr/permission denied to create a statement queue/, 'an ordinary role cannot create a queue');
sleep_full(1.5);
is($redis->cli('EXISTS', 'redsem:{queues}', 'redsem:{queues}:servers', 'redsem:{queues}:seen'), '0',
	'nothing was stored in Redis (without definitions, the keepers list no server either)');

# --- defined on one server, applied on both ---
is($a->safe_psql('postgres', "SELECT redsem_create_queue('rep', 'active_statements=2 max_wait=1min')"),
	'active_statements=2 min_cost=0 max_wait=60000ms on_redis_error=fail utility=off',
	'redsem_create_queue returns the definition stored');
$_->safe_psql('postgres', "ALTER ROLE analyst SET redsem.queue = 'rep'") foreach ($a, $b);
ok(defined wait_until(5, sub {
			$b->safe_psql('postgres', "SELECT defined_in || '/' || cap || '/' || max_wait FROM redsem_queues WHERE name = 'rep'")
			  eq 'redis/2/00:01:00' }),
	'the other server applies the definition');
ok(defined wait_until(5, sub { ($redis->cli('HLEN', 'redsem:{queues}:servers') // 0) == 2 }), 'the keepers list their servers');
my $pttl = $redis->cli('PTTL', 'redsem:{queues}:servers');
ok($pttl > 0 && $pttl <= 10000, "the servers' list expires by itself ($pttl ms)");
($ret, $out, $err) = $a->psql('postgres', "SELECT redsem_create_queue('rep', 'active_statements=5')");
like($err, qr/statement queue "rep" already exists/, 'a queue is created once');
($ret, $out, $err) = $a->psql('postgres', "SELECT redsem_alter_queue('nope', 'active_statements=5')");
like($err, qr/statement queue "nope" does not exist/, 'only a queue that exists is changed');
($ret, $out, $err) = $a->psql('postgres', "SELECT redsem_alter_queue('rep', 'active_statements=5')",
	extra_params => [ '-U', 'mallory' ]);
like($err, qr/permission denied to change a statement queue/, 'an ordinary role cannot change a queue');
like($err, qr/HINT:  Ask an administrator to make the change/, 'the hint does not suggest granting redsem_admin to that role');
unlike($err, qr/GRANT redsem_admin TO/, 'nor names a GRANT');
foreach my $call (q{redsem_set_limit('queue:rep', 50)}, q{redsem_set_rate('queue:rep', '1/s')},
	q{redsem_set_reserve('queue:rep', 1, 5)}, q{redsem_set_adaptive_limit('queue:rep', 1, 5)},
	q{redsem_stats_reset('queue:rep')})
{
	($ret, $out, $err) = $a->psql('postgres', "SELECT $call", extra_params => [ '-U', 'mallory' ]);
	like($err, qr/permission denied.*\n(.*\n)*HINT:  Ask an administrator to make the change/,
		"$call on a queue's semaphore: the same hint");
	unlike($err, qr/GRANT redsem_admin TO/, '... naming no GRANT');
}
($ret, $out, $err) = $b->psql('postgres', "ALTER ROLE mallory SET redsem.queue = 'rep'");
unlike($err, qr/not defined/, 'naming a queue of the fleet in ALTER ROLE does not warn');
($ret, $out, $err) = $b->psql('postgres', "ALTER ROLE mallory SET redsem.queue = 'repp'");
like($err, qr/statement queue "repp" is not defined/, 'naming an unknown queue does');
$b->safe_psql('postgres', "ALTER ROLE mallory RESET redsem.queue");

# --- the cap moves under load, on two servers ---
my $STEP_S = 4;
my @CAPS = (2, 3, 1, 4);
my $run_s = $STEP_S * (@CAPS + 1);
my @sessions;
foreach my $n ($a, $b)
{
	for my $i (1 .. 3)
	{
		my $s = RedsemTest::Session->new($n, name => "analyst$i", user => 'analyst');
		$s->send(join(' ', ('SELECT qwork(0.7);') x int($run_s / 0.7)));
		push @sessions, $s;
	}
}
my @changes;    # [uptime, cap before, cap after, uptime the call returned]
my $cap = $CAPS[0];
my $k = 0;
for my $to (@CAPS[ 1 .. $#CAPS ], 2)
{
	sleep_full($STEP_S);
	my $n = ($k++ % 2) ? $b : $a;
	my $at = RedsemHistory::uptime();
	if ($k == @CAPS)
	{
		$n->safe_psql('postgres', "SELECT redsem_set_limit('queue:rep', $to)");
	}
	else
	{
		$n->safe_psql('postgres', "SELECT redsem_alter_queue('rep', 'active_statements=$to')");
	}
	my $done = RedsemHistory::uptime();
	note "cap $cap -> $to at uptime $at (the call returned at $done)";
	push @changes, [ $at, $cap, $to, $done ];
	$cap = $to;
}
my $errors = 0;
foreach my $s (@sessions)
{
	my ($o, $e) = $s->wait_done($run_s + 60);
	my @bad = grep { /ERROR/ } split /\n/, ($e // '');
	$errors += @bad;
	diag("$s->{name}: $_") foreach @bad[ 0 .. ($#bad < 2 ? $#bad : 2) ];
	$s->quit;
}
is($errors, 0, 'no statement failed while the cap moved');
my @iv = RedsemHistory::logged_intervals('rep', $a, $b);
# (a statement admitted just before a change logs its start just after;
# the change itself lands in Redis at some time while its psql runs, which
# on a loaded machine can take over half a second: the larger cap holds
# from the call's start to half a second after it returned)
sub cap_at
{
	my ($t) = @_;
	my $c = $CAPS[0];
	for my $ch (@changes)
	{
		next if $t < $ch->[0];
		$c = ($t < $ch->[3] + 0.5) ? ($ch->[1] > $ch->[2] ? $ch->[1] : $ch->[2]) : $ch->[2];
	}
	return $c;
}
my ($bad, $peak4) = (0, 0);
for my $i (@iv)
{
	my $others = grep { $_ != $i && $_->{start} <= $i->{start} && $_->{end} > $i->{start} } @iv;
	$bad++, note sprintf('a start at %.2f with %d running, cap %d', $i->{start}, $others, cap_at($i->{start}))
	  if $others >= cap_at($i->{start});
	$peak4 = $others + 1 if $i->{start} > $changes[2][0] + 1 && $i->{start} < $changes[3][0] && $others + 1 > $peak4;
}
cmp_ok(scalar(@iv), '>=', 40, scalar(@iv) . ' statements ran');
is($bad, 0, 'no statement started while the cap in effect was reached');
is($peak4, 4, 'the raise to 4 admitted the waiters that fit at once');
is($b->safe_psql('postgres', "SELECT redsem_limit('queue:rep')"), '2', 'redsem_set_limit set the cap');
ok(defined wait_until(5, sub {
			$b->safe_psql('postgres', "SELECT active_statements || '/' || cap FROM redsem_queues WHERE name = 'rep'") eq '2/2' }),
	'and the definition with it (the same operation)');
like(slurp_file($a->logfile), qr/statement queue "rep" changed by role/, 'changes are logged where they are made');
like(slurp_file($b->logfile), qr/statement queue "rep" changed for every server: active_statements=3/,
	'and where they are applied');

# --- an option other than the cap reaches the other server ---
my $bypassed = $b->safe_psql('postgres', "SELECT bypassed FROM redsem_queues WHERE name = 'rep'");
like($a->safe_psql('postgres', "SELECT redsem_alter_queue('rep', 'min_cost=1e9')"), qr/min_cost=1000000000 max_wait=60000ms/,
	'an alter keeps the options it does not name');
ok(defined wait_until(5, sub {
			$b->safe_psql('postgres', "SELECT min_cost FROM redsem_queues WHERE name = 'rep'") eq '1000000000' }),
	'min_cost reaches the other server');
$b->safe_psql('postgres', 'SELECT count(*) FROM tq', extra_params => [ '-U', 'analyst' ]);
cmp_ok($b->safe_psql('postgres', "SELECT bypassed FROM redsem_queues WHERE name = 'rep'"), '>', $bypassed,
	'and applies there: a cheaper statement passes');
$a->safe_psql('postgres', "SELECT redsem_alter_queue('rep', 'min_cost=0 application_name=')");

# --- a redsem.queues that disagrees is not applied, and says so ---
$b->append_conf('postgresql.conf', "redsem.queues = 'rep: active_statements=9; other: active_statements=9'\n");
$b->reload;
ok(defined wait_until(5, sub {
			$b->safe_psql('postgres', "SELECT defined_in || '/' || active_statements || '/' || setting_differs FROM redsem_queues WHERE name = 'rep'")
			  eq 'redis/2/true' }),
	'the definition in Redis applies; redsem_queues shows the setting differs');
ok(defined wait_until(5, sub { slurp_file($b->logfile) =~ /redsem.queues defines statement queues "rep" otherwise than their definitions in Redis/ }),
	'the server log says so');
is($b->safe_psql('postgres', "SELECT defined_in FROM redsem_queues WHERE name = 'other'"), 'redsem.queues',
	'a queue only redsem.queues defines still applies');
my $servers = q{SELECT string_agg(standby || ' ' || queues_of_its_own::text || ' ' || setting_differs::text
		|| ' ' || (last_read > now() - interval '5 s'), ',' ORDER BY server LIKE '%:} . $b->port . q{/%') FROM redsem_queue_servers()};
ok(defined wait_until(5, sub { $a->safe_psql('postgres', $servers) eq 'false {} {} true,false {other} {rep} true' }),
	'redsem_queue_servers lists both servers, with what their redsem.queues does')
  or diag($a->safe_psql('postgres', $servers));

# --- Redis forgets: a server's copy comes back ---
$redis->cli('FLUSHALL');
$redis->end_grace;
ok(defined wait_until(5, sub { ($redis->cli('HGET', 'redsem:{queues}', 'rep') // '') =~ /^active_statements=2 / }),
	'after FLUSHALL a keeper stores its copy again');
ok(defined wait_until(5, sub { (slurp_file($a->logfile) . slurp_file($b->logfile)) =~ /Redis had lost the statement queue definitions/ }),
	'and logs it');

# --- dropped: the last drop leaves the hash, so nothing comes back ---
$a->safe_psql('postgres', "SELECT redsem_create_queue('gone', 'active_statements=1')");
is($a->safe_psql('postgres', "SELECT redsem_drop_queue('gone')"), 't', 'a queue is dropped');
($ret, $out, $err) = $a->psql('postgres', "SELECT redsem_drop_queue('gone')");
like($err, qr/statement queue "gone" does not exist/, 'once');
($ret, $out, $err) = $a->psql('postgres', "SELECT redsem_drop_queue('gone', if_exists => true)");
like($err, qr/does not exist, skipping/, 'if_exists only notes it');
is($a->safe_psql('postgres', "SELECT redsem_limit('queue:gone')"), '1000000',
	'its cap went with it (an open limit stays for some seconds: below)');
is($redis->cli('HEXISTS', 'redsem:{queues}', '!gone'), '1', 'the definitions note when it is to be removed');
# (every keeper that saw the drop restarts within its window: the note in
# Redis, not their memory, has the open limit removed; a review found it
# stored for good)
my @keepers = (keeper_pid_of($a), keeper_pid_of($b));
kill 'TERM', @keepers;
ok(defined wait_until(20, sub {
			my ($ka, $kb) = (keeper_pid_of($a), keeper_pid_of($b));
			$ka && $kb && $ka != $keepers[0] && $kb != $keepers[1] }),
	'both keepers restart right after the drop');

# --- a busy queue dropped: its line is let in at once, on both servers ---
$a->safe_psql('postgres', "SELECT redsem_create_queue('busy', 'active_statements=1 max_wait=30s')");
ok(defined wait_until(5, sub {
			$b->safe_psql('postgres', "SELECT count(*) FROM redsem_queues WHERE name = 'busy'") eq '1' }),
	'a queue "busy" is applied on both servers');
my $long = RedsemTest::Session->new($a, name => 'busy long');
$long->query_ok(q{SET redsem.queue = 'busy';});
$long->send(q{SELECT count(*) FROM tq, pg_sleep(120);});
ok(defined wait_until(10, sub {
			$a->safe_psql('postgres', "SELECT running FROM redsem_queues WHERE name = 'busy'") eq '1' }),
	'a long statement fills it');
my @line;
foreach my $n ($a, $b, $b)
{
	my $s = RedsemTest::Session->new($n, name => 'busy line');
	$s->query_ok(q{SET redsem.queue = 'busy';});
	$s->send(q{SELECT count(*) FROM tq;});
	push @line, $s;
}
ok(defined wait_until(10, sub {
			$a->safe_psql('postgres', "SELECT waiting FROM redsem_queues WHERE name = 'busy'") eq '3' }),
	'three statements wait in its line, from both servers');
$a->safe_psql('postgres', "SELECT redsem_drop_queue('busy')");
my $dropped_at = time;
my @ran = grep { my ($o, $e) = $_->wait_done(20); defined $o && $o eq '1' && $e eq '' } @line;
my $took = time - $dropped_at;
ok(@ran == 3 && $took < 3,
	sprintf('dropping it lets the statements in its line run at once (%d of 3 ran, %.1f s)', scalar(@ran), $took));
is(scalar(my @still = $long->wait_done(0)), 0, 'while its long statement runs on');
is($a->safe_psql('postgres', "SELECT redsem_limit('queue:busy')"), '1000000',
	'the drop left its semaphore an open limit, for statements of servers that have not read the drop yet');
my $late = RedsemTest::Session->new($b, name => 'busy late');
$late->query(q{SET redsem.queue = 'busy';});
my ($late_out, undef, $late_s) = $late->query(q{SELECT count(*) FROM tq;}, 20);
ok($late_out eq '1' && $late_s < 2, sprintf('a statement of it that comes now runs at once (%.1f s)', $late_s));
$a->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $long->backend_pid . ')');
ok(defined(($long->wait_done(20))[0]), 'the long statement is cancelled');
ok(defined wait_until(40, sub { $a->safe_psql('postgres', "SELECT redsem_limit('queue:busy')") eq '' }),
	'the keepers remove the open limit later: no cap of the dropped queue is left stored');
ok(defined wait_until(30, sub {
			$a->safe_psql('postgres', "SELECT redsem_limit('queue:gone')") eq ''
			  && $redis->cli('HEXISTS', 'redsem:{queues}', '!gone') eq '0' }),
	'the restarted keepers remove the open limit of the queue dropped before they started, and its note');
$late->quit;

# --- restarted while Redis is away: the copy in the data directory ---
$b->stop;
ok(defined wait_until(15, sub { $a->safe_psql('postgres', 'SELECT count(*) FROM redsem_queue_servers()') eq '1' }),
	'a server that stopped leaves the list within ten seconds');
$redis->stop;
$b->start;
is($b->safe_psql('postgres', "SELECT defined_in || '/' || active_statements FROM redsem_queues WHERE name = 'rep'"),
	'redis/2', 'a server restarted while Redis is away applies its copy');
($ret, $out, $err) = $b->psql('postgres', 'SELECT count(*) FROM tq', extra_params => [ '-U', 'analyst' ]);
like($err, qr/ERROR:.*redis/i, 'so a queued statement fails (on_redis_error=fail), not runs unqueued');
$redis->start;
$redis->end_grace;
$b->append_conf('postgresql.conf', "redsem.queues = 'other: active_statements=9'\n");
$b->reload;

ok(defined wait_until(5, sub { ($redis->cli('HEXISTS', 'redsem:{queues}', 'rep') // '') eq '1' }),
	'the restarted Redis gets the definitions back');

# --- a change made before any keeper restored them restores them first ---
$redis->stop;
$redis->start;
$redis->end_grace;
$a->safe_psql('postgres', "SELECT redsem_create_queue('first', 'active_statements=1')");
is($redis->cli('HEXISTS', 'redsem:{queues}', 'rep'), '1', 'a queue created at once after Redis forgot does not hide the others');
$a->safe_psql('postgres', "SELECT redsem_drop_queue('first')");

# --- a definition garbled by a direct writer is refused loudly ---
$redis->cli('HSET', 'redsem:{queues}', 'bad', 'active_statements=zero');
ok(defined wait_until(5, sub { slurp_file($a->logfile) =~ /definition of statement queue "bad" in Redis is not valid/ }),
	'a garbled definition is logged');
is($a->safe_psql('postgres', "SELECT count(*) FROM redsem_queues WHERE name = 'bad'"), '0', 'and not applied');
$redis->cli('HDEL', 'redsem:{queues}', 'bad');
# a queue applied before keeps its last valid definition (helper-154: it was
# dropped for every server, and the keepers' copies lost it)
my $rep_was = $redis->cli('HGET', 'redsem:{queues}', 'rep');
my $goff = -s $a->logfile;
$redis->cli('HSET', 'redsem:{queues}', 'rep', 'garbage=zz;;;');
ok(defined wait_until(5, sub { slurp_file($a->logfile, $goff) =~ /definition of statement queue "rep" in Redis is not valid; it is not applied\n.*DETAIL:  .*A queue applied before keeps its last valid definition/ }),
	'a garbled definition of a queue in use is logged');
RedsemTest::sleep_full(2);
is($a->safe_psql('postgres', "SELECT count(*) FROM redsem_queues WHERE name = 'rep'"), '1', 'and the queue stays, as it was');
unlike(slurp_file($a->logfile, $goff), qr/statement queue "rep" dropped/, 'nothing says it was dropped');
$redis->cli('HSET', 'redsem:{queues}', 'rep', $rep_was);
# a change counter another program wrote (helper-154: 58000, with a hint
# about FCALL being disabled) is a key conflict
my $count_was = $redis->cli('HGET', 'redsem:{queues}', '#');
$redis->cli('HSET', 'redsem:{queues}', '#', '1e300');
($ret, $out, $err) = $a->psql('postgres', "\\set VERBOSITY verbose\nSELECT redsem_create_queue('counted', 'active_statements=1')");
like($err, qr/ERROR:  38000: Redis .*rejected a redsem operation\n.*\nHINT:  Make sure no other program writes to keys under redsem.key_prefix/s,
	'a change counter another program wrote: 38000, and the hint says why');
$redis->cli('HSET', 'redsem:{queues}', '#', $count_was);
is($redis->cli('HEXISTS', 'redsem:{queues}', 'counted'), '0', 'and nothing was stored');
my ($lib) = RedsemTest::redsem_library();
my (undef, $ferr) = $redis->cli('FCALL', $lib, '1', 'redsem:{x}:owner', 'queue_drop', 'rep');
my ($fout) = $redis->cli('FCALL', $lib, '1', 'redsem:{x}:owner', 'queue_drop', 'rep');
like(($fout // '') . $ferr, qr/bad arguments for queue_drop/, 'the queue operations refuse a key that is not the definitions\'');
is($redis->cli('HEXISTS', 'redsem:{queues}', 'rep'), '1', 'so nothing was dropped');

# --- dropped: the statements are no longer queued ---
is($a->safe_psql('postgres', "SELECT redsem_drop_queue('rep')"), 't', 'the busy queue is dropped');
ok(defined wait_until(5, sub {
			$b->safe_psql('postgres', "SELECT count(*) FROM redsem_queues WHERE name = 'rep'") eq '0' }),
	'on every server');
$redis->stop;
is($b->safe_psql('postgres', 'SELECT count(*) > 0 FROM tq', extra_params => [ '-U', 'analyst' ]), 't',
	'its statements run without Redis now');

node_log_is_clean($_, $_->name . ': no crash') foreach ($a, $b);
$_->stop foreach ($a, $b);
done_testing();
