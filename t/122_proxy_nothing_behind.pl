
# 122_proxy_nothing_behind.pl - Redis behind a proxy that accepts, then
# closes the connection when nothing serves behind it (as HAProxy, envoy
# or stunnel do; here bench/delay_proxy.pl), from helper-140's probe.  A
# caller that comes while Redis is down fails at once, as it does when
# nothing serves at the address itself (docs/deployment.md: a wrong
# address must not cost a whole wait): in direct mode a new connection
# closed before anything was answered on it counted as a stale one that
# broke, so a caller rode it for its whole wait, and one that does not
# wait for a command's time (5 s).  A waiter already in line still rides
# the proxy's closes once Redis goes away under it.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time);

my $redis = RedsemTest::Redis->new;
my ($sock) = RedsemTest::cut_proxy($redis);
my $nowhere = PostgreSQL::Test::Utils::tempdir_short() . '/nowhere.sock';
RedsemTest::cut_proxy_at($nowhere, PostgreSQL::Test::Utils::tempdir_short() . '/nothing-here.sock');
ok(defined wait_until(10, sub { -S $nowhere }), 'a proxy to nowhere listens');

my $pg = create_node('proxy', $redis, "redsem.unix_socket = '$sock'\n");
my $s = RedsemTest::Session->new($pg, name => 's');
is(($s->query(q{SELECT redsem_acquire('p', 1) IS NOT NULL;}))[0], 't', 'through the proxy to Redis: served');

# a waiter in line when Redis goes away rides the proxy's closes
my $h = RedsemTest::Session->new($pg, name => 'holder');
$h->query(q{SELECT redsem_acquire('pw', 1, '3 s') IS NOT NULL;});
my $w = RedsemTest::Session->new($pg, name => 'waiter');
$w->send(q{SELECT redsem_acquire('pw', 1, '3 s', wait => '40 s') IS NOT NULL;});
ok(defined wait_until(10, sub { $redis->zcard('pw', 'owner') == 2 }), 'a holder and a waiter');
$redis->stop;
sleep_full(2);
$redis->start;
my ($out, $err) = $w->wait_done(40);
is($out, 't', 'the waiter rides the restart behind the proxy and is served (' . ($err // '') . ')');
$h->quit;
$w->quit;

# nothing behind the proxy: callers that come fail at once
$pg->append_conf('postgresql.conf', "redsem.unix_socket = '$nowhere'\n");
$pg->reload;
my $n = RedsemTest::Session->new($pg, name => 'newcomer');
my $secs;
($out, $err, $secs) = $n->query(q{SELECT redsem_acquire('n', 1, wait => '8 s') IS NOT NULL;}, 30);
like($err, qr/ERROR:  080\d\d:/, 'a newcomer with 8 s of wait gets a connection error');
cmp_ok($secs, '<', 2, sprintf('... at once, not at the end of its wait (%.2f s)', $secs));
($out, $err, $secs) = $n->query(q{SELECT redsem_acquire('n', 1, wait => '0') IS NOT NULL;}, 30);
like($err, qr/ERROR:  080\d\d:/, 'one that does not wait gets a connection error');
cmp_ok($secs, '<', 2, sprintf('... at once, not after redsem.command_timeout (%.2f s)', $secs));
$n->quit;
$s->quit;
ok(node_log_is_clean($pg), 'server log without crash');
$pg->stop;
$redis->stop;
done_testing();
