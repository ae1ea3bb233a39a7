
# 090_cluster_migration.pl - a Redis Cluster slot migration splits a
# semaphore's keys between two nodes (a reshard moves keys in batches).
# Redis Cluster checks only the keys a call names, so in a Cluster every
# call names all of the semaphore's keys: a call that finds some there and
# some not gets TRYAGAIN (retried) instead of running on half a semaphore
# (found by review: with the owner key alone, 42c65b5 granted 5 permits of
# 4 on the target, made keys there that stopped the migration, and failed
# calls on the source with 58000).

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(usleep);

my @nodes = RedsemTest::cluster_of_primaries('mig');
my ($lib, $text) = RedsemTest::redsem_library();


sub start_migration
{
	my ($slot) = @_;
	my $from = cluster_slot_owner(\@nodes, $slot);
	my ($to) = grep { $_ != $from } @nodes;
	$to->cli('CLUSTER', 'SETSLOT', $slot, 'IMPORTING', $from->cli('CLUSTER', 'MYID'));
	$from->cli('CLUSTER', 'SETSLOT', $slot, 'MIGRATING', $to->cli('CLUSTER', 'MYID'));
	return ($from, $to);
}

sub finish_migration
{
	my ($slot, $from, $to) = @_;
	my @keys = split /\n/, ($from->cli('CLUSTER', 'GETKEYSINSLOT', $slot, 1000) // '');
	my $r = @keys ? $from->cli('MIGRATE', '127.0.0.1', $to->port, '', 0, 5000, 'KEYS', @keys) : 'OK';
	$_->cli('CLUSTER', 'SETSLOT', $slot, 'NODE', $to->cli('CLUSTER', 'MYID')) foreach @nodes;
	return $r;
}

$_->cli('FUNCTION', 'LOAD', $text) foreach @nodes;

###########################################################################
note 'a semaphore split between two nodes by a migration (a reshard moves keys in batches)';

my $K = 'redsem:{split}';
my $slot = $nodes[0]->cli('CLUSTER', 'KEYSLOT', "$K:owner");
my $home = cluster_slot_owner(\@nodes, $slot);
# h1 takes 3 permits of 4 (the state counts the 2 beyond one per member: xh)
is((split /\n/, $home->cli('FCALL', $lib, 7, map({ "$K:$_" } qw(owner timeout ticket info waiting state)), "$K:gen", 'acquire', 'h1', 4, 3, 60000, 0, 30000, 'o', '', ''))[0],
	'held', 'h1 holds 3 permits of 4');
my ($from, $to) = start_migration($slot);
# a batch of MIGRATE took these keys; the state is still on the source
is($from->cli('MIGRATE', '127.0.0.1', $to->port, '', 0, 5000, 'KEYS', map { "$K:$_" } qw(owner ticket gen timeout info)),
	'OK', 'owner, ticket, gen, timeout and info migrated; state not yet');
like($from->cli('FCALL', $lib, 7, map({ "$K:$_" } qw(owner timeout ticket info waiting state)), "$K:gen", 'acquire', 'h2', 4, 2, 60000, 0, 30000, 'o', '', ''),
	qr/^(ASK |TRYAGAIN)/, 'the source answers an acquire of 2 permits with ASK or TRYAGAIN (its keys are split)');
my $r = cluster_pipe_cli($to, 'ASKING', "FCALL $lib 7 $K:owner $K:timeout $K:ticket $K:info $K:waiting $K:state $K:gen acquire h2 4 2 60000 0 30000 o \"\" \"\"");
like($r, qr/TRYAGAIN/,
	'on the target, the acquire is told TRYAGAIN (the state, a named key, is missing there)')
  or diag("the target answered: $r");
unlike($r, qr/held/, 'h2 is not granted 2 permits beside h1\'s 3 (limit 4)');
my $mig = finish_migration($slot, $from, $to);
is($mig, 'OK', 'and the rest of the slot migrates (no key was made on the target meanwhile)')
  or diag("MIGRATE answered: $mig");

###########################################################################
note 'a release while the slot migrates, none of its keys moved yet (redsem from SQL)';

my $node = RedsemTest::create_cluster_node('migpg', $nodes[0]);
my $s = RedsemTest::Session->new($node, name => 'holder');
$s->query_ok(q{SELECT redsem_acquire('mig', 2, lease => '60 s') IS NOT NULL;});
$slot = $nodes[0]->cli('CLUSTER', 'KEYSLOT', 'redsem:{mig}:owner');
($from, $to) = start_migration($slot);
$s->send(q{SELECT redsem_release('mig', id) FROM redsem_held() WHERE name = 'mig';});
usleep(1_000_000);
finish_migration($slot, $from, $to);
my ($out, $err) = $s->wait_done(20);
is($err, '', 'the release waits the migration out (TRYAGAIN, retried) instead of failing');
is($out, 't', 'and releases the live slot');
my $admin = RedsemTest::Session->new($node, name => 'admin');
$admin->query_ok(q{SELECT redsem_acquire('mig2', 2, lease => '60 s') IS NOT NULL;});
$slot = $nodes[0]->cli('CLUSTER', 'KEYSLOT', 'redsem:{mig2}:owner');
($from, $to) = start_migration($slot);
$s->send(q{SELECT permits_held FROM redsem_semaphore('mig2');});
usleep(1_000_000);
finish_migration($slot, $from, $to);
($out, $err) = $s->wait_done(20);
is($err, '', 'redsem_semaphore() during the migration waits too');

###########################################################################
note 'a release that lets a waiter in, while the slot migrates (helper-144)';

# The release writes the waiter's wake key, which the call does not name and
# which does not exist: on a MIGRATING node that stopped the script midway
# ("non local key", 58000), after the holder had left owner.  Now every call
# in a migrating slot answers TRYAGAIN before its first write, and is asked
# again until the migration ends.
my $w = RedsemTest::Session->new($node, name => 'waiter');
$s->query_ok(q{SELECT redsem_acquire('mig3', 1, lease => '60 s') IS NOT NULL;});
$w->send(q{SELECT redsem_acquire('mig3', 1, lease => '60 s', wait => '30 s') IS NOT NULL;});
ok(defined wait_until(10, sub { $admin->query_ok(q{SELECT waiting FROM redsem_semaphore('mig3');}) eq '1' }),
	'a waiter is in line behind the holder of mig3');
$slot = $nodes[0]->cli('CLUSTER', 'KEYSLOT', 'redsem:{mig3}:owner');
($from, $to) = start_migration($slot);
$s->send(q{SELECT redsem_release_all();});
usleep(1_000_000);
is(finish_migration($slot, $from, $to), 'OK', 'the slot migrates (nothing was made on the target meanwhile)');
($out, $err) = $s->wait_done(20);
is($err, '', 'the release waits the migration out instead of failing halfway (58000)');
is($out, '1', 'and releases the slot');
($out, $err) = $w->wait_done(30);
is($out, 't', 'the waiter gets the slot') or diag $err;
is($admin->query_ok(q{SELECT permits_held || ' ' || waiting FROM redsem_semaphore('mig3');}), '1 0',
	'one permit held (the waiter\'s), nobody waiting: nothing half-written');

$_->quit foreach ($s, $admin, $w);
$node->stop;
done_testing();
