
# 117_late_acquire.pl - an acquire that got no answer may still reach Redis
# after the session gave it up: a network path that held it heals, and the
# old connection's bytes arrive after the release, which went on a new
# connection (TCP retransmits what a closed socket had sent for some
# minutes).  Redis then grants a slot nobody will release or refresh, for
# its whole lease.  The keeper releases such a hold again every
# KEEPER_UNSURE_LOOK_MS for a while (src/timing.h), so the late grant is
# given back within seconds, not when its lease of an hour runs out.
#
# The server reaches Redis through RedsemTest::Proxy, which serves each
# connection in a process of its own: it holds the acquire asking for a
# lease of an hour for 4 s, unanswered (the session gives up after
# redsem.command_timeout, 1 s), passes it on, and drops what the session
# sent after it on that connection; every other connection goes on.
#
# Then the bound on what one role's failed acquires may keep watched: a
# role bounded by redsem.max_holds_per_role has no more of them watched
# than that bound (a role whose acquires keep failing, a short
# redsem.command_timeout of its own, would otherwise fill half the table
# for 16 minutes, and nobody else's failed acquire would be watched); an
# unbounded role's still are.  Acquires asking for half an hour are held
# by the proxy for two minutes: they stay watched for the rest of the test.
#
# Last, an acquire in flight when its server crash-restarts: its session is
# gone, the keeper releases it (nothing in Redis yet), and watches it as
# one that got no answer; the proxy passes the request on 8 s late, and the
# keeper gives the slot back within seconds.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes ();

my $redis = RedsemTest::Redis->new;
# (while the file is there: the session's tries again within its wait too)
my $breaking = PostgreSQL::Test::Utils::tempdir_short() . '/breaking';
# (while the file is there: releases of "lateb" get an error reply)
my $blocking = PostgreSQL::Test::Utils::tempdir_short() . '/blocking';
# (once, when the file is there: an acquire's connection closes unanswered)
my $dropping = PostgreSQL::Test::Utils::tempdir_short() . '/dropping';
my $proxy = RedsemTest::Proxy->new($redis, sub {
	my @cmd = @_;
	my $acquire = ($cmd[0] // '') =~ /^FCALL/i && grep { $_ eq 'acquire' } @cmd;
	return { late => 4 } if -e $breaking && $acquire && (grep { $_ eq '3600000' } @cmd);
	return { late => 120 } if $acquire && (grep { $_ eq '1800000' } @cmd);
	return { late => 8 } if $acquire && (grep { $_ eq '3540000' } @cmd);
	return { late => 4 } if $acquire && (grep { $_ eq '3420000' } @cmd);
	return "-ERR injected\r\n" if -e $blocking && ($cmd[0] // '') =~ /^FCALL/i &&
	  (grep { $_ eq 'release' } @cmd) && (grep { /\{(lateb|rideb)\}/ } @cmd);
	if ($acquire && (grep { $_ eq '1680000' } @cmd) && -e $dropping)
	{
		unlink $dropping;
		return { late => 0 };    # passed on, its reply dropped: the acquire rides on
	}
	return undef;
});
my $node = create_node('late', $proxy, "redsem.command_timeout = '1s'\nrestart_after_crash = on\n");
my $s = RedsemTest::Session->new($node, name => 'late');
# (the library loaded first: a delayed FCALL before it would fail)
is($s->query_ok(q{SELECT redsem_release('warm', redsem_acquire('warm', 1));}), 't', 'a first call loads the library');
my $off = -s $node->logfile;

PostgreSQL::Test::Utils::append_to_file($breaking, '');
my ($out, $err) = $s->query(q{SELECT redsem_acquire('late', 1, '1 hour');}, 30);
unlink $breaking;
like($err, qr/ERROR:  08006: .*did not answer within 1000 ms/, 'the acquire gets no answer within redsem.command_timeout');
ok(defined wait_until(10, sub { $redis->zcard('late', 'owner') == 1 }),
	'then it reaches Redis, late, and is granted a slot of an hour');
ok(defined wait_until(15, sub { $redis->zcard('late', 'owner') == 0 }),
	'the keeper gives that slot back within seconds');
like(slurp_file($node->logfile, $off),
	qr/redsem keeper released a slot of semaphore "late" granted late to an acquire that had failed/,
	'and says so in the server log');
is($s->query_ok(q{SELECT redsem_acquire('late', 1) IS NOT NULL;}), 't', 'the slot can be taken again');
is($s->query_ok(q{SELECT redsem_release_all();}), '1', 'and given back');

# A failed acquire whose release does not get through either (a path
# that holds the acquire often fails what follows): the keeper's release,
# once it gets through, finds the late grant, and says so; it counts no
# slot given back, as the session never had one
PostgreSQL::Test::Utils::append_to_file($blocking, '');
$off = -s $node->logfile;
($out, $err) = $s->query(q{SELECT redsem_acquire('lateb', 1, '57 min');}, 30);
like($err, qr/ERROR:  08006: /, 'an acquire gets no answer');
# (a later call reads the reply of the release sent at the end of the
# failed statement: an error, so the keeper has it)
$s->query(q{SELECT redsem_limit('free') IS NULL;});
ok(defined wait_until(10, sub { $redis->zcard('lateb', 'owner') == 1 }),
	'it reaches Redis late and is granted, its release refused meanwhile');
unlink $blocking;
ok(defined wait_until(20, sub { $redis->zcard('lateb', 'owner') == 0 }),
	'once releases get through, the keeper gives the slot back');
ok(defined wait_until(10, sub {
	slurp_file($node->logfile, $off) =~
	  /redsem keeper released a slot of semaphore "lateb" granted late to an acquire that had failed/ }),
	'and says it was granted late');
is($node->safe_psql('postgres', q{SELECT released || '/' || expired FROM redsem_stats WHERE name = 'lateb';}), '0/0',
	'and counts no slot given back or expired: the session never had it');

# A slot granted to an acquire that rode through a request without answer
# is watched once given back; when its session's release fails, the
# keeper's gets through and watches it: the session then has nothing left
# to give back, nor to count
PostgreSQL::Test::Utils::append_to_file($dropping, '');
my $rid = $s->query_ok(q{SELECT redsem_acquire('rideb', 1, '28 min', wait => '10 s');});
like($rid, qr/^\S+$/, 'an acquire whose first request got no answer rides on and is granted');
PostgreSQL::Test::Utils::append_to_file($blocking, '');
($out, $err) = $s->query(qq{SELECT redsem_release('rideb', '$rid');});
like($err, qr/ERROR/, 'its release is refused');
unlink $blocking;
ok(defined wait_until(20, sub {
	$node->safe_psql('postgres', q{SELECT state FROM redsem_server_holds() WHERE name = 'rideb';}) eq 'watching' }),
	'the keeper gives it back, and watches it');
($out, $err) = $s->query(qq{SELECT redsem_release('rideb', '$rid');});
is($out, 'f', 'a retry of the release finds nothing left');
is($err, '', 'with no WARNING');
is($node->safe_psql('postgres', q{SELECT acquired || '/' || released || '/' || expired FROM redsem_stats WHERE name = 'rideb';}), '1/1/0',
	'the slot is counted once: acquired, released, not expired');

$node->safe_psql('postgres', q{CREATE ROLE flaky LOGIN; ALTER ROLE flaky SET redsem.max_holds_per_role = 2;});
my $f = RedsemTest::Session->new($node, name => 'flaky', user => 'flaky');
my $watched = q{SELECT count(*) FROM redsem_server_holds() WHERE lease = '30 min' AND state = 'watching';};
# (the release of a failed acquire is confirmed at a later call: until
# then it counts toward the role's bound)
for my $i (1 .. 3)
{
	wait_until(20, sub {
		($out, $err) = $f->query(qq{SELECT redsem_acquire('held$i', 1, '30 min');}, 30);
		return 1 if $err =~ /ERROR:  08006: /;
		$f->query(q{SELECT redsem_limit('free') IS NULL;});
		return 0;
	});
	like($err, qr/ERROR:  08006: /, "the role's acquire $i gets no answer");
}
# (given back at the latest when the session ends: a release that failed
# is the keeper's until then, and counts toward the role's holds)
$f->quit;
my $n;
wait_until(20, sub {
	$n = $node->safe_psql('postgres', q{SELECT count(*) FROM redsem_server_holds() WHERE name LIKE 'held%';});
	return $n eq '2';
});
is($n, '2', "the keeper watches two of them: the role's bound");
is($node->safe_psql('postgres', $watched), '2', 'both given back and watched');
$f = RedsemTest::Session->new($node, name => 'flaky2', user => 'flaky');
is($f->query_ok(q{SELECT redsem_release('free', redsem_acquire('free', 1));}), 't',
	'the watched ones do not count toward its holds');
($out, $err) = $s->query(q{SELECT redsem_acquire('held4', 1, '30 min');}, 30);
like($err, qr/ERROR:  08006: /, "a superuser's acquire gets no answer");
wait_until(20, sub {
	$s->query(q{SELECT redsem_limit('free') IS NULL;});
	$n = $node->safe_psql('postgres', $watched);
	return $n eq '3';
});
is($n, '3', 'and is watched: its role has no bound');
$f->quit;
$s->quit;
node_log_is_clean($node);

note 'a path that stays slower than the valid time of a lease: the wait still ends in time';
{
	# (each reply 1.85 s late: a grant of a 2 s lease comes after its valid
	# time, 1.78 s, and so does its refresh's answer (refreshed within the
	# wait: one slow reply says little of the next).  The grant is given
	# back, and no other try is begun: the wait has less left than that
	# give-back took)
	my $slow_sock = PostgreSQL::Test::Utils::tempdir_short() . '/slow.sock';
	my $slow = IPC::Run::start(
		[ 'perl', "$FindBin::RealBin/../bench/delay_proxy.pl", $slow_sock, $redis->socket, 1850 ],
		'<', '/dev/null', '>', "$PostgreSQL::Test::Utils::log_path/117_slow_proxy.log", '2>&1');
	ok(defined wait_until(10, sub { -S $slow_sock }), 'a proxy that delays every reply listens');
	my $w = RedsemTest::Session->new($node, name => 'slowpath');
	$w->query_ok(qq{SET redsem.unix_socket = '$slow_sock'; SET redsem.command_timeout = '10s';});
	is($w->query_ok(q{SELECT redsem_release('slowwarm', redsem_acquire('slowwarm', 1, '60 s'));}, 120), 't',
		'the session connects through it (a long lease is not late)');
	my $t0 = Time::HiRes::time();
	my ($out, $err) = $w->query(q{SELECT redsem_acquire('slowpath', 1, '2 s', wait => '3 s') IS NULL;}, 60);
	my $secs = Time::HiRes::time() - $t0;
	is("$out|$err", 't|', 'an acquire whose grant comes too late returns NULL, no slot in time');
	cmp_ok($secs, '<', 8.5, sprintf('after the grant, its refresh and its give-back, not a try more (%.2f s)', $secs));
	# (in line behind a holder that leaves after the wait: its place, lost
	# by the time the slow answers come, is not taken again past the wait,
	# nor a late grant refreshed then; before, NULL came after 13 s)
	my $f = RedsemTest::Session->new($node, name => 'slowline_holder');
	$f->query_ok(q{SELECT redsem_acquire('slowpath', 1, '30 s') IS NOT NULL;});
	$f->send(q{SELECT pg_sleep(5.5); SELECT redsem_release_all();});
	$t0 = Time::HiRes::time();
	($out, $err) = $w->query(q{SELECT redsem_acquire('slowpath', 1, '2 s', wait => '3 s') IS NULL;}, 60);
	$secs = Time::HiRes::time() - $t0;
	is("$out|$err", 't|', 'a waiter in line over that path returns NULL');
	cmp_ok($secs, '<', 12, sprintf('within a few round trips of its wait (%.2f s)', $secs));
	$f->wait_done(30);
	$f->quit;
	is($redis->owner_waiting('slowpath'), '0|0', 'the late grant was given back');
	is($w->query_ok(q{SELECT count(*) FROM redsem_held();}), '0', 'the session holds nothing, and is told nothing');
	$w->quit;
	$slow->kill_kill;
}

my $c = RedsemTest::Session->new($node, name => 'crash');
$c->query_ok(q{SET redsem.command_timeout = '20s';});
$c->send(q{SELECT redsem_acquire('crashed', 1, '59 min');});
ok(defined wait_until(10, sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM redsem_server_holds() WHERE name = 'crashed' AND state = 'asking';}) eq '1' }),
	'an acquire is on its way');
$off = -s $node->logfile;
kill 'KILL', $c->backend_pid;
ok(defined wait_until(60, sub {
	my ($ok) = eval { $node->safe_psql('postgres', q{SELECT 1;}) };
	defined $ok && $ok eq '1' }), 'its server restarted after the crash');
# (until the request comes, 8 s after it was sent: a restart takes less)
ok(defined wait_until(6, sub {
	$node->safe_psql('postgres', q{SELECT state FROM redsem_server_holds() WHERE name = 'crashed';}) eq 'watching' }),
	'the keeper gave it back and watches it, shown as watching');
# (the slot is seen only between two looks of the keeper: its log line is
# what says it was granted)
ok(defined wait_until(30, sub {
	slurp_file($node->logfile, $off) =~
	  /redsem keeper released a slot of semaphore "crashed" granted late to an acquire that was under way when the server restarted after a crash/ }),
	'the acquire reaches Redis after the restart, is granted a slot of 59 minutes, and the keeper gives it back');
is($redis->zcard('crashed', 'owner'), 0, 'nobody holds it');
eval { $c->quit };
$node->stop;
$proxy->stop;
$redis->stop;
done_testing();
