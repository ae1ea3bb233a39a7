
# 081_history_faults.pl - never more than N running, checked on a history
# (issue 48, D), under faults.
#
# Two servers share one semaphore (limit 2); four sessions on each loop:
# take a slot, log "start" from inside PostgreSQL, work 0.3 s, log "end",
# give it back (t/RedsemHistory.pm).  A stopped work logs where it really
# ended.  Each case injects one fault while they run, and the checker
# asserts that at no instant more than 2 works overlapped.  The faults here
# are the short cases; bench/history.sh runs them longer, with and without
# the stop, and prints the README's table.
#
#   cut       server A's path to Redis hangs (a proxy that stops
#             forwarding) for longer than the lease (1 s; works run 0.8 s)
#   hang      Redis itself hangs (SIGSTOP) for longer than the lease
#   pause     one holder's backend is paused (SIGSTOP) longer than its lease
#   clock     server C's wall clock steps back 30 s and forward again
#             (libfaketime), C standing in for A: nothing redsem reckons
#             moves
#   flushall  Redis forgets everything (FLUSHALL) while A's works run
#   restart   Redis restarts without persistence while A's works run
#   control   the cut again, with redsem.on_slot_lost = warn: the checker
#             must see the overlaps the stop prevents

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use RedsemHistory;
use Test::More;
use Time::HiRes qw(time usleep);

my $LIMIT = 2;
my $RUN_S = 7;
my $FAULT_AT_S = 2;
my $FAULT_S = 2.5;    # longer than the 1 s lease
my $HOLD_S = 0.8;     # most of the lease: a cut always finds works running

my $redis = RedsemTest::Redis->new;

# server A reaches Redis through a proxy a case can freeze
my ($proxy_sock, $proxy_pid) = cut_proxy($redis);

# Server C's wall clock is libfaketime's, stepped through a file (the
# clock case only).  libfaketime reads that file in the faked call itself,
# gettimeofday included, which PostgreSQL's SIGALRM handler makes (and the
# watchdog fires 10 times a second while a slot is held): a read that
# lands in the handler while the backend is in malloc corrupts its heap
# (fopen allocates).  Read on every call (FAKETIME_NO_CACHE) that aborted
# a backend of the server in about one case in thirty, the cut and the hang
# included (seen in CI: "malloc assertion failure in sysmalloc"), so the
# other cases run on servers without it, and C re-reads the file only when
# a call comes more than a second after the second it last read it in
# (FAKETIME_CACHE_DURATION=1: every 2 s or less for a busy process), so
# each offset is held 3 s and the case checks that C's clock moved.
my $faketime = '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1';
($faketime) = glob('/usr/lib/*/faketime/libfaketime.so.1') unless -e $faketime;
my $offset_file = PostgreSQL::Test::Utils::tempdir_short() . '/faketime';
PostgreSQL::Test::Utils::append_to_file($offset_file, "+0\n");
my %saved = %ENV;
if (defined $faketime && -e $faketime)
{
	$ENV{LD_PRELOAD} = $faketime;
	$ENV{FAKETIME_TIMESTAMP_FILE} = $offset_file;
	$ENV{FAKETIME_CACHE_DURATION} = '1';
	$ENV{FAKETIME_DONT_FAKE_MONOTONIC} = '1';
}
my $conf = "redsem.command_timeout = 1000\nlog_min_messages = warning\n";
my $c = create_node('hist_c', $redis, $conf);
%ENV = %saved;
my $a = create_node('hist_a', $redis, "redsem.unix_socket = '$proxy_sock'\n$conf");
my $b = create_node('hist_b', $redis, $conf);
RedsemHistory::install($_) foreach ($a, $b, $c);

# Run the loops on both servers, inject $fault (a sub) $FAULT_AT_S in,
# check the history of semaphore $sem
sub run_case
{
	my ($sem, $fault, %o) = @_;
	my @n = @{ $o{sessions} // [ 4, 4 ] };
	my ($a, $b) = @{ $o{nodes} // [ $a, $b ] };
	my @w = map { RedsemHistory::start(($a, $b)[$_], $sem, $n[$_], limit => $LIMIT, lease => '1 s',
			hold => ($_ == 0 ? $o{hold_a} : undef) // $HOLD_S, wait => '20 s', run => $RUN_S,
			setup => $o{setup}) } (0, 1);
	sleep_full($FAULT_AT_S);
	# a fault of server A's comes while A runs works
	my $held = !$o{while_a_holds} || defined wait_until(8, sub { holding($a, $sem) });
	my $at = RedsemHistory::uptime();
	note("$sem: fault at uptime $at" . ($held ? '' : ' (no session of server A held a slot)'));
	$fault->(\@w);
	note("$sem: fault over at uptime " . RedsemHistory::uptime());
	RedsemHistory::finish(@w);
	my $r = RedsemHistory::check([ $a, $b ], $sem, $LIMIT, fault_at => $at);
	note(RedsemHistory::line($sem, $r) . " max_inside=$r->{max_inside} over_s=$r->{over_s} errors=$r->{errors}");
	return $r;
}

# The pid of a session of $node that holds a slot of $sem now ('' if none)
sub holding
{
	my ($node, $sem) = @_;
	return $node->safe_psql('postgres',
		"SELECT pid FROM redsem_server_holds() WHERE name = '$sem' AND state = 'holding' LIMIT 1");
}

# Freeze process $pid for $FAULT_S seconds
sub freeze
{
	my ($pid) = @_;
	kill 'STOP', $pid;
	sleep_full($FAULT_S);
	kill 'CONT', $pid;
	return;
}

# Step server C's wall clock back 30 s for 3 s (longer than the 2 s
# libfaketime may take to re-read the file), then forward again (until a
# new session finds it so, while the works still run); note in
# $clock_seen whether a new session of C found its clock behind (that
# libfaketime on C follows the file; the running sessions re-read it as
# often, but are not asked)
my $clock_seen;
sub step_clock
{
	$clock_seen = 0;
	for my $offset ('-30', '+0')
	{
		my $start = time;
		open(my $fh, '>', $offset_file) or die $!;
		print $fh "$offset\n";
		close $fh;
		if ($offset eq '-30')
		{
			$clock_seen = defined wait_until(2.8, sub { clock_lag($c) > 20 });
			sleep_full(3 - (time - $start)) if time - $start < 3;
		}
		else { wait_until(2.8, sub { clock_lag($c) < 5 }); }
	}
	return;
}

# How many seconds a new session of $node finds its wall clock behind ours
sub clock_lag
{
	my ($node) = @_;
	return time - $node->safe_psql('postgres', 'SELECT extract(epoch FROM clock_timestamp())');
}

# Pause a backend of server B that holds a slot now
sub pause_holder
{
	my $pid;
	wait_until(3, sub { ($pid = holding($b, 'pause')) ne '' });
	freeze($pid) if $pid;
	return;
}

# The faults: name, injection, options of run_case.  The cut and the hang
# run works of 8 s on server A's two sessions (hold_a; server B's are of
# 0.8 s; none of A's then waits in line ahead of B's), so that without the stop they would run on past
# their lease: with works of 0.8 s, one that began just before the fault
# could end before its lease did, and a slow machine then had nobody to
# stop (seen once in CI); with works of 4 s, a loaded machine's fault
# came 3 s and more into them, near their end (a review's finding).
my @faults = (
	[ 'cut', sub { freeze($proxy_pid) }, while_a_holds => 1, sessions => [ 2, 4 ], hold_a => 8 ],
	[ 'hang', sub { freeze($redis->pid) }, while_a_holds => 1, sessions => [ 2, 4 ], hold_a => 8 ],
	[ 'pause', \&pause_holder ],
	[ 'clock', \&step_clock, nodes => [ $c, $b ] ],
	# Redis forgets: the holders are stopped at their keeper's next
	# refresh, and the grace period (I15) keeps newcomers out until the
	# longest lease would have ended
	[ 'flushall', sub { $redis->cli('FLUSHALL') }, while_a_holds => 1 ],
	[ 'restart', sub { $redis->stop; $redis->start }, while_a_holds => 1 ]);

# bench/history.sh: every fault longer, with and without the stop
my $bench = $ENV{REDSEM_HISTORY_BENCH};
$RUN_S = $ENV{REDSEM_HISTORY_RUN_S} if $ENV{REDSEM_HISTORY_RUN_S};
my @table;
for my $f (@faults)
{
	my ($name, $inject, %o) = @$f;
	if ($name eq 'clock' && !(defined $faketime && -e $faketime))
	{
		SKIP: { skip 'libfaketime is not installed', 1; }
		next;
	}
	for my $policy ($bench ? ('cancel', 'warn') : ('cancel'))
	{
		my $sem = $policy eq 'cancel' ? $name : "$name-warn";
		my $r = run_case($sem, $inject, %o, setup => "SET redsem.on_slot_lost = $policy;");
		push @table, RedsemHistory::line("$name ($policy)", $r);
		next if $policy ne 'cancel';
		is($r->{over}, 0, "$name: never more than 2 at once ($r->{grants} works, $r->{lost} stopped)");
		cmp_ok($r->{lost}, '>=', 1, "$name: the holders cut off were stopped")
		  if $name eq 'cut' || $name eq 'hang';
		ok($clock_seen, 'clock: a new session of server C found its wall clock 30 s behind') if $name eq 'clock';
	}
}

# the control: without the stop, the cut lets more than 2 run at once, and
# the checker sees it
unless ($bench)
{
	my ($name, $inject, %o) = @{ $faults[0] };
	my $r = run_case('control', $inject, %o, setup => 'SET redsem.on_slot_lost = warn;');
	push @table, RedsemHistory::line('cut (warn)', $r);
	cmp_ok($r->{over}, '>', 0, "control (warn): the checker sees $r->{over} start(s) above the limit");
}
diag(join("\n", '| fault | works | starts above the limit | works stopped | longest run after the fault, of a stopped work |',
	'|---|---|---|---|---|', @table)) if $bench;

node_log_is_clean($_, 'no crash, no assertion failure') foreach ($a, $b, $c);
$_->stop foreach ($a, $b, $c);
$redis->stop;
done_testing();
