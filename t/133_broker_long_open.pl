
# 133_broker_long_open.pl - a role's long redsem.connect_timeout does not
# keep the others out (helper-159).  Anyone may set redsem.connect_timeout,
# up to 10 min.  In broker mode a target's connection is opened once for
# every session that waits for it; that open took the time of the session
# that asked first, so a path that swallowed it kept every other role's
# calls failing (08001) for as long as that role had set, long after the
# path worked again.  The broker's opens now last at most the server's
# redsem.connect_timeout; a session that may wait longer has another open
# made for it.  Direct mode (each session its own connection) is the
# control: the others are served at once.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time);

my $redis = RedsemTest::Redis->new;
my $flag = PostgreSQL::Test::Utils::tempdir() . '/swallow';

# a path that, while $flag exists, swallows a new connection's first
# command and everything after it, as a path that drops packets would
my $proxy = RedsemTest::Proxy->new($redis, sub {
	RedsemTest::sleep_full(3600) if -e $flag;
	return undef;
});

my $node = RedsemTest::start_node('longopen', <<"EOC");
shared_preload_libraries = 'redsem'
redsem.unix_socket = '@{[ $proxy->socket ]}'
EOC
$node->safe_psql('postgres', q{CREATE ROLE mallory LOGIN; CREATE ROLE victim LOGIN;});
my $v = RedsemTest::Session->new($node, name => 'victim', user => 'victim');
my $m = RedsemTest::Session->new($node, name => 'mallory', user => 'mallory');
my $ROUND = q{SELECT redsem_release('v', redsem_acquire('v', 5));};
is($v->query_ok($ROUND), 't', 'the victim is served');
is($m->query_ok(q{SELECT redsem_release('m', redsem_acquire('m', 5));}), 't', 'so is mallory');

# the path swallows new connections; the existing ones are cut (in broker
# mode the broker is killed, and the postmaster starts another)
open(my $fh, '>', $flag) or die "could not create $flag: $!";
close $fh;
my $old = broker_pid_of($node);
drop_links($redis, $node);
ok(defined wait_until(10, sub { my $b = broker_pid_of($node); defined $b && $b != $old }), 'a new broker')
  if broker_mode();
$m->send(q{SET redsem.connect_timeout = '10min'; SELECT redsem_acquire('m', 5) IS NOT NULL;});
RedsemTest::sleep_full(1);
unlink $flag;
my $back = time;
is($redis->cli('PING'), 'PONG', 'the path works again');

# the victim (connect_timeout 2 s): served within its own timeout, not after
# mallory's 10 min
my ($served, $first_err);
my $at = wait_until(8, sub {
	my ($out, $err) = $v->query($ROUND, 30);
	$first_err //= $err if $err ne '';
	return ($served = $out eq 't');
});
ok(defined $at, 'once the path works, another role is served within its connect timeout'
	  . (defined $at ? sprintf(' (%.1f s)', time - $back) : '; not in 8 s: ' . ($first_err // '')));
my $fails = grep { ($v->query($ROUND, 30))[0] ne 't' } 1 .. 5;
is($fails, 0, 'and its next five calls are too');
if (broker_mode())
{
	# mallory, who may wait 10 min, had another open made for her
	my ($out, $err, $secs) = $m->wait_done(10);
	is($out // '', 't', "mallory's own call is served too, by another open ("
		  . (defined $secs ? sprintf('%.1f s', $secs) : 'not in 10 s') . ')') or diag($err // '');
}
else
{
	# (her own connection was swallowed: she waits as long as she asked)
	$node->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $m->backend_pid . ')');
	my (undef, $err) = $m->wait_done(10);
	like($err // '', qr/57014/, "direct mode: mallory's call ends when cancelled");
}
$m->query('SELECT redsem_release_all();');
is($v->query_ok(q{SELECT count(*) FROM redsem_held();}), '0', 'nothing held behind');

# helper-160: with the server's connect_timeout at 50 ms or less, an open
# capped at it that was refused at once looked as if it ran out of time,
# and a session with 3 s began one open after another for 3 s (thousands
# of forks), then was told "no answer" instead of why
$node->safe_psql('postgres', q{ALTER SYSTEM SET redsem.connect_timeout = 40; SELECT pg_reload_conf();});
RedsemTest::sleep_full(1);
my $nowhere = PostgreSQL::Test::Utils::tempdir_short() . '/none.sock';
my $su = RedsemTest::Session->new($node, name => 'su');
my (undef, $nerr, $nsecs) = $su->query(qq{SET redsem.unix_socket = '$nowhere'; SET redsem.connect_timeout = '3s';
	SELECT redsem_acquire('v', 5); RESET redsem.unix_socket; RESET redsem.connect_timeout;});
like($nerr, qr/ERROR:  08001: could not connect to Redis .*\n.*DETAIL:  .*No such file or directory/,
	'a socket that is not there, with the server at 40 ms and the session at 3 s: 08001, saying why');
cmp_ok($nsecs, '<', 1, sprintf('at once (%.3f s), not after one open after another', $nsecs));

# a session that may wait longer than an open lasts (3 s against the
# server's 1 s), on a path that swallows every connection: told its own
# setting, and, in broker mode, what the last open said when that names
# more (here the AUTH that got no answer; a TLS handshake in t/051), as
# direct mode names it
$node->safe_psql('postgres', q{ALTER SYSTEM SET redsem.connect_timeout = 1000; SELECT pg_reload_conf();});
RedsemTest::sleep_full(1);
my $black = RedsemTest::Proxy->new($redis, sub { RedsemTest::sleep_full(3600); return undef; });
my $into_black = qq{SET redsem.unix_socket = '@{[ $black->socket ]}'; SET redsem.connect_timeout = '3s';};
my $out_of_black = q{RESET redsem.unix_socket; RESET redsem.connect_timeout; RESET redsem.user; RESET redsem.password;};
my (undef, $berr, $bsecs) = $su->query(qq{$into_black SET redsem.user = 'nobody'; SET redsem.password = 'pw';
	SELECT redsem_acquire('v', 5); $out_of_black}, 30);
like($berr, qr/ERROR:  08001: could not connect to Redis .*\n.*DETAIL:  no answer.* within 3000 ms \(redsem\.connect_timeout\)/,
	sprintf('a path that swallows everything, the session at 3 s: 08001 with its own setting (%.1f s)', $bsecs // -1));
like($berr, broker_mode() ? qr/; the broker's opens last at most 1000 ms each, and the last said: no answer to AUTH within 1000 ms/
	  : qr/no answer to AUTH within 3000 ms/, 'and the step that got no answer');
if (broker_mode())
{
	# (the last open's words are left out when they would only repeat)
	(undef, $berr) = $su->query(qq{$into_black SELECT redsem_acquire('v', 5); $out_of_black}, 30);
	like($berr, qr/DETAIL:  no answer within 3000 ms \(redsem\.connect_timeout\)$/m,
		'without a password, the session is told its own setting alone');
}
$node->safe_psql('postgres', q{ALTER SYSTEM RESET redsem.connect_timeout; SELECT pg_reload_conf();});
$su->quit;
$_->quit for ($v, $m);
node_log_is_clean($node);
$node->stop;
$proxy->stop;
$redis->stop;
done_testing();
