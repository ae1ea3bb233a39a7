
# 014_redis_errors.pl - every kind of Redis refusal comes back in its own
# class (see "Redis errors" in the README), and the Redis password stays
# secret.
#
#   authentication required, wrong password   28000, 28P01
#   too many clients                          08004
#   read-only replica, replica cut off        08006 (and the connection is
#                                             dropped: the next call
#                                             reconnects)
#   busy running a script                     08006
#   out of memory (maxmemory)                 53200, refused up front
#   a key of the wrong type                   38000
#
# The password: given in a file only the server's user can read
# (redsem.password_file); a file others could read is refused; no message
# and no log line shows the password.

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

my $PASSWORD = 'Corr3ct-Horse';
my $redis = RedsemTest::Redis->new;
my $node = create_node('errs', $redis, "redsem.connect_timeout = '1s'\n");
my $s = RedsemTest::Session->new($node, name => 's');
my $dir = File::Basename::dirname($redis->socket);

# One command on a new connection of our own (authenticated when needed)
sub admin
{
	my (@cmd) = @_;
	my $c = RedsemTest::RESP->new($redis->socket);
	$c->cmd('AUTH', $redis->{password}) if defined $redis->{password};
	return $c->cmd(@cmd);
}

# Run a statement in a fresh connection to Redis; returns stderr
sub fresh_error
{
	my ($sql) = @_;
	$redis->cli('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
	my ($out, $err) = $s->query($sql);
	return $err;
}

my $log_start = -s $node->logfile;

###########################################################################
note 'authentication';

admin('CONFIG', 'SET', 'requirepass', $PASSWORD);
$redis->{password} = $PASSWORD;

my $err = fresh_error(q{SELECT redsem_acquire('e_auth', 1);});
like($err, qr/ERROR:  28000: Redis at unix socket ".*" refused redsem access/,
	'no password where one is required: 28000');
# (Redis 7 answers a long command of an unauthenticated client with a
# protocol error instead of NOAUTH)
like($err, qr/DETAIL:  (NOAUTH|ERR Protocol error: unauthenticated)/, '... with Redis\'s words');
like($err, qr/HINT:  .*redsem\.password_file/, '... and a hint about the password setting');

$s->query_ok(q{SET redsem.password = 'wrong-one';});
$err = fresh_error(q{SELECT redsem_acquire('e_auth', 1);});
like($err, qr/ERROR:  28P01: Redis at .* did not accept redsem's password/,
	'a wrong password: 28P01');
unlike($err, qr/wrong-one/, '... and the message does not show it');

$s->query_ok(qq{SET redsem.password = '$PASSWORD';});
is($s->query_ok(q{SELECT redsem_release('e_auth', redsem_acquire('e_auth', 1));}), 't',
	'the right password in redsem.password works');
$s->query_ok(q{RESET redsem.password;});

note 'the password file';

my $pwfile = "$dir/redis.password";
PostgreSQL::Test::Utils::append_to_file($pwfile, "$PASSWORD\n");
chmod 0644, $pwfile;
$s->query_ok(qq{SET redsem.password_file = '$pwfile';});
$err = fresh_error(q{SELECT redsem_acquire('e_file', 1);});
like($err, qr/ERROR:  28000: redsem cannot read its password for Redis at .*\n.*DETAIL:  redsem.password_file ".*" has group or world access; permissions should be u=rw \(0600\) or less\n.*HINT:  .*Nothing was sent to Redis/,
	'a password file others can read is refused (28000), as a local problem');
unlike($err, qr/refused/, '... not reported as Redis refusing');
unlike($err, qr/\Q$PASSWORD\E/, '... without showing its content');
chmod 0600, $pwfile;
is($s->query_ok(q{SELECT redsem_release('e_file', redsem_acquire('e_file', 1));}), 't',
	'with permissions 0600 the password file works');
$s->query_ok(qq{SET redsem.password_file = '$dir/nonexistent';});
$err = fresh_error(q{SELECT redsem_acquire('e_file', 1);});
like($err, qr/ERROR:  28000: .*\n.*DETAIL:  could not open redsem.password_file ".*nonexistent": No such file or directory/,
	'a missing password file: 28000, naming the file');
$s->query_ok(q{RESET redsem.password_file;});

# The server-wide way: the keeper and every session read the file
my $off = -s $node->logfile;
$node->append_conf('postgresql.conf', "redsem.password_file = '$pwfile'\n");
$node->reload;
my $held = RedsemTest::Session->new($node, name => 'held');
my $hid = $held->query_ok(q{SELECT redsem_acquire('e_kept', 1, '2 s');});
sleep 4;
is($held->query_ok(q{SELECT kept_alive FROM redsem_held();}), 't',
	'with redsem.password_file in postgresql.conf the keeper keeps a 2 s lease alive for 4 s');
like(admin('CLIENT', 'LIST'), qr/ name=redsem:errs:keeper:\d+ /,
	"the keeper's connection, which authenticates, is named (redsem:errs:keeper:<pid>)");
is($held->query_ok(qq{SELECT redsem_release('e_kept', '$hid');}), 't', '... it was never lost');
$held->quit;

note 'who can see the password';

$node->safe_psql('postgres', q{CREATE ROLE watcher LOGIN IN ROLE pg_monitor;});
my $w = RedsemTest::Session->new($node, name => 'watcher', user => 'watcher');
is($w->query_ok(q{SHOW redsem.password_file;}), $pwfile,
	'pg_monitor sees where the password file is');
my ($wout, $werr) = $w->query(qq{SELECT pg_read_file('$pwfile');});
like($werr, qr/ERROR:  42501: permission denied for function pg_read_file/,
	'but cannot read it');
is($w->query_ok(q{SHOW redsem.password;}), '', 'redsem.password is empty');
$w->quit;

my $log = slurp_file($node->logfile, $log_start);
unlike($log, qr/\Q$PASSWORD\E/, 'the password appears in no log line');
like(slurp_file($node->logfile, $off), qr/parameter "redsem.password_file" changed to/,
	'(the reload logged the change of the file\'s path, not its content)');

admin('CONFIG', 'SET', 'requirepass', '');
$redis->{password} = undef;
$node->append_conf('postgresql.conf', "redsem.password_file = ''\n");
$node->reload;

###########################################################################
note 'too many clients';

my $kept = RedsemTest::RESP->new($redis->socket);    # opened while allowed
my $info = $kept->cmd('INFO', 'clients');
my ($connected) = $info =~ /connected_clients:(\d+)/;
$kept->cmd('CONFIG', 'SET', 'maxclients', $connected);
my $late = RedsemTest::Session->new($node, name => 'late');
my ($out);
($out, $err) = $late->query(q{SELECT redsem_acquire('e_max', 1);});
like($err, qr/ERROR:  08004: Redis at .* refused the connection: too many clients/,
	'Redis at maxclients: 08004');
like($err, qr/HINT:  Raise maxclients/, '... with a hint');
like($err, broker_mode() ? qr/share the connections of its "redsem broker"/ : qr/every PostgreSQL session that uses redsem keeps one/,
	'... that fits the connection mode');
# every time: the error line Redis writes before it closes is read however
# the set-up's write and its close cross (a race the first try can miss)
my @codes;
for (1 .. 6)
{
	my ($ret, $o, $e) = $node->psql('postgres', q{\set VERBOSITY verbose
SELECT redsem_acquire('e_max', 1);});
	push @codes, $e =~ /ERROR:  (\w{5}):/ ? $1 : '?';
}
is("@codes", join(' ', ('08004') x 6), '... in every new session (not 08006, a lost connection)');
$kept->cmd('CONFIG', 'SET', 'maxclients', 10000);
is($late->query_ok(q{SELECT redsem_release('e_max', redsem_acquire('e_max', 1));}), 't',
	'below maxclients again, the same session works');
$late->quit;

###########################################################################
note 'a read-only replica, and one cut off from its primary';

# the abort then waits for its release (of the acquire's place), which
# gets READONLY too: otherwise it would reopen a connection to send it
$s->query_ok(q{SET redsem.await_release = on;});
is($s->query_ok(q{SELECT redsem_release('e_ro', redsem_acquire('e_ro', 1));}), 't',
	'the session has a connection');
# Redis's clients but the keeper's, which may come and go meanwhile
sub clients_but_keeper
{
	return scalar grep { !/ name=redsem:[^ ]*:keeper:/ } ($redis->cli('CLIENT', 'LIST') // '') =~ /^(id=.*)$/mg;
}
my $clients_before = clients_but_keeper();
admin('REPLICAOF', '127.0.0.1', '1');
($out, $err) = $s->query(q{SELECT redsem_acquire('e_ro', 1);});
like($err, qr/ERROR:  08006: Redis at .* cannot serve redsem now/, 'a read-only replica: 08006');
like($err, qr/DETAIL:  READONLY/, '... with Redis\'s words');
like($err, qr/HINT:  .*failover/, '... and a hint about failover');
my $clients_after = clients_but_keeper();
SKIP:
{
	# (the session drops its link to the broker, which keeps its own
	# connection to this server: the session names the server to use)
	skip 'broker mode: the broker keeps its connection', 1 if broker_mode();
	is($clients_after, $clients_before - 1, 'the session dropped its connection');
}
is($redis->cli('EXISTS', 'redsem:{e_ro}:owner'), '0', 'nothing was written');

admin('CONFIG', 'SET', 'replica-serve-stale-data', 'no');
($out, $err) = $s->query(q{SELECT redsem_acquire('e_ro', 1);});
like($err, qr/ERROR:  08006: .*\n.*DETAIL:  (MASTERDOWN|READONLY)/,
	'a replica cut off from its primary, serving no stale data: 08006');
admin('CONFIG', 'SET', 'replica-serve-stale-data', 'yes');

# "failover": the same address becomes a primary again (another primary
# to redsem, which may lack grants made just before: the grace of I15,
# t/083, ended here)
admin('REPLICAOF', 'NO', 'ONE');
$redis->end_grace;
is($s->query_ok(q{SELECT redsem_release('e_ro', redsem_acquire('e_ro', 1));}), 't',
	'once it is a primary again, the next call reconnects and works');
$s->query_ok(q{RESET redsem.await_release;});

###########################################################################
note 'out of memory';

admin('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
admin('CONFIG', 'SET', 'maxmemory', '1');
($out, $err) = $s->query(q{SELECT redsem_acquire('e_oom', 1);});
like($err, qr/ERROR:  53200: Redis at .* is out of memory/, 'Redis above maxmemory: 53200');
like($err, qr/HINT:  .*maxmemory/, '... with a hint about maxmemory');
is($redis->cli('EXISTS', 'redsem:{e_oom}:ticket'), '0',
	'the script was refused up front: nothing was written');
# (helper-167 F1: the functions that only read failed with 53200 too)
admin('CONFIG', 'SET', 'maxmemory', '0');
my $h = RedsemTest::Session->new($node, name => 'oomh');
$hid = $h->query_ok(q{SELECT redsem_acquire('e_oomr', 2, lease => '1min');});
admin('CONFIG', 'SET', 'maxmemory', '1');
($out, $err) = $s->query(q{
	SELECT count(*) FROM redsem_holders('e_oomr');
	SELECT permits_held FROM redsem_semaphore('e_oomr');
	SELECT count(*) >= 0 FROM redsem_semaphores();
	SELECT redsem_limit('e_oomr') IS NULL;
	SELECT redsem_token('e_oomr', '} . $hid . q{') > 0;
	SELECT count(*) >= 0 FROM redsem_tenants('e_oomr');
	SELECT count(*) >= 0 FROM redsem_queue_servers();
});
is($err, '', 'above maxmemory, the functions that only read still answer')
	or diag($err);
is($out, "1\n1\nt\nt\nt\nt\nt", '... what Redis holds');
is($h->query_ok(qq{SELECT redsem_release('e_oomr', '$hid');}), 't', '... and the holder gives its slot back');
$h->quit;
admin('CONFIG', 'SET', 'maxmemory', '0');
is($s->query_ok(q{SELECT redsem_release('e_oom', redsem_acquire('e_oom', 1));}), 't',
	'with memory again it works');

###########################################################################
note 'fewer replicas than min-replicas-to-write';

# (helper-167: 58000 and a hint about renamed commands)
admin('CONFIG', 'SET', 'min-replicas-to-write', '1');
($out, $err) = $s->query(q{SELECT redsem_acquire('e_norepl', 1, '10 s', '0');});
like($err, qr/ERROR:  08006: .*\n.*DETAIL:  NOREPLICAS/, 'Redis short of replicas for writes: 08006 (NOREPLICAS)');
like($err, qr/HINT:  Redis refuses writes while fewer replicas than its min-replicas-to-write/, '... with a hint about it');
admin('CONFIG', 'SET', 'min-replicas-to-write', '0');
is($s->query_ok(q{SELECT redsem_release('e_norepl', redsem_acquire('e_norepl', 1));}), 't',
	'with the setting back it works');

###########################################################################
note 'busy running a script';

admin('CONFIG', 'SET', 'busy-reply-threshold', '100');
my $busy = RedsemTest::RESP->new($redis->socket);
# a read-only loop of a few seconds, ended early by SCRIPT KILL below
my @loop = ('EVAL', 'local i = 0 while i < 3e9 do i = i + 1 end return 1', '0');
syswrite($busy->{sock}, join('', '*3', "\r\n", map { '$' . length($_) . "\r\n$_\r\n" } @loop));
usleep(300_000);
($out, $err) = $s->query(q{SELECT redsem_acquire('e_busy', 1);});
like($err, qr/ERROR:  08006: .*\n.*DETAIL:  BUSY/, 'Redis busy running a script: 08006 (BUSY)');
like($err, qr/HINT:  Redis is busy running a long script/, '... with a hint');
admin('SCRIPT', 'KILL');
admin('CONFIG', 'SET', 'busy-reply-threshold', '5000');
ok(defined wait_until(10, sub {
	my ($o, $e) = $s->query(q{SELECT redsem_release('e_busy', redsem_acquire('e_busy', 1));});
	return $o eq 't' }), 'after SCRIPT KILL it works again');

###########################################################################
note 'a key conflict is 38000, and only that';

$redis->cli('SET', 'redsem:{e_type}:timeout', 'not a zset');
($out, $err) = $s->query(q{SELECT redsem_acquire('e_type', 1);});
like($err, qr/ERROR:  38000: Redis at .* rejected a redsem operation/, 'a key of the wrong type: 38000');
like($err, qr/DETAIL:  WRONGTYPE/, '... with Redis\'s words');
like($err, qr/HINT:  Make sure no other program writes to keys under redsem.key_prefix/, '... and its hint');
$redis->cli('DEL', 'redsem:{e_type}:timeout');
is($s->query_ok(q{SELECT redsem_release('e_type', redsem_acquire('e_type', 1));}), 't',
	'once the key is gone it works');

# Counts in the state hash that redsem did not write (helper-154: a negative
# xh, or a limit or cur of nan or 1e300, admitted every caller) make the call
# fail as a key conflict, not count on them
my $sv = RedsemTest::Session->new($node, name => 'sv');
my $h1 = $s->query_ok(q{SELECT redsem_acquire('e_val', 3);});
# (a rate's interval, burst and clock and a reserve's permits too: a rate
# of nan let nobody in, and gave 08P01 rather than 38000; each with the
# fields that make the script read it)
foreach my $bad ([ 'xh', '-100', x => 1 ], [ 'cur', 'nan' ], [ 'cur', '1e300' ], [ 'limit', 'inf' ],
	[ 'limit', '2.5' ], [ 'fz', 'x', x => 1 ], [ 'rt', 'nan', x => 1 ], [ 'rb', '-1', x => 1, rt => 1000 ],
	[ 'tat', '1e300', x => 1, rt => 1000 ], [ 'rk', '1.5', x => 1 ])
{
	my ($f, $v, %with) = @$bad;
	my $key = 'redsem:{e_val}:state';
	my %was = map { $_ => scalar $redis->cli('HGET', $key, $_) } ($f, 'x', keys %with);
	$redis->cli('HSET', $key, %with) if %with;
	$redis->cli('HSET', $key, $f, $v);
	($out, $err) = $sv->query(q{SELECT redsem_acquire('e_val', 3);});
	like($err, qr/ERROR:  38000: .*\n.*DETAIL:  REDSEM the state field \Q$f\E of this semaphore holds a value redsem did not write/,
		"state field $f = $v: the acquire fails with 38000, naming the field") or diag("out: $out");
	# what keeps or gives back runs on: the holder refreshes its slot
	is($s->query_ok(qq{SELECT redsem_refresh('e_val', '$h1');}), 't', '... while the holder still refreshes its slot');
	foreach my $k (sort keys %was)
	{
		if ($was{$k} ne '') { $redis->cli('HSET', $key, $k, $was{$k}); }
		else { $redis->cli('HDEL', $key, $k); }
	}
}
is($redis->zcard('e_val', 'owner'), 1, 'nobody was admitted meanwhile: one holder, as before');
# a rate's clock past 2^53 us is redsem's own (helper-160: a rate of one a
# week with a burst spent gets there), not a foreign value
my $x_was = $redis->cli('HGET', 'redsem:{e_val}:state', 'x');
$redis->cli('HSET', 'redsem:{e_val}:state', 'x', 1, 'rt', '604800000000', 'rb', '1', 'rs', '1/week',
	'tat', '9114672853956566');
($out, $err) = $sv->query(q{SELECT redsem_acquire('e_val', 3) IS NULL;});
is($out . $err, 't', 'a rate\'s clock far ahead: the rate refuses the acquire, no error');
$redis->cli('HDEL', 'redsem:{e_val}:state', 'rt', 'rb', 'rs', 'tat');
$redis->cli('HDEL', 'redsem:{e_val}:state', 'x') if ($x_was // '') eq '';
# a waiter already in line is not promoted while a count is foreign, even by
# a release (helper-154: cur = nan promoted waiters past the cap)
my $hw = $s->query_ok(q{SELECT redsem_acquire('e_val2', 1);});
$sv->send(q{SELECT redsem_acquire('e_val2', 1, wait => '4 s') IS NOT NULL;});
ok(defined wait_until(10, sub { $redis->zcard('e_val2', 'waiting') == 1 }), 'a waiter is in line');
my $cur_was = $redis->cli('HGET', 'redsem:{e_val2}:state', 'cur');
$redis->cli('HSET', 'redsem:{e_val2}:state', 'cur', 'nan');
$s->query_ok(qq{SELECT redsem_release('e_val2', '$hw');});
is($redis->zcard('e_val2', 'owner') - $redis->zcard('e_val2', 'waiting'), 0,
	'the release goes through, and promotes nobody while cur is nan');
$redis->cli('HSET', 'redsem:{e_val2}:state', 'cur', $cur_was);
$sv->wait_done(10);
$sv->query('SELECT redsem_release_all();');
is($sv->query_ok(q{SELECT redsem_release('e_val', redsem_acquire('e_val', 3));}), 't',
	'once the values are gone it works');
$s->query_ok(qq{SELECT redsem_release('e_val', '$h1');});
$sv->quit;

# Whichever of a new semaphore's keys another program took, the call stops
# with 38000 and what it wrote before stopping has a TTL: nothing is left
# for good, and the semaphore works once that key is gone.
foreach my $k (qw(ticket owner timeout info waiting state))
{
	my $sem = "e_type_$k";
	$redis->cli('SET', "redsem:{$sem}:$k", 'x') if $k ne 'ticket';
	$redis->cli('RPUSH', "redsem:{$sem}:$k", 'x') if $k eq 'ticket';
	($out, $err) = $s->query("SELECT redsem_release('$sem', redsem_acquire('$sem', 1));");
	my @left = grep { $_ ne "redsem:{$sem}:$k" } split /\n/, $redis->cli('--scan', '--pattern', "redsem:{$sem}:*");
	my @no_ttl = grep { $redis->cli('PTTL', $_) < 0 } @left;
	ok($err =~ /ERROR:  38000: / || ($k eq 'waiting' && $out eq 't'),
		"a $k key of another type: 38000 (waiting: not used by a grant)");
	is("@no_ttl", '', "... and every key it wrote has a TTL");
	$redis->cli('DEL', "redsem:{$sem}:$k");
	# (waiting: the grant came, and its release stopped before it wrote
	# anything (I14): the keeper, handed the slot, gives it back)
	ok(defined wait_until(30, sub { $redis->cli('ZCARD', "redsem:{$sem}:owner") eq '0' }),
		'... the slot its release could not give back stays taken until the keeper gives it back')
	  if $k eq 'waiting';
	is($s->query_ok("SELECT redsem_release('$sem', redsem_acquire('$sem', 1));"), 't',
		"... and once that key is gone it works");
}

# The same for the keys of tenants (I12): another program's key under the
# tenant hash, the tenants' ranking, a tenant's line, the line of those
# naming none or the weights stops the call that needs it with 38000
# (a holder naming a tenant needs the tenant hash; a waiter naming one,
# the lines and the ranking; the weights are read only once one is
# stored, so storing one is what stops); what it wrote has a TTL, and
# once that key is gone the semaphore works (a waiter the stopped call
# left half-made is gone by its deadline at the latest).
my $s2 = RedsemTest::Session->new($node, name => 's2');
foreach my $k ('tenant', 'tq', 'tline:A', 'tline:', 'weights')
{
	my $sem = "e_ten_" . ($k =~ s/:/_/r);
	my $key = "redsem:{$sem}:$k";
	$redis->cli('SET', $key, 'x');
	my $ok = 1;
	($out, $err) = $s->query("SELECT redsem_acquire('$sem', 1, tenant => 'B') IS NOT NULL;");
	if ($k eq 'weights')
	{
		$ok &&= $out eq 't';
		($out, $err) = $s->query("SELECT redsem_set_tenant_weight('$sem', 'A', 2);");
	}
	elsif ($k ne 'tenant')
	{
		$ok &&= $out eq 't';
		# (a waiter naming none first, so the line of those naming none is made)
		if ($k eq 'tline:')
		{
			$s2->send("SELECT redsem_acquire('$sem', 1, wait => '2 s') IS NULL;");
			$ok &&= defined wait_until(10, sub { $redis->zcard($sem, "waiting") == 1 });
		}
		($out, $err) = $s->query("SELECT redsem_acquire('$sem', 1, wait => '300 ms', tenant => 'A');");
		$s2->wait_done(10) if $k eq 'tline:';
	}
	ok($ok && $err =~ /ERROR:  38000: .*\n.*DETAIL:  WRONGTYPE/s, "a $k key of another type: 38000")
	  or diag("out: $out\nerr: $err");
	$s->query_ok('SELECT redsem_release_all();');
	my @left = grep { $_ ne $key } split /\n/, $redis->cli('--scan', '--pattern', "redsem:{$sem}:*");
	my @no_ttl = grep { $redis->cli('PTTL', $_) < 0 } @left;
	is("@no_ttl", '', "... and every key it wrote has a TTL");
	$redis->cli('DEL', $key);
	ok(defined wait_until(30, sub {
		my ($o) = $s->query("SELECT redsem_release('$sem', redsem_acquire('$sem', 1, wait => '1 s', tenant => 'A'));");
		return $o eq 't' }), "... and once that key is gone it works");
}

###########################################################################
note 'an ACL user with only the commands docs/deployment.md names';

# The documented list (what redsem sends, and what its library runs), read
# from docs/deployment.md itself, and checked against every command the
# script runs
my $readme = PostgreSQL::Test::Utils::slurp_file("$FindBin::RealBin/../docs/deployment.md");
my ($acl_text) = $readme =~ /^ {4}ACL SETUSER redsem on (.*?)\n\n/ms;
my @acl = grep { /^\+/ } split /\s+/, ($acl_text // '');
my %granted = map { substr($_, 1) => 1 } @acl;
my $lua = PostgreSQL::Test::Utils::slurp_file("$FindBin::RealBin/../src/redsem.lua");
my %runs = map { lc($_) => 1 }
  $lua =~ /(?:redis\.call\(|pcall\(redis\.call, |call_chunked\()'([A-Za-z]+)'/g;
my @missing = grep { !$granted{$_} } sort keys %runs;
ok(@acl > 10 && !@missing,
	'the documented ACL grants every command the library runs'
	  . (@missing ? ' (missing: ' . join(' ', @missing) . ')' : ''));
# and nothing more: besides the library's, only what a backend (or the
# broker, for its wait pools) sends itself
my @stale = grep { !$runs{$_} && !/^(fcall|function\|load|blpop|client\|setname|client\|id|client\|unblock)$/ }
  sort keys %granted;
ok(!@stale, 'the documented ACL grants no command redsem does not use'
	  . (@stale ? ' (unused: ' . join(' ', @stale) . ')' : ''));
admin('ACL', 'SETUSER', 'rs_min', 'on', '>Min-S3cret', 'resetkeys', '~redsem:*',
	'resetchannels', '-@all', @acl);
my $minpw = "$dir/min.password";
PostgreSQL::Test::Utils::append_to_file($minpw, "Min-S3cret\n");
chmod 0600, $minpw;
$s->query_ok(q{SET redsem."user" = 'rs_min';});
$s->query_ok(qq{SET redsem.password_file = '$minpw';});
admin('FUNCTION', 'FLUSH');
$redis->cli('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
is($s->query_ok(q{SELECT redsem_release('e_acl', redsem_acquire('e_acl', 1));}), 't',
	'the documented ACL on ~redsem:* is enough, even where the library must be loaded first');
like(admin('FUNCTION', 'LIST', 'LIBRARYNAME', 'redsem_*')->[0][1] // '', qr/^redsem_[0-9a-f]{16}$/,
	'that user loaded the library');
is($s->query_ok(q{SELECT redsem_set_limit('e_acl_cfg', 3); SELECT count(*) FROM redsem_semaphores() WHERE name = 'e_acl_cfg'; SELECT redsem_set_limit('e_acl_cfg', NULL);}),
	"\n1\n", 'and it is enough for the index of redsem_semaphores() too');
# each connection that authenticates (or selects a database) is named:
# server (cluster_name), purpose, process
my $spid = $s->query_ok('SELECT pg_backend_pid();');
my $named = broker_mode() ? 'broker:\d+' : "backend:$spid";
like(admin('CLIENT', 'LIST'), qr/^id=.* name=redsem:errs:$named .*user=rs_min /m,
	"CLIENT LIST names the session's connection (redsem:errs:backend:<pid>; in broker mode the broker's, as the session's own Redis user)");
admin('ACL', 'SETUSER', 'rs_min', '-client|setname');
$redis->cli('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
is($s->query_ok(q{SELECT redsem_release('e_acl', redsem_acquire('e_acl', 1));}), 't',
	'an ACL without CLIENT SETNAME: the connection works, unnamed');
like(admin('CLIENT', 'LIST'), qr/^id=.* name= .*user=rs_min /m, '... and is unnamed');
admin('ACL', 'SETUSER', 'rs_min', '+client|setname');
admin('ACL', 'SETUSER', 'rs_min', '-function|load');
# (the keeper, whose user may load the library, can load it again between
# the flush and the session's call on a busy machine: then the call works;
# give the slot back, flush again and try again)
for my $try (1 .. 5)
{
	admin('FUNCTION', 'FLUSH');
	$err = fresh_error(q{SELECT redsem_acquire('e_acl', 1);});
	last if $err ne '';
	note("the library was loaded again before the call (try $try)");
	$s->query_ok(q{SELECT redsem_release_all();});
}
like($err, qr/ERROR:  28000: .*\n.*DETAIL:  NOPERM/,
	'without +function|load, a Redis that lacks the library refuses: 28000 (NOPERM)');
like($err, qr/HINT:  .*FUNCTION LOAD/, '... with a hint naming what the ACL must allow');
admin('ACL', 'SETUSER', 'rs_min', '+function|load', '-zcard');
$err = fresh_error(q{SELECT redsem_acquire('e_acl', 1);});
like($err, qr/ERROR:  28000: /, 'an ACL that denies a command the library runs: 28000 too');
is($redis->cli('EXISTS', 'redsem:{e_acl}:owner'), '0', '... and nothing was written');
# an ACL that denies FCALL itself: Redis ran nothing, so the refused acquire
# leaves nothing for the keeper to watch or release (helper-154: each such
# acquire was watched, and under load they filled the table: 53400)
admin('ACL', 'SETUSER', 'rs_min', '+zcard', '-fcall');
$err = fresh_error(q{SELECT redsem_acquire('e_acl_deny', 1);});
like($err, qr/ERROR:  28000: .*\n.*DETAIL:  NOPERM/, 'an ACL that denies FCALL: 28000 (NOPERM)');
is($node->safe_psql('postgres', q{SELECT count(*) FROM redsem_server_holds() WHERE name = 'e_acl_deny'}), '0',
	'... and nothing of it is left in the server\'s table to watch or release');
admin('ACL', 'SETUSER', 'rs_min', '+fcall');
$s->query_ok(q{RESET redsem."user";});
$s->query_ok(q{RESET redsem.password_file;});
$redis->cli('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
is($s->query_ok(q{SELECT redsem_release('e_acl', redsem_acquire('e_acl', 1));}), 't',
	'the default user works again');

$s->quit;
node_log_is_clean($node);
$node->stop;
$redis->stop;
done_testing();
