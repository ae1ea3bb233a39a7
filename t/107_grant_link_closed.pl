
# 107_grant_link_closed.pl - redsem.grant_replicas when the connection that
# carried a grant closes before its WAIT.  WAIT counts the replicas that
# have the writes of its own connection: sent on a new connection, which
# wrote nothing, it would vouch for a grant it never carried.  A proxy in
# front of the primary closes the connection right after passing on the
# reply of an acquire (once); the acquire must then fail (08006, the grant
# given back), not use an unacknowledged grant.  Behind the broker the
# proxy closes the broker's connection, which ends the backend's link: the
# same case.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes ();

my ($primary, $replica) = primary_and_replica();

my $dir = PostgreSQL::Test::Utils::tempdir_short();
my $armed = "$dir/armed";      # holds the pid of the backend to stop
my $cut = "$dir/cut";
# (each connection is a process of its own: the files say whether to cut).
# The backend is stopped before the acquire goes on and let go once the
# connection is closed (behind the broker: once the broker has ended the
# backend's link), so that it finds the reply and the close together, as
# when a connection closes between a grant and its WAIT
my $proxy = RedsemTest::Proxy->new($primary, sub {
		my @cmd = @_;
		return undef unless -e $armed && !-e $cut;
		return undef unless uc($cmd[0] // '') eq 'FCALL' && grep { defined && $_ eq 'acquire' } @cmd;
		my $pid = slurp_file($armed);
		chomp $pid;
		kill 'STOP', $pid;
		open(my $f, '>', $cut) or die "cannot create $cut: $!";
		close $f;
		return sub { Time::HiRes::sleep(0.3); kill 'CONT', $pid; };
	});

my $node = create_node('glc', $proxy, "redsem.grant_replicas = 1\nredsem.grant_replica_timeout = 5000\n");
my $s = RedsemTest::Session->new($node, name => 's');
is($s->query_ok(q{SELECT redsem_release('glc', redsem_acquire('glc', 1));}), 't',
	'through the proxy, with the replica up, a grant is acknowledged and used');

# (armed: the next acquire's connection closes right after its reply)
open(my $f, '>', $armed) or die "cannot create $armed: $!";
print $f $s->backend_pid;
close $f;
my ($out, $err) = $s->query(q{SELECT redsem_acquire('glc', 1);});
ok(-e $cut, 'the proxy closed the connection after passing on the grant');
like($err, qr/ERROR:  08006: .*did not confirm a grant on its replicas.*DETAIL:  the connection that carried the grant closed before its replicas were asked/s,
	'the acquire fails: the WAIT would go on a connection that did not carry the grant');
is($out, '', '... and returns no slot');
$s->query_ok(q{SELECT 1;});
is($node->safe_psql('postgres', q{SELECT count(*) FROM redsem_holders('glc');}), '0',
	'the grant is given back: nobody holds the semaphore');
is($s->query_ok(q{SELECT redsem_release('glc', redsem_acquire('glc', 1));}), 't',
	'the next acquire is granted and acknowledged on the new connection');

# with a wait left, the acquire tries again within it (a failover's case)
unlink $cut;
is($s->query_ok(q{SELECT redsem_acquire('glc', 1, wait => '10 s') IS NOT NULL;}), 't',
	'with a wait, the acquire tries again and holds');
ok(-e $cut, '... after the connection that carried its first grant closed');
is($node->safe_psql('postgres', q{SELECT count(*) FROM redsem_holders('glc');}), '1', 'one holder');
$s->query_ok(q{SELECT redsem_release_all();});

$s->quit;
$node->stop;
node_log_is_clean($node);
$proxy->stop;
$replica->stop;
$primary->stop;
done_testing();
