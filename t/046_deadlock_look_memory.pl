
# 046_deadlock_look_memory.pl - the deadlock detector's once-a-second look
# does not grow the waiter's memory (issue 48, E5): a waiter for a
# semaphore whose holders on this server all wait for somebody else's row
# lock is looked at every second for 8 seconds, and its memory, as
# pg_log_backend_memory_contexts logs it, grows by less than 100 kB (each
# look used to keep what pg_blocking_pids allocated, some 20 kB per holder
# and step of its chain here).

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $redis = RedsemTest::Redis->new;
# more connections: pg_blocking_pids allocates per MaxBackends
my $node = create_node('dlmem', $redis, "max_connections = 200\ndeadlock_timeout = '200ms'\n");
$node->safe_psql('postgres', q{CREATE TABLE rows (id int PRIMARY KEY, v int); INSERT INTO rows VALUES (1, 0);});

my $admin = RedsemTest::Session->new($node, name => 'admin');
my $blocker = RedsemTest::Session->new($node, name => 'blocker');
my @holders = map { RedsemTest::Session->new($node, name => "holder$_") } 1 .. 4;
my $w = RedsemTest::Session->new($node, name => 'waiter');

$blocker->query_ok(q{BEGIN; UPDATE rows SET v = 1 WHERE id = 1;});
for my $h (@holders)
{
	$h->query_ok(q{BEGIN; SELECT redsem_acquire_xact('mem_sem', 4) IS NOT NULL;});
	$h->send(q{UPDATE rows SET v = 2 WHERE id = 1; COMMIT;});
}
ok(wait_until(10, sub { $admin->query_ok(q{SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock';}) eq '4' }),
	'the 4 holders of "mem_sem" (limit 4) wait for a row another session locked');

my $pid = $w->backend_pid;
$w->send(q{SELECT redsem_acquire_xact('mem_sem', 4, wait => '14 s') IS NULL;});
ok(wait_until(10, sub { $admin->query_ok(q{SELECT count(*) FROM redsem_holders('mem_sem') WHERE state = 'waiting';}) eq '1' }),
	'a fifth session waits in line (its holders wait for a lock: it looks every second)');

# the waiter's memory in all, as it logs it
sub grand_total
{
	my $offset = -s $node->logfile;
	$admin->query_ok(qq{SELECT pg_log_backend_memory_contexts($pid);});
	my $total;
	wait_until(10, sub {
		my $log = slurp_file($node->logfile, $offset);
		($total) = $log =~ /\[$pid\][^\n]*Grand total: (\d+) bytes/;
		return defined $total;
	});
	return $total;
}

sleep(2);
my $first = grand_total();
sleep(8);
my $second = grand_total();
ok(defined $first && defined $second, "the waiter logged its memory twice ($first, then $second bytes)");
cmp_ok($second - $first, '<', 100_000, 'eight looks later it has not grown by 100 kB');

my ($out, $err) = $w->wait_done(30);
is($err, '', 'the waiter was not told 40P01: its holders wait for somebody else');
is($out, 't', 'it ran out of wait time');
$blocker->query_ok(q{COMMIT;});
is(($_->wait_done(20))[1], '', 'the holders finish') foreach @holders;

$_->quit foreach (@holders, $w, $blocker, $admin);
done_testing();
