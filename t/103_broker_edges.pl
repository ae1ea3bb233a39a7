# 103_broker_edges.pl - the broker's edges found by review: where a WAIT
# goes, whose connect timeout a waiting call gets, a reply owed before a
# failure, and the pid its connections are named after.  Raw links speak
# to the broker's socket as a backend would (brokerlink.c's header).
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use Cwd;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

my ($primary, $replica) = primary_and_replica();
my $node = create_node('edges', $primary, "redsem.connection_mode = broker\n");

# A raw link to the broker for Redis at unix socket $sock, with a connect
# timeout of $timeout_ms (the header a backend sends first, no reply)
sub raw_link
{
	my ($sock, $timeout_ms, $db) = @_;
	my $cwd = getcwd();
	chdir $node->data_dir or die;
	my $r = RedsemTest::RESP->new('pg_stat_tmp/redsem_broker.sock');
	chdir $cwd;
	$r->send_raw(RedsemTest::RESP::encode('REDSEM.TARGET', '', 0, $sock, $db // 0, '', '', '0', '', '', '', '',
		$timeout_ms // 2000, '0', '', '', '', ''));
	return $r;
}

# A reply as text ("error: ..." for an error)
sub text_of { my ($r) = @_; return RedsemTest::RESP::is_error($r) ? "error: $r->{msg}" : $r; }

###########################################################################
note 'a WAIT goes on the connection that carried the caller\'s writes';

ok(defined wait_until(30, sub { ($primary->cli('INFO', 'replication') // '') =~ /state=online/ }),
	'the replica is online');
my $c = raw_link($primary->socket);
my $a = raw_link($primary->socket);
my $b = raw_link($primary->socket);
is($a->cmd('SET', 'edge', 'a0'), 'OK', 'a writes');
is($a->cmd('WAIT', '1', '2000'), 1, 'a\'s WAIT: the replica has it (its connection becomes a side one)');
is($c->cmd('PING'), 'PONG', 'c: another connection takes the shared role');
RedsemTest::sleep_full(1);
$replica->freeze;
is($a->cmd('SET', 'edge', 'a1'), 'OK', 'a writes again (the frozen replica does not get it)');
# (b's WAIT, with nothing written, lands on the shared connection a wrote
# on and takes it; a's WAIT must still go where a's write went, behind it)
$b->send_raw(RedsemTest::RESP::encode('WAIT', '1', '200'));
RedsemTest::sleep_full(0.05);
my $t0 = time;
my $acked = $a->cmd('WAIT', '1', '1000');
my $took = time - $t0;
is($acked, 0, sprintf('a\'s WAIT after b\'s: 0 replicas, after %.2f s (its write is not on the replica)', $took));
cmp_ok($took, '>=', 0.9, 'it waited its 1 s');
is($b->_reply, 0, 'b\'s WAIT times out with 0');
$replica->thaw;

my $bpid = broker_pid_of($node);
my @pids = map { /name=redsem:\S*:broker:(\d+)/ ? $1 : () } split /\n/, ($primary->cli('CLIENT', 'LIST') // '');
ok(@pids && !grep({ $_ != $bpid } @pids),
	'every broker connection is named after the broker\'s pid, not its openers\' (' . join(' ', @pids) . ")");

###########################################################################
note 'the connection a WAIT took is its target\'s last: kept, not closed once idle';

# (closing it would leave the target with no connection while a backend is
# linked for it: a Redis restarted meanwhile would go unseen, I15)
sub broker_on_db { my ($db) = @_; return scalar(grep { /name=redsem:\S*:broker:\d+/ && / db=$db / } split /\n/, ($primary->cli('CLIENT', 'LIST') // '')); }
my $wl = raw_link($primary->socket, 2000, 3);
is($wl->cmd('SET', 'edge', 'w'), 'OK', 'a link of database 3 writes');
is($wl->cmd('WAIT', '1', '2000'), 1, 'and waits for the replica: its WAIT takes the only connection');
RedsemTest::sleep_full(7);
is(broker_on_db(3), 1, 'idle for longer than a side connection may be (5 s), the connection stays, as the shared one');
is(text_of($wl->cmd('PING')), 'PONG', 'and the link was not ended');

###########################################################################
note 'a reply owed comes before anything else: never a failure in its place';

my $admin = RedsemTest::RESP->new($primary->socket);
my $d = raw_link($primary->socket);
my $e = raw_link($primary->socket);
is($d->cmd('PING'), 'PONG', 'd is served');
is($admin->cmd('CLIENT', 'PAUSE', '1000', 'WRITE'), 'OK', 'Redis holds writes for 1 s');
$d->send_raw(RedsemTest::RESP::encode('SET', 'edge2', 'x'));
RedsemTest::sleep_full(0.1);
$e->send_raw(RedsemTest::RESP::encode('WAIT', '0', '100'));
RedsemTest::sleep_full(0.1);
$d->send_raw(RedsemTest::RESP::encode('PING'));
is(text_of($d->_reply), 'OK', 'd\'s first reply is its SET\'s');
is(text_of($d->_reply), 'PONG', 'then its PING\'s');
is($admin->cmd('GET', 'edge2'), 'x', 'the SET was applied');

###########################################################################
note 'a call waiting for another session\'s open gets its own connect timeout';

my $frozen = RedsemTest::Redis->new;
my $fsock = $frozen->socket;
$frozen->freeze;
my $h1 = RedsemTest::Session->new($node, name => 'h1');
my $h2 = RedsemTest::Session->new($node, name => 'h2');
$h1->send(qq{SET redsem.unix_socket = '$fsock'; SET redsem.connect_timeout = 8000; SET redsem.command_timeout = 20000; SELECT redsem_acquire('far1', 1, '60 s');});
RedsemTest::sleep_full(0.5);
$h2->send(qq{SET redsem.unix_socket = '$fsock'; SET redsem.connect_timeout = 500; SET redsem.command_timeout = 3000; SELECT redsem_acquire('far2', 1, '60 s');});
my (undef, $err2, $el2) = $h2->wait_done(20);
# (h1's connect timeout, which h2 must not get, is 8 s; the default, 2 s)
cmp_ok($el2, '<', 1.9, sprintf('h2 fails within about its own connect timeout of 0.5 s (%.2f s)', $el2));
like($err2, qr/08001: .*\n.*DETAIL:  no answer within 500 ms \(redsem\.connect_timeout\)/,
	'with 08001, naming its own timeout, as in direct mode') or diag($err2);
$h1->quit;
$h2->quit;

note 'one session\'s short connect timeout does not fail the others';
my $x = raw_link($fsock, 30);
$x->send_raw(RedsemTest::RESP::encode('PING'));
my $y = raw_link($fsock, 3000);
$y->send_raw(RedsemTest::RESP::encode('PING'));
RedsemTest::sleep_full(0.3);
$frozen->thaw;
is(text_of($y->_reply), 'PONG', 'y (3 s) gets its PONG once Redis answers, 0.3 s in');
like(text_of($x->_reply), qr/^error: REDSEMBROKER \d+\+? no answer within 30 ms/, 'x (30 ms) got its own timeout');
$frozen->stop;

###########################################################################
note 'the wait pool\'s connection killed under a waiter: the broker stays, the waiter rides on';

my $holder = RedsemTest::Session->new($node, name => 'holder');
my $waiter = RedsemTest::Session->new($node, name => 'waiter');
is($holder->query_ok(q{SELECT redsem_acquire('edge_wait', 1, '60 s') IS NOT NULL;}), 't', 'the holder takes the slot');
$waiter->send(q{SELECT redsem_acquire('edge_wait', 1, '60 s', wait => '20 s') IS NOT NULL;});
my $blpop;
ok(defined wait_until(10, sub {
	($blpop) = grep { /cmd=blpop/ && /name=redsem:\S*:broker:/ } split /\n/, ($primary->cli('CLIENT', 'LIST') // '');
	defined $blpop }), 'the waiter waits on the broker\'s wait pool connection');
my $before = broker_pid_of($node);
my ($id) = ($blpop // '') =~ /^id=(\d+)/;
$primary->cli('CLIENT', 'KILL', 'ID', $id) if defined $id;
RedsemTest::sleep_full(0.3);
is(broker_pid_of($node), $before, 'the broker lives on (its failed pool connection is let go whole)');
$holder->query_ok(q{SELECT redsem_release_all();});
my (undef, $werr) = $waiter->wait_done(25);
is($werr, '', 'the waiter gets the slot within its wait') or diag($werr);
$waiter->query_ok(q{SELECT redsem_release_all();});
$_->quit for ($holder, $waiter);

###########################################################################
note 'a waiter\'s BLPOP behind the broker means what its own would: the list is the record';

# (the wait pool's BLPOP names many waiters' lists; a waiter is answered
# a nil only once no BLPOP naming its lists is out, so nothing it should
# have had is popped for nobody, and the broker keeps nothing of its own)
my $w = raw_link($primary->socket);
my $pusher = RedsemTest::RESP->new($primary->socket);
ok(!defined $w->cmd('BLPOP', 'pool:wake', 'pool:nudge', '0.3'), 'the waiter\'s BLPOP times out: a nil');
is($pusher->cmd('RPUSH', 'pool:wake', 'ticket-1'), 1, 'its wake-up is pushed right after');
RedsemTest::sleep_full(0.1);
is($pusher->cmd('LLEN', 'pool:wake'), 1, 'it waits in the list, as it would in direct mode');
my $t1 = time;
my $got = $w->cmd('BLPOP', 'pool:wake', 'pool:nudge', '5');
is(ref $got ? join(' ', @$got) : text_of($got // 'nil'), 'pool:wake ticket-1',
	'the next BLPOP gets it from the list');
cmp_ok(time - $t1, '<', 1, 'at once');
ok(!defined $w->cmd('BLPOP', 'pool:wake', 'pool:nudge', '0.2'), 'nothing is handed over twice');
$pusher->cmd('RPUSH', 'pool:wake', 'ticket-2');
$pusher->cmd('DEL', 'pool:wake');
ok(!defined $w->cmd('BLPOP', 'pool:wake', 'pool:nudge', '0.2'),
	'a wake-up taken back (its list deleted, as a confirm or a lapse does) is never handed over');
$pusher->cmd('RPUSH', 'pool:wake', 'ticket-3');
$pusher->cmd('DEL', 'pool:wake');
$pusher->cmd('RPUSH', 'pool:wake', 'ticket-4');
$got = $w->cmd('BLPOP', 'pool:wake', 'pool:nudge', '2');
is(ref $got ? join(' ', @$got) : text_of($got // 'nil'), 'pool:wake ticket-4',
	'a wake-up replaced (DEL and RPUSH, as the script posts one) is handed over as replaced');

note 'the last waiter of a pool leaves while its BLPOP is out: its lists are not popped for nobody';

my $lw = raw_link($primary->socket);
$lw->send_raw(RedsemTest::RESP::encode('BLPOP', 'left:wake', 'left:nudge', '4'));
RedsemTest::sleep_full(0.5);
close $lw->{sock};
RedsemTest::sleep_full(0.5);
$pusher->cmd('RPUSH', 'left:wake', 'ticket-x');
RedsemTest::sleep_full(0.1);
is($pusher->cmd('LLEN', 'left:wake'), 1, 'a wake-up pushed after the waiter left stays in its list');
$pusher->cmd('DEL', 'left:wake');

###########################################################################
note 'a promotion that lapsed while its waiter was stopped is never taken for a grant';

# (review: a broker that kept a wake-up popped for a waiter it had answered
# handed it over after the promotion was taken back: two holders of a
# limit of 1)
my $ea = RedsemTest::Session->new($node, name => 'ea');
my $ec = RedsemTest::Session->new($node, name => 'ec');
my $ew = RedsemTest::Session->new($node, name => 'ew');
my $eid = $ea->query_ok(q{SELECT redsem_acquire('lapse', 1, '60 s');});
my $joined = time;
$ew->send(q{SELECT redsem_acquire('lapse', 1, '1 s', wait => '40 s');});
ok(defined wait_until(10, sub { $primary->zcard('lapse', 'waiting') == 1 }), 'w waits in line');
RedsemTest::sleep_full(0.3);
kill 'STOP', $ew->backend_pid;
# (w's BLPOP, about 5 s, ends while w is stopped)
RedsemTest::sleep_full($joined + 5.6 - time);
is($ea->query_ok(qq{SELECT redsem_release('lapse', '$eid');}), 't', 'the holder releases: w is promoted');
RedsemTest::sleep_full(1.5);	# (w's window, 1 s, lapses)
my $ecid = $ec->query_ok(q{SELECT redsem_acquire('lapse', 1, '60 s');});
like($ecid, qr/^[0-9a-f]{16}\./, 'another session takes the slot after w\'s window');
kill 'CONT', $ew->backend_pid;
my ($eout) = $ew->wait_done(2);
ok(!defined $eout, 'w, whose promotion lapsed, waits again (as in direct mode)');
is_deeply([ holders_of($primary, 'lapse') ], [$ecid], 'only the other session holds');
$ec->query_ok(q{SELECT redsem_release_all();});
my ($wout, $werr2) = $ew->wait_done(20);
like($wout // '', qr/^[0-9a-f]{16}\./, 'then w gets the slot') or diag($werr2);
$ew->query_ok(q{SELECT redsem_release_all();});
$_->quit for ($ea, $ec, $ew);

###########################################################################
note 'a link that makes the broker hold too much is closed; the broker serves on';

{
	local $SIG{PIPE} = 'IGNORE';
	my $bpid = broker_pid_of($node);
	my $big = raw_link($primary->socket);
	# (a bulk string of 100 MB announced, then sent: it is never whole)
	my $mb = 0;
	eval {
		$big->send_raw("*2\r\n\$4\r\nECHO\r\n\$100000000\r\n");
		my $chunk = 'x' x (1 << 20);
		while ($mb < 90) { $big->send_raw($chunk); $mb++; }
		1;
	};
	ok(!defined eval { $big->_reply; 1 },
		"a link holding more than 64 MB of a request is closed ($mb MB sent)");
	is(raw_link($primary->socket)->cmd('PING'), 'PONG', 'the broker serves another link');
	is(broker_pid_of($node), $bpid, 'and it is the same broker (not restarted)');
	like(slurp_file($node->logfile), qr/redsem broker closed a backend's link holding more than 64 MB of requests/,
		'the broker logs why');
}

node_log_is_clean($node);
$node->stop;
done_testing();
