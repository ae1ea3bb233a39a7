
# 069_fleet_far_redis.pl - the keeper's touch of the fleet index with Redis
# far away or slow (issue 48, E7).  A touch is given a budget reckoned from
# the holds' leases and redsem.command_timeout (src/timing.h), not a fixed
# 100 ms: with every request 150 ms on its way to Redis, the server still
# shows up in redsem_semaphores(), the keeper still logs that Redis may
# evict keys, and it keeps its connection.  And a touch that does run out
# of its budget (a Redis slow to answer it) leaves its reply to be read
# later instead of dropping the keeper's connection: a reply that has come
# by the connection's next use is read and the keeper does not reconnect
# at every touch (one that has not, t/070, drops the connection then).
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(usleep);

# The connections Redis has accepted so far (each redis-cli call is one)
sub connections_received
{
	my ($redis) = @_;
	my $info = $redis->cli('INFO', 'stats') // '';
	return $info =~ /^total_connections_received:(\d+)/m ? $1 : -1;
}

note 'A: Redis far away (150 ms before each request reaches it)';
my $far = RedsemTest::Redis->new;
$far->cli('CONFIG', 'SET', 'maxmemory', '1gb');
$far->cli('CONFIG', 'SET', 'maxmemory-policy', 'allkeys-lru');
my $far_sock = PostgreSQL::Test::Utils::tempdir_short() . '/far.sock';
my $far_proxy = IPC::Run::start(
	[ 'perl', "$FindBin::RealBin/../bench/delay_proxy.pl", $far_sock, $far->socket, 0, 150 ],
	'<', '/dev/null', '>', "$PostgreSQL::Test::Utils::log_path/069_far_proxy.log", '2>&1');
ok(defined wait_until(10, sub { -S $far_sock }), 'the delay proxy listens');
my $a = create_node('far', $far, "redsem.unix_socket = '$far_sock'\n");

note 'B: Redis slow to answer a touch (0.6 s, more than its budget), with a command timeout of 1 s';
my $slow = RedsemTest::Redis->new;
my $slow_proxy = RedsemTest::Proxy->new($slow, sub {
		usleep(600_000) if grep { $_ eq 'index_touch' } @_;
		return undef;
	});
my $b = create_node('slow', $slow,
	"redsem.unix_socket = '" . $slow_proxy->socket . "'\nredsem.command_timeout = '1s'\n");

my $ha = RedsemTest::Session->new($a, name => 'ha');
is($ha->query_ok(q{SELECT redsem_acquire('fw_far', 2, '3 s') IS NOT NULL;}), 't',
	'A: a slot through the far proxy (a 3 s lease: refreshed every second)');
# (and two more key prefixes: three indexes to touch, in one round trip)
my @hp = map {
	my $h = RedsemTest::Session->new($a, name => "hp$_");
	is($h->query_ok(qq{SET redsem.key_prefix = 'p$_:'; SELECT redsem_acquire('fw_p$_', 2, '3 s') IS NOT NULL;}), 't',
		"A: a slot under key prefix p$_:");
	$h;
} (2, 3);
my $hb = RedsemTest::Session->new($b, name => 'hb');
is($hb->query_ok(q{SELECT redsem_acquire('fw_slow', 2, '6 s') IS NOT NULL;}), 't',
	'B: a slot through the slow proxy (a 6 s lease: refreshed every 2 s)');

my $va = RedsemTest::Session->new($a, name => 'va');
my ($out, $err);
ok(defined wait_until(30, sub {
			($out, $err) = $va->query(q{SELECT name FROM redsem_semaphores();}, 30);
			$out eq 'fw_far' }),
	'A: the far server shows up in redsem_semaphores(): its touch fits its budget')
  or diag("got: $out\n$err");
# (the keeper's lines carry no application name, the sessions' do)
ok(defined wait_until(30, sub {
			slurp_file($a->logfile) =~
			  /\] WARNING:  redsem's Redis may evict its keys \(maxmemory-policy allkeys-lru\)/ }),
	'A: the keeper read its touch\'s answer: it logs that Redis may evict keys');
ok(defined wait_until(30, sub {
			slurp_file($b->logfile) =~
			  /\] LOG:  redsem keeper could not note its semaphores in the index of redsem_semaphores\(\): Redis at .* did not answer within (\d+) ms/ && $1 > 100 }),
	'B: the keeper\'s touch ran out of a budget above the old fixed 100 ms');
ok(defined wait_until(10, sub { defined $slow->cli('ZSCORE', 'redsem:index', 'fw_slow') }),
	'B: ... though it reached Redis, late');
ok(defined wait_until(30, sub { defined $far->cli('ZSCORE', 'p2:index', 'fw_p2') && defined $far->cli('ZSCORE', 'p3:index', 'fw_p3') }),
	'A: the indexes of the other two key prefixes name their semaphores too');

# a touch or more (every 10 s) in the window, and refreshes around it
my $before_a = connections_received($far);
my $before_b = connections_received($slow);
sleep 12;
my $new_a = connections_received($far) - $before_a - 1;
my $new_b = connections_received($slow) - $before_b - 1;
is($new_a, 0, 'A: the keeper kept its connection over a touch and the refreshes');
is($new_b, 0, 'B: the keeper kept its connection although its touches ran out of time');
is($far->zcard('fw_far', 'owner'), 1, 'A: the hold is kept alive through the far proxy');
is($slow->zcard('fw_slow', 'owner'), 1, 'B: the hold is kept alive after the late replies');
is($ha->query_ok(q{SELECT count(*) FROM redsem_held() WHERE kept_alive AND lease_expires_at > clock_timestamp();}), '1', 'A: the session still holds its slot, kept alive');
is($hb->query_ok(q{SELECT count(*) FROM redsem_held() WHERE kept_alive AND lease_expires_at > clock_timestamp();}), '1', 'B: the session still holds its slot, kept alive');
# (the keeper's count of its hold's lease in the generation went behind the
# first touch, on its budget, before: two round trips of 150 ms in turn in
# its 333 ms)
unlike(slurp_file($a->logfile), qr/could not note its semaphores|could not refresh|could not count its holds' leases/,
	'A: no touch, refresh or count of leases in the generations failed (three key prefixes, all in one round trip)');
unlike(slurp_file($b->logfile), qr/could not refresh/, 'B: no refresh failed');

$_->quit foreach ($ha, $hb, $va, @hp);
$a->stop;
$b->stop;
node_log_is_clean($a);
node_log_is_clean($b);
$far_proxy->signal('TERM');
$far_proxy->finish;
$slow_proxy->stop;
$far->stop;
$slow->stop;
done_testing();
