
# 085_queue_cap_online.pl - a statement queue's cap changed online (issue
# 49): two servers run long statements of one queue while the DBA moves
# its cap 2 -> 3 -> 1 -> 4 by editing redsem.queues and reloading, on both
# servers, then with redsem_set_limit.  No statement fails, and no
# statement starts while as many as the cap in effect run (a lowered cap
# lets the running ones finish).  Before, every statement of the queue
# failed with 22023 ("in use with a limit of 2, not 3") until the running
# ones ended.

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

my $STEP_S = 4;
my @CAPS = (2, 3, 1, 4);
my $redis = RedsemTest::Redis->new;
my @nodes = map { create_node("cap_$_", $redis, "redsem.queues = 'rep: active_statements=2'\n") } qw(a b);
foreach my $n (@nodes)
{
	RedsemHistory::install($n);
	$n->safe_psql('postgres', q{
CREATE ROLE analyst LOGIN;
ALTER ROLE analyst SET redsem.queue = 'rep';
CREATE FUNCTION qwork(hold float8) RETURNS int LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
  RAISE WARNING 'hist rep start % %', hist_uptime(), pg_backend_pid();
  PERFORM pg_sleep(hold);
  RAISE WARNING 'hist rep end % %', hist_uptime(), pg_backend_pid();
  RETURN 1;
END $$;
});
}

# Three analysts per server, each running statements of 0.7 s one after
# another for the whole test
my $run_s = $STEP_S * (@CAPS + 1);
my @sessions;
foreach my $n (@nodes)
{
	for my $i (1 .. 3)
	{
		my $s = RedsemTest::Session->new($n, name => "analyst$i", user => 'analyst');
		$s->send(join(' ', ('SELECT qwork(0.7);') x int($run_s / 0.7)));
		push @sessions, $s;
	}
}

# The cap moves: each step on both servers (redsem.queues, reload), then
# once more by hand (redsem_set_limit, which is the same operation)
my @changes;    # [uptime, cap before, cap after, uptime once in Redis]
my $cap = $CAPS[0];
for my $next (@CAPS[ 1 .. $#CAPS ], 'by hand')
{
	sleep_full($STEP_S);
	my $at = RedsemHistory::uptime();
	my $to;
	if ($next eq 'by hand')
	{
		$to = 2;
		$nodes[0]->safe_psql('postgres', "SELECT redsem_set_limit('queue:rep', $to);");
	}
	else
	{
		$to = $next;
		foreach my $n (@nodes)
		{
			$n->append_conf('postgresql.conf', "redsem.queues = 'rep: active_statements=$to'\n");
			$n->reload;
		}
	}
	# (when Redis has the new cap: the servers reload, and their keepers
	# store it, in a time a loaded machine stretches)
	ok(defined wait_until(10, sub {
				($nodes[0]->safe_psql('postgres', "SELECT redsem_limit('queue:rep')") // '') eq $to }),
		"cap $to is in Redis");
	my $stored = RedsemHistory::uptime();
	note "cap $cap -> $to at uptime $at (in Redis by $stored)";
	push @changes, [ $at, $cap, $to, $stored ];
	$cap = $to;
}
ok(defined wait_until(10, sub {
			($nodes[0]->safe_psql('postgres', "SELECT redsem_limit('queue:rep')") // '') eq '2'
		}), 'the cap in Redis is the last one set');
is($nodes[1]->safe_psql('postgres', "SELECT active_statements || '/' || cap FROM redsem_queues WHERE name = 'rep'"),
	'4/2', 'redsem_queues shows the definition and the cap in effect');

my $errors = 0;
foreach my $s (@sessions)
{
	my ($out, $err) = $s->wait_done($run_s + 60);
	my @bad = grep { /ERROR/ } split /\n/, ($err // '');
	$errors += @bad;
	diag("$s->{name}: $_") foreach @bad[ 0 .. ($#bad < 2 ? $#bad : 2) ];
	$s->quit;
}
is($errors, 0, 'no statement failed while the cap moved');

# The history: no statement started while as many as the cap in effect
# ran (around a change, the larger of the two caps, for 3 s, or until
# half a second after Redis was seen to have the new cap if later)
my @iv = RedsemHistory::logged_intervals('rep', @nodes);
sub cap_at
{
	my ($t) = @_;
	my $c = $CAPS[0];
	for my $ch (@changes)
	{
		next if $t < $ch->[0];
		my $until = $ch->[0] + 3 > $ch->[3] + 0.5 ? $ch->[0] + 3 : $ch->[3] + 0.5;
		$c = ($t < $until) ? ($ch->[1] > $ch->[2] ? $ch->[1] : $ch->[2]) : $ch->[2];
	}
	return $c;
}
my ($bad, $max_seen) = (0, 0);
for my $i (@iv)
{
	my $others = grep { $_ != $i && $_->{start} <= $i->{start} && $_->{end} > $i->{start} } @iv;
	$max_seen = $others + 1 if $others + 1 > $max_seen;
	if ($others >= cap_at($i->{start}))
	{
		$bad++;
		note sprintf('a start at %.2f with %d running, cap %d', $i->{start}, $others, cap_at($i->{start}));
	}
}
cmp_ok(scalar(@iv), '>=', 40, scalar(@iv) . ' statements ran');
is($bad, 0, "no statement started while the cap in effect was reached (at most $max_seen at once)");
my $at4 = grep { my $s = $_->{start}; $s > $changes[2][0] + 3 && $s < $changes[3][0] } @iv;
cmp_ok($at4, '>', 0, 'statements ran under the raised cap of 4');
my $peak4 = 0;
for my $i (@iv)
{
	next unless $i->{start} > $changes[2][0] + 3 && $i->{start} > $changes[2][3] && $i->{start} < $changes[3][0];
	my $n = grep { $_->{start} <= $i->{start} && $_->{end} > $i->{start} } @iv;
	$peak4 = $n if $n > $peak4;
}
is($peak4, 4, 'and 4 ran at once then (the raise woke the waiters that fit)');

like(slurp_file($nodes[0]->logfile), qr/statement queue "rep": cap set to 3 for every server/,
	'the keeper says when it stores a changed cap');

# a queue dropped and defined again while the keeper runs: its definition
# is stored, not the cap it had before (found by review)
foreach my $def ('other: active_statements=1', 'rep: active_statements=7')
{
	$_->append_conf('postgresql.conf', "redsem.queues = '$def'\n") foreach @nodes;
	$_->reload foreach @nodes;
	sleep_full(1);
}
ok(defined wait_until(10, sub { ($nodes[0]->safe_psql('postgres', "SELECT redsem_limit('queue:rep')") // '') eq '7' }),
	'a queue defined again gets its new definition\'s cap');
$_->stop foreach @nodes;
$redis->stop;
done_testing();
