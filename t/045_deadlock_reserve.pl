
# 045_deadlock_reserve.pl - the deadlock detector (src/deadlock.c) counts
# what a reserve keeps from the waiter's class (issue 48, E3): a
# statement-queue deadlock under redsem_set_reserve ends with 40P01 as it
# does without the reserve; a wait that is not a deadlock because the stuck
# holder sits inside the reserve is not declared one; nor is a wait behind
# a waiter ahead that can never fit beside the stuck holder, since that one
# may give up (here it does, and the waiter behind it gets its slot).

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $redis = RedsemTest::Redis->new;
my $node = create_node('dlres', $redis,
	"redsem.queues = 'q1: active_statements=2'\n" . "deadlock_timeout = '200ms'\n");
$node->safe_psql('postgres', q{
CREATE TABLE rows (id int PRIMARY KEY, v int);
INSERT INTO rows VALUES (1, 0), (2, 0);
SELECT redsem_set_reserve('queue:q1', 1, 10);
});

my $admin = RedsemTest::Session->new($node, name => 'admin');
my $w = RedsemTest::Session->new($node, name => 'waiter');
my $h = RedsemTest::Session->new($node, name => 'holder');
my $c = RedsemTest::Session->new($node, name => 'other');
# a deadlock missed waits for this, then ends with 57014
$_->query_ok(q{SET statement_timeout = '8s'; SET redsem.queue = 'q1';}) foreach ($w, $h, $c);

# wait until n sessions wait for a lock
sub lock_waits
{
	my ($n) = @_;
	return wait_until(10, sub { $admin->query_ok(q{SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock';}) eq $n });
}

###########################################################################
note 'a reserve of 1 of 2 for priority 10: the holder below it takes the one slot left to the others';

$w->query_ok(q{BEGIN; UPDATE rows SET v = v + 1 WHERE id = 1;});
$h->send(q{UPDATE rows SET v = v + 10 WHERE id = 1;});
ok(lock_waits(1), 'the holder took a queue slot and waits for the row the waiter locked');
my ($out, $err, $secs) = $w->query(q{SELECT pg_sleep(0);}, 30);
like($err, qr/ERROR:  40P01: deadlock detected while waiting for a slot of redsem semaphore "queue:q1"/,
	'the waiter (priority 0) can never use the reserved slot: 40P01, not statement_timeout');
like($err, qr/DETAIL:  Process \d+ holds a slot of it and waits for a lock held by this transaction; 1 of its 2 permits are held that way, and a reserve \(redsem_set_reserve\) keeps others for priority 10 and up/,
	'saying so');
cmp_ok($secs, '<', 6, "within a few deadlock_timeouts ($secs s)");
$w->query_ok(q{ROLLBACK;});
is(($h->wait_done(20))[1], '', 'the rollback freed the row: the holder finishes');

###########################################################################
note 'no false alarm: a stuck holder inside the reserve leaves the others their slot';

$h->query_ok(q{SET redsem.queue_priority = 10;});
$w->query_ok(q{BEGIN; UPDATE rows SET v = v + 1 WHERE id = 1;});
$h->send(q{UPDATE rows SET v = v + 10 WHERE id = 1;});
ok(lock_waits(1), 'a holder of priority 10 (in the reserve) waits for the row the waiter locked');
$c->send(q{SELECT pg_sleep(3);});
ok(wait_until(10, sub { $admin->query_ok(q{SELECT running FROM redsem_queues WHERE name = 'q1';}) eq '2' }),
	'another session (priority 0) runs in the slot left to the others');
($out, $err, $secs) = $w->query(q{SELECT 'ran' FROM (SELECT pg_sleep(0)) s;}, 30);
is($err, '', 'the waiter is not told 40P01: its slot comes when the other statement ends');
is($out, 'ran', "and its statement runs ($secs s)");
is(($c->wait_done(20))[1], '', 'the other statement ended');
$w->query_ok(q{ROLLBACK;});
is(($h->wait_done(20))[1], '', 'the holder finishes');
$h->query_ok(q{RESET redsem.queue_priority;});
$_->query_ok(q{RESET redsem.queue;}) foreach ($w, $h, $c);

###########################################################################
note 'no false alarm: a waiter ahead that can never fit beside the stuck holder may still give up';

$w->query_ok(q{BEGIN; UPDATE rows SET v = 0 WHERE id = 2;});
$h->query_ok(q{BEGIN; SELECT redsem_acquire_xact('dl_ahead', 3) IS NOT NULL;});
$h->send(q{UPDATE rows SET v = 1 WHERE id = 2; COMMIT;});
ok(lock_waits(1), 'a holder of "dl_ahead" (limit 3) waits for a row the waiter locked');
$c->send(q{SELECT redsem_acquire_xact('dl_ahead', 3, wait => '3 s', permits => 3) IS NOT NULL;});
ok(wait_until(10, sub { $admin->query_ok(q{SELECT count(*) FROM redsem_holders('dl_ahead') WHERE state = 'waiting';}) eq '1' }),
	'another session waits, up to 3 s, for all 3 permits');
($out, $err, $secs) = $w->query(q{SELECT redsem_acquire_xact('dl_ahead', 3, wait => NULL) IS NOT NULL;}, 30);
is($err, '', 'the waiter for 1 permit behind it is not told 40P01');
is($out, 't', "its slot comes once the one ahead gave up ($secs s)");
my ($ahead_out, $ahead_err) = $c->wait_done(30);
is($ahead_out, 'f', 'the waiter ahead gave up at the end of its wait');
$w->query_ok(q{ROLLBACK;});
is(($h->wait_done(20))[1], '', 'the holder goes on');

$_->quit foreach ($w, $h, $c, $admin);
done_testing();
