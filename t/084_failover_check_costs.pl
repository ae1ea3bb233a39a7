
# 084_failover_check_costs.pl - what the failover check of I15 (a change
# of primary that may have lost grants starts a grace) costs when nothing
# fails, and where it must not be fooled (issue 48, B; found by review):
#
#   - two servers alternating acquires do not rewrite the generation key
#     at every call (ue moves on once per half lease at most);
#   - a PostgreSQL server whose wall clock is a minute behind Redis's
#     still keeps ue current, so a failover that lost its grant starts a
#     grace (the check reckons on redsem's clock, which no step moves);
#   - nor does the first grant after an idle spell escape it;
#   - a fleet whose grants wait for a replica (redsem.grant_replicas = 1)
#     gets no grace after a change of primary that lost nothing, even
#     after a refresh with a lease.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $LEASE = '6 s';
my $conf = "redsem.command_timeout = 2000\nlog_min_messages = warning\n";

# Redis's clock, in ms
sub rtime
{
	my ($r) = @_;
	my ($s, $us) = split /\n/, scalar $r->cli('TIME');
	return int($s * 1000 + $us / 1000);
}

# A try-acquire of $sem on $node: 't' or 'f'
sub try_on
{
	my ($n, $sem) = @_;
	return $n->safe_psql('postgres', "SELECT redsem_acquire('$sem', 1, '$LEASE', wait => '0') IS NOT NULL");
}

note 'two servers alternating: the generation settles';
{
	my $r = RedsemTest::Redis->new;
	my $a = create_node('alt_a', $r, $conf);
	my $b = create_node('alt_b', $r, $conf);
	my $sa = RedsemTest::Session->new($a, name => 'sa');
	my $sb = RedsemTest::Session->new($b, name => 'sb');
	$_->query_ok("SELECT redsem_release('s', redsem_acquire('s', 1, '$LEASE'));") foreach ($sa, $sb, $sa, $sb);
	sleep_full(3.5);    # a quarter and more of the lease: the next acquires look closer
	my ($changes, $prev) = (0, $r->cli('GET', 'redsem:gen'));
	my $t0 = rtime($r);
	for my $i (1 .. 100)
	{
		(($i % 2) ? $sa : $sb)->query_ok("SELECT redsem_release('s', redsem_acquire('s', 1, '$LEASE'));");
		my $g = $r->cli('GET', 'redsem:gen');
		$changes++ if $g ne $prev;
		$prev = $g;
	}
	# (ue moves on once half a lease or less of it is left: a write at the
	# first call and one more at most, then one per 3 s the loop takes on a
	# loaded machine: CI's failed at 3 beside prove -j3's heaviest files)
	my $took = rtime($r) - $t0;
	my $bound = 2 + int($took / 3000);
	cmp_ok($changes, '<=', $bound,
		"100 alternating acquires in $took ms rewrote the generation key $changes time(s)");
	$_->quit foreach ($sa, $sb);
	$_->stop foreach ($a, $b);
	$r->stop;
}

# A grant on the old primary alone, after 12 s of grants from server A (its
# wall clock $skew s off Redis's): server B's try on the promoted replica
sub lost_grant_case
{
	my ($tag, $skew) = @_;
	my ($p, $r) = primary_and_replica();
	my $faketime = '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1';
	($faketime) = glob('/usr/lib/*/faketime/libfaketime.so.1') unless -e $faketime;
	if ($skew ne '+0' && !(defined $faketime && -e $faketime))
	{
		SKIP: { skip 'libfaketime is not installed', 1; }
		return;
	}
	my %saved = %ENV;
	# (a fixed offset in FAKETIME, read once: a file read in every faked
	# call would run in PostgreSQL's SIGALRM handler too, whose
	# gettimeofday then allocates, and a backend in malloc at that moment
	# corrupts its heap: t/081)
	if ($skew ne '+0')
	{
		$ENV{LD_PRELOAD} = $faketime;
		$ENV{FAKETIME} = $skew;
		$ENV{FAKETIME_DONT_FAKE_MONOTONIC} = '1';
	}
	my $a = create_node("${tag}_a", $p, $conf);
	%ENV = %saved;
	my $b = create_node("${tag}_b", $r, $conf);
	my $loop = RedsemTest::Session->new($a, name => "${tag}_loop");
	for (1 .. 12)
	{
		$loop->query_ok("SELECT redsem_release('s', redsem_acquire('s', 1, '$LEASE'));");
		sleep_full(1);
	}
	ok(defined wait_until(10, sub { ($r->cli('GET', 'redsem:gen') // '') eq ($p->cli('GET', 'redsem:gen') // '') }),
		"$tag: the replica has the generation");
	my ($ue) = ($r->cli('GET', 'redsem:gen') // '') =~ /:(\d+):[0-9a-f]*$/;
	cmp_ok(($ue // 0) - rtime($r), '>', 0, "$tag: its ue is ahead of Redis's clock");
	# the "failover": the replica is promoted, and A's grant is on the old primary alone
	$r->cli('REPLICAOF', 'NO', 'ONE');
	my $h = RedsemTest::Session->new($a, name => "${tag}_A");
	ok($h->query_ok("SELECT redsem_acquire('s', 1, '$LEASE');") ne '', "$tag: A holds on the old primary alone");
	is(try_on($b, 's'), 'f', "$tag: B's try on the new primary gets NULL (the grace) while A holds");
	$h->quit;
	$loop->quit;
	$_->stop foreach ($a, $b);
	$_->stop foreach ($p, $r);
	return;
}

note 'a server whose wall clock is behind Redis\'s still keeps ue current';
lost_grant_case('ctl', '+0');
lost_grant_case('skew', '-60');

note 'the first grant after an idle spell is the one lost (found by review)';
{
	my ($p, $r) = primary_and_replica();
	my $a = create_node('idle_a', $p, $conf);
	my $b = create_node('idle_b', $r, $conf);
	$a->safe_psql('postgres', "SELECT redsem_release('s', redsem_acquire('s', 1, '4 s'))");
	ok(defined wait_until(10, sub { ($r->cli('GET', 'redsem:gen') // '') eq ($p->cli('GET', 'redsem:gen') // '') }),
		'idle: the replica has the generation');
	sleep_full(9);    # more than two leases
	$r->cli('REPLICAOF', 'NO', 'ONE');
	my $h = RedsemTest::Session->new($a, name => 'idle_A');
	ok($h->query_ok("SELECT redsem_acquire('s', 1, '4 s');") ne '', 'idle: A holds on the old primary alone');
	is(try_on($b, 's'), 'f', "idle: B's try on the new primary gets NULL (the grace) while A holds");
	$h->quit;
	$_->stop foreach ($a, $b, $p, $r);
}

note 'grant_replicas = 1: no grace after a change of primary that lost nothing';
{
	my ($p, $r) = primary_and_replica();
	my $c = create_node('acked_c', $p, $conf . "redsem.grant_replicas = 1\nredsem.grant_replica_timeout = 10000\n");
	my $d = create_node('acked_d', $r, $conf . "redsem.grant_replicas = 1\n");
	$c->safe_psql('postgres', "SELECT redsem_release('q', redsem_acquire('q', 1, '$LEASE'))");
	$c->safe_psql('postgres',
		"SELECT redsem_refresh('q', x, '$LEASE'), redsem_refresh('q', x, '8 s'), redsem_release('q', x) FROM redsem_acquire('q', 1, '$LEASE') x");
	my $g = $p->cli('GET', 'redsem:gen');
	like($g, qr/:0:0:[0-9a-f]{16}$/, "refreshes with a lease, a longer one too, count no grant that waits for no replica ($g)");
	ok(defined wait_until(10, sub { ($r->cli('GET', 'redsem:gen') // '') eq $g }), 'the replica has the generation');
	$r->cli('REPLICAOF', 'NO', 'ONE');
	$d->append_conf('postgresql.conf', "redsem.grant_replicas = 0\n");
	$d->reload;
	is(try_on($d, 'q'), 't', 'the promoted replica admits at once');
	$_->stop foreach ($c, $d);
	$_->stop foreach ($p, $r);
}

done_testing();
