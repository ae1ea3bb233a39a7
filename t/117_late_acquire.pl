
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

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $redis = RedsemTest::Redis->new;
# (while the file is there: the session's tries again within its wait too)
my $breaking = PostgreSQL::Test::Utils::tempdir_short() . '/breaking';
my $proxy = RedsemTest::Proxy->new($redis, sub {
	my @cmd = @_;
	return { late => 4 } if -e $breaking && ($cmd[0] // '') =~ /^FCALL/i
	  && (grep { $_ eq 'acquire' } @cmd) && (grep { $_ eq '3600000' } @cmd);
	return undef;
});
my $node = create_node('late', $proxy, "redsem.command_timeout = '1s'\n");
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
$s->quit;
node_log_is_clean($node);
$node->stop;
$proxy->stop;
$redis->stop;
done_testing();
