
# 104_broker_cluster.pl - Redis Cluster routing inside the broker (issue
# 51): in broker mode a backend's calls go on one link whatever node they
# need; the broker sends each to the node of its key's slot, from one slot
# map for the whole server, learnt from the redirections it passes on.
# Checked here: one link for calls on three nodes; a backend's first call
# of a slot that another backend already taught the broker costs no
# redirection; after a slot moved because another backend was redirected,
# a backend that used the slot before is told MOVED by the broker itself
# (it counts a change of route, so its acquire checks the era, I15) though
# its call never reaches the old node; a release sent at commit after such
# a move goes to the new node (not answered MOVED: the keeper would have
# to release it), and the next acquire is told; a node whose connection
# was lost (it may have restarted) is a change too; releases at commit on
# three nodes need at most one more link; a waiter is handed its slot.  (The Cluster suites, t/052, t/053, t/090, run
# through the broker in .ci/run's broker pass.)

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my @nodes = RedsemTest::cluster_of_primaries('bcl');
my $seed = $nodes[0];
my $pg = RedsemTest::create_cluster_node('bclpg', $seed, "redsem.connection_mode = broker\n");

# The primary that serves a slot
sub owner_of_slot
{
	my ($slot) = @_;
	foreach my $line (split /\n/, ($seed->cli('CLUSTER', 'NODES') // ''))
	{
		my @f = split /\s+/, $line;
		my ($port) = ($f[1] // '') =~ /:(\d+)@/ or next;
		foreach my $range (@f[ 8 .. $#f ])
		{
			my ($lo, $hi) = $range =~ /^(\d+)(?:-(\d+))?$/ or next;
			$hi //= $lo;
			return (grep { $_->port == $port } @nodes)[0] if $lo <= $slot && $slot <= $hi;
		}
	}
	return undef;
}

sub slot_of { return $seed->cli('CLUSTER', 'KEYSLOT', "redsem:{$_[0]}:owner"); }
sub node_of { return owner_of_slot(slot_of($_[0])); }

# How many MOVED replies node $n gave since its last CONFIG RESETSTAT
sub moved_at
{
	my ($n) = @_;
	return (($n->cli('INFO', 'errorstats') // '') =~ /errorstat_MOVED:count=(\d+)/) ? $1 : 0;
}

# The Unix sockets a backend holds (its client's and its links to the broker)
sub unix_sockets_of
{
	my ($pid) = @_;
	my %unix = map { ((split /\s+/)[6] // '') => 1 } split /\n/, slurp_file('/proc/net/unix');
	my $n = 0;
	opendir(my $d, "/proc/$pid/fd") or return -1;
	foreach my $fd (readdir $d)
	{
		my $l = readlink("/proc/$pid/fd/$fd") // '';
		$n++ if $l =~ /^socket:\[(\d+)\]$/ && $unix{$1};
	}
	closedir $d;
	return $n;
}

sub session { return RedsemTest::Session->new($pg, name => $_[0]); }
sub cycle
{
	my ($name, $limit) = (@_, 1);
	return "SELECT redsem_release('$name', redsem_acquire('$name', $limit, wait => '10 s'));";
}
# cycle, its redirections followed shown (DEBUG2)
sub debug_cycle { return 'SET client_min_messages = debug2; ' . cycle(@_) . ' RESET client_min_messages;'; }

# a semaphore on each primary, the first not on the seed
my %on;
foreach my $i (1 .. 200)
{
	my $n = node_of("bc$i");
	$on{ $n->port } //= "bc$i";
	last if keys %on == 3;
}
is(scalar(keys %on), 3, 'a semaphore name on each of the three primaries');
my ($far) = map { $on{ $_->port } } grep { $_ != $seed } @nodes;
my @each = map { $on{ $_->port } } @nodes;

###########################################################################
note 'one link to the broker for calls on every node';

my $a = session('a');
my $apid = $a->query_ok('SELECT pg_backend_pid();');
is($a->query_ok(cycle($each[0])), 't', "a call on the seed's semaphore");
my $one = unix_sockets_of($apid);
is($a->query_ok(join(' ', map { cycle($_) } @each[ 1, 2 ])), "t\nt", 'calls on the two other primaries');
is(unix_sockets_of($apid), $one, 'the backend still holds the same sockets: one link, routed by the broker')
  or diag('before ' . $one . ', after ' . unix_sockets_of($apid));

###########################################################################
note 'one slot map for the whole server';

$_->cli('CONFIG', 'RESETSTAT') foreach @nodes;
$a->query_ok(cycle($far));
my $b = session('b');
is($b->query_ok(cycle($far)), 't', 'a new backend uses a semaphore another backend used');
my $c = session('c');
is($c->query_ok(cycle($far)), 't', 'and another');
is(moved_at($seed) + moved_at(node_of($far)), 0,
	'no node answered MOVED: the broker already knew the slot\'s node');

###########################################################################
note 'a slot moved: a backend that did not see it move is told by the broker';

# Migrate the slot of semaphore $name to another primary: (old, new)
sub migrate
{
	my ($name) = @_;
	my $slot = slot_of($name);
	my $from = node_of($name);
	my ($to) = grep { $_ != $from } @nodes;
	$to->cli('CLUSTER', 'SETSLOT', $slot, 'IMPORTING', $from->cli('CLUSTER', 'MYID'));
	$from->cli('CLUSTER', 'SETSLOT', $slot, 'MIGRATING', $to->cli('CLUSTER', 'MYID'));
	my @keys = split /\n/, ($from->cli('CLUSTER', 'GETKEYSINSLOT', $slot, 1000) // '');
	is(@keys ? $from->cli('MIGRATE', '127.0.0.1', $to->port, '', 0, 5000, 'KEYS', @keys) : 'OK', 'OK',
		"the slot of \"$name\" migrated to another primary");
	$_->cli('CLUSTER', 'SETSLOT', $slot, 'NODE', $to->cli('CLUSTER', 'MYID')) foreach @nodes;
	ok(defined wait_until(20, sub { my $o = node_of($name); defined $o && $o == $to }), 'every node says so');
	return ($from, $to);
}

my $slot = slot_of($far);
my ($from, $to) = migrate($far);

# (MOVED counts are taken around one call: the keeper, which routes by
# itself, may be redirected once at any time)
my $m0 = moved_at($from);
my ($out, $err) = $a->query(debug_cycle($far));
is($out, 't', 'a backend calls on the moved semaphore');
like($err, qr/redsem: FCALL: MOVED \Q$slot\E /, 'it was redirected');
cmp_ok(moved_at($from) - $m0, '>=', 1, 'by the old node');

$m0 = moved_at($from);
($out, $err) = $b->query(debug_cycle($far));
is($out, 't', 'a second backend that used the semaphore before calls on it');
like($err, qr/redsem: FCALL: MOVED \Q$slot\E /,
	'it is told MOVED (a change of route it counts: its acquire checks the era)');
is(moved_at($from) - $m0, 0, '... by the broker: its call never reached the old node');
($out, $err) = $b->query(debug_cycle($far));
unlike($err, qr/MOVED/, 'and only once');

my $d = session('d');
$m0 = moved_at($from) + moved_at($to);
($out, $err) = $d->query(debug_cycle($far));
is($out, 't', 'a new backend calls on it');
unlike($err, qr/MOVED/, 'without a redirection: a new link checks the era anyway');
is(moved_at($from) + moved_at($to) - $m0, 0, 'no node answered MOVED');

###########################################################################
note 'a release at commit, sent without waiting, after a move another backend saw';

my ($far2) = grep { my $n = node_of($_); $n != $seed && slot_of($_) != $slot } map { "bd$_" } 1 .. 200;
is($b->query_ok("BEGIN; SELECT redsem_acquire_xact('$far2', 2) IS NOT NULL;"), 't',
	"a backend holds \"$far2\" in a transaction");
my ($from2, $to2) = migrate($far2);
$a->query_ok(cycle($far2, 2));
is($b->query_ok('COMMIT;'), '', 'it commits, after another backend was redirected');
# (the keeper's release would come about 6 s later)
ok(defined wait_until(3, sub { ($to2->cli('ZCARD', "redsem:{$far2}:owner") // 1) == 0 }),
	'its release, sent at commit, freed the slot at once (the broker sent it to the new node, not the keeper later)');
($out, $err) = $b->query(debug_cycle($far2, 2));
like($err, qr/redsem: FCALL: MOVED /, 'its next acquire is told MOVED by the broker (it checks the era)');

###########################################################################
note 'a node whose connections were lost: a backend that used it before is told';

my ($n1, $n2) = map { node_of($_) } @each[ 1, 2 ];
$b->query_ok(cycle($each[1]) . ' ' . cycle($each[2]));
my $log_at = -s $pg->logfile;
$n1->cli('CLIENT', 'KILL', 'TYPE', 'normal');
ok(defined wait_until(10, sub { slurp_file($pg->logfile, $log_at) =~ /redsem broker closed its connection to Redis at 127\.0\.0\.1:@{[ $n1->port ]}/ }),
	'the broker saw its connection to a node closed (its last call was on another node)');
($out, $err) = $b->query(debug_cycle($each[1]));
is($out, 't', 'the backend calls on that node again');
like($err, qr/redsem: FCALL: MOVED /, 'told MOVED by the broker: the node may have restarted (it checks the era)');

###########################################################################
note 'releases at commit on three nodes';

my $bpid = $b->query_ok('SELECT pg_backend_pid();');
my $before = unix_sockets_of($bpid);
is($b->query_ok('BEGIN; ' . join(' ', map { "SELECT redsem_acquire_xact('$_', 1) IS NOT NULL;" } @each) . ' COMMIT;'),
	"t\nt\nt", 'a transaction holds a semaphore on each node');
$b->query_ok(cycle($each[0]));
cmp_ok(unix_sockets_of($bpid), '<=', $before + 1, 'its releases at commit took at most one more link');

###########################################################################
note 'a wait across the move';

my $w = session('w');
is($w->query_ok("SELECT redsem_acquire('$far', 1) IS NOT NULL;"), 't', 'a holder');
$c->send("SELECT redsem_release('$far', redsem_acquire('$far', 1, wait => '20 s'));");
ok(defined wait_until(10, sub { ($to->cli('ZCARD', "redsem:{$far}:waiting") // 0) == 1 }), 'a waiter');
is($w->query_ok("SELECT redsem_release_all();"), '1', 'the holder leaves');
($out, $err) = $c->wait_done(20);
is($out, 't', 'the waiter is handed the slot') or diag($err);

$_->quit foreach ($a, $b, $c, $d, $w);
$pg->stop;
done_testing();
