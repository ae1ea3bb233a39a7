
# 028_failover_line.pl - the line after a failover (I9 in src/redsem.lua),
# driven at the library level against a real primary and replica.
#
# A replica inherits the primary's line: waiters, and waiters promoted that
# have not confirmed yet, whose sessions may still be talking to the old
# primary (or were served, and released, there).  Once the replica is
# promoted (REPLICAOF NO ONE: a new replication id), the first caller that
# would wait turns those waiters away (nudged to look again: a live one
# queues again) and drops the unconfirmed promotions, so a fresh caller on
# a free semaphore gets in at once instead of after their windows and
# places run out; confirmed holders stay.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my ($primary, $replica) = primary_and_replica();

my $p = RedsemTest::RESP->new($primary->socket);
my ($lib, $text) = redsem_library("$FindBin::RealBin/../src/redsem.lua");
ok(!RedsemTest::RESP::is_error($p->cmd('FUNCTION', 'LOAD', $text)), 'the library loads on the primary');

sub keys_of { my ($n) = @_; return map { "f:{$n}:$_" } qw(owner timeout ticket info waiting state); }
sub ev
{
	my ($r, $name, @args) = @_;
	# (the script's order puts the generation known and its flags, none
	# here, after the origin, before settle)
	splice(@args, 8, 0, '', '') if ($args[0] // '') eq 'acquire' && @args > 8;
	my $reply = $r->cmd('FCALL', $lib, 1, (keys_of($name))[0], @args);
	return 'error: ' . $reply->{msg} if RedsemTest::RESP::is_error($reply);
	return ref $reply eq 'ARRAY' ? $reply->[0] : $reply;
}

note 'the line on the old primary';
is(ev($p, 'pr', 'acquire', 'h1', 1, 1, 60000, 0, 30000, 'old', 'settle'), 'held', '"pr": h1 holds its only slot');
is(ev($p, 'pr', 'acquire', 'w1', 1, 1, 60000, 1, 30000, 'old', 'settle'), 'waiting', 'w1 waits');
is(ev($p, 'pr', 'release', 'h1'), 1, 'h1 releases: w1 is promoted, and has 5 s to confirm');
is(ev($p, 'line', 'acquire', 'h2', 1, 1, 60000, 0, 30000, 'old', 'settle'), 'held', '"line": h2 holds its only slot');
is(ev($p, 'line', 'acquire', 'w2', 1, 1, 60000, 1, 30000, 'old', 'settle'), 'waiting', 'w2 waits, its place kept 30 s');
is(ev($p, 'keep', 'acquire', 'h3', 1, 1, 60000, 0, 30000, 'old'), 'held', '"keep": h3 holds its only slot');
is(ev($p, 'keep', 'acquire', 'w3', 1, 1, 60000, 1, 30000, 'old'), 'waiting', 'w3 waits');
is(ev($p, 'keep', 'release', 'h3'), 1, 'h3 releases: w3 is promoted');
is($p->cmd('WAIT', 1, 5000), 1, 'the replica has all of it');

note 'the replica is promoted';
my $r = RedsemTest::RESP->new($replica->socket);
my $old_id = ($primary->cli('INFO', 'replication') =~ /master_replid:(\w+)/)[0];
$replica->cli('REPLICAOF', 'NO', 'ONE');
my $new_id = ($replica->cli('INFO', 'replication') =~ /master_replid:(\w+)/)[0];
isnt($new_id, $old_id, 'it has a replication id of its own');

is(ev($r, 'pr', 'acquire', 'n1', 1, 1, 60000, 0, 30000, 'new', 'settle'), 'held',
	'"pr": a fresh caller gets the free slot at once (w1, promoted on the old primary, never confirms here)');
is($r->cmd('ZSCORE', 'f:{pr}:owner', 'w1'), undef, 'the unconfirmed promotion is gone');
is(ev($r, 'pr', 'wait_check', 'w1', 30000, 'settle'), 'lost', 'w1, if alive, finds it lost (and queues again)');

is(ev($r, 'line', 'acquire', 'n2', 1, 1, 60000, 1, 30000, 'new', 'settle'), 'waiting', '"line": a fresh caller waits');
is($r->cmd('ZSCORE', 'f:{line}:waiting', 'w2'), undef, 'the waiter queued on the old primary is turned away');
is($r->cmd('LINDEX', 'f:{line}:nudge:w2', 0), 'n0', 'and nudged to look again at once');
ok(defined $r->cmd('ZSCORE', 'f:{line}:owner', 'h2'), 'the confirmed holder h2 stays: dropping it could admit too many');
is(ev($r, 'line', 'wait_check', 'w2', 30000, 'settle'), 'lost', 'w2, if alive, finds its place lost');
is(ev($r, 'line', 'acquire', 'w2b', 1, 1, 60000, 1, 30000, 'new', 'settle'), 'waiting', 'and queues again, behind n2');
is(ev($r, 'line', 'release', 'h2'), 1, 'h2 releases');
is(ev($r, 'line', 'wait_check', 'n2', 30000, 'settle'), 'held', 'n2 is promoted and confirms');
is(ev($r, 'line', 'wait_check', 'w2b', 30000, 'settle'), 'waiting', 'w2b keeps its place: no era change now');

note 'callers that do not settle eras (no redsem.grant_replicas) keep the inherited line';
is(ev($r, 'keep', 'acquire', 'n5', 1, 1, 60000, 0, 30000, 'new'), 'busy',
	'"keep": a caller that does not settle is refused: the old primary may still be granting');
ok(defined $r->cmd('ZSCORE', 'f:{keep}:owner', 'w3'), 'w3\'s promotion stays until its window ends');

note 'a later call in the same era changes nothing';
is(ev($r, 'pr', 'acquire', 'n3', 1, 1, 60000, 1, 30000, 'new', 'settle'), 'waiting', '"pr": n3 waits behind n1');
is(ev($r, 'pr', 'acquire', 'n4', 1, 1, 60000, 0, 30000, 'new', 'settle'), 'busy', 'and a try-once caller is refused, n3 first');
ok(defined $r->cmd('ZSCORE', 'f:{pr}:waiting', 'n3'), 'n3 still waits');

$_->stop foreach ($replica, $primary);
done_testing();
