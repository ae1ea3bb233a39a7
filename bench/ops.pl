# bench/ops.pl ACQ REL SEM FROM COUNT WHAT - RESP for COUNT redsem operations
# on ids x<FROM>.. of semaphore SEM, as src/script.c sends them: acquires sent
# as ACQ and releases as REL ("FCALL name" or "EVALSHA sha"); WHAT is pairs
# (acquire + release), fill (acquires that hold for 10 minutes) or refresh
# (a keeper's refresh_many of each one hold, sent as ACQ: ids filled before).  Used by
# bench/script_cpu.sh and bench/instructions.sh with redis-cli --pipe.
# With OPS_KEYS=6, as a library before the generation key (I15) wants
# them: the semaphore's six keys; else as src/script.c sends them: the
# owner key alone, and for an acquire the generation key and its two
# arguments after the origin, the generation known being OPS_GEN ('' if
# unset: what the first call on a fresh Redis sends) with flag 'u'.
use strict;
my ($acq, $rel, $sem, $from, $count, $what) = @ARGV;
my $six = ($ENV{OPS_KEYS} // '') eq '6';
my @keys = $six ? (map { "redsem:{$sem}:$_" } qw(owner timeout ticket info waiting state)) : ("redsem:{$sem}:owner");
my @gen = $six ? () : ($ENV{OPS_GEN} // '', 'u');
sub cmd { my $s = '*' . scalar(@_) . "\r\n"; $s .= '$' . length($_) . "\r\n$_\r\n" for @_; return $s; }
# (only an acquire names the generation key)
sub op
{
    my ($call, @args) = @_;
    my @k = (!$six && $args[0] eq 'acquire') ? (@keys, 'redsem:gen') : @keys;
    return cmd(split(/ /, $call), scalar(@k), @k, @args);
}
my $origin = 'bench.example:5432|4242|db|user|bench';
binmode STDOUT;
for my $i ($from .. $from + $count - 1) {
    my $id = sprintf('%016x.%d', 0xfeed0000 + $i, $i);
    my $lease = $what eq 'fill' ? 600000 : 30000;
    if ($what eq 'refresh') { print op($acq, 'refresh_many', $id, $lease); next; }
    print op($acq, 'acquire', $id, 1000000, 1, $lease, 0, 60000, $origin, @gen);
    print op($rel, 'release', $id) if $what eq 'pairs';
}
