
# 053_cluster_hung_node.pl - one hung Redis Cluster node (SIGSTOP) delays
# only its own holds.  Three primaries on loopback; a session holds slots
# with a 3 s lease on semaphores of all three; one primary is stopped for
# 9 s, its listen queue filled so that a new connection to it times out
# (as to a host that is down): the keeper then forgets which slots it
# serves and sends their commands to a healthy node, which redirects them
# to the hung one.  The keeper gives each node a share of its time derived
# from the leases it keeps, charged only for time spent on that node, and
# sends to the hung node last once it has failed: the holds on the other
# two nodes are refreshed throughout (another server never gets their
# slots), the keeper's log names the hung node, and a backend's calls on
# healthy nodes are not held up by a release it left on the hung one.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);
use IO::Socket::INET;

my $HANG_S = 9;

my @nodes = cluster_of_primaries('hnode');    # no failover: a node comes back

sub make_node { return create_cluster_node($_[0], $nodes[0], "redsem.command_timeout = '5s'\n"); }
my $pg = make_node('holds');
my $other = make_node('others');

my @names = map { "hung$_" } 1 .. 18;
my $h = RedsemTest::Session->new($pg, name => 'holder');
is($h->query_ok(q{SELECT count(redsem_acquire('hung' || i, 1, lease => '3 s')) FROM generate_series(1, 18) i;}), '18',
	'18 slots with a 3 s lease, kept alive by the keeper');

# which node serves each semaphore
my %on;
foreach my $n (@nodes)
{
	foreach my $k (split /\n/, ($n->cli('KEYS', 'redsem:{hung*}:owner') // ''))
	{
		$on{$1} = $n if $k =~ /\{(hung\d+)\}/;
	}
}
is(scalar(keys %on), 18, 'every semaphore found on its node');
# the victim is not the node the servers were told to start from
my ($victim) = grep { $_ != $nodes[0] } map { $on{$_} } @names;
my @healthy = grep { $on{$_} != $victim } @names;
my @stuck = grep { $on{$_} == $victim } @names;
cmp_ok(scalar(@healthy), '>', 0, scalar(@healthy) . ' semaphores on the two other nodes');

note 'the node of hung1 (port ' . $victim->port . ") is stopped for $HANG_S s";
my $probe = RedsemTest::Session->new($other, name => 'probe');
$probe->query_ok(q{SET redsem.command_timeout = '300ms'; SET redsem.connect_timeout = '300ms';});
my $list = join(',', map { "'$_'" } @healthy);
my $probe_sql = qq{SELECT count(*) FROM unnest(ARRAY[$list]) AS n WHERE redsem_acquire_xact(n, 1) IS NOT NULL;};
is($probe->query_ok($probe_sql), '0', 'another server finds them all taken');
kill 'STOP', $victim->pid;
# The stopped node accepts nothing: once its listen queue (tcp-backlog 511)
# is full, a new connection to it waits for nothing but its timeout
my @filler;
for (1 .. 600)
{
	my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $victim->port, Blocking => 0)
	  or last;
	push @filler, $sock;
}
note scalar(@filler) . ' connections wait in the stopped node\'s listen queue';
my $t0 = time;
my ($stolen, $probes, $answered) = (0, 0, 0);
while (time - $t0 < $HANG_S)
{
	my ($out, $perr) = $probe->query($probe_sql);
	note "probe: $perr" if $perr ne '';
	$probes++;
	if ($out =~ /^\d+$/)
	{
		$stolen += $out;
		$answered++;
	}
	usleep(250_000);
}
close $_ foreach @filler;
kill 'CONT', $victim->pid;
cmp_ok($answered, '>', 5, "another server asked for the healthy nodes' semaphores $answered times meanwhile (of $probes)");
is($stolen, 0, 'and never got a slot: the holds on the healthy nodes were kept alive throughout');
# the hung node's slots could not be confirmed for longer than their lease
# allows: they were stopped, and the holder's next statement is told, once
my (undef, $herr) = $h->query('SELECT 1;');
like($herr, qr/ERROR:  57014: the slot of semaphore "hung\d+" was lost/,
	'the slots on the hung node were stopped: the holder\'s next statement is told');
ok(defined wait_until(10, sub { $h->query_ok(qq{SELECT count(*) FROM redsem_held() WHERE name IN ($list) AND keeper_error IS NULL;}) == @healthy }),
	'redsem_held shows them all kept alive')
  or diag($h->query_ok(qq{SELECT name, keeper_error FROM redsem_held() WHERE name IN ($list);}));
is($h->query_ok(qq{SELECT count(*) FROM redsem_held() WHERE name IN ($list);}), scalar(@healthy), 'none was lost');
my $log = slurp_file($pg->logfile);
my $port = $victim->port;
my @lines = grep { /redsem keeper: / } split /\n/, $log;
ok(scalar(grep { /127\.0\.0\.1:$port\b/ } @lines), 'the keeper log names the hung node')
  or diag(join("\n", @lines));
is(scalar(grep { /127\.0\.0\.1:(\d+)/ && $1 != $port } @lines), 0, 'and no other');
# the keeper's calls to the hung node are cut short by the node's share of
# a batch (a third of a 3 s lease at most), and the log says so, not that
# redsem.connect_timeout (2 s) or redsem.command_timeout (5 s) ran out.
# Which failure it logs first (trouble is logged once per 30 s) depends on
# whether its first refresh there came before the stop: a command that had
# no answer on the connection it had, or a connection that could not be made
my @timeouts = map { /(?:no answer(?: to \S+)?|did not answer) within (\d+) ms(?: \((.*?)\))?/ ? [ $1, $2 // '' ] : () } @lines;
ok(@timeouts && !grep({ $_->[0] > 1000 || ($_->[1] ne '' && $_->[1] !~ /^the time this call had left/) } @timeouts),
	'the keeper\'s timeouts name the bound that applied: the share of the batch it had left')
  or diag(join("\n", @lines));
# the keeper's fleet touch, whose budget the hung node may use up, does not
# then blame the next node it turns to for not answering "within 0 ms"
my @zero = grep { /within 0 ms/ } split /\n/, $log;
is(scalar(@zero), 0, 'no log line says a node did not answer within 0 ms') or diag(join("\n", @zero));
note $_ foreach grep { /given no time/ } split /\n/, $log;

note 'a backend that left a release on the hung node';
my $b = RedsemTest::Session->new($pg, name => 'backend');
# the timeouts of the report this test answers: wait 2 s, command 5 s,
# connect 2 s (a call on the dead shard took 10 s there)
$b->query_ok(q{SET redsem.command_timeout = '5s'; SET redsem.connect_timeout = '2s';});
my ($stuck1) = @stuck;
# a free semaphore on a healthy node
$b->query_ok(q{SELECT count(redsem_acquire('free' || i, 1, '60 s')) FROM generate_series(1, 12) i;});
my ($free) = grep { my $f = $_; grep { ($_->cli('EXISTS', "redsem:{$f}:owner") // '') eq '1' } grep { $_ != $victim } @nodes }
  map { "free$_" } 1 .. 12;
$b->query_ok(q{SELECT redsem_release_all();});
ok(defined $free, "\"$free\" lives on a healthy node");
kill 'STOP', $victim->pid;
my ($out, $err, $secs) = $b->query(qq{BEGIN; SELECT redsem_acquire_xact('$stuck1', 1, wait => '2 s'); COMMIT;});
like($err, qr/08006|08001/, 'a call on the hung node fails');
cmp_ok($secs, '<', 2 + 5 + 2 + 0.5,
	"within its bound: connect_timeout + command_timeout + wait, and 50 ms at the rollback ($secs s)");
my $t1 = time;
is($b->query_ok(qq{SELECT redsem_release('$free', redsem_acquire('$free', 1));}), 't',
	'the next call, on a healthy node, works');
cmp_ok(time - $t1, '<', 0.9, 'without first waiting for the hung node (its release is the keeper\'s)');
kill 'CONT', $victim->pid;

$_->quit foreach ($h, $probe, $b);

note 'the keeper\'s count of leases in generations goes past the hung node';
# A keeper that starts counts its holds' leases in their generations at
# once (gen_raise, I15): with the node stopped, the generations on the
# healthy nodes must still be counted, not wait behind one that hangs (the
# victim's holds outlive the wait: a 50 s lease)
my $gs = RedsemTest::Session->new($pg, name => 'gens');
is($gs->query_ok(q{SELECT count(redsem_acquire('gk' || i, 1, lease => '50 s')) FROM generate_series(1, 24) i;}), '24',
	'24 slots with a 50 s lease');
# (rounds of the keeper's that do not wait 5 s on the node for its refreshes)
$pg->append_conf('postgresql.conf', "redsem.command_timeout = '1s'\n");
$pg->reload;
# the old keeper stopped, so that only the new one can count again
my $old_keeper = keeper_pid_of($pg);
kill 'STOP', $old_keeper;
# the generation keys that count this lease (no older hold had one as long),
# on the healthy nodes: each set back to a lmax of 1 s, the rest kept
my (%lowered, $on_victim);
foreach my $n (@nodes)
{
	foreach my $k (split /\n/, ($n->cli('KEYS', 'redsem:gen*') // ''))
	{
		next unless ($n->cli('GET', $k) // '') =~ /^n\d{16}:50000:/;
		if ($n == $victim) { $on_victim++; next; }
		$lowered{$k} = $n;
	}
}
# (the healthy nodes' only: the victim may be stopped)
sub lower_gens
{
	foreach my $k (keys %lowered)
	{
		my $v = $lowered{$k}->cli('GET', $k) // '';
		$lowered{$k}->cli('SET', $k, "$1:1000:$2") if $v =~ /^(n\d{16}):50000:(.*)$/;
	}
}
lower_gens();
cmp_ok(scalar(keys %lowered), '>', 0, scalar(keys %lowered) . ' generations on the healthy nodes set back');
cmp_ok($on_victim // 0, '>', 0, ($on_victim // 0) . ' on the node that hangs');
kill 'STOP', $victim->pid;
kill 'TERM', $old_keeper;
kill 'CONT', $old_keeper;
wait_until(10, sub { !kill(0, $old_keeper) });
# (anything it raised on its way out, set back again before the new one starts)
lower_gens();
my $counted = wait_until(30, sub {
	!grep { ($lowered{$_}->cli('GET', $_) // '') !~ /^n\d{16}:50000:/ } keys %lowered
});
kill 'CONT', $victim->pid;
ok(defined $counted, 'a new keeper counts the 50 s lease again in every generation on the healthy nodes'
	  . (defined $counted ? sprintf(' (%.1f s)', $counted) : ''))
  or diag(join("\n", map { "$_: " . ($lowered{$_}->cli('GET', $_) // '') } sort keys %lowered));
isnt(keeper_pid_of($pg) // 0, $old_keeper, 'it is a new keeper');
$gs->quit;
$pg->stop;
$other->stop;
node_log_is_clean($pg);
$_->stop foreach @nodes;
done_testing();
