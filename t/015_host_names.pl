
# 015_host_names.pl - a host name's lookup never holds a backend hostage.
#
# getaddrinfo() can block for as long as the resolver's timeouts (tens of
# seconds with a dead name server) and ignores signals.  redsem looks names
# up on a helper thread and waits on its latch meanwhile (src/redis/resolve.c).
# The server here loads t/fault/dns_fault.c, a resolver that hangs on
# *.slow.redsem.test, fails on *.none.redsem.test and answers 127.0.0.1 for
# *.here.redsem.test: the lookup must end at redsem.connect_timeout, on
# cancel, statement_timeout and pg_terminate_backend, leave no descriptor
# behind once the abandoned lookups end, and the session must go on.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

# the shim's hang: longer than every wait below that must beat it
my $HANG_S = 6;

my $redis = RedsemTest::Redis->new;
my $port = PostgreSQL::Test::Cluster::get_free_port();
$redis->cli('CONFIG', 'SET', 'bind', '127.0.0.1');
$redis->cli('CONFIG', 'SET', 'port', $port);

my $tmp = PostgreSQL::Test::Utils::tempdir();
my $shim = dns_fault_shim($tmp);
my $lookups = "$tmp/lookups.log";
my $node;
{
	local $ENV{LD_PRELOAD} = $shim;
	local $ENV{REDSEM_FAULT_DNS_SLEEP} = $HANG_S;
	local $ENV{REDSEM_FAULT_DNS_LOG} = $lookups;
	local $ENV{REDSEM_FAULT_WRITE_DELAY} = "$tmp/write_delay";
	$node = create_node('dns', $redis, <<"EOC");
redsem.unix_socket = ''
redsem.host = 'db.here.redsem.test'
redsem.port = $port
EOC
}

my $s = RedsemTest::Session->new($node, name => 's');
my $ROUND = q{SELECT redsem_release('h', redsem_acquire('h', 1, '60 s'));};

# A statement with redsem.host set to $host: (stderr, seconds)
sub with_host
{
	my ($host, $sql) = @_;
	my (undef, $err, $secs) = $s->query("SET redsem.host = '$host';\n$sql\nRESET redsem.host;");
	return ($err, $secs);
}

# The backend's open descriptors
sub fds_of
{
	my ($pid) = @_;
	opendir(my $d, "/proc/$pid/fd") or return -1;
	my $n = grep { !/^\./ } readdir($d);
	closedir($d);
	return $n;
}

###########################################################################
note 'names that resolve, and names that do not';

is($s->query_ok($ROUND), 't', 'a host name that resolves: acquire and release over TCP');
like(slurp_file($lookups), qr/^db\.here\.redsem\.test$/m, 'the name went through the resolver');
my ($err, $secs) = with_host('127.0.0.1', $ROUND);
is($err, '', 'a numeric address needs no lookup');

($err) = with_host('db.none.redsem.test', $ROUND);
like($err, qr/ERROR:  08001: could not connect to Redis at db\.none\.redsem\.test:\d+\n.*DETAIL:  could not resolve host name "db\.none\.redsem\.test"/s,
	'a name without an address: 08001, saying so');

###########################################################################
note 'a resolver that hangs';

($err, $secs) = with_host('db.slow.redsem.test',
	"SET redsem.connect_timeout = 1000;\n$ROUND\nRESET redsem.connect_timeout;");
like($err, qr/ERROR:  08001: .*\n.*DETAIL:  no address for host name "db\.slow\.redsem\.test" within \d+ ms \(redsem\.connect_timeout is 1000 ms\)/,
	'the lookup ends at redsem.connect_timeout with 08001');
cmp_ok($secs, '<', $HANG_S - 2, 'without waiting for the resolver');
SKIP:
{
	# (the acquire was written to the link to the broker, which the backend
	# cannot tell from Redis: its abort sends a release, and the broker
	# tries the name again for it; docs/broker.md)
	skip 'broker mode: the abort tries a release', 1 if broker_mode();
	is(scalar(() = slurp_file($lookups) =~ /^db\.slow\.redsem\.test$/mg), 1,
		'one lookup: a failed acquire that never reached Redis leaves nothing to release, at abort or at the next call');
}
is($s->query_ok('SELECT count(*) FROM redsem_held();'), '0', 'and no hold behind');

($err, $secs) = with_host('db.slow.redsem.test',
	"SET redsem.connect_timeout = 60000;\nSET statement_timeout = '300ms';\n$ROUND\n"
	  . "RESET statement_timeout;\nRESET redsem.connect_timeout;");
like($err, qr/ERROR:  57014: canceling statement due to statement timeout/,
	'statement_timeout ends the lookup');
cmp_ok($secs, '<', $HANG_S - 2, 'at once');

$s->send("SET redsem.host = 'db.slow.redsem.test';\nSET redsem.connect_timeout = 60000;\n$ROUND");
usleep(500_000);
$node->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $s->backend_pid . ')');
(undef, $err, $secs) = $s->wait_done(30);
like($err, qr/ERROR:  57014: canceling statement due to user request/, 'a cancel ends the lookup');
cmp_ok($secs, '<', $HANG_S - 2, 'at once');
$s->query_ok("RESET redsem.host;\nRESET redsem.connect_timeout;");
is($s->query_ok($ROUND), 't', 'the session goes on, with a name that resolves');

###########################################################################
note 'abandoned lookups clean up after themselves';

my $before = fds_of($s->backend_pid);
for my $i (1 .. 8)
{
	with_host('db.slow.redsem.test', "SET statement_timeout = '50ms';\n$ROUND\nRESET statement_timeout;");
}
($err) = with_host('db.here.redsem.test', $ROUND);
SKIP:
{
	# (in broker mode names are looked up by the broker's openers, one per
	# connection it opens, not by the backend: the abandoned calls above
	# all waited for the one opener of their target)
	skip 'broker mode: the backend looks nothing up', 1 if broker_mode();
	like($err, qr/ERROR:  08001: .*\n.*DETAIL:  8 earlier lookups of host names are still running; the name server does not answer/,
		'with eight lookups abandoned and still running, no ninth thread: 08001, saying why');
}
($err) = with_host('127.0.0.1', $ROUND);
is($err, '', 'a numeric address still works meanwhile');
ok(defined wait_until($HANG_S + 10, sub { fds_of($s->backend_pid) == $before }),
	'once the lookups end, the backend has as many descriptors open as before')
  or diag('before: ' . $before . ', now: ' . fds_of($s->backend_pid));
is($s->query_ok($ROUND), 't', 'and host names work again');

###########################################################################
note 'the thread wakes the backend late: its eventfd is still its own';

# The thread publishes its result, then writes the eventfd.  The shim holds
# that write back while a NOTIFY wakes the backend, which sees the result
# and stops waiting: the eventfd must stay open until the thread is done
# with it (before, the backend closed it and the thread wrote 8 bytes to
# whatever descriptor reused the number, often the Redis socket).
$s->query_ok('LISTEN redsem_wake;');
append_to_file("$tmp/write_delay", '1500');
$s->send("SET redsem.host = 'race.here.redsem.test';\n$ROUND\nRESET redsem.host;");
usleep(400_000);
$node->safe_psql('postgres', 'NOTIFY redsem_wake;');
(undef, $err) = $s->wait_done(30);
is($err, '', 'the lookup that answered before its wake-up was written: acquire and release work');
SKIP:
{
	# (in broker mode the backend has no lookup thread to race: the
	# broker's opener looks the name up, and the NOTIFY does not reach it)
	skip 'broker mode: the backend looks nothing up', 2 if broker_mode();
	ok(defined wait_until(10, sub { slurp_file($lookups) =~ /^eventfd write delayed$/m }),
		'the thread wrote its wake-up late');
	unlike(slurp_file($lookups), qr/no longer an eventfd/,
		'to its own eventfd, still open: never to a descriptor the backend closed or reused');
}
unlink("$tmp/write_delay");
# (psql prints the NOTIFY after whichever result came with it: this one, on a slow machine)
is($s->query_ok($ROUND) =~ s/\n?Asynchronous notification "redsem_wake" received[^\n]*//r, 't',
	'the connection to Redis is intact');
$s->query_ok('UNLISTEN redsem_wake;');

###########################################################################
note 'pg_terminate_backend during a lookup';

my $t = RedsemTest::Session->new($node, name => 't');
$t->send("SET redsem.host = 'db.slow.redsem.test';\nSET redsem.connect_timeout = 60000;\n$ROUND");
usleep(500_000);
my $t0 = time;
$node->safe_psql('postgres', 'SELECT pg_terminate_backend(' . $t->backend_pid . ')');
ok($t->wait_exit(30), 'the session ends');
cmp_ok(time - $t0, '<', $HANG_S - 2, 'at once');

is($s->query_ok($ROUND), 't', 'the server goes on');
$s->quit;
$node->stop;
node_log_is_clean($node);

done_testing();
