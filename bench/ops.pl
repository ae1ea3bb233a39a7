# bench/ops.pl ACQ REL SEM FROM COUNT WHAT - RESP for COUNT redsem operations
# on ids x<FROM>.. of semaphore SEM, as src/script.c sends them: acquires sent
# as ACQ and releases as REL ("FCALL name" or "EVALSHA sha"); WHAT is pairs
# (acquire + release), fill (acquires that hold for 10 minutes), refresh
# (a keeper's refresh_many of each one hold, sent as ACQ: ids filled before)
# spread (COUNT acquires, each on a semaphore of its own, SEM.<n>, then
# their releases in the same order: no call names a semaphore called just
# before it) or handoffs (limit 1: COUNT acquires, the first holds, the
# others wait, then their releases in order: each but the last promotes the
# next).  Used by
# bench/script_cpu.sh and bench/instructions.sh with redis-cli --pipe.
# With OPS_KEYS=6, as a library before the generation key (I15) wants
# them: the semaphore's six keys; else as src/script.c sends them: the
# owner key and the generation key (OPS_GEN_KEYS=acquire: for an acquire
# only, as before every call named it), and for an acquire its two
# arguments after the origin, the generation known being OPS_GEN ('' if
# unset: what the first call on a fresh Redis sends) with flag 'u'.
use strict;
my ($acq, $rel, $sem, $from, $count, $what) = @ARGV;
my $six = ($ENV{OPS_KEYS} // '') eq '6';
my @gen = $six ? () : ($ENV{OPS_GEN} // '', 'u');
my $gen_on_acquire_only = ($ENV{OPS_GEN_KEYS} // '') eq 'acquire';
my $origin = 'bench.example:5432|4242|db|user|bench';
sub cmd { my $s = '*' . scalar(@_) . "\r\n"; $s .= '$' . length($_) . "\r\n$_\r\n" for @_; return $s; }
sub op
{
    my ($call, @args) = @_;
    return op_on($sem, $call, @args);
}
sub op_on
{
    my ($on, $call, @args) = @_;
    my @ks = $six ? (map { "redsem:{$on}:$_" } qw(owner timeout ticket info waiting state)) : ("redsem:{$on}:owner");
    my @k = (!$six && ($args[0] eq 'acquire' || !$gen_on_acquire_only)) ? (@ks, 'redsem:gen') : @ks;
    return cmd(split(/ /, $call), scalar(@k), @k, @args);
}
binmode STDOUT;
if ($what eq 'spread') {
    my @ids = map { [sprintf('%016x.%d', 0xfeed0000 + $_, $_), "$sem.$_"] } ($from .. $from + $count - 1);
    print op_on($_->[1], $acq, 'acquire', $_->[0], 1000000, 1, 30000, 0, 60000, $origin, @gen) for @ids;
    print op_on($_->[1], $rel, 'release', $_->[0]) for @ids;
    exit 0;
}
if ($what eq 'handoffs') {
    my @ids = map { sprintf('%016x.%d', 0xfeed0000 + $_, $_) } ($from .. $from + $count - 1);
    print op($acq, 'acquire', $_, 1, 1, 600000, 1, 600000, $origin, @gen) for @ids;
    print op($rel, 'release', $_) for @ids;
    exit 0;
}
for my $i ($from .. $from + $count - 1) {
    my $id = sprintf('%016x.%d', 0xfeed0000 + $i, $i);
    my $lease = $what eq 'fill' ? 600000 : 30000;
    if ($what eq 'refresh') { print op($acq, 'refresh_many', $id, $lease); next; }
    print op($acq, 'acquire', $id, 1000000, 1, $lease, 0, 60000, $origin, @gen);
    print op($rel, 'release', $id) if $what eq 'pairs';
}
