
# 109_reload_ignored_host.pl - a reload that changes a setting the
# connection ignores keeps every slot alive.  Over a Unix socket
# (redsem.unix_socket), redsem.host and redsem.port are not used; the
# keeper, which keeps alive only the slots taken under the Redis data it
# reaches, used to count them in that data's name: a DBA changing
# redsem.host (say, to prepare a move) had every holder of the server
# stopped at its lease's end.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $redis = RedsemTest::Redis->new;
my $node = create_node('ignored', $redis);

my $s = RedsemTest::Session->new($node, name => 'holder');
is($s->query_ok(q{SELECT redsem_acquire('ih', 1, '2 s') IS NOT NULL;}), 't', 'a session holds a slot with a 2 s lease');
$node->safe_psql('postgres', "ALTER SYSTEM SET redsem.host = '192.0.2.1'; SELECT pg_reload_conf();");
RedsemTest::sleep_full(6);
is(scalar(holders_of($redis, 'ih')), 1, 'redsem.host changed while a socket is used: the hold is kept alive past its lease');
is($s->query_ok(q{SELECT count(*) FROM redsem_held() WHERE keeper_error IS NULL;}), '1', '... with no keeper error');
$s->query_ok(q{SELECT redsem_release_all();});
is(scalar(holders_of($redis, 'ih')), 0, '... and its session releases it');

$s->quit;
$node->stop;
node_log_is_clean($node);
$redis->stop;
done_testing();
