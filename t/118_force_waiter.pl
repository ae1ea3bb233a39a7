
# 118_force_waiter.pl - an administrator removes a waiter (redsem_force_release
# of a place in line, issue of helper-129 and helper-131): the waiter is told
# (57014) and does not queue again, also when it was promoted and had not
# confirmed yet, and a statement queue's statement is told in a queue's words.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $redis = RedsemTest::Redis->new;
my $node = create_node('force_waiter', $redis, "redsem.queues = 'fq: active_statements=1 max_wait=60s'\n");

sub session { return RedsemTest::Session->new($node, name => $_[0]); }

# The id of the first waiter of $sem
sub first_waiter
{
	my ($sem) = @_;
	my ($id) = split /\n/, ($redis->cli('ZRANGE', "redsem:{$sem}:waiting", '0', '-1') // '');
	return $id;
}

my $dba = session('dba');
my $alice = session('alice');

###########################################################################
note 'a waiter promoted but paused before it confirmed, then force-released, does not take the slot';
{
	# (before, its confirming look found its slot gone, took that for a
	# Redis that forgot, queued again and was granted at once)
	my $id = $alice->query_ok(q{SELECT redsem_acquire('fp', 1, '60 s');});
	my $m = session('mallory');
	$m->send(q{SELECT redsem_acquire('fp', 1, '60 s', '60 s') IS NOT NULL;});
	ok(defined wait_until(30, sub { $redis->zcard('fp', 'waiting') == 1 }), 'mallory waits');
	my $mid = first_waiter('fp');
	kill 'STOP', $m->backend_pid;
	# (a promotion a third of its window after the waiter's last look is
	# the waiter's to confirm, not its keeper's)
	usleep(2_000_000);
	is($alice->query_ok(qq{SELECT redsem_release('fp', '$id');}), 't', 'alice releases: mallory, paused, is promoted');
	my $off = -s $node->logfile;
	is($dba->query_ok(qq{SELECT redsem_force_release('fp', '$mid');}), 't',
		'an administrator force-releases her slot before she confirms');
	# (and her promotion window, 5 s, passes before she looks: the slot
	# goes with it, so only the marker tells her; helper-132)
	usleep(6_000_000);
	kill 'CONT', $m->backend_pid;
	my ($out, $err) = $m->wait_done(30);
	like($err, qr/ERROR:  57014: canceling the wait for semaphore "fp": an administrator removed this session from its line/,
		'mallory is told, 57014');
	is($redis->zcard('fp', 'owner'), 0, 'she did not queue again: nobody holds or waits');
	like(slurp_file($node->logfile, $off), qr/slot "\Q$mid\E" of semaphore "fp" force-released/, 'the log says so');
	$m->quit;
}

###########################################################################
note 'a statement waiting in a statement queue, removed: told in the queue\'s words';
{
	my $h = session('qholder');
	$h->query_ok(q{SET redsem.queue = 'fq';});
	$h->send(q{SELECT pg_sleep(30);});
	ok(defined wait_until(30, sub { $redis->zcard('queue:fq', 'owner') == 1 }), 'a statement runs in queue fq');
	my $q = session('queued');
	$q->query_ok(q{SET redsem.queue = 'fq';});
	$q->send(q{SELECT 42, pg_sleep(0);});	# (not light: it queues)
	ok(defined wait_until(30, sub { $redis->zcard('queue:fq', 'waiting') == 1 }), 'another waits in its line');
	my $mid = first_waiter('queue:fq');
	is($dba->query_ok(qq{SELECT redsem_force_release('queue:fq', '$mid');}), 'f', 'an administrator removes it');
	my ($out, $err) = $q->wait_done(15);
	like($err, qr/ERROR:  57014: statement could not enter redsem queue "fq": an administrator removed it from the line/,
		'the statement is told, 57014');
	is($redis->zcard('queue:fq', 'waiting'), 0, 'it did not queue again');
	$node->safe_psql('postgres', 'SELECT pg_cancel_backend(' . $h->backend_pid . ')');
	$h->wait_done(30);
	is($q->query_ok(q{SELECT 43, pg_sleep(0);}), '43|', 'the session\'s next statement runs');
	$_->quit foreach ($h, $q);
}

$_->quit foreach ($alice, $dba);
node_log_is_clean($node, 'no crash, no assertion failure');
$node->stop;
$redis->stop;
done_testing();
