
# 022_callbacks.pl - nothing raises out of a commit, abort or exit callback.
#
# An ERROR in a commit callback of a transaction that has an xid is a PANIC
# (the commit is already durable), so the callbacks catch everything:
# Redis trouble, and also out-of-memory, epoll or wait-set failures.  The
# hidden superuser setting redsem.inject_fault makes such an ERROR happen
# at a chosen point; the transaction must still commit or roll back, the
# server must not restart, the session must go on, and the slot must be
# released anyway (by the keeper, or by the session's next call).

use strict;
use warnings FATAL => 'all';

use FindBin;
use IPC::Run;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $redis = RedsemTest::Redis->new;
my $node = create_node('cb', $redis);
$node->safe_psql('postgres', 'CREATE TABLE t (x int)');
my $s = RedsemTest::Session->new($node, name => 's');

sub slot_free
{
	my ($sem) = @_;
	return $node->safe_psql('postgres',
		"SELECT id IS NOT NULL AND redsem_release('$sem', id)
		   FROM (SELECT redsem_acquire('$sem', 1, '60 s') AS id) a") eq 't';
}

my $WARNING = qr/WARNING:  01000: redsem could not release slots (at the end of the transaction|at the rollback of a subtransaction|at session exit)\n.*DETAIL:  redsem: fault injected at/;

###########################################################################
note 'COMMIT of a transaction with an xid';

my ($out, $err) = $s->query(q{
	BEGIN;
	INSERT INTO t VALUES (1);
	SELECT redsem_acquire_xact('cb_commit', 1, '60 s') IS NOT NULL;
	SET redsem.inject_fault = 'callback';
	COMMIT;
	RESET redsem.inject_fault;
	SELECT count(*) FROM t;});
is($out, "t\n1", 'the transaction committed, and its row is there');
like($err, $WARNING, 'the error in the commit callback became a WARNING');
unlike($err, qr/PANIC|ERROR/, 'no ERROR, no PANIC');
ok(defined wait_until(15, sub { slot_free('cb_commit') }),
	'the slot is released anyway (by the keeper)');

note 'a wait set that cannot be made at COMMIT';

($out, $err) = $s->query(q{
	BEGIN;
	INSERT INTO t VALUES (2);
	SELECT redsem_acquire_xact('cb_ws', 1, '60 s') IS NOT NULL;
	SET redsem.inject_fault = 'wait_set';});
is($out, 't', 'a transaction with an xid holds a slot');
# drop its connection: the release at commit must connect again
drop_links($redis, $node);
($out, $err) = $s->query(q{COMMIT; RESET redsem.inject_fault; SELECT count(*) FROM t;});
is($out, '2', 'COMMIT succeeded');
SKIP:
{
	# (a link to the broker is a local socket, connected without a wait;
	# the release at commit is sent without waiting for its reply)
	skip 'broker mode: nothing at commit makes a wait set', 1 if broker_mode();
	like($err, $WARNING, 'the failed wait set became a WARNING');
}
ok(defined wait_until(15, sub { slot_free('cb_ws') }), 'the slot is released anyway');

###########################################################################
note 'a real epoll failure at COMMIT (an LD_PRELOAD shim)';

# A second server whose processes load t/fault/epoll_fault.c: epoll_create1
# fails in the one backend named in $fault_file.  The backend's Redis
# connection is dropped before COMMIT, so the release at commit must open a
# new connection and a new wait set: CreateWaitEventSet fails for real.
# (0.1.0 let that ERROR escape the commit callback: a PANIC.)
my $shim = PostgreSQL::Test::Utils::tempdir() . '/epoll_fault.so';
my ($cc_out, $cc_err) = ('', '');
IPC::Run::run([ $ENV{CC} // 'cc', '-shared', '-fPIC', '-o', $shim,
	"$FindBin::RealBin/fault/epoll_fault.c", '-ldl' ], '>', \$cc_out, '2>', \$cc_err)
  or BAIL_OUT("cannot build the fault shim: $cc_err");
my $fault_file = PostgreSQL::Test::Utils::tempdir() . '/fault.pid';
my $faulty;
{
	local $ENV{LD_PRELOAD} = $shim;
	local $ENV{REDSEM_FAULT_FILE} = $fault_file;
	$faulty = create_node('faulty', $redis);
}
$faulty->safe_psql('postgres', 'CREATE TABLE t (x int)');
my $f = RedsemTest::Session->new($faulty, name => 'f');
($out, $err) = $f->query(q{
	BEGIN;
	INSERT INTO t VALUES (1);
	SELECT redsem_acquire_xact('cb_epoll', 1, '60 s') IS NOT NULL;});
is($out, 't', 'a transaction with an xid holds a slot');
drop_links($redis, $faulty);
PostgreSQL::Test::Utils::append_to_file($fault_file, $f->backend_pid);
($out, $err) = $f->query(q{COMMIT; SELECT count(*) FROM t;});
unlink $fault_file;
is($out, '1', 'COMMIT succeeded although epoll_create1 failed in the commit callback');
SKIP:
{
	skip 'broker mode: nothing at commit makes a wait set', 1 if broker_mode();
	like($err, qr/WARNING:  01000: redsem could not release slots at the end of the transaction\n.*DETAIL:  epoll_create1 failed: Too many open files/,
		'the failure became a WARNING naming it');
}
unlike($err, qr/PANIC/, 'no PANIC');
ok(defined wait_until(15, sub {
	$faulty->safe_psql('postgres', q{SELECT id IS NOT NULL AND redsem_release('cb_epoll', id)
		FROM (SELECT redsem_acquire('cb_epoll', 1, '60 s') AS id) a}) eq 't' }),
	'the slot is released anyway');
is($f->query_ok(q{SELECT 1;}), '1', 'the session goes on');
$f->quit;
unlike(slurp_file($faulty->logfile), qr/PANIC|terminated by signal|was terminated/,
	'that server did not panic or restart');
$faulty->stop;

###########################################################################
note 'ROLLBACK after an error, and a subtransaction rollback';

($out, $err) = $s->query(q{
	BEGIN;
	INSERT INTO t VALUES (3);
	SELECT redsem_acquire_xact('cb_abort', 1, '60 s') IS NOT NULL;
	SET redsem.inject_fault = 'release';
	SELECT 1 / 0;
	ROLLBACK;
	RESET redsem.inject_fault;
	SELECT count(*) FROM t;});
is($out, "t\n2", 'the transaction rolled back');
like($err, $WARNING, 'the error in the abort callback became a WARNING');
ok(defined wait_until(15, sub { slot_free('cb_abort') }), 'the slot is released anyway');

($out, $err) = $s->query(q{
	BEGIN;
	SAVEPOINT a;
	SELECT redsem_acquire_xact('cb_sub', 1, '60 s') IS NOT NULL;
	SET redsem.inject_fault = 'callback';
	ROLLBACK TO SAVEPOINT a;
	RESET redsem.inject_fault;
	COMMIT;});
is($out, 't', 'a subtransaction held a slot');
like($err, $WARNING, 'the error at the subtransaction rollback became a WARNING');
ok(defined wait_until(15, sub { slot_free('cb_sub') }), 'the slot is released anyway');

###########################################################################
note 'the session\'s next call retries what a callback left';

$node->safe_psql('postgres', 'SELECT 1');
# with the keeper stopped from helping (a 60 s lease, and the keeper's
# retry), the session itself releases at its next call
($out, $err) = $s->query(q{
	BEGIN;
	SELECT redsem_acquire_xact('cb_next', 1, '60 s') IS NOT NULL;
	SET redsem.inject_fault = 'callback';
	COMMIT;
	RESET redsem.inject_fault;
	SELECT redsem_release_all();});
like($err, $WARNING, 'the commit left the release to later');
ok(defined wait_until(15, sub { slot_free('cb_next') }), 'and the slot is free');

###########################################################################
note 'session exit';

my $x = RedsemTest::Session->new($node, name => 'x');
is($x->query_ok(q{SELECT redsem_acquire('cb_exit', 1, '60 s') IS NOT NULL;
	SET redsem.inject_fault = 'callback';}), 't', 'x holds a session slot, then disconnects');
my $off = -s $node->logfile;
$x->quit;
ok(defined wait_until(15, sub { slot_free('cb_exit') }),
	'the slot is released anyway (the keeper sees the backend gone)');
like(slurp_file($node->logfile, $off), qr/WARNING:  redsem could not release slots at session exit/,
	'the exit callback logged a WARNING');

$s->quit;
my $log = slurp_file($node->logfile);
unlike($log, qr/PANIC|terminated by signal|server process .* exited with exit code [^01]/,
	'the server never crashed or panicked');
is($node->safe_psql('postgres', 'SELECT count(*) FROM t'), '2', 'and both committed rows are there');
$node->stop;
$redis->stop;
done_testing();
