
# 129_cluster_importing.pl - a call sent with ASKING to the node a slot is
# migrating to (IMPORTING), once the keys a call names moved but not those
# it does not name (a waiter's wake key, a tenant's line): it must answer
# TRYAGAIN before any write, as on the node the slot leaves (helper-148: a
# release stopped halfway there, "non local key", and two permits of four
# were held by nobody for good).  An EXISTS of two keys that never exist is
# refused on both nodes.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my @nodes = RedsemTest::cluster_of_primaries('imp');
my ($lib, $text) = RedsemTest::redsem_library();


$_->cli('FUNCTION', 'LOAD', $text) foreach @nodes;

my $K = 'redsem:{ts}';
my @named = map { "$K:$_" } qw(owner timeout ticket info waiting state);
my $slot = $nodes[0]->cli('CLUSTER', 'KEYSLOT', "$K:owner");
my $from = cluster_slot_owner(\@nodes, $slot);
my ($to) = grep { $_ != $from } @nodes;
sub fcall { my ($n, @a) = @_; return $n->cli('FCALL', $lib, 7, @named, "$K:gen", @a); }

is((split /\n/, fcall($from, 'acquire', 'h1', 1, 1, 60000, 0, 30000, 'o', '', '', '', '0', 'ta'))[0], 'held', 'h1 (tenant ta) holds');
note 'w1: ' . join(' ', split /\n/, fcall($from, 'acquire', 'w1', 1, 1, 60000, 1, 30000, 'o', '', '', '', '0', 'tb'));
note 'w2: ' . join(' ', split /\n/, fcall($from, 'acquire', 'w2', 1, 1, 60000, 1, 30000, 'o', '', '', '', '0', 'tc'));
my @keys = sort split /\n/, $from->cli('CLUSTER', 'GETKEYSINSLOT', $slot, 1000);
note "keys: @keys";

$to->cli('CLUSTER', 'SETSLOT', $slot, 'IMPORTING', $from->cli('CLUSTER', 'MYID'));
$from->cli('CLUSTER', 'SETSLOT', $slot, 'MIGRATING', $to->cli('CLUSTER', 'MYID'));
# a reshard batch takes the named keys first
is($from->cli('MIGRATE', '127.0.0.1', $to->port, '', 0, 5000, 'KEYS', @named, "$K:gen"), 'OK', 'the seven named keys migrated, the others not yet');
note 'left on the source: ' . join(' ', sort split /\n/, $from->cli('CLUSTER', 'GETKEYSINSLOT', $slot, 1000));
like(fcall($from, 'release', 'h1'), qr/^(ASK |TRYAGAIN)/, 'the source redirects the release (its named keys moved)');
my $r = cluster_pipe_cli($to, 'ASKING', "FCALL $lib 7 @named $K:gen release h1");
like($r, qr/TRYAGAIN/, 'on the importing node, the release is told TRYAGAIN (keys it does not name are still on the source)')
  or diag "the target answered: $r";
note 'on the target now: ' . join(' ', sort split /\n/, $to->cli('CLUSTER', 'GETKEYSINSLOT', $slot, 1000));
my @left = split /\n/, ($from->cli('CLUSTER', 'GETKEYSINSLOT', $slot, 1000) // '');
my $mig = @left ? $from->cli('MIGRATE', '127.0.0.1', $to->port, '', 0, 5000, 'KEYS', @left) : 'OK';
my ($mig2) = @left ? ($from->cli('MIGRATE', '127.0.0.1', $to->port, '', 0, 5000, 'KEYS', @left))[1] : '';
is($mig, 'OK', 'the rest of the slot migrates') or diag "MIGRATE: $mig $mig2";
$_->cli('CLUSTER', 'SETSLOT', $slot, 'NODE', $to->cli('CLUSTER', 'MYID')) foreach @nodes;
note 'list: ' . join(' ', split /\n/, ($to->cli('FCALL', $lib, 7, @named, "$K:gen", 'list') // ''));
note 'tq: ' . join(' ', split /\n/, ($to->cli('ZRANGE', "$K:tq", 0, -1, 'WITHSCORES') // ''));
note 'waiting: ' . join(' ', split /\n/, ($to->cli('ZRANGE', "$K:waiting", 0, -1) // ''));
note 'owner: ' . join(' ', split /\n/, ($to->cli('ZRANGE', "$K:owner", 0, -1) // ''));

###########################################################################
note 'every key of the slot migrated, the slot not yet closed (SETSLOT NODE still to come)';
$K = 'redsem:{tz}';
@named = map { "$K:$_" } qw(owner timeout ticket info waiting state);
$slot = $nodes[0]->cli('CLUSTER', 'KEYSLOT', "$K:owner");
$from = cluster_slot_owner(\@nodes, $slot);
($to) = grep { $_ != $from } @nodes;
is((split /\n/, fcall($from, 'acquire', 'h1', 4, 3, 60000, 0, 30000, 'o', '', ''))[0], 'held', 'h1 holds 3 permits of 4');
is((split /\n/, fcall($from, 'acquire', 'w1', 4, 3, 60000, 1, 30000, 'o', '', ''))[0], 'waiting', 'w1 waits for 3');
$to->cli('CLUSTER', 'SETSLOT', $slot, 'IMPORTING', $from->cli('CLUSTER', 'MYID'));
$from->cli('CLUSTER', 'SETSLOT', $slot, 'MIGRATING', $to->cli('CLUSTER', 'MYID'));
@left = split /\n/, ($from->cli('CLUSTER', 'GETKEYSINSLOT', $slot, 1000) // '');
is($from->cli('MIGRATE', '127.0.0.1', $to->port, '', 0, 5000, 'KEYS', @left), 'OK', 'every key migrated: ' . scalar(@left));
$r = cluster_pipe_cli($to, 'ASKING', "FCALL $lib 7 @named $K:gen release h1");
like($r, qr/^OK\n(1|TRYAGAIN)/, 'the release on the importing node either runs whole or is told TRYAGAIN')
  or diag "the target answered: $r";
$_->cli('CLUSTER', 'SETSLOT', $slot, 'NODE', $to->cli('CLUSTER', 'MYID')) foreach @nodes;
note 'list: ' . join(' ', split /\n/, ($to->cli('FCALL', $lib, 7, @named, "$K:gen", 'list') // ''));
note 'summary: ' . join(' ', split /\n/, ($to->cli('FCALL', $lib, 7, @named, "$K:gen", 'summary') // ''));
note 'release again: ' . join(' ', split /\n/, (fcall($to, 'release', 'h1') // ''));
note 'w1 looks: ' . join(' ', split /\n/, (fcall($to, 'wait_check', 'w1', 30000) // ''));
my $x = fcall($to, 'acquire', 'x1', 4, 1, 60000, 0, 30000, 'o', '', '');
note 'x1: ' . join(' ', split /\n/, $x);
note 'state: ' . join(' ', split /\n/, ($to->cli('HGETALL', "$K:state") // ''));
done_testing();
