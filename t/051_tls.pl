# redsem over TLS, against redis-server --tls-port with a throwaway CA made
# by openssl here: server verification (authority, name), mutual TLS, the
# keeper over TLS, and clear 08001 errors for every refusal.  A build
# without TLS (hiredis 0.14) is checked to say so, then the rest is skipped.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use File::Spec;
use IPC::Run;
use Time::HiRes;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->append_conf('postgresql.conf', <<"EOC");
shared_preload_libraries = 'redsem'
redsem.host = '127.0.0.1'
redsem.port = 1
log_min_messages = warning
EOC
$node->append_conf('postgresql.conf', connection_mode_conf());
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION redsem');

# The error of $sql after $settings (SET commands), VERBOSITY verbose
sub error_of
{
	my ($settings, $sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres',
		"\\set VERBOSITY verbose\n$settings\n$sql", on_error_stop => 1);
	return $err;
}

my $probe = error_of(q{SET redsem.tls = on;}, q{SELECT redsem_acquire_xact('t', 1);});
if ($probe =~ /has no TLS support/)
{
	like($probe, qr/08001: .*\n.*needs hiredis 1\.0 or later with hiredis_ssl/,
		'a build without TLS says which library it needs (08001)');
	$node->stop;
	done_testing();
	exit 0;
}

###########################################################################
note 'a throwaway CA, a server certificate, a client certificate';

my $dir = File::Spec->rel2abs(PostgreSQL::Test::Utils::tempdir('tls'));
sub openssl
{
	my @cmd = ('openssl', @_);
	my ($out, $err);
	IPC::Run::run(\@cmd, '<', '/dev/null', '>', \$out, '2>', \$err)
	  or BAIL_OUT("openssl @_: $err");
	return;
}
# a key and a certificate for $cn signed by CA $ca (self-signed if undef)
sub make_cert
{
	my ($name, $cn, $ca, $san) = @_;
	openssl('req', '-new', '-newkey', 'rsa:2048', '-nodes', '-subj', "/CN=$cn",
		'-keyout', "$dir/$name.key", '-out', "$dir/$name.csr");
	my $ext = "$dir/$name.ext";
	PostgreSQL::Test::Utils::append_to_file($ext,
		defined $san ? "subjectAltName=$san\n" : "basicConstraints=critical,CA:TRUE\n");
	if (defined $ca)
	{
		openssl('x509', '-req', '-in', "$dir/$name.csr", '-CA', "$dir/$ca.crt",
			'-CAkey', "$dir/$ca.key", '-CAcreateserial', '-days', '2',
			'-extfile', $ext, '-out', "$dir/$name.crt");
	}
	else
	{
		openssl('x509', '-req', '-in', "$dir/$name.csr", '-signkey', "$dir/$name.key",
			'-days', '2', '-extfile', $ext, '-out', "$dir/$name.crt");
	}
	chmod 0600, "$dir/$name.key";
	return;
}
make_cert('ca', 'redsem test CA');
make_cert('server', 'redis.test', 'ca', 'DNS:redis.test,IP:127.0.0.1');
make_cert('client', 'redsem', 'ca', 'DNS:redsem');
make_cert('rogue_ca', 'someone else');
make_cert('rogue_client', 'redsem', 'rogue_ca', 'DNS:redsem');

# A Redis on a TLS-only port with the test CA's server certificate;
# $auth_clients is Redis's tls-auth-clients, @cli_args what redis-cli needs.
sub tls_server
{
	my ($name, $auth_clients, @cli_args) = @_;
	return RedsemTest::TcpServer->new(
		name => $name,
		conf => [
			'port 0',
			'tls-port PORT',
			"tls-cert-file $dir/server.crt",
			"tls-key-file $dir/server.key",
			"tls-ca-cert-file $dir/ca.crt",
			"tls-auth-clients $auth_clients",
		],
		tls_args => [ '--tls', '--cacert', "$dir/ca.crt", @cli_args ]);
}

my $redis = tls_server('redis_tls', 'optional');
my $port = $redis->port;
my $mutual = tls_server('redis_mtls', 'yes',
	'--cert', "$dir/client.crt", '--key', "$dir/client.key");
my $mport = $mutual->port;
my $plain = RedsemTest::TcpServer->new(name => 'redis_plain');

my $base = "SET redsem.tls = on; SET redsem.port = $port; SET redsem.tls_ca_file = '$dir/ca.crt';";
my $take = q{SELECT redsem_acquire_xact('t', 1) IS NOT NULL;};

###########################################################################
note 'verifying the server';

is($node->safe_psql('postgres', "$base $take"), 't',
	'a slot is taken over TLS, the server verified against redsem.tls_ca_file and its IP');
is($node->safe_psql('postgres', "$base SET redsem.tls_server_name = 'redis.test'; $take"), 't',
	'and against a server name');
like(error_of("$base SET redsem.tls_server_name = 'other.test';", $take),
	qr/08001: could not connect to Redis at 127\.0\.0\.1:$port\n.*the server certificate was not accepted: [^\n]*(mismatch|hostname)/i,
	'a certificate for another name is refused (08001), saying why');
SKIP:
{
	# the name, not the address it resolves to, is what gets verified
	skip 'localhost does not resolve here', 1
	  unless defined scalar(gethostbyname('localhost'))
	  && join('.', unpack('C4', scalar(gethostbyname('localhost')))) eq '127.0.0.1';
	like(error_of("$base SET redsem.host = 'localhost';", $take),
		qr/08001: could not connect to Redis at localhost:$port\n.*the server certificate was not accepted: [^\n]*(mismatch|hostname)/i,
		'connecting by a host name verifies that name, not the address it resolves to (127.0.0.1 is in the certificate, localhost is not)');
}
like(error_of("$base SET redsem.tls_ca_file = '$dir/rogue_ca.crt';", $take),
	qr/08001: .*\n.*the server certificate was not accepted: (unable to get local issuer|self.signed|certificate signature)/i,
	'a certificate from another authority is refused');
like(error_of("SET redsem.tls = on; SET redsem.port = $port;", $take),
	qr/08001: .*\n.*the server certificate was not accepted/,
	'without redsem.tls_ca_file, only the system authorities are trusted');
like(error_of("$base SET redsem.tls_ca_file = '$dir/missing.crt';", $take),
	qr/08001: .*\n.*could not load the TLS files/, 'a missing CA file is a clear error');
like(error_of("$base SET redsem.connect_timeout = 300; SET redsem.port = " . $plain->port . ';', $take),
	qr/08001: .*\n.*no TLS handshake within 300 ms \(redsem.connect_timeout\); is the server serving TLS on this port\?/,
	'a server without TLS on that port: no handshake (08001)');
like(error_of("$base SET redsem.unix_socket = '/tmp/x.sock';", $take),
	qr/08001: .*\n.*redsem.tls applies to TCP connections/, 'TLS over a unix socket is refused');

###########################################################################
note 'behind the broker: TLS opened by an opener that stays as the relay';

# The processes named $comm whose parent is named $parent
sub processes_named
{
	my ($comm, $parent) = @_;
	my @found;
	for my $p (glob '/proc/[0-9]*')
	{
		my ($c, $pp) = (slurp_or_empty("$p/comm"), slurp_or_empty("$p/stat"));
		next unless $c eq $comm && $pp =~ /^\d+ \(.*\) \S (\d+)/;
		push @found, ($p =~ m{(\d+)$})[0] if slurp_or_empty("/proc/$1/comm") eq $parent;
	}
	return @found;
}
sub slurp_or_empty
{
	my ($f) = @_;
	open(my $fh, '<', $f) or return '';
	my $v = do { local $/; <$fh> } // '';
	close $fh;
	$v =~ s/\n\z//;
	return $v;
}

SKIP:
{
	skip 'direct mode: the backends do their own TLS', 10 unless broker_mode();
	is($node->safe_psql('postgres', "$base $take"), 't', 'a slot is taken over TLS through the broker');
	my @relays = processes_named('redsem relay', 'redsem broker');
	ok(@relays >= 1, 'the broker talks to the TLS server through a relay process of its own ('
		  . scalar(@relays) . ')');
	like($redis->cli('CLIENT', 'LIST'), qr/name=redsem:[^ ]*:broker:\d+ /,
		'the TLS server sees the connection named after the broker');

	# The relay polls only for redsem.broker_poll after bytes moved: idle,
	# it sleeps (a relay that spun would use about all of a CPU here)
	my $cpu = sub {
		my $ticks = 0;
		$ticks += cpu_ticks($_) // 0 for @relays;
		return $ticks;
	};
	my $before = $cpu->();
	Time::HiRes::sleep(1.5);
	my $idle = $cpu->() - $before;
	my $alive = grep { -e "/proc/$_" } @relays;
	ok($idle < 15 && $alive == @relays,
		"an idle relay sleeps: $idle clock ticks of CPU in 1.5 s ($alive of " . scalar(@relays) . ' relays still there)');

	# A TLS server that never answers the handshake: its open waits out
	# its connect timeout in an opener, and the broker serves the others
	# (a session of 4 s: in broker mode an open lasts the server's 2 s, and
	# the session is told its own setting and what the last open said,
	# docs/broker.md)
	my ($out, $err) = ('', '');
	my $t0 = Time::HiRes::time();
	my $stuck = IPC::Run::start(
		[ 'psql', '-X', '-q', '-d', $node->connstr('postgres'), '-c',
		  "$base SET redsem.connect_timeout = 4000; SET redsem.port = " . $plain->port . "; $take" ],
		'>', \$out, '2>', \$err);
	Time::HiRes::sleep(0.5);
	my $t1 = Time::HiRes::time();
	my $ok = $node->safe_psql('postgres', "$base $take");
	my $took = Time::HiRes::time() - $t1;
	ok($ok eq 't' && $took < 2 && Time::HiRes::time() - $t0 < 3.5,
		sprintf('while a TLS open hangs, another session is served at once (%.2f s)', $took));
	$stuck->finish;
	like($err, broker_mode()
		  ? qr/no answer within 4000 ms \(redsem\.connect_timeout\); the broker's opens last at most 2000 ms each, and the last said: no TLS handshake within 2000 ms/
		  : qr/no TLS handshake within 4000 ms/,
		'and the hung open fails with its own words, ' . sprintf('after %.1f s', Time::HiRes::time() - $t0));

	# The relay dies: the calls on its connection see it lost, the next opens anew
	my %killed = map { $_ => 1 } processes_named('redsem relay', 'redsem broker');
	kill 'KILL', keys %killed;
	ok(wait_until(5, sub {
		my ($r) = $node->psql('postgres', "$base $take");
		return $r == 0 && grep { !$killed{$_} } processes_named('redsem relay', 'redsem broker');
	}), 'after its relay is killed, the next call opens another and is served');

	# A frozen TLS server (SIGSTOP: a frozen path): the call fails in its
	# command timeout, the broker gives the connection up at its own, the
	# relay ends and is reaped, and the server's return is served anew
	kill 'STOP', $redis->pid;
	my $frozen = error_of("$base SET redsem.command_timeout = 1000;", $take);
	like($frozen, qr/08006|55P03|57014/, 'a call to a frozen TLS server fails within its command timeout');
	my %before = map { $_ => 1 } processes_named('redsem relay', 'redsem broker');
	sleep 7;    # (the broker's command timeout, 5 s, plus its margin)
	kill 'CONT', $redis->pid;
	ok(wait_until(10, sub {
		my ($r) = $node->psql('postgres', "$base $take");
		return $r == 0;
	}), 'the server back, the next call is served');
	ok(wait_until(5, sub { !grep { $before{$_} } processes_named('redsem relay', 'redsem broker') }),
		'the relay of the connection given up has ended and been reaped (no zombie)');
}

###########################################################################
note 'mutual TLS';

my $client = "SET redsem.tls_cert_file = '$dir/client.crt'; SET redsem.tls_key_file = '$dir/client.key';";
is($node->safe_psql('postgres', "$base SET redsem.port = $mport; $client $take"), 't',
	'a server that requires a client certificate accepts ours');
like(error_of("$base SET redsem.port = $mport;", $take),
	qr/08001: .*\n.*the server refused the TLS session after the handshake \(a client certificate it requires or does not accept\): /,
	'without one it refuses the connection (08001), saying why');
like(error_of("$base SET redsem.port = $mport; SET redsem.tls_cert_file = '$dir/rogue_client.crt'; SET redsem.tls_key_file = '$dir/rogue_client.key';", $take),
	qr/08001: .*\n.*the server refused the TLS session after the handshake \(a client certificate it requires or does not accept\): /,
	'and with one of another authority too');
like(error_of("$base SET redsem.tls_cert_file = '$dir/client.crt';", $take),
	qr/08001: .*\n.*redsem.tls_cert_file and redsem.tls_key_file must be set together/,
	'a certificate without its key is a clear error');
like(error_of("$base SET redsem.tls_cert_file = '$dir/client.crt'; SET redsem.tls_key_file = '$dir/server.key';", $take),
	qr/08001: .*\n.*could not load the TLS files/, 'a key that does not match is refused');

###########################################################################
note 'settings, and the keeper over TLS';

$node->safe_psql('postgres', 'CREATE ROLE plain LOGIN');
like(error_of(q{SET ROLE plain;}, q{SET redsem.tls_ca_file = '/tmp/x';}),
	qr/permission denied to set parameter "redsem.tls_ca_file"/,
	'an ordinary role cannot change the TLS settings');

$node->append_conf('postgresql.conf', <<"EOC");
redsem.tls = on
redsem.port = $mport
redsem.tls_ca_file = '$dir/ca.crt'
redsem.tls_cert_file = '$dir/client.crt'
redsem.tls_key_file = '$dir/client.key'
EOC
$node->restart;
my $s = RedsemTest::Session->new($node, name => 'holder');
$s->query_ok(q{SELECT redsem_acquire('kept', 1, lease => '1 s');});
sleep 3;
is($s->query_ok(q{SELECT count(*) FROM redsem_held() WHERE name = 'kept';}), '1',
	'a hold with a 1 s lease is still held 3 s later: the keeper refreshes it over TLS');
is($mutual->cli('ZCARD', 'redsem:{kept}:owner'), '1', 'and Redis has it');
$s->quit;
ok(wait_until(10, sub { ($mutual->cli('ZCARD', 'redsem:{kept}:owner') // '') eq '0' }),
	'the session ends: its slot is given back over TLS');

# A fast shutdown signals every process of the server (the postmaster
# signals each child's process group): behind the broker, which serves on
# while backends give their slots back on their way out, the relays must
# survive it too
my $h = RedsemTest::Session->new($node, name => 'at_stop');
$h->query_ok(q{SELECT redsem_acquire('at_stop', 1, lease => '1 h');});
is($mutual->cli('ZCARD', 'redsem:{at_stop}:owner'), '1', 'a session holds a slot over TLS');
node_log_is_clean($node, 'no crash in the server log');
$node->stop('fast');
$h->wait_exit(10);
is($mutual->cli('ZCARD', 'redsem:{at_stop}:owner'), '0',
	'a fast shutdown: the session gives its slot back over TLS on its way out');
done_testing();
