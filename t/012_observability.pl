
# 012_observability.pl - redsem_stats, redsem_holders, redsem_held and
# redsem_token report what happened.
#
# A scripted sequence on semaphore "obs" (limit 2) with known outcomes:
#   A and B acquire                      acquired 2
#   E tries while full                   refused 1
#   D waits 300 ms, times out            waited 1, wait_timeouts 1
#   C, then F wait in line; A releases (C gets in), B releases (F gets in),
#   C and F release                      acquired 4, waited 3, released 4
#   A acquires, its keys vanish from Redis, A releases: false
#                                        acquired 5, expired 1
#   A acquires, its keys vanish, A refreshes: false
#                                        acquired 6, lost 1
#   Redis down, A refreshes              redis_errors 1
# Every lease is 60 s: the keeper's first refresh would come after 20 s, so
# it never touches these holds (it would count a vanished hold as lost).

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

use Time::HiRes qw(time usleep);

# After Redis was started again: in broker mode the broker tries an address
# where nothing served again only after 100 ms (ACQUIRE_RIDE_PAUSE_MS), so
# a call at once could still be told that nothing serves there
sub back_again
{
	usleep(250_000) if broker_mode();
	return;
}

my $redis = RedsemTest::Redis->new;
my $node = create_node('obs', $redis);
my $user = $node->safe_psql('postgres', 'SELECT current_user');

# A session with its own application_name.
sub session
{
	my ($label) = @_;
	my $s = RedsemTest::Session->new($node, name => $label);
	$s->query_ok("SET application_name = 'app_$label';");
	return $s;
}

sub stats
{
	my ($name) = @_;
	return $node->safe_psql('postgres',
		qq{SELECT acquired, refused, waited, wait_timeouts, released, expired, lost, redis_errors
		   FROM redsem_stats WHERE name = '$name'});
}

# Remove every trace of the semaphore's members from Redis, as if their
# leases had run out (the ticket counter stays).
sub vanish
{
	my ($sem) = @_;
	$redis->cli('DEL', map { "redsem:{$sem}:$_" } qw(owner timeout info waiting state));
}

my $ctl = RedsemTest::Session->new($node, name => 'ctl');
is($ctl->query_ok('SELECT count(*) FROM redsem_stats;'), '0', 'no statistics yet');

###########################################################################
note 'the sequence';

my %s = map { $_ => session($_) } qw(A B C D E F);
my %id;
$id{a1} = $s{A}->query_ok(q{SELECT redsem_acquire('obs', 2, '60 s');});
$id{b1} = $s{B}->query_ok(q{SELECT redsem_acquire('obs', 2, '60 s');});
like($id{$_}, qr/^[0-9a-f]{16}\./, "$_ acquired") foreach qw(a1 b1);
is($s{E}->query_ok(q{SELECT redsem_acquire('obs', 2, '60 s') IS NULL;}), 't', 'E is refused');
my ($out, $err, $secs) = $s{D}->query(q{SELECT redsem_acquire('obs', 2, '60 s', '300 ms') IS NULL;});
is("$out|$err", 't|', 'D waits 300 ms and gives up');

$s{C}->send(q{SELECT redsem_acquire('obs', 2, '60 s', '30 s');});
ok(defined wait_until(30, sub { $redis->zcard('obs', 'waiting') == 1 }), 'C waits in line');
$s{F}->send(q{SELECT redsem_acquire('obs', 2, '60 s', '30 s');});
ok(defined wait_until(30, sub { $redis->zcard('obs', 'waiting') == 2 }), 'F waits in line behind C');

# Holders, then waiters, in line order.
my @rows = map { [ split /\|/, $_, -1 ] } split /\n/, $ctl->query_ok(q{
	SELECT position, state, id, ticket, lease_expires_at IS NOT NULL,
	       coalesce(lease_expires_at > now() + interval '30 s', false),
	       server, pid, database, username, application_name
	FROM redsem_holders('obs');});
is(scalar @rows, 4, 'redsem_holders lists four members');
my @who = qw(A B C F);
foreach my $i (0 .. 3)
{
	my $r = $rows[$i] // [];
	my $w = $who[$i];
	my $state = $i < 2 ? 'holding' : 'waiting';
	is($r->[0], $i + 1, "row $i: position " . ($i + 1));
	is($r->[1], $state, "row $i: $w is $state");
	is($r->[7], $s{$w}->backend_pid, "row $i: pid of $w");
	is(join('|', @$r[ 6, 8, 9, 10 ]), "obs|postgres|$user|app_$w",
		"row $i: server, database, username, application_name of $w");
	if ($i < 2)
	{
		is($r->[2], $id{ lc($w) . '1' }, "row $i: id of $w");
		is("$r->[4]|$r->[5]", 't|t', "row $i: a holder's lease ends in about 60 s");
	}
	else
	{
		like($r->[2], qr/^[0-9a-f]{16}\.$s{$w}->{backend_pid}\./, "row $i: an id of $w");
		is($r->[4], 'f', "row $i: a waiter has no lease end");
	}
}
# When each holder got its slot, and since when each waiter waits: ages
# Redis counts, so no clock of another server matters
is($ctl->query_ok(q{
	SELECT string_agg(state || ':' ||
	         coalesce((acquired_at BETWEEN clock_timestamp() - interval '5 min' AND clock_timestamp() + interval '1 s')::text, '') || ':' ||
	         coalesce((waiting_since BETWEEN clock_timestamp() - interval '5 min' AND clock_timestamp() + interval '1 s')::text, ''),
	         ' ' ORDER BY position)
	FROM redsem_holders('obs');}),
	'holding:true: holding:true: waiting::true waiting::true',
	'holders show acquired_at, waiters waiting_since (each only that), both in the last minutes');
is($ctl->query_ok(q{
	SELECT bool_and(a < b) FROM (
	  SELECT waiting_since AS a, lead(waiting_since) OVER (ORDER BY position) AS b
	  FROM redsem_holders('obs') WHERE state = 'waiting') w WHERE b IS NOT NULL;}),
	't', 'C has waited longer than F');
# This server's view: the same members, with their sessions
is($ctl->query_ok(q{
	SELECT string_agg(application_name || ':' || state || ':' || (id IS NOT NULL) || ':' ||
	         (acquired_at IS NOT NULL) || ':' || (waiting_since IS NOT NULL) || ':' ||
	         (CASE WHEN state = 'waiting' THEN wait_event_type ELSE '-' END),
	         ' ' ORDER BY application_name)
	FROM redsem_activity WHERE name = 'obs';}),
	'app_A:holding:true:true:false:- app_B:holding:true:true:false:- app_C:waiting:true:false:true:Extension app_F:waiting:true:false:true:Extension',
	'redsem_activity: holders and waiters of this server with their pg_stat_activity (a superuser sees ids)');
$ctl->query_ok(q{CREATE ROLE obs_monitor IN ROLE pg_monitor; CREATE ROLE obs_nobody;});
is($ctl->query_ok(q{SET ROLE obs_monitor; SELECT count(*), count(id) FROM redsem_activity WHERE name = 'obs'; RESET ROLE;}),
	'4|0', 'a pg_monitor member sees them all, without ids');
($out, $err) = $ctl->query(q{SET ROLE obs_nobody; SELECT count(*) FROM redsem_activity; RESET ROLE;});
like($err, qr/permission denied for view redsem_activity/, 'an ordinary role may not read it');
$ctl->query_ok(q{RESET ROLE;});
my @tickets = map { $_->[3] // 0 } @rows;
ok($tickets[0] < $tickets[1] && $tickets[1] < $tickets[2] && $tickets[2] < $tickets[3],
	"tickets rise along the line (@tickets)");

# Tokens: redsem_token = redsem_held().token = the holder's ticket.
is($s{A}->query_ok(qq{SELECT name, id, scope, lease, token, kept_alive,
		token = redsem_token('obs', '$id{a1}') FROM redsem_held();}),
	"obs|$id{a1}|session|00:01:00|$tickets[0]|t|t",
	"A's redsem_held() row, its token equal to redsem_token and the ticket");
is($ctl->query_ok(qq{SELECT redsem_token('obs', '$id{b1}');}), $tickets[1],
	"redsem_token works from any session");
is($ctl->query_ok(qq{SELECT redsem_token('obs', '$rows[2][2]') IS NULL;}), 't',
	'a waiter has no token');

is($s{A}->query_ok(qq{SELECT redsem_release('obs', '$id{a1}');}), 't', 'A releases');
($out, $err) = $s{C}->wait_done(30);
is($err, '', 'C got in');
$id{c1} = $out;
is($id{c1}, $rows[2][2], "C's id is the one listed while it waited");
is($ctl->query_ok(qq{SELECT redsem_token('obs', '$id{a1}') IS NULL;}), 't',
	'a released holder has no token');
is($s{B}->query_ok(qq{SELECT redsem_release('obs', '$id{b1}');}), 't', 'B releases');
($out, $err) = $s{F}->wait_done(30);
is($err, '', 'F got in');
$id{f1} = $out;

my %tok;
foreach my $p ([ C => 'c1' ], [ F => 'f1' ])
{
	my ($w, $k) = @$p;
	my ($held, $direct) = split /\|/, $s{$w}->query_ok(
		qq{SELECT token, redsem_token('obs', '$id{$k}') FROM redsem_held();});
	is($held, $direct, "$w: redsem_held().token = redsem_token");
	$tok{$k} = $held;
}
ok($tok{c1} > $tickets[1] && $tok{f1} > $tok{c1},
	'tokens rise with each grant');
cmp_ok($tok{c1}, '>', $tickets[2], "C's token is a ticket drawn when it was promoted, above the one it had in line");

is($s{C}->query_ok(qq{SELECT redsem_release('obs', '$id{c1}');}), 't', 'C releases');
is($s{F}->query_ok(qq{SELECT redsem_release('obs', '$id{f1}');}), 't', 'F releases');

# An expired slot: release returns false.
$id{a2} = $s{A}->query_ok(q{SELECT redsem_acquire('obs', 2, '60 s');});
my $tok_a2 = $s{A}->query_ok(q{SELECT token FROM redsem_held();});
ok($tok_a2 > $tok{f1}, 'the next grant has a higher token still');
vanish('obs');
is($s{A}->query_ok(qq{SELECT redsem_release('obs', '$id{a2}');}), 'f',
	'releasing a slot that vanished from Redis returns false');

# A lost slot: refresh returns false, and the session forgets it.
$id{a3} = $s{A}->query_ok(q{SELECT redsem_acquire('obs', 2, '60 s');});
vanish('obs');
is($s{A}->query_ok(qq{SELECT redsem_refresh('obs', '$id{a3}');}), 'f',
	'refreshing a slot that vanished from Redis returns false');
is($s{A}->query_ok(q{SELECT count(*) FROM redsem_held();}), '0',
	'redsem_held() no longer lists it');

# A Redis error (on a slot the session still holds: one it no longer holds
# is refused without asking Redis).
$id{a4} = $s{A}->query_ok(q{SELECT redsem_acquire('obs', 2, '60 s');});
$redis->stop;
($out, $err) = $s{A}->query(qq{SELECT redsem_refresh('obs', '$id{a4}');});
like($err, qr/ERROR:  08001: could not connect to Redis/, 'with Redis down, refresh fails with 08001');
($out, $err) = $s{A}->query(q{SELECT redsem_acquire('obs_down', 1, '60 s');});
like($err, qr/ERROR:  08001: could not connect to Redis/, 'and so does acquire');
$redis->start;
$redis->end_grace;    # (the grace after it forgot: t/082)
back_again();

###########################################################################
note 'the statistics';

is(stats('obs'), '7|1|3|1|4|1|1|1',
	'obs: acquired 7, refused 1, waited 3, wait_timeouts 1, released 4, expired 1, lost 1, redis_errors 1');
is($node->safe_psql('postgres',
		q{SELECT total_wait_time >= interval '300 ms' FROM redsem_stats WHERE name = 'obs'}),
	't', 'total_wait_time includes the 300 ms of the timed-out wait');
is($node->safe_psql('postgres',
		q{SELECT waits_le_1ms + waits_le_10ms + waits_le_100ms + waits_le_1s + waits_le_10s + waits_over_10s = waited,
		         waits_le_1s >= 1, longest_wait >= interval '300 ms', longest_wait <= total_wait_time
		  FROM redsem_stats WHERE name = 'obs'}),
	't|t|t|t', 'each wait is in one bucket (the 300 ms one in "<= 1 s"), and the longest is kept');
is(stats('obs_down'), '0|0|0|0|0|0|0|1',
	'a failed acquire counts one Redis error and nothing else');

# One more semaphore, so resetting one name leaves the other.
my $o = $ctl->query_ok(q{SELECT redsem_acquire('obs_other', 1, '60 s');});
is($ctl->query_ok(qq{SELECT redsem_release('obs_other', '$o');}), 't', 'obs_other used once');
is(stats('obs_other'), '1|0|0|0|1|0|0|0', 'obs_other: acquired 1, released 1');

$ctl->query_ok(q{SELECT redsem_stats_reset('obs');});
is($ctl->query_ok(q{SELECT string_agg(name, ',' ORDER BY name) FROM redsem_stats;}),
	'obs_down,obs_other', "redsem_stats_reset('obs') forgets only obs");
my (undef, $long_err) = $ctl->query(q{SELECT redsem_stats_reset(repeat('x', 201));});
like($long_err, qr/22023: semaphore name is too long/, 'a name no semaphore can have is refused (22023)');
(undef, $long_err) = $ctl->query(q{SELECT redsem_stats_reset('');});
like($long_err, qr/22023: semaphore name must not be empty/, '... and so is an empty one');
$ctl->query_ok(q{SELECT redsem_stats_reset();});
is($ctl->query_ok('SELECT count(*) FROM redsem_stats;'), '0',
	'redsem_stats_reset() forgets everything');

$node->safe_psql('postgres', 'CREATE ROLE plain LOGIN');
my ($rout, $rerr) = ('', '');
$node->psql('postgres', 'SELECT redsem_stats_reset()',
	stdout => \$rout, stderr => \$rerr, extra_params => [ '-U', 'plain' ]);
like($rerr, qr/permission denied to reset redsem statistics/,
	'an ordinary role may not reset the statistics');
$node->safe_psql('postgres', 'CREATE ROLE statsadmin LOGIN IN ROLE redsem_admin');
($rout, $rerr) = ('', '');
$node->psql('postgres', 'SELECT redsem_stats_reset()',
	stdout => \$rout, stderr => \$rerr, extra_params => [ '-U', 'statsadmin' ]);
is($rerr, '', 'a member of redsem_admin may');

$s{$_}->quit foreach keys %s;
$ctl->quit;

note 'a full statistics table: later names add up in one row, queues keep theirs';
$node->append_conf('postgresql.conf', <<'EOC');
redsem.max_tracked_semaphores = 16
redsem.queues = 'q1: active_statements=1'
log_min_messages = log
EOC
$node->restart;
sub full_logs
{
	my @lines = grep { /LOG:  redsem statistics table is full/ } split /\n/, slurp_file($node->logfile);
	return scalar @lines;
}
sub others
{
	return $node->safe_psql('postgres',
		'SELECT acquired, released FROM redsem_stats WHERE name IS NULL');
}
# While Redis is down, an ordinary role makes errors be counted under 70
# names that look like queues' semaphores: they are ordinary names, 16 get
# rows and the rest add up in the others' row.
$redis->stop;
$node->safe_psql('postgres', q{DO $$ BEGIN
	FOR i IN 1 .. 70 LOOP
		BEGIN PERFORM redsem_limit('queue:j' || i); EXCEPTION WHEN OTHERS THEN NULL; END;
	END LOOP; END $$;}, extra_params => [ '-U', 'plain' ]);
$redis->start;
$redis->end_grace;    # (the grace after it forgot: t/082)
back_again();
is($node->safe_psql('postgres',
		q{SELECT count(*), sum(redis_errors) FROM redsem_stats WHERE name LIKE 'queue:j%'}),
	'16|16', 'redsem.max_tracked_semaphores names have rows');
is($node->safe_psql('postgres', 'SELECT redis_errors FROM redsem_stats WHERE name IS NULL'),
	'54', 'the others are counted together, in the row whose name is NULL');
is(full_logs(), 1, 'the server log says once that the table is full');
# A statement queue still gets its row.
$node->safe_psql('postgres', q{SET redsem.queue = 'q1'; SELECT pg_sleep(0);});
is($node->safe_psql('postgres', q{SELECT admitted FROM redsem_queues WHERE name = 'q1'}),
	'1', 'a statement queue still counts: the queues redsem.queues defines have room of their own');
# Anybody's later name joins the others' row, until a name is forgotten.
$node->safe_psql('postgres',
	join(' ', map { "SELECT redsem_release('fill$_', redsem_acquire('fill$_', 1));" } 1 .. 3),
	extra_params => [ '-U', 'plain' ]);
is(others(), '3|3', 'later names join the others');
$node->safe_psql('postgres', q{SELECT redsem_release('late', redsem_acquire('late', 1));});
is(others(), '4|4', 'whoever uses them');
is(stats('late'), '', 'and have no row of their own');
$node->safe_psql('postgres', q{SELECT redsem_stats_reset('queue:j1');});
$node->safe_psql('postgres', q{SELECT redsem_release('late', redsem_acquire('late', 1));});
is(stats('late'), '1|0|0|0|1|0|0|0', 'forgetting one name makes room for the next');
is(others(), '4|4', 'the others row keeps its counts');
$node->safe_psql('postgres', q{SELECT redsem_release('later', redsem_acquire('later', 1));});
is(others(), '5|5', 'full again: the next new name joins the others');
is(full_logs(), 2, 'and the log says so again, once');
$node->safe_psql('postgres', q{SELECT redsem_stats_reset();});
is($node->safe_psql('postgres', 'SELECT count(*) FROM redsem_stats'), '0',
	'redsem_stats_reset() forgets the others row too');
$node->safe_psql('postgres', q{SELECT redsem_release('fresh', redsem_acquire('fresh', 1));});
is(stats('fresh'), '1|0|0|0|1|0|0|0', 'and the table has room again');

# one name under two key prefixes is two semaphores: two rows (issue 49)
$node->safe_psql('postgres', q{SELECT redsem_stats_reset();});
$node->safe_psql('postgres', q{SET redsem.key_prefix = 'tenant_a:'; SELECT redsem_release('shared', redsem_acquire('shared', 1));});
$node->safe_psql('postgres', q{SET redsem.key_prefix = 'tenant_b:'; SELECT redsem_release('shared', redsem_acquire('shared', 1));
SELECT redsem_release('shared', redsem_acquire('shared', 1));});
is($node->safe_psql('postgres', q{SELECT string_agg(key_prefix || '=' || acquired, ',' ORDER BY key_prefix) FROM redsem_stats WHERE name = 'shared'}),
	'tenant_a:=1,tenant_b:=2', 'redsem_stats keeps a name under two key prefixes apart');
$node->safe_psql('postgres', q{SELECT redsem_stats_reset('shared');});
is($node->safe_psql('postgres', q{SELECT count(*) FROM redsem_stats WHERE name = 'shared'}), '0',
	'redsem_stats_reset(name) forgets it under every prefix');
node_log_is_clean($node);
$node->stop;
$redis->stop;
done_testing();
