
# 060_pgbouncer.pl - redsem behind a real PgBouncer (the Debian package,
# started here on a free loopback port).
#
# Session pooling: a client that leaves holding a session slot gives it
# back, because PgBouncer's server_reset_query (DISCARD ALL) releases every
# slot of the server connection before the next client gets it.
# Transaction pooling: transaction-scoped slots (redsem_acquire_xact) work
# as anywhere; session slots stay with the server connection (the README
# says so), unless server_reset_query_always runs DISCARD ALL after every
# transaction.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my ($pgbouncer) = grep { -x } ($ENV{REDSEM_TEST_PGBOUNCER} // (), '/usr/sbin/pgbouncer', '/usr/bin/pgbouncer');
plan skip_all => 'PgBouncer is not installed (Debian package pgbouncer)' unless defined $pgbouncer;

my $redis = RedsemTest::Redis->new;
my $node = create_node('pooled', $redis);
my $user = $node->safe_psql('postgres', 'SELECT current_user;');

# Start PgBouncer in front of $node with pool mode $mode; returns (port, harness)
sub start_bouncer
{
	my ($mode, $extra) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $host = $node->host;
	my $pgport = $node->port;
	open(my $f, '>', "$dir/pgbouncer.ini") or die "cannot write pgbouncer.ini: $!";
	print $f <<"EOC";
[databases]
postgres = host=$host port=$pgport dbname=postgres user=$user

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = any
pool_mode = $mode
default_pool_size = 1
max_client_conn = 20
server_reset_query = DISCARD ALL
logfile = $dir/pgbouncer.log
${\ ($extra // '')}
EOC
	close $f;
	my $h = IPC::Run::start([ $pgbouncer, "$dir/pgbouncer.ini" ],
		'<', '/dev/null', '>', "$dir/out.log", '2>&1');
	my $up = wait_until(20, sub { run_via($port, 'SELECT 1;') eq '1' });
	BAIL_OUT("pgbouncer did not start:\n" . slurp_file("$dir/pgbouncer.log")) unless defined $up;
	return ($port, $h);
}

# One psql run through PgBouncer at $port: its stdout (stderr into $err)
sub run_via
{
	my ($port, $sql, $err_ref) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $node->installed_command('psql'), '-XAtq', '-h', '127.0.0.1', '-p', $port,
		'-U', $user, '-d', 'postgres', '-c', $sql ], '<', '/dev/null', '>', \$out, '2>', \$err);
	$$err_ref = $err if $err_ref;
	chomp $out;
	return $out;
}

sub holders
{
	my ($name) = @_;
	return $node->safe_psql('postgres', qq{SELECT count(*) FROM redsem_holders('$name');});
}

sub stop_bouncer
{
	my ($h) = @_;
	$h->signal('INT');
	eval { $h->finish; 1 } or $h->kill_kill;
}

###########################################################################
note 'session pooling';

my ($port, $h) = start_bouncer('session');
my $pid1 = run_via($port, q{SELECT pg_backend_pid() || ' ' || (redsem_acquire('pooled', 1, '60 s') IS NOT NULL);});
like($pid1, qr/^\d+ true$/, 'a client takes a session slot through PgBouncer, and disconnects');
ok(defined wait_until(10, sub { holders('pooled') eq '0' }),
	'PgBouncer resets the server connection (DISCARD ALL): the slot is given back');
my $pid2 = run_via($port, q{SELECT pg_backend_pid() || ' ' || (redsem_acquire('pooled', 1, '60 s') IS NOT NULL);});
my ($b1) = split / /, $pid1;
my ($b2, $got) = split / /, $pid2;
is($b2, $b1, 'the next client gets the same server connection');
is($got, 'true', 'and the slot: it was not kept alive for a client that is gone');
ok(defined wait_until(10, sub { holders('pooled') eq '0' }), 'which it gives back in turn');
is(run_via($port, q{SELECT count(*) FROM redsem_held();}), '0', 'the server connection holds nothing');
stop_bouncer($h);

###########################################################################
note 'transaction pooling';

($port, $h) = start_bouncer('transaction');
is(run_via($port, q{BEGIN; SELECT redsem_acquire_xact('tx', 1) IS NOT NULL; COMMIT;}), 't',
	'a transaction-scoped slot works through transaction pooling');
is(holders('tx'), '0', 'and ends with its transaction');
run_via($port, q{SELECT redsem_acquire('leaky', 1, '60 s');});
is(holders('leaky'), '1', 'a session slot outlives the client: it stays with the server connection (documented)');
is(run_via($port, q{SELECT redsem_release_all();}), '1', 'the next client on that connection can release it');
stop_bouncer($h);

($port, $h) = start_bouncer('transaction', 'server_reset_query_always = 1');
run_via($port, q{SELECT redsem_acquire('leaky', 1, '60 s');});
ok(defined wait_until(10, sub { holders('leaky') eq '0' }),
	'with server_reset_query_always = 1, DISCARD ALL after every transaction releases it');
stop_bouncer($h);

$node->stop;
node_log_is_clean($node);
$redis->stop;
done_testing();
