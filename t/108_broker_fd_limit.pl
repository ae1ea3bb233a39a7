
# 108_broker_fd_limit.pl - the broker out of file descriptors.  Each
# backend linked to the broker is a socket in its process; once its
# open-file limit is reached it cannot accept the next link.  Its listener
# then stays readable, and the broker's wait is level-triggered: it used to
# wake at once, fail again and log again, on and on (a core spent, a log
# line per turn).  Now it stops listening for a moment, says so once (with
# a hint), and accepts the waiting backends as soon as links close: every
# session is served in the end, within its command timeout.  The limit is
# lowered on the running broker with prlimit (the broker raises its soft
# limit to the hard one when it starts).

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use IPC::Run;
use POSIX ();
use Time::HiRes qw(time);

plan skip_all => 'prlimit (util-linux) is not installed' unless system('prlimit --version >/dev/null 2>&1') == 0;

my $redis = RedsemTest::Redis->new;
my $node = create_node('fdlimit', $redis, <<'EOC');
redsem.connection_mode = broker
redsem.command_timeout = 30000
max_connections = 80
EOC

my $broker;
ok(defined wait_until(10, sub { $broker = RedsemTest::broker_pid_of($node) }), 'the broker runs');
my $s = RedsemTest::Session->new($node, name => 'warm');
is($s->query_ok(q{SELECT redsem_release('fd', redsem_acquire('fd', 100));}), 't',
	'a session is served (the broker has its Redis connection)');

# (its descriptors now, and room for 15 more)
my @fds = glob("/proc/$broker/fd/*");
my $limit = scalar(@fds) + 15;
is(system('prlimit', "--pid=$broker", "--nofile=$limit:$limit"), 0, "the broker's open-file limit lowered to $limit");

# The CPU the broker has used, in seconds
sub broker_cpu
{
	return cpu_ticks($broker) / POSIX::sysconf(POSIX::_SC_CLK_TCK);
}

my $log_start = -s $node->logfile;
my $script = PostgreSQL::Test::Utils::tempdir() . '/hold.sql';
PostgreSQL::Test::Utils::append_to_file($script,
	"SELECT redsem_acquire('fd', 100, '60 s');\nSELECT pg_sleep(4);\n");
my ($pb_out, $pb_err) = ('', '');
my $pgbench = IPC::Run::start(
	[ $node->installed_command('pgbench'), '-n', '-c', '40', '-j', '4', '-t', '1',
	  '-f', $script, '-d', $node->connstr('postgres') ],
	'>', \$pb_out, '2>', \$pb_err);
ok(defined wait_until(20, sub {
			slurp_file($node->logfile, $log_start) =~ /could not accept a connection: Too many open files/ }),
	'the broker runs out of descriptors, and says so');
my $holders = scalar(holders_of($redis, 'fd'));
cmp_ok($holders, '<', 40, "not every backend is linked meanwhile ($holders hold)");

# (spinning, it would use about all of a CPU meanwhile)
my ($cpu0, $t0) = (broker_cpu(), time);
RedsemTest::sleep_full(2);
my $share = (broker_cpu() - $cpu0) / (time - $t0);
cmp_ok($share, '<', 0.5, sprintf('the broker does not spin while it cannot accept (%.0f%% of a CPU)', 100 * $share));
my $said = () = slurp_file($node->logfile, $log_start) =~ /could not accept a connection/g;
cmp_ok($said, '<=', 2, "it says so once, not at every turn ($said)");
like(slurp_file($node->logfile, $log_start), qr/HINT:  Raise the open-file limit/, 'with a hint');

$pgbench->finish;
like($pb_out, qr/number of transactions actually processed: 40/,
	'every backend is served in the end, as links close (within its command timeout)')
  or diag($pb_err);
ok(defined wait_until(20, sub { scalar(holders_of($redis, 'fd')) == 0 }), 'their slots went with their sessions');
is($s->query_ok(q{SELECT redsem_release('fd', redsem_acquire('fd', 100));}), 't', 'the first session is still served');

$s->quit;
$node->stop;
node_log_is_clean($node);
$redis->stop;
done_testing();
