
# 082_forget_grace.pl - when Redis forgets (FLUSHALL, a restart without
# persistence), nobody is admitted until the holders it forgot are stopped:
# the grace period of I15 (issue 48, B).
#
# A fresh Redis admits at once; after it forgets, a try-acquire gets NULL
# and a waiter waits until the longest lease taken before would have ended,
# while the holders are stopped at their keeper's next refresh; then the
# line moves.  Refused calls leave no generation key, and a server that
# never saw this Redis starts no grace.

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
my $node = create_node('forget', $redis, "redsem.command_timeout = 1000\n");

sub session { return RedsemTest::Session->new($node, name => $_[0]); }

# The generation keys Redis has (outside a Cluster: one, redsem:gen)
sub gen_keys { return grep { /^redsem:gen(\{\d+\})?$/ } $redis->scan_keys('redsem:gen*'); }

# The lost-slot error (psql runs with VERBOSITY verbose)
sub lost_error { my ($sem) = @_; return qr/ERROR:  57014: the slot of semaphore "\Q$sem\E" was lost/; }

# One try of $sem (limit 1) by a new session: 't' if it got the slot
sub try_once
{
	my ($sem, $lease) = @_;
	return $node->safe_psql('postgres',
		"SELECT redsem_acquire('$sem', 1, '$lease', wait => '0') IS NOT NULL");
}

# Under key prefix $prefix: this server (A) holds $sem (60 s lease), its
# keeper held still; Redis forgets; a server new to Redis ($name) is made.
# Returns that server, the holder's session and A's keeper's pid.
sub forgotten_holder
{
	my ($name, $prefix, $sem) = @_;
	my $other = create_node($name, $redis, '');
	my $h = session("${prefix}_holder");
	$h->query_ok("SET redsem.key_prefix = '$prefix:'; SELECT redsem_acquire('$sem', 1, '60 s') IS NOT NULL;");
	my $keeper = keeper_pid_of($node);
	kill 'STOP', $keeper;
	$redis->cli('FLUSHALL');
	return ($other, $h, $keeper);
}

# A's keeper, held still by forgotten_holder, restarted: true once it
# started the grace under $prefix
sub keeper_starts_grace
{
	my ($keeper, $prefix) = @_;
	kill 'TERM', $keeper;
	kill 'CONT', $keeper;
	return defined wait_until(20, sub { ($redis->cli('GET', "$prefix:gen") // '') =~ /^g/ });
}

###########################################################################
note 'a fresh Redis admits at once; a refused call leaves no key';
{
	is(try_once('fresh', '3 s'), 't', 'the first acquire on a fresh Redis gets its slot');
	is(join(',', gen_keys()), 'redsem:gen', 'and made the generation key');
	my $g = $redis->cli('GET', (gen_keys())[0]);
	like($g, qr/^n\d{16}:3000:0:0:\d+:\d+:\d+:[0-9a-f]*$/, "no grace, lmax its lease ($g)");
	is($redis->cli('PTTL', (gen_keys())[0]), '-1', 'the key has no TTL (one per prefix)');
	$redis->cli('FLUSHALL');
	my ($ret, $out, $err) = $node->psql('postgres', "SELECT redsem_acquire('refused', 2, '3 s', wait => '0', permits => 3)");
	like($err, qr/permits/, 'a call refused for its arguments');
	is(scalar($redis->scan_keys('*')), 0, '... leaves no key at all');
}

###########################################################################
note 'FLUSHALL under a running holder: newcomers wait out the grace';
{
	# the FLUSHALL above: this server had seen the generation (lmax 3 s)
	is(try_once('g1', '4 s'), 'f', 'the first acquire after it gets NULL: the grace');
	like(slurp_file($node->logfile),
		qr/LOG:  redsem: Redis at unix socket "[^"]+" forgot the semaphores of key prefix "redsem:" since this server last used them\n.*DETAIL:  .*stored limits, rates, reserves and tenant weights are gone until they are stored again\./,
		'the server log says that Redis forgot, and what is gone until stored again');
	my @graces = slurp_file($node->logfile) =~ /LOG:  redsem: Redis at unix socket "[^"]+" admits no new holder under key prefix "redsem:" until \d{4}-\d\d-\d\d [\d:.]+\S* \(by Redis's clock\)\n.*DETAIL:  A grace: Redis forgot slots/g;
	is(scalar(@graces), 1, '... and, once, that it admits no new holder until the grace ends (helper-167 F8: nothing did)');
	like($redis->cli('GET', 'redsem:gen'), qr/^g\d{16}:0:\d+:3000:\d+:\d+:\d+:[0-9a-f]*$/,
		'the new generation counts no lease of a call told busy');
	ok(defined wait_until(10, sub { try_once('g1', '4 s') eq 't' }), 'a slot, once the grace is over');
	like($redis->cli('GET', 'redsem:gen'), qr/^n\d{16}:4000:0:3000:\d+:\d+:\d+:[0-9a-f]*$/, 'its lmax is the 4 s lease now');
	my $h = session('holder');
	$h->send("SELECT redsem_acquire('g1', 1, '3 s') IS NOT NULL; SELECT pg_sleep(30);");
	ok(wait_until(10, sub { $redis->zcard('g1', 'owner') == 1 }), 'a holder runs');
	usleep(200_000);
	$redis->cli('FLUSHALL');
	my $flushed = time;
	my $w = session('waiter');
	$w->send("SELECT redsem_acquire('g1', 1, '3 s', wait => '20 s') IS NOT NULL;");
	usleep(300_000);
	is(try_once('g1', '3 s'), 'f', 'a try-acquire during the grace gets NULL');
	my ($gret, $gout, $gerr) = $node->psql('postgres',
		"BEGIN; SELECT redsem_guard('g1', 1, '3 s', '200 ms'); COMMIT;");
	like($gerr, qr/DETAIL:  Redis lost, or after a change of primary may have lost, slots it had granted .* nobody is admitted until their leases could have ended/,
		'a guard whose wait runs out during the grace says why, not that the slots stayed taken');
	my $g = $redis->cli('GET', 'redsem:gen');
	my ($sec, $us) = split /\n/, scalar $redis->cli('TIME');
	# (the grace's length from the key itself, when it was made to when it
	# ends: the steps above take over a second on a loaded machine)
	my ($gmade, $guntl) = $g =~ /^g(\d{16}):3000:(\d+):4000:\d+:\d+:\d+:[0-9a-f]*$/;
	my $glen = defined $guntl ? $guntl - int($gmade / 1000) : undef;
	ok(defined $glen && $glen >= 4000 && $glen < 4100 && $guntl > $sec * 1000 + $us / 1000,
		"the new generation has a grace of the longest lease, 4 s, still running, and counts the waiter's 3 s ($g)");
	my (undef, $herr) = $h->wait_done(20);
	my $stopped = time;
	like($herr, lost_error('g1'), 'the holder is stopped (its slot is gone)');
	cmp_ok($stopped - $flushed, '<', 3, 'at its keeper next refresh');
	my ($wout, $werr) = $w->wait_done(20);
	my $admitted = time;
	is($wout, 't', 'the waiter gets the slot');
	cmp_ok($admitted, '>', $stopped, 'after the holder was stopped');
	cmp_ok($admitted - $flushed, '>=', 3.5, 'once the grace is over (4 s after the first call)');
	cmp_ok($admitted - $flushed, '<', 7, 'and not much later');
	my ($until) = $redis->cli('GET', 'redsem:gen') =~ /^g\d+:3000:(\d+):/;
	($sec, $us) = split /\n/, scalar $redis->cli('TIME');
	cmp_ok($until // 0, '<=', $sec * 1000 + $us / 1000, 'its grace is over');
	$w->query_ok('SELECT redsem_release_all();');
	is(try_once('g1', '3 s'), 't', 'admission is as before');
	like($redis->cli('GET', 'redsem:gen'), qr/^n\d{16}:3000:0:4000:\d+:\d+:\d+:[0-9a-f]*$/, '... and the next acquire wrote the generation without grace');
	$w->quit;
	$h->quit;
}

###########################################################################
note 'a restart without persistence: the same';
{
	my $h = session('holder2');
	$h->send("SELECT redsem_acquire('g2', 1, '2 s') IS NOT NULL; SELECT pg_sleep(30);");
	ok(wait_until(10, sub { $redis->zcard('g2', 'owner') == 1 }), 'a holder runs');
	$redis->stop;
	$redis->start;
	my $restarted = time;
	my $got;
	ok(defined wait_until(10, sub { ($got = eval { try_once('g2', '2 s') } // '') ne '' }),
		'the server reaches the restarted Redis');
	is($got, 'f', 'its first try-acquire gets NULL: the grace');
	my (undef, $herr) = $h->wait_done(20);
	like($herr, lost_error('g2'), 'the holder is stopped');
	ok(defined wait_until(10, sub { try_once('g2', '2 s') eq 't' }), 'then the slot is free again');
	cmp_ok(time - $restarted, '>=', 2.8, 'not before the grace (of the longest lease, 3 s) ended');
	$h->quit;
}

###########################################################################
note 'a restart forgets stored limits: a caller waiting under one stores it again and waits on';
{
	# fixed and adaptive stored limits, each held by one session and waited
	# for by another with 30 s of wait: 22023 in the middle of the wait
	# before (deployment.md promises a restart is ridden)
	$node->safe_psql('postgres',
		"SELECT redsem_set_limit('st1', 1); SELECT redsem_set_adaptive_limit('ad1', 1, 3, 1);");
	my %s;
	for my $sem (qw(st1 ad1))
	{
		my $h = session("h$sem");
		$h->query_ok("SELECT redsem_acquire('$sem', lease => '2 s') IS NOT NULL;");
		my $w = session("w$sem");
		$w->send("SELECT redsem_acquire('$sem', lease => '2 s', wait => '30 s') IS NOT NULL;");
		$s{$sem} = [ $h, $w ];
	}
	ok(wait_until(10, sub { $redis->zcard('st1', 'owner') == 2 && $redis->zcard('ad1', 'owner') == 2 }),
		'each semaphore has its holder and a waiter');
	my $log_at = -s $node->logfile;
	$redis->stop;
	$redis->start;
	for my $sem (qw(st1 ad1))
	{
		my ($h, $w) = @{ $s{$sem} };
		my ($out, $err) = $w->wait_done(30);
		is($out, 't', "$sem: the waiter rides the restart and is served (" . ($err // '') . ')');
		is($node->safe_psql('postgres', "SELECT limit_in_effect, adaptive_min FROM redsem_semaphore('$sem')"),
			'1|', "$sem: the limit it was told is stored again, fixed");
		$h->quit;
		$w->quit;
	}
	like(slurp_file($node->logfile, $log_at), qr/had no stored limit after Redis forgot it; a caller waiting under it stored it again at 1/,
		'the server log says so');
	# a caller that never saw the limit (none stored) still gets 22023 at once
	my ($rc, $out, $err) = $node->psql('postgres', "SELECT redsem_acquire('none1', wait => '5 s')");
	like($err, qr/has no stored limit/, 'a semaphore without a stored limit: 22023, as before');
	$node->safe_psql('postgres', "SELECT redsem_set_limit('st1', NULL); SELECT redsem_set_limit('ad1', NULL)");
}

###########################################################################
note 'FLUSHALL forgets stored limits too: the waiter stores it again (helper-140)';
{
	# FLUSHALL breaks no connection: the waiter finds its line gone, and
	# got 22023 in the middle of its wait before
	$node->safe_psql('postgres', "SELECT redsem_set_limit('st2', 1);");
	my $h = session('hst2');
	$h->query_ok("SELECT redsem_acquire('st2', lease => '2 s') IS NOT NULL;");
	my $w = session('wst2');
	$w->send("SELECT redsem_acquire('st2', lease => '2 s', wait => '30 s') IS NOT NULL;");
	ok(wait_until(10, sub { $redis->zcard('st2', 'owner') == 2 }), 'st2 has its holder and a waiter');
	my $log_at = -s $node->logfile;
	$redis->cli('FLUSHALL');
	my ($out, $err) = $w->wait_done(30);
	is($out, 't', 'the waiter is served after FLUSHALL (' . ($err // '') . ')');
	is($node->safe_psql('postgres', "SELECT stored_limit FROM redsem_semaphore('st2')"), '1',
		'the limit it was told is stored again');
	like(slurp_file($node->logfile, $log_at), qr/semaphore "st2" had no stored limit after Redis forgot it/,
		'the server log says so');
	$h->quit;
	$w->quit;
	$node->safe_psql('postgres', "SELECT redsem_set_limit('st2', NULL)");
	# an administrator's removal leaves the line: a waiter's line is not
	# lost, and the limit is not stored again
	$node->safe_psql('postgres', "SELECT redsem_set_limit('st3', 1);");
	$h = session('hst3');
	$h->query_ok("SELECT redsem_acquire('st3', lease => '2 s') IS NOT NULL;");
	$w = session('wst3');
	$w->send("SELECT redsem_acquire('st3', lease => '2 s', wait => '30 s') IS NOT NULL;");
	ok(wait_until(10, sub { $redis->zcard('st3', 'owner') == 2 }), 'st3 has its holder and a waiter');
	$node->safe_psql('postgres', "SELECT redsem_set_limit('st3', NULL)");
	$h->query_ok("SELECT redsem_release_all();");
	($out, $err) = $w->wait_done(30);
	is($out, 't', 'st3, its limit removed by an administrator: the waiter is served');
	is($node->safe_psql('postgres', "SELECT coalesce(stored_limit::text, 'none') FROM redsem_semaphore('st3')"), 'none',
		'... and the removed limit is not stored again');
	$h->quit;
	$w->quit;
	# nor when the waiter, stalled, loses its place after the removal (its
	# promotion window passes): Redis forgot nothing (helper-142)
	$node->safe_psql('postgres', "SELECT redsem_set_limit('st4', 1);");
	$h = session('hst4');
	$h->query_ok("SELECT redsem_acquire('st4', lease => '2 s') IS NOT NULL;");
	$w = session('wst4');
	$w->send("SELECT redsem_acquire('st4', lease => '2 s', wait => '30 s') IS NOT NULL;");
	ok(wait_until(10, sub { $redis->zcard('st4', 'owner') == 2 }), 'st4 has its holder and a waiter');
	$node->safe_psql('postgres', "SELECT redsem_set_limit('st4', NULL)");
	kill 'STOP', $w->backend_pid;
	$h->query_ok("SELECT redsem_release_all();");
	sleep_full(7);		# (past the promotion window, 5 s)
	kill 'CONT', $w->backend_pid;
	($out, $err) = $w->wait_done(30);
	is($node->safe_psql('postgres', "SELECT coalesce(stored_limit::text, 'none') FROM redsem_semaphore('st4')"), 'none',
		'a stalled waiter that lost its place does not store a removed limit again (' . ($err // '') . ')');
	$h->quit;
	$w->quit;
}

###########################################################################
note 'FLUSHALL, the waiter on a server that knew no generation when it began (helper-143)';
{
	my $fresh = create_node('forget_fresh', $redis, "redsem.command_timeout = 1000\n");
	$node->safe_psql('postgres', "SELECT redsem_set_limit('st5', 1);");
	my $h = session('hst5');
	$h->query_ok("SELECT redsem_acquire('st5', lease => '2 s') IS NOT NULL;");
	my $w = RedsemTest::Session->new($fresh, name => 'wst5');
	$w->send("SELECT redsem_acquire('st5', lease => '2 s', wait => '30 s') IS NOT NULL;");
	ok(wait_until(10, sub { $redis->zcard('st5', 'owner') == 2 }), 'a holder here, a waiter on a new server');
	$redis->cli('FLUSHALL');
	my ($out, $err) = $w->wait_done(30);
	is($out, 't', 'the new server\'s waiter is served after FLUSHALL (' . ($err // '') . ')');
	is($node->safe_psql('postgres', "SELECT coalesce(stored_limit::text, 'none') FROM redsem_semaphore('st5')"), '1',
		'... and the limit it was told is stored again');
	$h->quit;
	$w->quit;
	$node->safe_psql('postgres', "SELECT redsem_set_limit('st5', NULL)");
	$fresh->stop;
}

###########################################################################
note 'a refresh that lengthens a lease counts in the grace';
{
	my $r = session('refresher');
	my $id = $r->query_ok("SELECT redsem_acquire('r1', 1, '1 s');");
	$r->query_ok("SELECT redsem_refresh('r1', '$id', '6 s');");
	like($redis->cli('GET', 'redsem:gen'), qr/^n\d{16}:6000:0:/, 'the generation counts the 6 s lease');
	$r->query_ok('SELECT redsem_release_all();');
	$r->quit;
}

###########################################################################
note 'a long lease given back stops counting in the grace two windows (five minutes each) later';
{
	my $s = session('long');
	my $id = $s->query_ok("SELECT redsem_acquire('long1', 1, '1 hour');");
	$s->query_ok("SELECT redsem_release('long1', '$id');");
	$s->quit;
	like($redis->cli('GET', 'redsem:gen'), qr/^n\d{16}:3600000:0:/, 'the generation counts the hour');
	# a window passes: the window's start is set back five minutes
	my $window_passes = sub {
		my $v = $redis->cli('GET', 'redsem:gen');
		$v =~ s/^(n\d{16}:\d+:\d+:\d+):(\d+):/"$1:" . ($2 - 300000) . ':'/e or die "no generation: $v";
		$redis->cli('SET', 'redsem:gen', $v);
	};
	$window_passes->();
	is(try_once('long2', '2 s'), 't', 'an acquire a window later');
	like($redis->cli('GET', 'redsem:gen'), qr/^n\d{16}:2000:0:3600000:/,
		'... starts a new window: the hour counts as the window before\'s');
	$window_passes->();
	is(try_once('long2', '2 s'), 't', 'an acquire a window later again');
	like($redis->cli('GET', 'redsem:gen'), qr/^n\d{16}:2000:0:2000:/, '... and the hour no longer counts');
	$redis->cli('FLUSHALL');
	my $t0 = time;
	is(try_once('long3', '2 s'), 'f', 'Redis forgets: a grace starts');
	ok(defined wait_until(10, sub { try_once('long3', '2 s') eq 't' }), 'and ends');
	cmp_ok(time - $t0, '<', 6, 'as long as the leases asked for since (2 s), not the hour given back');
}

###########################################################################
note 'the keeper keeps the leases of its holds and waits counted (a window may have started anew), in every generation';
{
	# holds under two key prefixes: two generations, counted in one pipeline
	my $k = create_node('forget_keeper', $redis, '');
	my @keys = ('redsem:gen', 'pb:gen');
	my @s;
	foreach my $p ('redsem:', 'pb:')
	{
		my $s = RedsemTest::Session->new($k, name => "kept_$p");
		$s->query_ok("SET redsem.key_prefix = '$p'; SELECT redsem_acquire('kg', 1, '9 s') IS NOT NULL;");
		push @s, $s;
	}
	like($redis->cli('GET', $_) // '', qr/^n\d{16}:9000:0:\d+:\d+:\d+:\d+:[0-9a-f]*$/, "$_ counts the 9 s lease")
	  foreach @keys;
	# and one that waits (under redsem:, behind the holder) for a 12 s lease
	my $w = RedsemTest::Session->new($k, name => 'kept_waiter');
	$w->send("SELECT redsem_acquire('kg', 1, '12 s', wait => '60 s') IS NOT NULL;");
	ok(wait_until(10, sub { $redis->zcard('kg', 'waiting') == 1 }), 'a session waits for a 12 s lease');
	my %lease = ('redsem:gen' => 12000, 'pb:gen' => 9000);
	# The keeper counts at its start, then hourly: the old one is stopped
	# (it may be about to count), the generations set back, and a new one
	# started.  As if a new window had started: lmax and lprev forget the
	# 9 s lease (ul, ue and era stay as they were, as at a window's start: a
	# ue set back would tell the next caller that knew it that writes were
	# lost, and start a grace that the next case does not expect).
	my $forget = sub {
		foreach my $key (@keys)
		{
			my $v = $redis->cli('GET', $key) // '';
			$redis->cli('SET', $key, $v) if $v =~ s/^(n\d{16}):$lease{$key}:\d+:\d+:/$1:1000:0:0:/;
		}
	};
	my $old = keeper_pid_of($k);
	kill 'STOP', $old;
	$forget->();
	kill 'TERM', $old;
	kill 'CONT', $old;
	wait_until(10, sub { !kill(0, $old) });
	$forget->();			# (what it may have counted on its way out)
	ok(defined wait_until(25, sub { !grep { ($redis->cli('GET', $_) // '') !~ /^n\d{16}:$lease{$_}:/ } @keys }),
		'a new keeper counts the waiter\'s 12 s lease again, and the holds\' 9 s lease in the other generation')
	  or diag(join(' ', map { $redis->cli('GET', $_) // '(none)' } @keys));
	isnt(keeper_pid_of($k) // 0, $old, 'it is a new keeper');
	$_->quit foreach @s;
	$w->wait_done(20);
	$w->quit;
	$k->stop;
}

###########################################################################
note 'another server that used this Redis, not that semaphore: the grace holds there too';
{
	my $b = create_node('forget_b', $redis, '');
	is($b->safe_psql('postgres', "SELECT redsem_acquire('warm', 1, '2 s', wait => '0') IS NOT NULL"),
		't', 'server B takes a slot of another semaphore');
	my $h = session('holder3');
	$h->send("SELECT redsem_acquire('m1', 1, '3 s') IS NOT NULL; SELECT pg_sleep(30);");
	ok(wait_until(10, sub { $redis->zcard('m1', 'owner') == 1 }), 'server A holds m1 (limit 1)');
	$redis->cli('FLUSHALL');
	is($b->safe_psql('postgres', "SELECT redsem_acquire('m1', 1, '3 s', wait => '0') IS NOT NULL"),
		'f', 'server B does not get m1 beside the holder Redis forgot');
	my (undef, $herr) = $h->wait_done(20);
	like($herr, lost_error('m1'), 'the holder is stopped');
	ok(defined wait_until(15, sub {
		$b->safe_psql('postgres', "SELECT redsem_acquire('m1', 1, '3 s', wait => '0') IS NOT NULL") eq 't' }),
		'then server B gets it');
	$h->quit;
	$b->stop;
}

###########################################################################
note 'a server that never saw this Redis starts no grace';
{
	my $other = create_node('forget_new', $redis, '');
	$redis->cli('FLUSHALL');
	my $t0 = time;
	is($other->safe_psql('postgres', "SELECT redsem_acquire('g3', 1, '2 s', wait => '0') IS NOT NULL"),
		't', 'its first acquire after FLUSHALL gets the slot at once');
	my $g = $redis->cli('GET', (gen_keys())[0]);
	like($g, qr/^n/, 'and its generation has no grace');
	is(try_once('g3b', '2 s'), 'f', 'but a server that knew the one Redis forgot still waits out its grace');
	like($redis->cli('GET', 'redsem:gen'), qr/^g/, '... and made it a grace for everybody');
	$other->stop;
}

###########################################################################
note 'the keeper learns first that Redis forgot: it starts the grace, and its server does not forget it';
{
	# Under a prefix of its own (the grace is a minute long): server A holds
	# a slot; Redis forgets; a server new to it makes the new generation,
	# without grace; A's keeper counts its holds before any acquire of A.
	# Before, it noted the new generation as what A knew, and A's acquires
	# then started no grace beside the holder Redis forgot.
	# (A's keeper is held still meanwhile: its count would start the grace
	# before the new server's acquire)
	my ($other, $h, $old) = forgotten_holder('forget_kf', 'kf', 'kf1');
	is($other->safe_psql('postgres', "SET redsem.key_prefix = 'kf:'; SELECT redsem_acquire('kf2', 1, '2 s', wait => '0') IS NOT NULL"),
		't', 'a server new to Redis makes the new generation and gets a slot at once');
	like($redis->cli('GET', 'kf:gen'), qr/^n/, '... without grace');
	ok(keeper_starts_grace($old, 'kf'),
		'server A\'s new keeper counts its hold, and starts the grace of its 60 s lease')
	  or diag($redis->cli('GET', 'kf:gen'));
	is($node->safe_psql('postgres', "SET redsem.key_prefix = 'kf:'; SELECT redsem_acquire('kf3', 1, '2 s', wait => '0') IS NOT NULL"),
		'f', 'server A\'s acquires wait it out');
	is($other->safe_psql('postgres', "SET redsem.key_prefix = 'kf:'; SELECT redsem_acquire('kf4', 1, '2 s', wait => '0') IS NOT NULL"),
		'f', 'and so do the other server\'s');
	$h->quit;
	$other->stop;
}

###########################################################################
note 'waiters in line when a grace begins: a release does not let them in';
{
	# Under a prefix of its own: server A holds a slot (60 s lease), its
	# keeper held still; Redis forgets; a server new to it takes kw1 and a
	# second session of it waits behind; A's keeper starts the grace; the
	# holder of kw1 gives it back.  Before, a release did not name the
	# generation key, and promotion let the waiter in beside A's holder.
	my ($other, $h, $old) = forgotten_holder('forget_kw', 'kw', 'kwa');
	my $oh = RedsemTest::Session->new($other, name => 'kw_other_holder');
	$oh->query_ok("SET redsem.key_prefix = 'kw:'; SELECT redsem_acquire('kw1', 1, '30 s') IS NOT NULL;");
	my $ow = RedsemTest::Session->new($other, name => 'kw_other_waiter');
	$ow->send("SET redsem.key_prefix = 'kw:'; SELECT redsem_acquire('kw1', 1, '30 s', wait => '6 s') IS NOT NULL;");
	ok(defined wait_until(10, sub { $redis->cli('ZCARD', 'kw:{kw1}:waiting') == 1 }),
		'a server new to Redis holds kw1 without grace, a waiter in line behind');
	ok(keeper_starts_grace($old, 'kw'), 'server A\'s keeper starts the grace of its 60 s lease');
	$oh->query_ok('SELECT redsem_release_all();');
	my ($out) = $ow->wait_done(20);
	is($out, 'f', 'the waiter is not let in during the grace: its wait runs out');
	is($redis->cli('EXISTS', 'kw:{kw1}:owner'), '0', 'nobody holds kw1 beside A\'s holder');
	$oh->quit;
	$ow->quit;
	$h->quit;
	$other->stop;
}

###########################################################################
note 'the script alone: a newcomer after the grace does not pass its waiters';
{
	my ($lib, $text) = RedsemTest::redsem_library();
	$redis->cli('FUNCTION', 'LOAD', $text);
	my $call = sub {
		my ($sem, @args) = @_;
		# (written id ... origin, settle, priority, tenant, known, flags:
		# the script takes known and flags right after the origin)
		@args = (@args[ 0 .. 7 ], @args[ 11, 12 ], @args[ 8 .. 10 ]) if $args[0] eq 'acquire';
		return scalar $redis->cli('FCALL', $lib, 2, "redsem:{$sem}:owner", 'redsem:gen', @args);
	};
	$redis->cli('FLUSHALL');
	my $r = $call->('fp', 'acquire', 'h1', 3, 1, 2000, 0, 60000, 'test', '', '0', '', '', '');
	like($r, qr/^held\n\d+\n2000\nn\d{16}:2000:0:0:\d+:\d+:\d+:[0-9a-f]*$/, 'a fresh Redis: held, and told the generation');
	my ($known) = $r =~ /\n(n\d{16}:2000:0:0:\d+:\d+:\d+:[0-9a-f]*)$/;
	$call->('fp', 'release', 'h1');
	$redis->cli('FLUSHALL');
	like($call->('fp', 'acquire', 'w1', 3, 1, 2000, 1, 60000, 'test', '', '0', '', $known, ''),
		qr/^waiting\n/, 'Redis forgot: a caller that knew the generation waits, though 3 fit');
	like($call->('fp', 'acquire', 'n0', 3, 1, 2000, 0, 60000, 'test', '', '0', '', $known, ''),
		qr/^busy\n/, 'a try-acquire is told busy');
	sleep_full(2.2);
	like($call->('fp', 'acquire', 'n1', 3, 1, 2000, 0, 60000, 'test', '', '0', '', $known, ''),
		qr/^held\n/, 'after the grace a newcomer gets in');
	is(scalar $redis->cli('ZSCORE', 'redsem:{fp}:waiting', 'w1'), '', '... and the waiter before it was promoted first');
	cmp_ok(scalar $redis->cli('ZSCORE', 'redsem:{fp}:owner', 'w1'), '<',
		scalar $redis->cli('ZSCORE', 'redsem:{fp}:owner', 'n1'), '... with the earlier ticket');
	# a caller that knew a longer lease lengthens a grace another started
	$redis->cli('FLUSHALL');
	my $r2 = $call->('fq', 'acquire', 'a', 3, 1, 2000, 0, 60000, 'test', '', '0', '', '', '');
	my ($k2) = $r2 =~ /\n(n\S+)$/;
	my $r6 = $call->('fq', 'acquire', 'b', 3, 1, 6000, 0, 60000, 'test', '', '0', '', $k2, 'g');
	my ($k6) = $r6 =~ /\n(n\d{16}:6000:\S+)$/;
	ok(defined $k6, 'a 6 s lease raises lmax');
	$redis->cli('FLUSHALL');
	like($call->('fq', 'acquire', 'c', 3, 1, 1000, 0, 60000, 'test', '', '0', '', $k2, ''), qr/^busy/,
		'forgotten: a caller that knew only the 2 s lease starts a grace');
	like($call->('fq', 'acquire', 'd', 3, 1, 1000, 0, 60000, 'test', '', '0', '', $k6, ''), qr/^busy/,
		'one that knew the 6 s lease is busy too');
	my ($gus, $guntl) = $redis->cli('GET', 'redsem:gen') =~ /^g(\d{16}):\d+:(\d+):/;
	my $len = $guntl - int($gus / 1000);
	ok($len >= 6000 && $len < 6100, "... and made the grace 6 s long ($len ms)");
	# forgotten again during the grace: as long a grace again
	my ($kg) = $redis->cli('GET', 'redsem:gen');
	$redis->cli('FLUSHALL');
	like($call->('fq', 'acquire', 'e', 3, 1, 1000, 0, 60000, 'test', '', '0', '', $kg, ''), qr/^busy/,
		'forgotten again during the grace: still busy (the grace carried over)');
	($gus, $guntl) = $redis->cli('GET', 'redsem:gen') =~ /^g(\d{16}):\d+:(\d+):/;
	$len = $guntl - int($gus / 1000);
	ok($len >= 6000 && $len < 6100, "... a new grace as long ($len ms)");
	# a grace made longer after a semaphore's waiters came: they wait for
	# the longer one (wait_check names the generation key)
	$redis->cli('FLUSHALL');
	my $ra = $call->('fx', 'acquire', 'a', 1, 1, 1000, 0, 60000, 'test', '', '0', '', '', '');
	my ($k1) = $ra =~ /\n(n\S+)$/;
	$call->('fx', 'release', 'a');
	my $rb = $call->('fy', 'acquire', 'b', 1, 1, 8000, 0, 60000, 'test', '', '0', '', $k1, 'g');
	my ($k8) = $rb =~ /\n(n\d{16}:8000:\S+)$/;
	ok(defined $k8, 'a server that knew the 8 s lease');
	$redis->cli('FLUSHALL');
	like($call->('fx', 'acquire', 'w', 1, 1, 1000, 1, 60000, 'test', '', '0', '', $k1, ''), qr/^waiting/,
		'forgotten: a waiter comes in the grace of the 1 s lease its server knew');
	like($call->('fy', 'acquire', 'c', 1, 1, 1000, 0, 60000, 'test', '', '0', '', $k8, ''), qr/^busy/,
		'a server that knew the 8 s lease makes the grace 8 s long');
	sleep_full(1.5);
	like(scalar $redis->cli('FCALL', $lib, 2, 'redsem:{fx}:owner', 'redsem:gen', 'wait_check', 'w', 60000),
		qr/^waiting/,
		'after 1.5 s the waiter still waits (its semaphore had noted 1 s)');
	like(scalar $redis->cli('FCALL', $lib, 1, 'redsem:{fx}:owner', 'give_up', 'nobody'),
		qr/^lost/, 'a call without the key (give_up) promotes nobody either');
	ok($redis->cli('ZSCORE', 'redsem:{fx}:waiting', 'w') ne '', 'the waiter is still in line');
	# a keeper's count (gen_raise) ends a window that is over, as an
	# acquire does: keepers alone, with no acquire, move it on
	my ($tsec, $tus) = split /\n/, scalar $redis->cli('TIME');
	my $tnow = $tsec * 1000 + int($tus / 1000);
	$redis->cli('SET', 'redsem:gen', 'n1700000000000000:3600000:0:7000:' . ($tnow - 300500) . ':0:0:');
	like(scalar $redis->cli('FCALL', $lib, 2, 'redsem:{fk}:owner', 'redsem:gen', 'gen_raise', 2000),
		qr/^n1700000000000000:2000:0:3600000:\d+:0:0:$/, 'gen_raise in a window that is over: a new window, the hour now the one before');
	like(scalar $redis->cli('FCALL', $lib, 2, 'redsem:{fk}:owner', 'redsem:gen', 'gen_raise', 1000),
		qr/^n1700000000000000:2000:0:3600000:/, '... and within the window nothing moves');
	# a keeper's count that knew a generation Redis forgot starts the grace
	# itself (else its server would note the new one, without grace, and
	# its acquires would not start it either)
	my $raise = sub { return scalar $redis->cli('FCALL', $lib, 2, 'redsem:{fk}:owner', 'redsem:gen', 'gen_raise', @_); };
	my $knew = 'n1700000000000000:7000:0:0:' . $tnow . ':0:0:';
	my $made = ($tnow - 1000) * 1000;	# (a second ago)
	my $there = "n$made:1000:0:0:$tnow:0:0:";
	$redis->cli('SET', 'redsem:gen', $there);
	like($raise->(1000, '', $there), qr/^n$made:1000:0:0:/, 'gen_raise knowing the generation there: no grace');
	my $g = $raise->(1000, '', $knew);
	my ($until) = $g =~ /^g$made:1000:(\d+):7000:/;
	is($until, $tnow - 1000 + 7000, "knowing one Redis forgot: a grace of the 7 s lease it knew, from when the new one was made ($g)");
	is(scalar $redis->cli('GET', 'redsem:gen'), $g, '... written');
	$redis->cli('DEL', 'redsem:gen');
	is($raise->(1000, '', ''), '', 'none there, none known: none made');
	is(scalar $redis->cli('EXISTS', 'redsem:gen'), '0', '... no key');
	$g = $raise->(1000, 'u', $knew);
	my ($us2, $u2) = $g =~ /^g(\d{16}):1000:(\d+):7000:/;
	ok(defined $u2 && $u2 - int($us2 / 1000) >= 7000, "none there, one known: made, in a grace ($g)");
	like($g, qr/:[0-9a-f]{16}$/,
		'... on the era of the primary it was made on (a failover before any acquire checks it)');
	like($raise->(1000, 'x', $knew), qr/ERR|argument/i, 'a flag that is not u is refused');
	# a grace made in a window that is over: the window ends, and lprev
	# keeps what is left of the grace, so that Redis forgetting again
	# before it ends (the next server passes the text without its grace, as
	# src/gen.c writes it) gets as long a one (helper-128: lprev took lmax)
	my $old_made = ($tnow - 360000) * 1000;
	$redis->cli('SET', 'redsem:gen', "n$old_made:2000:0:0:" . ($tnow - 360000) . ':0:0:');
	$g = $raise->(1000, '', 'n1700000000000000:3600000:0:0:' . $tnow . ':0:0:');
	my ($u3, $lp3) = $g =~ /^g$old_made:\d+:(\d+):(\d+):/;
	ok(defined $lp3 && $lp3 >= $u3 - $tnow - 1000 && $lp3 <= $u3 - $tnow + 5000,
		"a grace of the hour, in a new window: lprev keeps what is left of it ($g)");
	(my $passed = $g) =~ s/^g(\d+:\d+):\d+:/n$1:0:/;
	$redis->cli('DEL', 'redsem:gen');
	$g = $raise->(1000, '', $passed);
	my ($us4, $u4) = $g =~ /^g(\d{16}):\d+:(\d+):/;
	ok(defined $u4 && $u4 >= $u3 - 1000, "Redis forgets again: the new grace lasts as long as the first ($g)");
	# a line that had no grace when one began (on another semaphore, or by
	# a keeper's gen_raise): a release lets nobody in before it ends (every
	# call names the key), and then the line moves
	$redis->cli('FLUSHALL');
	my $rl = $call->('fl', 'acquire', 'h', 1, 1, 60000, 0, 60000, 'test', '', '0', '', '', '');
	my ($kl) = $rl =~ /\n(n\S+)$/;
	ok(defined $kl, 'a server new to Redis: held at once, no grace');
	like($call->('fl', 'acquire', 'w', 1, 1, 60000, 1, 60000, 'test', '', '0', '', $kl, ''), qr/^waiting/,
		'a waiter behind it');
	($tsec, $tus) = split /\n/, scalar $redis->cli('TIME');
	$tnow = $tsec * 1000 + int($tus / 1000);
	my ($lmade) = $kl =~ /^n(\d{16}):/;
	my $lgrace = $tnow - int($lmade / 1000) + 2500;
	like($raise->(1000, '', "n1700000000000000:$lgrace:0:0:$tnow:0:0:"), qr/^g/,
		'a keeper that knew a generation Redis forgot starts a grace (2.5 s from now)');
	$call->('fl', 'release', 'h');
	ok($redis->cli('ZSCORE', 'redsem:{fl}:waiting', 'w') ne '', 'the release lets nobody in during it');
	like($call->('fl', 'wait_check', 'w', 60000), qr/^waiting/, 'the waiter waits on');
	sleep_full(3);
	like($call->('fl', 'wait_check', 'w', 60000), qr/^held/, 'after the grace its look lets it in');
	# promotion reads the key after writes (helper-133): a key of another
	# type there is none (a release is not left half-done), and a grace
	# text beyond a day (Redis's clock went back) is cut to a day, as an
	# acquire cuts it
	$redis->cli('FLUSHALL');
	like($call->('fh', 'acquire', 'a', 3, 2, 60000, 0, 60000, 'test', '', '0', '', '', ''), qr/^held/, 'a holder of 2 permits of 3');
	like($call->('fh', 'acquire', 'b', 3, 1, 60000, 0, 60000, 'test', '', '0', '', '', ''), qr/^held/, 'and one of 1');
	like($call->('fh', 'acquire', 'c', 3, 2, 60000, 1, 60000, 'test', '', '0', '', '', ''), qr/^waiting/, 'a waiter for 2');
	$redis->cli('DEL', 'redsem:gen');
	$redis->cli('HSET', 'redsem:gen', 'x', '1');
	is($call->('fh', 'release', 'a'), '1', 'a hash at the generation key: the release goes through');
	ok($redis->cli('ZSCORE', 'redsem:{fh}:waiting', 'c') eq '', '... and promotes the waiter for 2');
	is(scalar $redis->cli('HGET', 'redsem:{fh}:state', 'p:a') // '', '', '... nothing of the released holder is left');
	$redis->cli('DEL', 'redsem:gen');
	$call->('fh', 'release', $_) for qw(b c);
	like($call->('fg', 'acquire', 'h', 1, 1, 60000, 0, 60000, 'test', '', '0', '', '', ''), qr/^held/, 'a holder');
	like($call->('fg', 'acquire', 'w', 1, 1, 60000, 1, 60000, 'test', '', '0', '', '', ''), qr/^waiting/, 'a waiter');
	($tsec, $tus) = split /\n/, scalar $redis->cli('TIME');
	$tnow = $tsec * 1000 + int($tus / 1000);
	$redis->cli('SET', 'redsem:gen', 'g1700000000000000:1000:' . ($tnow + 30 * 86400000) . ":0:$tnow:0:0:");
	$call->('fg', 'release', 'h');
	my $gu = $redis->cli('HGET', 'redsem:{fg}:state', 'gu') // 0;
	ok($gu > $tnow && $gu <= $tnow + 86400000 + 60000, "a grace text 30 days long stops the line a day at most ($gu)");
	$call->('fg', 'give_up', 'w');
	is(scalar $redis->cli('EXISTS', 'redsem:{fg}:owner'), '0', '... (the waiter gives up: nothing left)');
	$redis->cli('DEL', 'redsem:gen');
	$redis->cli('SET', 'redsem:gen', 'not ours');
	like($call->('fp', 'acquire', 'n2', 3, 1, 2000, 0, 60000, 'test', '', '0', '', $known, ''),
		qr/^held\n\d+\n2000$/, 'a foreign string at the key: no generation, no grace, no error');
	is(scalar $redis->cli('GET', 'redsem:gen'), 'not ours', '... and it is left alone');
}

node_log_is_clean($node, 'no crash, no assertion failure');
$node->stop;
$redis->stop;

###########################################################################
note 'Redis Cluster: each node forgets on its own';
{
	my @nodes = cluster_of_primaries('gnode');
	my $pg = create_cluster_node('forget_cluster', $nodes[0], "redsem.command_timeout = '2s'\n");
	my $try = sub {
		my ($sem) = @_;
		return $pg->safe_psql('postgres', "SELECT redsem_acquire('$sem', 1, '3 s', wait => '0') IS NOT NULL");
	};
	my @names = map { "cg$_" } 1 .. 12;
	is(join('', map { $try->($_) } @names), 't' x 12, 'twelve semaphores, each taken once (3 s leases)');
	# which node serves each: the one whose keys in its slot are there
	# (its generation key stays)
	my %node_of;
	foreach my $sem (@names)
	{
		my $slot = $nodes[0]->cli('CLUSTER', 'KEYSLOT', "redsem:{$sem}:owner");
		my ($n) = grep { ($_->cli('CLUSTER', 'COUNTKEYSINSLOT', $slot) // '') =~ /^[1-9]/ } @nodes;
		$node_of{$sem} = $n;
	}
	is(scalar(grep { defined $node_of{$_} } @names), 12, 'each semaphore\'s slot has its generation key on its node');
	my $victim = $node_of{ $names[0] };
	my @forgot = grep { $node_of{$_} == $victim } @names;
	my @kept = grep { defined $node_of{$_} && $node_of{$_} != $victim } @names;
	cmp_ok(scalar(@kept), '>', 0, scalar(@forgot) . ' semaphores on one node, ' . scalar(@kept) . ' on the others');
	$victim->cli('FLUSHALL');
	is(join('', map { $try->($_) } @forgot), 'f' x @forgot, 'the semaphores of the node that forgot are in their grace');
	is(join('', map { $try->($_) } @kept), 't' x @kept, 'those of the other nodes admit at once');
	ok(defined wait_until(10, sub { $try->($forgot[0]) eq 't' }), 'after the grace, admission resumes there');
	node_log_is_clean($pg, 'no crash, no assertion failure (Cluster)');
	$pg->stop;
	$_->stop foreach @nodes;
}
done_testing();
