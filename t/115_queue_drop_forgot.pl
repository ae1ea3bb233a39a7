
# 115_queue_drop_forgot.pl - statements waiting in a queue that is dropped
# while Redis forgets: Redis restarts (without persistence) under a full
# queue, so its cap is gone and a grace period holds the line; the queue is
# dropped; Redis restarts again.  Each waiter stores the queue's cap again,
# and the keeper's watch of the dropped queue removes it.  Such a waiter
# failed with 22023 "has no stored limit" (an adversarial review found
# it); a cap removed again while a statement waits, of a queue no longer
# defined, is a drop's, and a dropped queue's line runs: they run, with a
# NOTICE.  A
# queue that is not dropped, through the same restarts, keeps its cap: its
# waiters, which store its cap again each time, never run unqueued (the
# first fix let them: a second review found three of them running at once
# in a queue of one).

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $redis = RedsemTest::Redis->new;
my $a = create_node('forgot_a', $redis);
my $b = create_node('forgot_b', $redis);
foreach my $n ($a, $b)
{
	$n->safe_psql('postgres', q{
CREATE ROLE worker LOGIN;
CREATE TABLE tq AS SELECT 1 AS x;
GRANT SELECT ON tq TO worker;
ALTER ROLE worker SET redsem.queue = 'g2';
});
}
$a->safe_psql('postgres', q{
CREATE ROLE stayer LOGIN;
ALTER ROLE stayer SET redsem.queue = 'live';
CREATE TABLE spans(t0 timestamptz, t1 timestamptz);
GRANT SELECT ON tq TO stayer;
GRANT INSERT ON spans TO stayer;
CREATE FUNCTION work() RETURNS void LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz := clock_timestamp();
BEGIN
  PERFORM pg_sleep(0.5);
  INSERT INTO spans VALUES (t0, clock_timestamp());
END $$;
});
$a->safe_psql('postgres', "SELECT redsem_create_queue('g2', 'active_statements=1')");
$a->safe_psql('postgres', "SELECT redsem_create_queue('live', 'active_statements=1')");
ok(defined wait_until(10, sub {
			$b->safe_psql('postgres', "SELECT count(*) FROM redsem_queues WHERE name = 'g2'") eq '1' }),
	'a queue of one, applied on both servers');

my $holder = RedsemTest::Session->new($a, name => 'holder', user => 'worker');
$holder->send(q{SELECT count(*) FROM tq, pg_sleep(4);});
ok(defined wait_until(10, sub { $a->safe_psql('postgres', "SELECT running FROM redsem_queues WHERE name = 'g2'") eq '1' }),
	'a statement holds its slot');
my @line;
foreach my $n ($a, $a, $a, $b, $b)
{
	my $s = RedsemTest::Session->new($n, name => 'waiter', user => 'worker');
	$s->send(q{SELECT count(*) FROM tq;});
	push @line, $s;
}
ok(defined wait_until(10, sub { $a->safe_psql('postgres', "SELECT waiting FROM redsem_queues WHERE name = 'g2'") eq '5' }),
	'five wait in its line, on both servers');
my $stay_holder = RedsemTest::Session->new($a, name => 'live holder', user => 'stayer');
$stay_holder->send(q{SELECT count(*) FROM tq, pg_sleep(4);});
ok(defined wait_until(10, sub { $a->safe_psql('postgres', "SELECT running FROM redsem_queues WHERE name = 'live'") eq '1' }),
	'a statement holds the slot of a second queue of one, "live"');
my @stay;
foreach my $i (1 .. 4)
{
	my $s = RedsemTest::Session->new($a, name => "live waiter $i", user => 'stayer');
	$s->send(q{SELECT work() FROM tq;});
	push @stay, $s;
}
ok(defined wait_until(10, sub { $a->safe_psql('postgres', "SELECT waiting FROM redsem_queues WHERE name = 'live'") eq '4' }),
	'four wait in its line');

# (restart: the new server is on the socket's path as the old one stops;
# a Redis down for a while under waiting statements is t/116's)
$redis->restart;
sleep_full(2.5);
$a->safe_psql('postgres', "SELECT redsem_drop_queue('g2')");
sleep_full(1);
$redis->restart;
my ($ran, @errors, $noticed) = (0);
foreach my $s (@line)
{
	my ($out, $err) = $s->wait_done(60);
	$ran++ if defined $out && $out eq '1';
	push @errors, $err if defined $err && $err =~ /ERROR/;
	$noticed++ if defined $err && $err =~ /NOTICE:.*the queue was dropped while it waited/;
}
is(scalar(@errors), 0, 'no statement of the dropped queue\'s line fails') or diag("@errors");
is($ran, 5, '... all five run');
# (how many meet their cap removed again depends on when the keepers'
# check comes: without the fix, 1 run in 2 failed here)
note(($noticed // 0) . ' of them told that the queue was dropped while they waited');
my $told = 0;
foreach my $s (@stay)
{
	my (undef, $err) = $s->wait_done(90);
	$told++ if defined $err && $err =~ /runs without a slot/;
}
is($told, 0, 'no statement of the queue that was not dropped runs without a slot');
my @spans = map { [ split /\|/ ] } split /\n/,
  $a->safe_psql('postgres', 'SELECT extract(epoch FROM t0), extract(epoch FROM t1) FROM spans ORDER BY t0');
my $overlaps = grep { $spans[$_][0] < $spans[ $_ - 1 ][1] } 1 .. $#spans;
is($overlaps, 0, sprintf('... and its %d statements that ran never overlapped (a cap of one)', scalar @spans));
$_->wait_done(20) foreach ($holder, $stay_holder);
$_->quit foreach (@line, @stay, $holder, $stay_holder);

node_log_is_clean($_, $_->name . ': no crash') foreach ($a, $b);
$_->stop foreach ($a, $b);
$redis->stop;
done_testing();
