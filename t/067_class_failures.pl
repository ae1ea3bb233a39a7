# 067_class_failures.pl - admission classes on the failure paths (issue 22,
# item 5), across two PostgreSQL servers sharing a Redis: a semaphore with
# a stored limit of 3, one permit reserved for priority 5 and up, tenant A
# weighted 2.  Checked: the keeper keeps a hold with a tenant and a
# priority alive past its lease; a weighted hold of tenant B on the other
# server; a backend terminated while it holds gives its permits back at
# once, and they go by notification to the waiting tenants in fair-share
# order (the tenant holding less per weight first, with the lower fencing
# token); a waiter of the reserve's class cancelled by statement_timeout
# leaves the line and its tenant's line; once everybody has gone, Redis
# keeps only the configuration (limit, reserve, weights): no tenant line,
# no tenant count, no member.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(usleep);

my $redis = RedsemTest::Redis->new;
my $na = create_node('cf_a', $redis);
my $nb = create_node('cf_b', $redis);
$na->safe_psql('postgres', q{
SELECT redsem_set_limit('cf', 3);
SELECT redsem_set_reserve('cf', 1, 5);
SELECT redsem_set_tenant_weight('cf', 'A', 2);
});

# the permits held and the callers waiting, as server b sees them
sub seen
{
	return $nb->safe_psql('postgres', q{SELECT permits_held || ' ' || waiting FROM redsem_semaphore('cf');});
}

# 1. a hold of tenant A, priority 5 (the reserve's class), lease 1 s
my $a1 = RedsemTest::Session->new($na, name => 'a1');
is($a1->query_ok(q{SELECT redsem_acquire('cf', lease => '1 s', tenant => 'A', priority => 5) IS NOT NULL;}), 't',
	'a1 (server a) holds as tenant A, priority 5, with a 1 s lease');
usleep(2_500_000);
is(seen(), '1 0', 'after 2.5 s it still holds: server a\'s keeper kept it alive');
is($a1->query_ok(q{SELECT kept_alive FROM redsem_held() WHERE name = 'cf';}), 't', 'redsem_held says it is kept alive');

# 2. a weighted hold of tenant B on server b: the 2 permits the reserve
# leaves to priority 0
my $b1 = RedsemTest::Session->new($nb, name => 'b1');
is($b1->query_ok(q{SELECT redsem_acquire('cf', permits => 2, tenant => 'B') IS NOT NULL;}), 't',
	'b1 (server b) holds 2 permits as tenant B');
is(seen(), '3 0', 'the limit of 3 is reached');

# 3. two waiters of two tenants, one on each server
my $w1 = RedsemTest::Session->new($na, name => 'w1');
my $w2 = RedsemTest::Session->new($nb, name => 'w2');
$w1->send(q{SELECT redsem_acquire('cf', wait => '60 s', tenant => 'A') IS NOT NULL;});
ok(defined wait_until(20, sub { $redis->zcard('cf', 'waiting') == 1 }), 'w1 (server a, tenant A) waits');
$w2->send(q{SELECT redsem_acquire('cf', wait => '60 s', tenant => 'C') IS NOT NULL;});
ok(defined wait_until(20, sub { $redis->zcard('cf', 'waiting') == 2 }), 'w2 (server b, tenant C) waits');
is($na->safe_psql('postgres', q{SELECT waiting || ' ' || tenants_waiting FROM redsem_semaphores() WHERE name = 'cf';}),
	'2 2', 'redsem_semaphores: 2 waiting, of 2 tenants');

# 4. b1's backend is terminated: its 2 permits go to the two waiters at once
my $t0 = Time::HiRes::time();
$nb->safe_psql('postgres', 'SELECT pg_terminate_backend(' . $b1->backend_pid . ');');
my ($g1) = $w1->wait_done(20);
my ($g2) = $w2->wait_done(20);
my $took = Time::HiRes::time() - $t0;
is("$g1 $g2", 't t', 'both waiters get a permit once the terminated backend\'s 2 are back');
note sprintf('the waiters had their permits %.2f s after the termination (a look comes every 5 s)', $took);
my $tok1 = $w1->query_ok(q{SELECT token FROM redsem_held() WHERE name = 'cf';});
my $tok2 = $w2->query_ok(q{SELECT token FROM redsem_held() WHERE name = 'cf';});
cmp_ok($tok2, '<', $tok1,
	'tenant C (holding 0) was served before tenant A (1 permit per weight 2 = 0.5): its fencing token is lower');
is($na->safe_psql('postgres', q{SELECT string_agg(coalesce(tenant, '-') || ':' || permits_held, ' ' ORDER BY tenant) FROM redsem_tenants('cf') WHERE permits_held > 0;}),
	'A:2 C:1', 'redsem_tenants: A holds 2, C 1; B, terminated, holds nothing');
$b1->quit;

# 5. a waiter of the reserve's class cancelled by statement_timeout
my $c1 = RedsemTest::Session->new($nb, name => 'c1');
my ($out, $err) = $c1->query(q{SET statement_timeout = '1s'; SELECT redsem_acquire('cf', wait => '60 s', tenant => 'D', priority => 7);});
like($err, qr/57014/, 'a waiter of tenant D, priority 7, is cancelled by statement_timeout');
ok(defined wait_until(10, sub { seen() eq '3 0' }), 'it left the line') or diag(seen());
is($redis->cli('EXISTS', 'redsem:{cf}:tline:D', 'redsem:{cf}:tq', 'redsem:{cf}:rline'), '0',
	'and nothing of its line is left: no tenant line, no ranking of tenants, no line of the class');
$c1->quit;

# 6. everybody goes: only the configuration is left
$_->quit foreach ($a1, $w1, $w2);
ok(defined wait_until(20, sub { $redis->cli('EXISTS', 'redsem:{cf}:owner') eq '0' }), 'every member has gone');
ok(defined wait_until(5, sub { $redis->cli('EXISTS', 'redsem:{cf}:ticket') eq '0' }), 'the ticket goes a second later');
is(join(' ', $redis->scan_keys('redsem:{cf}:*')), 'redsem:{cf}:state redsem:{cf}:weights',
	'Redis keeps the state and the weights, and nothing else');
is(join(' ', sort split /\n/, $redis->cli('HKEYS', 'redsem:{cf}:state')), 'limit rk rp wt x',
	'the state holds the limit, the reserve, that weights are stored and x (I13): no count of holders, tenants or the class');
is($redis->cli('PTTL', 'redsem:{cf}:state') . ' ' . $redis->cli('PTTL', 'redsem:{cf}:weights'), '-1 -1',
	'both are configuration, without a TTL');

node_log_is_clean($_, $_->name . "'s log shows no crash") foreach ($na, $nb);
$_->stop foreach ($na, $nb);
$redis->stop;
done_testing();
