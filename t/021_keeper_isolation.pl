
# 021_keeper_isolation.pl - one failing hold must not stop the keeper for
# the others, and no reply of Redis, however malformed, crashes the keeper
# or a backend.
#
# The server reaches Redis through RedsemTest::Proxy, which can answer any
# command with bytes of our choosing, and as an ACL user whose rights can be
# narrowed.  Three holds go bad in three ways (a key of the wrong type, an
# ACL that now denies its keys, malformed replies to its refreshes) while
# two healthy holds with 2 s leases must be kept alive for 6 s.  The bad
# holds are marked in redsem_held(), logged with their semaphore's name at a
# limited rate, and retried with back-off.  Then the same after a
# crash-restart: the cleanup of the previous incarnation releases what it
# can and is not stopped by what it cannot.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use File::Basename ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $redis = RedsemTest::Redis->new;
my $dir = File::Basename::dirname($redis->socket);

# the ACL user redsem runs as, allowed every key for now
$redis->cli('ACL', 'SETUSER', 'rs', 'on', '>rs-secret', '~*', '&*', '+@all');
my $pwfile = "$dir/rs.password";
PostgreSQL::Test::Utils::append_to_file($pwfile, "rs-secret\n");
chmod 0600, $pwfile;

# garbage for every refresh of semaphore "garbled", a different kind each time
my @garbage = (
	"\$-1\r\n",                         # nil
	"\$5\r\nhello\r\n",                 # a string that is no number
	"*2\r\n:1\r\n*0\r\n",               # an array
	":-7\r\n",                          # a negative lease
	"-ERR unknown command 'FCALL'\r\n",    # an error of no known class
	"+OK\r\n");                         # a status
my $n = 0;
my $proxy = RedsemTest::Proxy->new($redis, sub {
	my @cmd = @_;
	return undef unless ($cmd[0] // '') =~ /^(?:EVAL|FCALL)/i;
	my $refresh = grep { $_ eq 'refresh' || $_ eq 'refresh_many' } @cmd;
	return $garbage[ $n++ % @garbage ]
	  if $refresh && grep { /\{garbled\}/ } @cmd;
	return "*1\r\n\$7\r\nunknown\r\n" if grep { /\{evil\}/ } @cmd;
	return undef;
});

my $node = PostgreSQL::Test::Cluster->new('iso');
$node->init;
my $psock = $proxy->socket;
$node->append_conf('postgresql.conf', <<"EOC");
shared_preload_libraries = 'redsem'
redsem.unix_socket = '$psock'
redsem.user = 'rs'
redsem.password_file = '$pwfile'
restart_after_crash = on
max_connections = 50
EOC
$node->append_conf('postgresql.conf', connection_mode_conf());
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION redsem');

sub session { return RedsemTest::Session->new($node, name => $_[0]); }
sub log_since { return slurp_file($node->logfile, $_[0]); }

sub keeper_pid
{
	return $node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'redsem keeper'});
}

###########################################################################
note 'three holds go bad, two stay healthy';

my %s = map { $_ => session($_) } qw(good1 good2 wrongtype denied garbled);
my %id;
foreach my $name (sort keys %s)
{
	# the holds that go bad are watched, not stopped: what is tested here
	# is that their failures stay theirs (t/080 tests the stops)
	$s{$name}->query_ok('SET redsem.on_slot_lost = warn;') unless $name =~ /^good/;
	$id{$name} = $s{$name}->query_ok(qq{SELECT redsem_acquire('$name', 1, '2 s');});
	like($id{$name}, qr/^[0-9a-f]{16}\./, "$name holds its semaphore's only slot (2 s lease)");
}
my $keeper = keeper_pid();
my $off = -s $node->logfile;

$redis->cli('DEL', 'redsem:{wrongtype}:timeout');
$redis->cli('SET', 'redsem:{wrongtype}:timeout', 'not a zset');
$redis->cli('ACL', 'SETUSER', 'rs', 'resetkeys', '~redsem:gen*', '~redsem:{good*', '~redsem:{wrongtype}*',
	'~redsem:{garbled}*', '~redsem:{evil}*', '~redsem:{after*');

my $t0 = time;
sleep 6;
foreach my $name (qw(good1 good2))
{
	is($node->safe_psql('postgres', qq{SELECT redsem_acquire('$name', 1, '60 s') IS NULL}), 't',
		"after 6 s, $name (2 s lease) is still held: nobody else gets in");
	is($s{$name}->query_ok(q{SELECT kept_alive, keeper_error IS NULL FROM redsem_held();}),
		't|t', "$name: kept_alive, no keeper_error");
}

my %why = (
	wrongtype => qr/WRONGTYPE/,
	denied => qr/NOPERM/,
	garbled => qr/unexpected reply|refused a redsem command/);
foreach my $name (sort keys %why)
{
	# (watched under policy warn: told once that its lease went unconfirmed)
	my (undef, $warned) = $s{$name}->query('SELECT 1;');
	like($warned, qr/WARNING:  01000: the slot of semaphore "$name" was lost\nDETAIL:  Redis had not confirmed its lease/,
		"$name: its session is warned, once, that its lease went unconfirmed");
	my $row = $s{$name}->query_ok(q{SELECT kept_alive, keeper_error FROM redsem_held();});
	like($row, qr/^f\|/, "$name: redsem_held() says it is not kept alive");
	like($row, $why{$name}, "$name: keeper_error says why");
}

my $log = log_since($off);
foreach my $name (sort keys %why)
{
	my @lines = $log =~ /(redsem keeper could not refresh the slot of semaphore "$name"[^\n]*)/g;
	is(scalar(@lines), 1,
		sprintf("the log names $name once in %.0f s, though the keeper retried it (%d lines)",
			time - $t0, scalar @lines));
}
like($log, qr/tries again in \d+ ms \(failure 1\)/, 'the log says when the keeper tries again');
unlike($log, qr/server process .* was terminated|PANIC|TRAP/, 'nothing crashed');
is(keeper_pid(), $keeper, 'the keeper is the same process: it did not crash');

###########################################################################
note 'malformed replies to a backend: an error, never a crash';

my $e = session('evil');
foreach my $sql (
	q{SELECT redsem_acquire('evil', 1)},
	q{SELECT * FROM redsem_holders('evil')},
	q{SELECT redsem_token('evil', 'x.1')},
	q{SELECT redsem_acquire('evil', 1, '10 s', '1 s')})
{
	my ($out, $err) = $e->query("$sql;");
	like($err, qr/ERROR:  08P01: unexpected reply from Redis at unix socket/,
		"$sql: 08P01, unexpected reply");
}
is($e->query_ok('SELECT 1;'), '1', 'the session goes on');
$e->quit;

###########################################################################
note 'a crash-restart: the cleanup releases what it can';

# Every hold above belongs to a backend that the crash-restart kills; the
# new keeper releases them all, except "wrongtype", whose keys are still of
# the wrong type: that one failure must not keep the others taken.
$redis->cli('ACL', 'SETUSER', 'rs', 'allkeys');
$redis->cli('SET', 'redsem:{wrongtype}:timeout', 'still not a zset');
my $g = session('after2');
my $gid = $g->query_ok(q{SELECT redsem_acquire('after2', 1, '60 s');});
like($gid, qr/^[0-9a-f]{16}\./, 'after2 holds a slot with a 60 s lease');
$off = -s $node->logfile;
kill 'KILL', $g->backend_pid;
my $t_kill = time;
ok(poll_through_restart($node,
		q{SELECT redsem_release('after2', redsem_acquire('after2', 1, '60 s'))}),
	'after the crash-restart, after2\'s slot is free again');
cmp_ok(time - $t_kill, '<', 15, sprintf('... within %.1f s of the kill', time - $t_kill));
ok(defined wait_until(10, sub {
	log_since($off) =~ /redsem keeper could not release the slot of semaphore "wrongtype"/ }),
	'the log says which one it could not release');
foreach my $name (qw(good1 good2 denied garbled))
{
	is($node->safe_psql('postgres', qq{SELECT id IS NOT NULL AND redsem_release('$name', id)
			FROM (SELECT redsem_acquire('$name', 1, '60 s') AS id) a}),
		't', "$name, held before the crash, is free again");
}
my $k = session('after3');
my $kid = $k->query_ok(q{SELECT redsem_acquire('after3', 1, '2 s');});
sleep 4;
is($k->query_ok(q{SELECT kept_alive FROM redsem_held();}), 't',
	'a new hold after the restart is kept alive (2 s lease, 4 s)');
is($k->query_ok(qq{SELECT redsem_release('after3', '$kid');}), 't', '... and was never lost');
$k->quit;

$proxy->stop;
$node->stop('immediate');
$redis->stop;
done_testing();
