
# RedsemTest.pm - shared helpers for redsem's TAP tests.
#
#   my $redis = RedsemTest::Redis->new;         # private redis-server, unix socket
#   my $node  = RedsemTest::create_node('main', $redis);
#   my $s     = RedsemTest::Session->new($node); # one psql session, kept open
#   my ($out, $err) = $s->query('SELECT 1;');
#
# The Redis server comes from $ENV{REDSEM_TEST_REDIS_SERVER} (default
# "redis-server" in PATH) and listens only on a unix socket in a temporary
# directory (--port 0), without persistence.  Nothing here touches system
# services or well-known ports.  $ENV{REDSEM_TEST_REDIS_LOCALE}
# ("<LOCPATH>:<locale>", made by scripts/test.sh) runs every server under
# that locale, as a service manager often does: the script must not depend
# on Redis collating by bytes.

package RedsemTest;

use strict;
use warnings FATAL => 'all';

use Carp;
use Exporter 'import';
use File::Basename qw(dirname);
use FindBin;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

our @EXPORT = qw(create_node connection_mode_conf wait_until node_log_is_clean redsem_library primary_and_replica
  cluster_of_primaries create_cluster_node server_holds_of keeper_pid_of cut_proxy cut_proxy_at sleep_full
  processes cpu_ticks holders_of broker_mode broker_pid_of drop_links write_password_file
  check_told_once poll_through_restart sentinel_deployment sentinel_node cluster_pipe_cli
  cluster_slot_owner dns_fault_shim);

# Servers start as a copy of one initdb made before the suite
# (scripts/test.sh sets INITDB_TEMPLATE): the suite is CPU-bound on 2 cores,
# and a copy costs a tenth of an initdb's CPU.  PostgreSQL 17 and later copy
# the template themselves; for 15 the initdb of Cluster::init (always
# "initdb -D <dir> -A trust -N" there) becomes the copy here.
if (defined $ENV{INITDB_TEMPLATE} && -d $ENV{INITDB_TEMPLATE})
{
	no warnings 'redefine';
	my $real = \&PostgreSQL::Test::Utils::system_or_bail;
	*PostgreSQL::Test::Utils::system_or_bail = sub {
		my @args = @_;

		return $real->('cp', '-RPp', $ENV{INITDB_TEMPLATE}, $args[2])
		  if "@args" eq "initdb -D $args[2] -A trust -N";
		return $real->(@args);
	};
}

# A socket path must fit in sockaddr_un (108 bytes with the NUL).
use constant MAX_SOCKET_PATH => 100;

# Start a Redis (or Sentinel) command under REDSEM_TEST_REDIS_LOCALE, if
# set, with its output appended to $log; returns the harness.
sub start_server
{
	my ($cmd, $log) = @_;
	my ($locpath, $locale) = split /:/, $ENV{REDSEM_TEST_REDIS_LOCALE} // '', 2;
	local %ENV = %ENV;
	@ENV{qw(LOCPATH LC_ALL)} = ($locpath, $locale) if $locale;
	return IPC::Run::start($cmd, '<', '/dev/null', '>>', $log, '2>>', $log);
}

=pod

=item redsem_library([$path[, checked => 1]])

The Redis function library redsem loads, built the way src/script.c builds
it from src/redsem.lua (or $path): returns its name (which is also the name
of its one function, for FCALL) and its text (for FUNCTION LOAD).

With checked => 1, every redis.call of the script goes through a wrapper
that notes each argument given as a Lua number (Redis formats one with
"%.17g", which costs more than a short command: the script passes strings
only), and the library has a second function, <name>_number_args, that
returns the notes made since it was last called ("CMD argument N", at most
100).

=cut

sub redsem_library
{
	my ($path, %opt) = @_;
	require Digest::SHA;
	$path //= "$FindBin::RealBin/../src/redsem.lua";
	open(my $fh, '<', $path) or die "cannot read $path: $!";
	my $body = do { local $/; <$fh> };
	close($fh);
	my $extra = '';
	if ($opt{checked})
	{
		$body =~ s/\bredis\.call\(/checked_call(/g;
		$body = <<'LUA' . $body;
local NUMBER_ARGS = {}
local function checked_call(cmd, ...)
    local args = {...}
    for i = 1, select('#', ...) do
        if type(args[i]) == 'number' and #NUMBER_ARGS < 100 then
            NUMBER_ARGS[#NUMBER_ARGS + 1] = cmd .. ' argument ' .. (i + 1)
        end
    end
    return redis.call(cmd, ...)
end
LUA
	}
	my $name = 'redsem_' . substr(Digest::SHA::sha1_hex($body), 0, 16);
	$extra = "redis.register_function('${name}_number_args', "
	  . "function() local n = NUMBER_ARGS; NUMBER_ARGS = {}; return n end)\n"
	  if $opt{checked};
	return ($name,
		"#!lua name=$name\n$body\nredis.register_function('$name', dispatch)\n"
		  . "redis.register_function{function_name='${name}_keep', flags={'allow-oom'}, "
		  . "callback=function(keys, args) return dispatch(keys, args, true) end}\n$extra");
}

=pod

=head1 FUNCTIONS

=over

=item create_node($name, $redis, $extra_conf)

Create and start a PostgreSQL node that preloads redsem and talks to $redis
over its unix socket (or through a RedsemTest::Proxy in front of it: anything
with a socket), then CREATE EXTENSION redsem in database postgres.
$extra_conf (optional) is appended to postgresql.conf.

=cut

sub create_node
{
	my ($name, $redis, $extra_conf) = @_;
	my $sock = $redis->socket;

	return start_node($name, <<"EOC", $extra_conf);
shared_preload_libraries = 'redsem'
redsem.unix_socket = '$sock'
max_connections = 50
log_statement = none
log_min_messages = warning
EOC
}

# A new server with $conf and then $extra_conf (optional) in its
# postgresql.conf, started, with the extension created.  With
# $ENV{REDSEM_TEST_CONNECTION_MODE} set, a server that preloads redsem runs
# in that connection mode (unless $extra_conf says otherwise).
sub start_node
{
	my ($name, $conf, $extra_conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);

	$conf .= connection_mode_conf()
	  if $conf =~ /shared_preload_libraries\s*=\s*'[^']*redsem/;

	$node->init;
	$node->append_conf('postgresql.conf', $conf);
	$node->append_conf('postgresql.conf', $extra_conf) if defined $extra_conf;
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION redsem');
	return $node;
}

# The postgresql.conf line that puts a server preloading redsem in the
# connection mode $ENV{REDSEM_TEST_CONNECTION_MODE} asks for ("" if none):
# for the files that set their servers up themselves
sub connection_mode_conf
{
	my $mode = $ENV{REDSEM_TEST_CONNECTION_MODE} // '';
	return $mode ne '' ? "redsem.connection_mode = $mode\n" : '';
}

=pod

=item write_password_file($path, $password)

Write $password as the only line of the file at $path, mode 0600, in place
of what was there (a rename: a reader never sees it half written), as a
DBA rotating a password would.

=cut

sub write_password_file
{
	my ($path, $pw) = @_;
	open(my $f, '>', "$path.new") or die "cannot write $path.new: $!";
	print $f "$pw\n";
	close($f);
	chmod(0600, "$path.new") or die "chmod $path.new: $!";
	rename("$path.new", $path) or die "rename to $path: $!";
	return;
}

=pod

=item sleep_full($seconds)

Sleep $seconds in full.  Perl's sleep and usleep return early when a
signal comes, and stopping a child with SIGSTOP sends its parent SIGCHLD:
a test that freezes a process it started and then sleeps would thaw it
at once.

=cut

sub sleep_full
{
	my ($s) = @_;
	my $end = time + $s;
	while ((my $left = $end - time) > 0) { usleep($left * 1e6); }
	return;
}

# For redis-cli: a last argument too long for the command line (the
# library's text is over 128 kB, Linux's limit for one argument) goes
# through stdin with -x instead.  Returns (extra options, stdin).
sub long_last_arg
{
	my ($args) = @_;
	return ([], '/dev/null') unless @$args && length($args->[-1]) > 65536;
	my $text = pop @$args;
	return ([ '-x' ], \$text);
}

=pod

=item poll_through_restart($node, $sql, $timeout_s)

Run $sql in a new session every 100 ms until it answers 't', for at most
$timeout_s seconds (PG_TEST_TIMEOUT_DEFAULT's, 180 unless set, by
default); on a timeout, print its last answer and error.  For polls
across a crash-restart:
Cluster's poll_query_until dies there when psql, refused while the server
restarts, exits before IPC::Run has written the query to its stdin
("ack Broken pipe"); here that try just fails.

=cut

sub poll_through_restart
{
	my ($node, $sql, $timeout) = @_;
	my ($out, $err);
	my $ok = defined wait_until($timeout // $PostgreSQL::Test::Utils::timeout_default, sub {
		$out = eval { $node->safe_psql('postgres', $sql) };
		$err = $@;
		return 1 if defined $out && $out eq 't';
		usleep(80_000);
		return 0;
	});
	Test::More::diag("poll_through_restart gave up on: $sql\nlast answer: "
		  . ($out // '(none)') . "\nlast error: " . ($err || '(none)')) unless $ok;
	return $ok;
}

=pod

=item wait_until($timeout_s, $code)

Call $code every 20 ms until it returns true or $timeout_s seconds pass.
Returns the elapsed seconds on success, undef on timeout.

=cut

sub wait_until
{
	my ($timeout, $code) = @_;
	my $start = time;

	while (1)
	{
		return time - $start if $code->();
		return undef if time - $start > $timeout;
		usleep(20_000);
	}
}

=pod

=item node_log_is_clean($node, $test_name)

A test that the server log shows no crashed backend, PANIC or assertion
failure.

=cut

=pod

=item primary_and_replica()

Start two private Redis servers: a primary, also on a free loopback port,
and a replica of it, in sync.  Returns ($primary, $replica).

=cut

sub primary_and_replica
{
	my $primary = RedsemTest::Redis->new;
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	$primary->cli('CONFIG', 'SET', 'bind', '127.0.0.1');
	$primary->cli('CONFIG', 'SET', 'port', $port);
	my $replica = RedsemTest::Redis->new;
	$replica->cli('REPLICAOF', '127.0.0.1', $port);
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	ok(defined wait_until(30, sub {
				($primary->cli('INFO', 'replication') // '') =~ /connected_slaves:1/
				  && ($replica->cli('INFO', 'replication') // '') =~ /master_link_status:up/
			}), 'a replica follows the primary');
	return ($primary, $replica);
}

=item dns_fault_shim($dir)

Build t/fault/dns_fault.c (a resolver a test can make hang or answer names
of its own, through LD_PRELOAD) into $dir/dns_fault.so; returns its path,
or bails out if it does not build.

=cut

sub dns_fault_shim
{
	my ($dir) = @_;
	my $shim = "$dir/dns_fault.so";
	my ($cc_out, $cc_err) = ('', '');
	IPC::Run::run([ $ENV{CC} // 'cc', '-shared', '-fPIC', '-o', $shim,
		"$FindBin::RealBin/fault/dns_fault.c", '-ldl' ], '>', \$cc_out, '2>', \$cc_err)
	  or BAIL_OUT("cannot build the resolver shim: $cc_err");
	return $shim;
}

=item cluster_pipe_cli($node, @lines)

Send @lines (commands, one per line) on one redis-cli connection to Cluster
node $node (ASKING must share the command's connection); returns what it
printed, trailing blanks cut.

=cut

sub cluster_pipe_cli
{
	my ($n, @lines) = @_;
	my ($out, $err) = ('', '');
	my $in = join("\n", @lines) . "\n";
	IPC::Run::run([ 'redis-cli', '-h', '127.0.0.1', '-p', $n->port ], '<', \$in, '>', \$out, '2>', \$err);
	$out =~ s/\s+\z//;
	return $out;
}

=item cluster_slot_owner($nodes, $slot)

The node of @$nodes that serves hash slot $slot, as CLUSTER NODES of the
first says (undef if none).

=cut

sub cluster_slot_owner
{
	my ($nodes, $slot) = @_;
	foreach my $line (split /\n/, $nodes->[0]->cli('CLUSTER', 'NODES'))
	{
		my @f = split /\s+/, $line;
		my ($port) = $f[1] =~ /:(\d+)@/;
		foreach my $r (@f[ 8 .. $#f ])
		{
			my ($lo, $hi) = $r =~ /^(\d+)(?:-(\d+))?$/ or next;
			$hi //= $lo;
			return (grep { $_->port == $port } @$nodes)[0] if $lo <= $slot && $slot <= $hi;
		}
	}
	return undef;
}

=item sentinel_deployment($prefix, %opt)

Start a Redis primary and $opt{replicas} (default 2) replicas of it, and
three sentinels watching it as "mymaster" (down-after-milliseconds
$opt{down_after}, default 1000; failover-timeout $opt{failover_timeout},
default 4000), all RedsemTest::TcpServer nodes on loopback named after
$prefix, and wait until the replicas are in sync and every sentinel knows
the two others and every replica.  Returns ($primary, \@replicas,
\@sentinels).

=cut

sub sentinel_deployment
{
	my ($prefix, %opt) = @_;
	my $n = $opt{replicas} // 2;
	my @fast = ('repl-diskless-sync-delay 0');
	my $primary = RedsemTest::TcpServer->new(name => "${prefix}_a", conf => [@fast]);
	my @replicas = map {
		RedsemTest::TcpServer->new(name => "${prefix}_r$_",
			conf => [ @fast, 'replicaof 127.0.0.1 ' . $primary->port ])
	} 1 .. $n;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	ok(wait_until(30, sub { !grep { ($_->cli('INFO', 'replication') // '') !~ /master_link_status:up/ } @replicas }),
		'the replicas are in sync');
	my @sentinels = map {
		RedsemTest::TcpServer->new(
			name => "${prefix}_sentinel$_",
			sentinel => 1,
			conf => [
				'sentinel monitor mymaster 127.0.0.1 ' . $primary->port . ' 2',
				'sentinel down-after-milliseconds mymaster ' . ($opt{down_after} // 1000),
				'sentinel failover-timeout mymaster ' . ($opt{failover_timeout} // 4000),
			])
	} 1 .. 3;
	ok(wait_until(60, sub {
				!grep {
					my $m = $_->cli('SENTINEL', 'master', 'mymaster') // '';
					((($m =~ /num-other-sentinels\n(\d+)/)[0] // 0) != 2)
					  || ((($m =~ /num-slaves\n(\d+)/)[0] // 0) != $n)
				} @sentinels
			}), "three sentinels watch the primary and its $n replica(s)");
	return ($primary, \@replicas, \@sentinels);
}

=item sentinel_node($name, $sentinels, $extra_conf)

Create and start a PostgreSQL node that preloads redsem and finds its Redis
through @$sentinels (redsem.sentinels), in the connection mode of the run,
with $extra_conf appended, then CREATE EXTENSION redsem.  Returns the node.

=cut

sub sentinel_node
{
	my ($name, $sentinels, $extra_conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', "shared_preload_libraries = 'redsem'\n"
		  . connection_mode_conf()
		  . "redsem.sentinels = '" . join(',', map { $_->address } @$sentinels) . "'\n"
		  . ($extra_conf // ''));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION redsem');
	return $node;
}

=item cluster_of_primaries($prefix, %conf)

Start a Redis Cluster of three primaries on loopback (RedsemTest::TcpServer
nodes named "$prefix1".."$prefix3"), each with a bus port of its own, no
replicas and no failover (cluster-node-timeout 20 s unless given as
node_timeout), and wait until every node sees it up.  Returns the nodes.

=cut

sub cluster_of_primaries
{
	my ($prefix, %conf) = @_;
	my $timeout = $conf{node_timeout} // 20000;
	my @nodes = map {
		RedsemTest::TcpServer->new(
			name => "$prefix$_",
			conf => [
				'cluster-enabled yes',
				'cluster-port ' . PostgreSQL::Test::Cluster::get_free_port(),
				'cluster-config-file nodes.conf',
				"cluster-node-timeout $timeout",
				'cluster-require-full-coverage no',
			])
	} 1 .. 3;
	my $created = $nodes[0]->cli('--cluster', 'create', (map { $_->address } @nodes),
		'--cluster-replicas', '0', '--cluster-yes');
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	ok(defined $created, 'a cluster of three primaries');
	ok(wait_until(60, sub {
				!grep { (($_->cli('CLUSTER', 'INFO') // '') !~ /cluster_state:ok/) } @nodes
			}), 'the cluster is up');
	return @nodes;
}

=item create_cluster_node($name, $seed, $extra_conf)

A PostgreSQL server with redsem preloaded in Cluster mode, started from
node $seed (a RedsemTest::TcpServer, such as cluster_of_primaries
returns), with $extra_conf appended, running, with the extension created.

=cut

sub create_cluster_node
{
	my ($name, $seed, $extra_conf) = @_;
	my $port = $seed->port;

	return start_node($name, <<"EOC", $extra_conf);
shared_preload_libraries = 'redsem'
redsem.cluster = on
redsem.host = '127.0.0.1'
redsem.port = $port
log_min_messages = warning
EOC
}

=pod

=item cut_proxy($redis)

Start a proxy between servers and $redis (bench/delay_proxy.pl, no delay)
that a test can freeze with SIGSTOP: connections stay open and nothing is
forwarded, as over a network path that hangs; SIGCONT heals it.  Returns
(its socket, its pid); it is stopped (thawed first) when the test ends.

=item cut_proxy_at($listen, $upstream)

The same proxy listening on $listen (a socket path or "host:port") for
$upstream; returns its pid at once, listening or not yet.

=cut

my @cut_proxies;
my $cut_parent = $$;

sub cut_proxy
{
	my ($redis) = @_;
	my $sock = PostgreSQL::Test::Utils::tempdir_short() . '/cut.sock';
	my $pid = cut_proxy_at($sock, $redis->socket);
	wait_until(10, sub { -S $sock }) or croak 'the proxy did not start';
	return ($sock, $pid);
}

sub cut_proxy_at
{
	my ($listen, $upstream) = @_;
	my $pid = fork;
	croak "fork failed: $!" unless defined $pid;
	if ($pid == 0)
	{
		# (a failed exec must not run the test's END blocks: _exit; its
		# warning, fatal here, would die into them)
		{ no warnings 'exec'; exec($^X, "$FindBin::RealBin/../bench/delay_proxy.pl", $listen, $upstream, 0); }
		print STDERR "exec of the cut proxy failed: $!\n";
		POSIX::_exit(127);
	}
	push @cut_proxies, $pid;
	return $pid;
}

# (only in the test's own process, not in a fork of it that exits)
END
{
	if ($$ == $cut_parent) { foreach my $pid (@cut_proxies) { kill 'CONT', $pid; kill 'TERM', $pid; } }
}

=item cpu_ticks($pid)

CPU time (utime + stime, in clock ticks) process $pid has used so far, or
undef once it is gone.

=cut

sub cpu_ticks
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or return undef;
	my $stat = <$fh>;
	close $fh;
	return undef unless defined $stat && $stat =~ /\)\s+(.*)$/;
	my @f = split /\s+/, $1;
	# after "(comm)": state is field 3, utime 14 and stime 15
	return $f[11] + $f[12];
}

=item processes()

[pid, ppid, state, cmdline] of every process of the machine.

=cut

sub processes
{
	my @out;
	foreach my $stat (glob '/proc/[0-9]*/stat')
	{
		open(my $fh, '<', $stat) or next;
		my $line = <$fh>;
		close $fh;
		next unless defined $line && $line =~ /^(\d+) \(.*\) (\S) (\d+) /;
		my ($pid, $state, $ppid) = ($1, $2, $3);
		(my $cmdfile = $stat) =~ s/stat$/cmdline/;
		open($fh, '<', $cmdfile) or next;
		my $cmd = <$fh> // '';
		close $fh;
		push @out, [ $pid, $ppid, $state, $cmd ];
	}
	return @out;
}

=item broker_mode()

True if the servers this run starts that preload redsem run in broker mode
(REDSEM_TEST_CONNECTION_MODE=broker, see start_node).

=cut

sub broker_mode
{
	return ($ENV{REDSEM_TEST_CONNECTION_MODE} // '') eq 'broker';
}

=item broker_pid_of($node)

The pid of $node's broker: the live child of the postmaster's child whose
process title is "redsem broker supervisor" (undef if there is none).

=cut

sub broker_pid_of
{
	my ($node) = @_;
	my ($pm) = split /\n/, PostgreSQL::Test::Utils::slurp_file($node->data_dir . '/postmaster.pid');
	my @all = processes();
	my ($sup) = map { $_->[0] }
	  grep { $_->[1] == $pm && $_->[2] ne 'Z' && $_->[3] =~ /redsem broker supervisor/ } @all;
	return undef unless defined $sup;
	my ($broker) = map { $_->[0] } grep { $_->[1] == $sup && $_->[2] ne 'Z' } @all;
	return $broker;
}

=item drop_links($redis, @nodes)

Cut the sessions of @nodes off their Redis connections: CLIENT KILL of
$redis's normal clients (in direct mode each session's own connection);
in broker mode also a SIGKILL of each node's broker, so that each session's
link to it drops as its own connection would (the supervisor starts
another broker at once).

=cut

sub drop_links
{
	my ($redis, @nodes) = @_;
	$redis->cli('CLIENT', 'KILL', 'TYPE', 'normal');
	return unless broker_mode();
	foreach my $node (@nodes)
	{
		my $pid = broker_pid_of($node);
		kill 'KILL', $pid if defined $pid;
	}
	return;
}

=item keeper_pid_of($node)

The pid of $node's keeper: the postmaster's child whose process title
names it (undef if there is none).

=cut

sub keeper_pid_of
{
	my ($node) = @_;
	my ($pm) = split /\n/, PostgreSQL::Test::Utils::slurp_file($node->data_dir . '/postmaster.pid');
	foreach my $p (processes())
	{
		my ($pid, $ppid, $state, $cmd) = @$p;
		return $pid if $ppid == $pm && $state ne 'Z' && $cmd =~ /redsem keeper/;
	}
	return undef;
}

=item check_told_once($err, $name)

Check what code that catches query_canceled printed ("caught: ...") in
$err: the stop was told as the lost slot (twice at most, if a cancel was
on its way), and no bare "canceling statement due to user request" came
after it.  One may come before: a cancel that lands between two
statements of PL/pgSQL, outside any executor call, is PostgreSQL's own
(the next statement tells the stop).  $name names the checks.

=cut

sub check_told_once
{
	my ($err, $name) = @_;
	my @caught = $err =~ /caught: ([^\n]*)/g;
	my ($first) = grep { $caught[$_] =~ /was lost/ } 0 .. $#caught;
	ok(defined $first, "$name: the stop was told as the lost slot") or diag explain \@caught;
	return unless defined $first;
	my @after = @caught[ $first .. $#caught ];
	ok(!grep({ !/was lost/ } @after) && @after <= 2 && $first <= 1,
		"$name: told once (twice if a cancel was on its way), no bare cancel after it")
	  or diag explain \@caught;
	return;
}

=item holders_of($redis, $sem)

The holders of semaphore $sem in $redis right now: its owners (ids) that
are not in line.

=cut

sub holders_of
{
	my ($redis, $sem) = @_;
	my %waiting = map { $_ => 1 } split /\n/,
	  ($redis->cli('ZRANGE', "redsem:{$sem}:waiting", '0', '-1') // '');
	return grep { !$waiting{$_} } split /\n/,
	  ($redis->cli('ZRANGE', "redsem:{$sem}:owner", '0', '-1') // '');
}

=item server_holds_of($node, $pid)

The entries of $node's hold table that process $pid has, as
"name:state" lines joined by commas, in name order ('' for none).

=cut

sub server_holds_of
{
	my ($node, $pid) = @_;
	return $node->safe_psql('postgres',
		"SELECT string_agg(name || ':' || state, ',' ORDER BY name)
		   FROM redsem_server_holds() WHERE pid = $pid") // '';
}

sub node_log_is_clean
{
	my ($node, $name) = @_;
	my $log = slurp_file($node->logfile);
	my @bad = grep {
		/was terminated by signal|terminated by exception|PANIC:|TRAP:|server process .* exited with exit code [^01]|all server processes terminated/
	} split /\n/, $log;

	local $Test::Builder::Level = $Test::Builder::Level + 1;
	ok(!@bad, $name // 'server log shows no crash')
	  or diag(join("\n", @bad));
}

=pod

=back

=cut

###########################################################################

package RedsemTest::Redis;

use strict;
use warnings FATAL => 'all';

use Carp;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my @all_servers;

=pod

=head1 RedsemTest::Redis

=over

=item RedsemTest::Redis->new

Start a private redis-server on a unix socket in a fresh temp directory.

=cut

sub new
{
	my ($class) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir('redis');

	$dir = PostgreSQL::Test::Utils::tempdir_short()
	  if length("$dir/redis.sock") > RedsemTest::MAX_SOCKET_PATH;
	my $self = bless {
		dir => $dir,
		socket => "$dir/redis.sock",
		server => $ENV{REDSEM_TEST_REDIS_SERVER} // 'redis-server',
		cli => $ENV{REDSEM_TEST_REDIS_CLI},
		starts => 0,
	}, $class;

	unless (defined $self->{cli})
	{
		# redis-cli normally sits next to redis-server
		my $server = $self->{server};
		my $dir_of = $server =~ m{/} ? File::Basename::dirname($server) : undef;
		$self->{cli} =
		  (defined $dir_of && -x "$dir_of/redis-cli")
		  ? "$dir_of/redis-cli"
		  : 'redis-cli';
	}
	push @all_servers, $self;
	$self->start;
	return $self;
}

sub socket { return $_[0]->{socket}; }
sub pid { return $_[0]->{pid}; }

=pod

=item $redis->start

(Re)start the server on the same socket; waits until it answers PING.

=cut

sub start
{
	my ($self, $socket) = @_;
	my $n = ++$self->{starts};
	my $log = "$PostgreSQL::Test::Utils::log_path/redis_"
	  . basename_of_test() . "_$n.log";

	# ($socket: another path, for restart)
	$socket //= $self->{socket};
	croak "redis already running" if $self->{pid};
	unlink $socket;
	my @cmd = (
		$self->{server}, '--port', '0',
		'--unixsocket', $socket,
		'--unixsocketperm', '700',
		'--save', '',
		'--appendonly', 'no',
		'--enable-debug-command', 'local',
		'--daemonize', 'no',
		'--dir', $self->{dir},
		'--logfile', $log);
	note "starting redis: @cmd";
	$self->{harness} = RedsemTest::start_server(\@cmd, $log);
	$self->{pid} = $self->{harness}->{KIDS}[0]{PID};

	my $ok = RedsemTest::wait_until(
		30,
		sub {
			return 0 unless -S $socket;
			my $out = do { local $self->{socket} = $socket; $self->cli('PING') };
			return defined $out && $out eq 'PONG';
		});
	BAIL_OUT("redis-server did not start; see $log") unless defined $ok;
	return;
}

sub basename_of_test
{
	my $b = $0;
	$b =~ s{.*/}{};
	$b =~ s/\.[^.]+$//;
	return $b;
}

=pod

=item $redis->restart

Restart the server without persistence (it comes back empty) with as short
a gap as can be: a new server is started on a socket of its own first, the
old one stopped, and the new socket renamed into the old one's path at
once, so that clients whose connections broke at the stop find the new
server when they connect again, even 100 ms later on a loaded machine
(stop and start leave the path empty for as long as a start takes).

=cut

sub restart
{
	my ($self) = @_;
	my ($old_pid, $old_harness) = @$self{qw(pid harness)};
	# (a path of its own each time: a server unlinks the path it was
	# started on when it stops, which must not be the next one's)
	my $next = "$self->{socket}." . ($self->{starts} + 1);

	$self->{pid} = undef;
	$self->start($next);
	my ($new_pid, $new_harness) = @$self{qw(pid harness)};
	@$self{qw(pid harness)} = ($old_pid, $old_harness);
	$self->stop;
	rename($next, $self->{socket}) or croak "rename $next: $!";
	@$self{qw(pid harness)} = ($new_pid, $new_harness);
	return;
}

=item $redis->come_back(grace_over => 1)

Start a stopped server again on its path (it comes back empty).  With
grace_over, its generation says that the grace after forgetting is over
(end_grace) before any client can reach it: it is started on a path of its
own, given the generation there, and renamed into place.

=cut

sub come_back
{
	my ($self, %opt) = @_;
	my $next = "$self->{socket}." . ($self->{starts} + 1);

	croak "redis already running" if $self->{pid};
	$self->start($next);
	if ($opt{grace_over})
	{
		local $self->{socket} = $next;
		$self->end_grace;
	}
	rename($next, $self->{socket}) or croak "rename $next: $!";
	return;
}

=pod

=item $redis->stop

Stop the server (SIGTERM, no save) and wait for it to exit.  Redis removes
its socket file on the way out.

=cut

sub stop
{
	my ($self) = @_;
	return unless $self->{pid};
	kill 'CONT', $self->{pid};    # in case it was stalled
	kill 'TERM', $self->{pid};
	eval { $self->{harness}->finish; 1 }
	  or do { kill 'KILL', $self->{pid}; eval { $self->{harness}->finish } };
	$self->{pid} = undef;
	$self->{harness} = undef;
	unlink $self->{socket};
	return;
}

=pod

=item $redis->freeze / $redis->thaw

Stall the server (SIGSTOP): connections are still accepted by the kernel,
but nothing is answered until thaw (SIGCONT).

=cut

sub freeze { kill 'STOP', $_[0]->{pid}; return; }

=item $redis->end_grace

Give this Redis a generation (redsem:gen, I15 in src/redsem.lua) made two
days ago, when every lease anybody knew of has ended: as if the grace
after it forgot (a restart without persistence) were over, for tests of
something else after a restart.

=cut

sub end_grace
{
	my ($self) = @_;
	my ($sec, $usec) = split /\n/, scalar $self->cli('TIME');
	my $now_ms = $sec * 1000 + int($usec / 1000);
	$self->cli('SET', 'redsem:gen', sprintf('n%d%06d:0:0:0:%d:0:0:', $sec - 2 * 86400, $usec, $now_ms));
	return;
}
sub thaw { kill 'CONT', $_[0]->{pid}; return; }

=pod

=item $redis->cli(@args)

Run redis-cli against the server; returns its trimmed stdout (undef if
redis-cli failed).  In list context also returns stderr.  If
$redis->{password} is set, redis-cli authenticates with it.

=cut

sub cli
{
	my ($self, @args) = @_;
	my ($out, $err) = ('', '');
	my @auth = defined $self->{password}
	  ? ('--no-auth-warning', '-a', $self->{password}) : ();
	my ($x, $in) = RedsemTest::long_last_arg(\@args);
	my $ok = IPC::Run::run([ $self->{cli}, '-s', $self->{socket}, @auth, @$x, @args ],
		'<', $in, '>', \$out, '2>', \$err);
	$out =~ s/\s+\z//;
	$out = undef unless $ok;
	return wantarray ? ($out, $err) : $out;
}

=pod

=item $redis->script($semaphore, @args)

Run redsem's Lua library (src/redsem.lua, loaded if need be) on $semaphore's keys under the
default prefix, with @args (the operation and its arguments), as another
server would; returns redis-cli's output.

=cut

sub script
{
	my ($self, $name, @args) = @_;
	my ($lib, $text) = RedsemTest::redsem_library();
	$self->cli('FUNCTION', 'LOAD', $text);    # "already exists" is fine
	return $self->cli('FCALL', $lib, 1, "redsem:{$name}:owner", @args);
}

=pod

=item $redis->zcard($semaphore, $suffix)

ZCARD of the semaphore's owner or waiting set (default key prefix).

=cut

sub zcard
{
	my ($self, $name, $suffix) = @_;
	my $n = $self->cli('ZCARD', "redsem:{$name}:$suffix");
	return defined $n ? $n + 0 : -1;
}

=pod

=item $redis->owner_waiting($semaphore)

"owner|waiting": both ZCARDs read at one instant (one script), so a
hand-off between two separate reads cannot show as two holders.

=cut

sub owner_waiting
{
	my ($self, $name) = @_;
	return $self->cli('EVAL',
		"return redis.call('ZCARD', KEYS[1]) .. '|' .. redis.call('ZCARD', KEYS[2])",
		2, "redsem:{$name}:owner", "redsem:{$name}:waiting") // '';
}

=pod

=item $redis->scan_keys($pattern)

The keys matching $pattern, sorted.

=cut

sub scan_keys
{
	my ($self, $pattern) = @_;
	my $out = $self->cli('--scan', '--pattern', $pattern) // '';
	my @keys = sort grep { $_ ne '' } split /\n/, $out;
	return @keys;    # in scalar context: how many
}

END
{
	local $?;    # (the test's exit status)
	foreach my $r (@all_servers)
	{
		eval { $r->stop; 1 } or kill 'KILL', ($r->{pid} // 0);
	}
}

=pod

=back

=cut

###########################################################################

package RedsemTest::RESP;

use strict;
use warnings FATAL => 'all';

use Carp;
use IO::Socket::UNIX;
use Socket qw(SOCK_STREAM);

=pod

=head1 RedsemTest::RESP

A minimal Redis client speaking RESP2 over a unix socket, for tests that
drive redsem's Lua script directly, many commands per second.

  my $r = RedsemTest::RESP->new($redis->socket);
  my $reply = $r->cmd('FCALL', $name, 1, $owner_key, @args);

Replies: a status or bulk string as a string, an integer as a number, nil
as undef, an array as an array reference, and an error as a
RedsemTest::RESP::Error object (test it with RedsemTest::RESP::is_error).

=over

=item RedsemTest::RESP->new($socket_path)

=cut

sub new
{
	my ($class, $path) = @_;
	my $sock = IO::Socket::UNIX->new(Type => SOCK_STREAM, Peer => $path)
	  or croak "cannot connect to $path: $!";
	return $class->on_socket($sock);
}

# A reader/writer on a socket that is already open
sub on_socket
{
	my ($class, $sock) = @_;
	binmode $sock;
	return bless { sock => $sock, buf => '' }, $class;
}

# The RESP encoding of a command
sub encode
{
	my (@args) = @_;
	my $req = '*' . scalar(@args) . "\r\n";
	foreach my $a (@args)
	{
		my $b = "$a";
		utf8::encode($b) if utf8::is_utf8($b);
		$req .= '$' . length($b) . "\r\n$b\r\n";
	}
	return $req;
}

=pod

=item $r->cmd(@args)

Send one command and return its reply.

=cut

sub cmd
{
	my ($self, @args) = @_;
	$self->send_raw(encode(@args));
	return $self->_reply;
}

# Write bytes to the socket
sub send_raw
{
	my ($self, $req) = @_;
	my $off = 0;
	while ($off < length $req)
	{
		my $n = syswrite($self->{sock}, $req, length($req) - $off, $off);
		croak "write to redis failed: $!" unless defined $n;
		$off += $n;
	}
	return;
}

sub is_error { return ref($_[0]) eq 'RedsemTest::RESP::Error'; }

# Read more bytes into the buffer.
sub _fill
{
	my ($self) = @_;
	my $n;
	# (a signal, such as the SIGCHLD of a Redis the test froze, interrupts
	# the read: read again)
	do { $n = sysread($self->{sock}, $self->{buf}, 65536, length $self->{buf}); }
	  while (!defined $n && $!{EINTR});
	croak "read from redis failed: " . (defined $n ? 'EOF' : $!) unless $n;
	return;
}

sub _line
{
	my ($self) = @_;
	my $i;
	$self->_fill while ($i = index($self->{buf}, "\r\n")) < 0;
	my $line = substr($self->{buf}, 0, $i);
	substr($self->{buf}, 0, $i + 2) = '';
	return $line;
}

# The raw bytes of the next complete value (for relaying it unchanged)
sub _raw
{
	my ($self) = @_;
	my $line = $self->_line;
	my $raw = "$line\r\n";
	my ($type, $rest) = (substr($line, 0, 1), substr($line, 1));
	if ($type eq '$' && $rest >= 0)
	{
		$self->_fill while length($self->{buf}) < $rest + 2;
		$raw .= substr($self->{buf}, 0, $rest + 2);
		substr($self->{buf}, 0, $rest + 2) = '';
	}
	elsif ($type eq '*' && $rest > 0)
	{
		$raw .= $self->_raw foreach 1 .. $rest;
	}
	return $raw;
}

sub _reply
{
	my ($self) = @_;
	my $line = $self->_line;
	my ($type, $rest) = (substr($line, 0, 1), substr($line, 1));
	return $rest if $type eq '+';
	return $rest + 0 if $type eq ':';
	return bless { msg => $rest }, 'RedsemTest::RESP::Error' if $type eq '-';
	if ($type eq '$')
	{
		return undef if $rest < 0;
		$self->_fill while length($self->{buf}) < $rest + 2;
		my $s = substr($self->{buf}, 0, $rest);
		substr($self->{buf}, 0, $rest + 2) = '';
		return $s;
	}
	if ($type eq '*')
	{
		return undef if $rest < 0;
		return [ map { $self->_reply } 1 .. $rest ];
	}
	croak "unexpected reply line from redis: $line";
}

=pod

=back

=cut

###########################################################################

package RedsemTest::Proxy;

use strict;
use warnings FATAL => 'all';

use Carp;
use IO::Socket::UNIX;
use POSIX ();
use Socket qw(SOCK_STREAM);

=pod

=head1 RedsemTest::Proxy

A Redis that lies on demand: a unix-socket proxy in front of a real
RedsemTest::Redis that relays every command, except those for which the
test's corrupt function returns raw bytes: those bytes are the reply, and
Redis never sees the command.

  my $proxy = RedsemTest::Proxy->new($redis, sub {
      my @cmd = @_;                       # the command, as strings
      return "\$3\r\nabc\r\n" if grep { /\{evil\}/ } @cmd;
      return undef;                       # relay to Redis
  });
  ... redsem.unix_socket = $proxy->socket ...
  $proxy->stop;

Each client connection is served by its own process, so blocking commands
(BLPOP) block only their own client.  A corrupt function that returns
{ late => N } has the command passed on to Redis N seconds later, without
an answer, and then closes the connection, dropping what its client sent
after the command (a network path that held a connection's bytes, then
delivered some of them once its client had given it up).  A corrupt function that returns a
code reference has the command relayed and its reply passed on, and then
closes that client's connection (and its connection to Redis) and runs the
code.

=over

=item RedsemTest::Proxy->new($redis, $corrupt)

=cut

my @all_proxies;

sub new
{
	my ($class, $redis, $corrupt) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir_short();
	my $path = "$dir/proxy.sock";
	my $listener = IO::Socket::UNIX->new(Type => SOCK_STREAM, Local => $path, Listen => 64)
	  or croak "cannot listen on $path: $!";
	my $pid = fork;
	croak "fork failed: $!" unless defined $pid;
	if ($pid == 0)
	{
		# (a fork of the test: it must never leave by a way that runs the
		# test's END blocks, which would stop the proxies, unlinking this
		# socket, and print a TAP summary of their own)
		POSIX::setpgid(0, 0);
		$SIG{CHLD} = 'IGNORE';
		eval {
			while (1)
			{
				my $c = $listener->accept or next;
				my $kid = fork;
				if (defined $kid && $kid == 0)
				{
					close $listener;
					eval { serve($c, $redis->socket, $corrupt); };
					POSIX::_exit(0);
				}
				close $c;
			}
		};
		print STDERR "proxy $path ended: $@";
		POSIX::_exit(1);
	}
	# (the child makes its own group too, but stop may come before it has)
	POSIX::setpgid($pid, $pid);
	close $listener;
	my $self = bless { pid => $pid, socket => $path, owner => $$ }, $class;
	push @all_proxies, $self;
	return $self;
}

sub socket { return $_[0]->{socket}; }

# Relay one client's commands, corrupting those the test asks for
sub serve
{
	my ($c, $upstream, $corrupt) = @_;
	my $u = IO::Socket::UNIX->new(Type => SOCK_STREAM, Peer => $upstream) or return;
	my $client = RedsemTest::RESP->on_socket($c);
	my $redis = RedsemTest::RESP->on_socket($u);
	while (1)
	{
		my $cmd = $client->_reply;
		last unless ref $cmd eq 'ARRAY';
		my $fake = $corrupt->(@$cmd);
		if (ref $fake eq 'HASH' && $fake->{late})
		{
			# no answer; the command reaches Redis late, and what the client
			# sent after it never does
			sleep $fake->{late};
			$redis->send_raw(RedsemTest::RESP::encode(@$cmd));
			$redis->_raw;
			last;
		}
		if (defined $fake && ref $fake ne 'CODE')
		{
			$client->send_raw($fake);
			next;
		}
		$redis->send_raw(RedsemTest::RESP::encode(@$cmd));
		$client->send_raw($redis->_raw);
		next unless defined $fake;
		close $c;
		close $u;
		$fake->();
		last;
	}
	return;
}

=pod

=item $proxy->stop

Stop the proxy and every connection it serves.

=cut

sub stop
{
	my ($self) = @_;
	return unless $self->{pid};
	kill 'KILL', -$self->{pid};
	kill 'KILL', $self->{pid};
	waitpid($self->{pid}, 0);
	$self->{pid} = undef;
	unlink $self->{socket};
	return;
}

# (only in the process that made them: a fork of the test that exits
# must not stop them)
END
{
	local $?;    # (the test's exit status)
	$_->stop foreach grep { $_->{owner} == $$ } @all_proxies;
}

=pod

=back

=cut

###########################################################################

package RedsemTest::Session;

use strict;
use warnings FATAL => 'all';

use Carp;
use IPC::Run;
use Test::More;
use Time::HiRes qw(time usleep);

=pod

=head1 RedsemTest::Session

One psql process kept open on a node, for tests that need the same backend
across several steps, or a statement left running while the test does
something else.  psql runs with -XAtq, ON_ERROR_STOP off and VERBOSITY
verbose, so errors show their SQLSTATE ("ERROR:  57014: ...").

=over

=item RedsemTest::Session->new($node, %opts)

Start psql and wait until it is connected.  $s->backend_pid is the pid of
its backend.  Options: name (for messages), dbname, user, app (its
application_name).

=cut

sub new
{
	my ($class, $node, %opts) = @_;
	my $self = bless {
		stdin => '',
		stdout => '',
		stderr => '',
		seq => 0,
		name => $opts{name} // 'session',
	}, $class;
	my @cmd = (
		$node->installed_command('psql'), '-XAtq',
		'-v', 'ON_ERROR_STOP=0',
		'-d', $node->connstr($opts{dbname} // 'postgres')
		  . (defined $opts{user} ? " user=$opts{user}" : '')
		  . (defined $opts{app} ? " application_name=$opts{app}" : ''),
		'-f', '-');

	$self->{h} = IPC::Run::start(\@cmd, '<', \$self->{stdin}, '>',
		\$self->{stdout}, '2>', \$self->{stderr});
	my ($out, $err) =
	  $self->query("\\set VERBOSITY verbose\nSELECT pg_backend_pid();");
	croak "psql session did not start: $err" if $err ne '' || $out !~ /^\d+$/;
	$self->{backend_pid} = $out;
	return $self;
}

sub backend_pid { return $_[0]->{backend_pid}; }

=pod

=item $s->send($sql)

Send $sql (complete statements) and return at once.  Use wait_done to
collect the result.

=cut

sub send
{
	my ($self, $sql) = @_;
	my $n = ++$self->{seq};

	croak "a statement is still running" if defined $self->{pending};
	$self->{pending} = $n;
	$self->{sent_at} = time;
	$self->{stdin} .= "$sql\n\\echo 'redsem-done $n'\n\\warn 'redsem-done $n'\n";
	$self->{h}->pump_nb;
	return;
}

=pod

=item $s->wait_done($timeout_s)

Wait for the statement sent last to finish.  Returns (stdout, stderr,
seconds since send), or an empty list if it did not finish in time (it is
still pending then).

=cut

sub wait_done
{
	my ($self, $timeout) = @_;
	my $n = $self->{pending};
	croak "nothing pending" unless defined $n;
	$timeout //= $PostgreSQL::Test::Utils::timeout_default;
	my $banner = qr/redsem-done $n\n/;
	my $end = time + $timeout;

	while (1)
	{
		$self->{h}->pump_nb if $self->{h}->pumpable;
		last if $self->{stdout} =~ $banner && $self->{stderr} =~ $banner;
		return () if time > $end || !$self->{h}->pumpable;
		usleep(2_000);
	}
	my $elapsed = time - $self->{sent_at};
	my ($out, $err) = ($self->{stdout}, $self->{stderr});
	$out =~ s/\n?redsem-done $n\n//;
	$err =~ s/redsem-done $n\n//;
	$self->{stdout} = '';
	$self->{stderr} = '';
	$self->{pending} = undef;
	note sprintf("%s (%.3f s) stderr:\n%s", $self->{name}, $elapsed, $err)
	  if $err ne '';
	return ($out, $err, $elapsed);
}

=pod

=item $s->query($sql, $timeout_s)

send + wait_done; dies if the statement does not finish in time.

=cut

sub query
{
	my ($self, $sql, $timeout) = @_;
	$self->send($sql);
	my @r = $self->wait_done($timeout);
	croak "$self->{name}: statement did not finish in time: $sql" unless @r;
	return @r;
}

=pod

=item $s->query_ok($sql, $timeout_s)

query, and fail the calling test script if anything came on stderr.
Returns stdout.

=cut

sub query_ok
{
	my ($self, $sql, $timeout) = @_;
	my ($out, $err) = $self->query($sql, $timeout);
	croak "$self->{name}: statement failed: $sql\n$err" if $err ne '';
	return $out;
}

=pod

=item $s->wait_stderr($regex, $timeout_s)

Wait until stderr (of the pending statement) matches.  Returns the seconds
since send, or undef on timeout.

=cut

sub wait_stderr
{
	my ($self, $re, $timeout) = @_;
	my $end = time + $timeout;
	while (1)
	{
		$self->{h}->pump_nb if $self->{h}->pumpable;
		return time - $self->{sent_at} if $self->{stderr} =~ $re;
		return undef if time > $end;
		usleep(1_000);
	}
}

sub stderr_so_far { return $_[0]->{stderr}; }

=pod

=item $s->wait_exit($timeout_s)

Wait for psql to exit (e.g. after its backend was terminated).  Returns true
if it did; stdout/stderr so far stay readable via stderr_so_far.

=cut

sub wait_exit
{
	my ($self, $timeout) = @_;
	my $end = time + $timeout;
	while ($self->{h}->pumpable)
	{
		$self->{h}->pump_nb;
		return 0 if time > $end;
		usleep(2_000);
	}
	eval { $self->{h}->finish; 1 };
	$self->{finished} = 1;
	return 1;
}

=pod

=item $s->quit

End psql normally (\q) and wait for it to exit.

=cut

sub quit
{
	my ($self) = @_;
	return if $self->{finished};
	# \q to a psql that already exited would fail with EPIPE
	eval { $self->{h}->pump_nb; 1 };
	$self->{stdin} .= "\\q\n" if $self->{h}->pumpable;
	eval { $self->{h}->finish; 1 } or eval { $self->{h}->kill_kill; 1 };
	$self->{finished} = 1;
	return;
}

=pod

=back

=cut


package RedsemTest::TcpServer;

use strict;
use warnings FATAL => 'all';

use Carp;
use File::Spec;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my @tcp_servers;

=pod

=head1 RedsemTest::TcpServer

A redis-server (or a sentinel, with sentinel => 1) on a free loopback TCP
port, for the tests of Sentinel and TLS.  Its configuration file is
written in a temp directory (a sentinel rewrites it), with no persistence.

=over

=item RedsemTest::TcpServer->new(name => $n, conf => [lines], sentinel => 0|1, tls => 0|1)

Start it and wait until it answers PING.  With tls => 1 the conf must set
up TLS and cli() speaks TLS with $self->{tls_args}.

=cut

sub new
{
	my ($class, %o) = @_;
	my $self = bless {
		name => $o{name},
		port => PostgreSQL::Test::Cluster::get_free_port(),
		dir => File::Spec->rel2abs(PostgreSQL::Test::Utils::tempdir($o{name})),
		conf_lines => $o{conf} // [],
		sentinel => $o{sentinel} // 0,
		tls_args => $o{tls_args} // [],
		server => $ENV{REDSEM_TEST_REDIS_SERVER} // 'redis-server',
		cli => $ENV{REDSEM_TEST_REDIS_CLI},
		starts => 0,
	}, $class;
	unless (defined $self->{cli})
	{
		my $dir_of = $self->{server} =~ m{/} ? File::Basename::dirname($self->{server}) : undef;
		my $cli = $self->{server} =~ /valkey/ ? 'valkey-cli' : 'redis-cli';
		$self->{cli} = (defined $dir_of && -x "$dir_of/$cli") ? "$dir_of/$cli" : $cli;
	}
	push @tcp_servers, $self;
	$self->start;
	return $self;
}

sub port { return $_[0]->{port}; }
sub pid { return $_[0]->{pid}; }
sub address { return '127.0.0.1:' . $_[0]->{port}; }

=pod

=item $srv->start(@extra_conf_lines)

(Re)start on the same port, with the configuration written anew (plus
@extra_conf_lines) unless it is a sentinel restarting.

=cut

sub start
{
	my ($self, @extra) = @_;
	my $n = ++$self->{starts};
	# (absolute: the server changes to its dir before opening its log)
	my $log = File::Spec->rel2abs("$PostgreSQL::Test::Utils::log_path/$self->{name}_"
		  . RedsemTest::Redis::basename_of_test() . "_$n.log");
	my $conf = "$self->{dir}/server.conf";

	croak "$self->{name} already running" if $self->{pid};
	if (!$self->{sentinel} || $n == 1)
	{
		open my $fh, '>', $conf or die "$conf: $!";
		print $fh join("\n",
			"port $self->{port}", 'bind 127.0.0.1', "dir $self->{dir}",
			"logfile $log", 'daemonize no',
			($self->{sentinel} ? () : ("save ''", 'appendonly no')),
			(map { s/\bPORT\b/$self->{port}/r } @{ $self->{conf_lines} }, @extra), '');
		close $fh;
	}
	my @cmd = ($self->{server}, $conf, ($self->{sentinel} ? ('--sentinel') : ()),
		($n > 1 ? ('--logfile', $log) : ()));
	$self->{harness} = RedsemTest::start_server(\@cmd, $log);
	$self->{pid} = $self->{harness}->{KIDS}[0]{PID};
	my $ok = RedsemTest::wait_until(30, sub { ($self->cli('PING') // '') eq 'PONG' });
	BAIL_OUT("$self->{name} did not start; see $log") unless defined $ok;
	return;
}

=pod

=item $srv->stop / $srv->kill9

Stop it (SIGTERM), or kill it at once (SIGKILL, nothing saved or said).

=cut

sub stop
{
	my ($self, $signal) = @_;
	return unless $self->{pid};
	kill($signal // 'TERM', $self->{pid});
	eval { $self->{harness}->finish; 1 }
	  or do { kill 'KILL', $self->{pid}; eval { $self->{harness}->finish } };
	$self->{pid} = undef;
	return;
}

sub kill9 { $_[0]->stop('KILL'); return; }

=pod

=item $srv->cli(@args)

Run redis-cli against it; its trimmed stdout, or undef if it failed.

=cut

sub cli
{
	my ($self, @args) = @_;
	my ($out, $err) = ('', '');
	my ($x, $in) = RedsemTest::long_last_arg(\@args);
	my $ok = IPC::Run::run(
		[ $self->{cli}, '-h', '127.0.0.1', '-p', $self->{port}, @{ $self->{tls_args} }, @$x, @args ],
		'<', $in, '>', \$out, '2>', \$err);
	$out =~ s/\s+\z//;
	return $ok ? $out : undef;
}

END
{
	local $?;
	$_->stop foreach @tcp_servers;
}

=pod

=back

=cut


package RedsemTest::Failover;

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Utils;
use Test::More;

=pod

=head1 RedsemTest::Failover

Counting what a forced failover did, from the periods [semaphore, t0, t1]
that the sessions of t/050 and t/052 log in PostgreSQL (independently of
redsem), and reporting the figures bench/failover.sh collects.

=over

=item rounds()

The rounds t/050 and t/052 run, as [how, grant_replicas] pairs: two of the
four (a planned failover and a killed primary, each with
redsem.grant_replicas 0 and 1), 'failover:1 kill:1' unless
$ENV{REDSEM_FAILOVER_ROUNDS} names others (say 'failover:0 kill:0'), or
'all'.  scripts/matrix.sh gives its roots the other two, so that a CI run
covers all four; bench/failover.sh runs longer rounds.

=cut

sub rounds
{
	my @all = ([ 'failover', 0 ], [ 'failover', 1 ], [ 'kill', 0 ], [ 'kill', 1 ]);
	my $pick = $ENV{REDSEM_FAILOVER_ROUNDS} || 'failover:1 kill:1';
	return @all if $pick eq 'all';
	my %want = map { $_ => 1 } split ' ', $pick;
	my @got = grep { $want{"$_->[0]:$_->[1]"} } @all;
	die "REDSEM_FAILOVER_ROUNDS='$pick' names no round (failover:0 failover:1 kill:0 kill:1)\n" unless @got;
	return @got;
}

=pod

=item sweep($periods, $limit)

Per semaphore, the most periods that overlap, and how many periods started
with $limit already reached (summed over semaphores).

=cut

sub sweep
{
	my ($periods, $limit) = @_;
	my %by;
	push @{ $by{ $_->[0] } }, $_ foreach @$periods;
	my ($max, $over) = (0, 0);
	foreach my $list (values %by)
	{
		my @ev = sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] }
		  ((map { [ $_->[1], +1 ] } @$list), (map { [ $_->[2], -1 ] } @$list));
		my $in = 0;
		foreach my $e (@ev)
		{
			$in += $e->[1];
			$over++ if $e->[1] > 0 && $in > $limit;
			$max = $in if $in > $max;
		}
	}
	return ($max, $over);
}

=pod

=item longest_gap($periods, $from, $to)

The longest time in [$from, $to] without a period starting.

=cut

sub longest_gap
{
	my ($periods, $from, $to) = @_;
	my @t = sort { $a <=> $b } grep { $_ >= $from } map { $_->[1] } @$periods;
	my ($prev, $gap) = ($from, 0);
	foreach my $t (@t, $to)
	{
		$gap = $t - $prev if $t - $prev > $gap;
		$prev = $t;
	}
	return $gap;
}

=pod

=item failures($node, $label)

What went wrong in round $label, from the table failures (round, at,
state, msg) its sessions fill: {acquires => acquires that failed or got no
slot within their wait, releases => releases that raised, stopped =>
holders stopped because a failover lost their slot}.

=cut

sub failures
{
	my ($node, $label) = @_;
	my ($a, $r, $l) = split /\|/, $node->safe_psql('postgres', qq{
		SELECT count(*) FILTER (WHERE state <> 'lost' AND msg NOT LIKE 'release: %'),
		       count(*) FILTER (WHERE state <> 'lost' AND msg LIKE 'release: %'),
		       count(*) FILTER (WHERE state = 'lost')
		FROM failures WHERE round = '$label';});
	return { acquires => $a, releases => $r, stopped => $l };
}

=pod

=item report_line($kind, $replicas, $periods, $max, $over, $gap, $window, $failed, $fresh)

One line of figures; a gap as long as the window is marked ">" (at least).
$fresh (optional): seconds until a fresh session got an idle semaphore after
the new primary took writes (-1: not within a minute).

=cut

sub report_line
{
	my ($kind, $replicas, $periods, $max, $over, $gap, $window, $failed, $fresh) = @_;
	my $censored = $gap >= $window - 0.1 ? '>' : '';
	return sprintf('%-10s grant_replicas=%d  periods=%4d  max_inside=%d  over_admissions=%d  longest_gap_s=%s%.2f  failed_acquires=%d  failed_releases=%d  stopped=%d',
		$kind, $replicas, $periods, $max, $over, $censored, $gap, @$failed{qw(acquires releases stopped)})
	  . (defined $fresh ? sprintf('  fresh_idle_s=%.2f', $fresh) : '');
}

=pod

=item publish(@lines)

Print the figures, and append them to $ENV{REDSEM_FAILOVER_REPORT} if set.

=cut

sub publish
{
	my (@lines) = @_;
	diag("failover figures:\n" . join("\n", @lines));
	PostgreSQL::Test::Utils::append_to_file($ENV{REDSEM_FAILOVER_REPORT}, join("\n", @lines) . "\n")
	  if $ENV{REDSEM_FAILOVER_REPORT};
	return;
}

=pod

=back

=cut

1;
