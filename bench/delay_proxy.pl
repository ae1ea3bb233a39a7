#!/usr/bin/perl
#
# bench/delay_proxy.pl - a unix-socket proxy in front of Redis that delays
# every reply by a fixed time, so that a round trip costs that much more:
# "Redis 1 ms away" on one machine.
#
#   perl bench/delay_proxy.pl LISTEN_SOCKET REDIS_SOCKET DELAY_MS [REQUEST_DELAY_MS]
#
# Either end may be a TCP address on loopback instead (127.0.0.1:PORT), as
# in front of a Redis Cluster node that announces the proxy's port.
#
# Requests go through at once (or REQUEST_DELAY_MS later); each chunk Redis
# answers is held DELAY_MS before it is passed on, in order.  Pipelined
# requests stay pipelined: n requests sent together cost one delay, not n.
# A request still held back when its client goes away never reaches Redis,
# as over a network whose client gave up before the request arrived.  One
# process, one event loop, any number of clients.  Stops on SIGTERM/SIGINT.

use strict;
use warnings;

use IO::Select;
use IO::Socket::INET;
use IO::Socket::UNIX;
use Socket qw(SOCK_STREAM);
use Time::HiRes qw(time);

my ($listen_path, $redis_path, $delay_ms, $request_delay_ms) = @ARGV;
die "usage: $0 LISTEN_SOCKET REDIS_SOCKET DELAY_MS [REQUEST_DELAY_MS]\n" unless defined $delay_ms;
my $delay = $delay_ms / 1000;
my $request_delay = ($request_delay_ms // 0) / 1000;

# True if an address is TCP (host:port), not a unix socket's path
sub is_tcp { return $_[0] =~ /^[\w.]+:\d+$/; }

my $listener;
if (is_tcp($listen_path))
{
	$listener = IO::Socket::INET->new(LocalAddr => $listen_path, Listen => 128, ReuseAddr => 1)
	  or die "cannot listen on $listen_path: $!\n";
}
else
{
	unlink $listen_path;
	$listener = IO::Socket::UNIX->new(Type => SOCK_STREAM, Local => $listen_path, Listen => 128)
	  or die "cannot listen on $listen_path: $!\n";
	chmod 0777, $listen_path;
}
$SIG{TERM} = $SIG{INT} = sub { unlink $listen_path unless is_tcp($listen_path); exit 0; };

my $sel = IO::Select->new($listener);
my %peer;     # fileno => the other socket
my %client;   # fileno of an upstream socket => its client socket
my %queue;    # fileno of a client => [ [due, bytes], ... ] replies waiting
my %sock;     # fileno of a client => the client socket
my %pending;  # fileno of an upstream => [ [due, bytes], ... ] requests waiting
my %usock;    # fileno of an upstream => the upstream socket

# Close both ends of a connection
sub drop
{
	my ($fh) = @_;
	my $other = $peer{ fileno $fh };
	for my $s (grep { defined } $fh, $other)
	{
		$sel->remove($s);
		delete $peer{ fileno $s };
		delete $client{ fileno $s };
		delete $queue{ fileno $s };
		delete $sock{ fileno $s };
		delete $pending{ fileno $s };
		delete $usock{ fileno $s };
		close $s;
	}
}

# a peer that went away makes a write fail, not the proxy die; and the
# proxy goes when whoever started it goes (a test killed before its END)
$SIG{PIPE} = 'IGNORE';
my $parent = getppid();

while (1)
{
	# sleep until the next reply is due, or something arrives (a second
	# at most: then look whether the parent is still there)
	exit 0 if getppid() != $parent;
	my $now = time;
	my $next;
	for my $q (values %queue, values %pending)
	{
		$next = $q->[0][0] if @$q && (!defined $next || $q->[0][0] < $next);
	}
	my $timeout = defined $next ? ($next > $now ? $next - $now : 0) : 1;
	$timeout = 1 if $timeout > 1;
	for my $fh ($sel->can_read($timeout))
	{
		if ($fh == $listener)
		{
			my $c = $listener->accept or next;
			my $u = is_tcp($redis_path)
			  ? IO::Socket::INET->new(PeerAddr => $redis_path)
			  : IO::Socket::UNIX->new(Type => SOCK_STREAM, Peer => $redis_path);
			unless ($u) { close $c; next; }
			$peer{ fileno $c } = $u;
			$peer{ fileno $u } = $c;
			$client{ fileno $u } = $c;
			$queue{ fileno $c } = [];
			$sock{ fileno $c } = $c;
			$pending{ fileno $u } = [];
			$usock{ fileno $u } = $u;
			$sel->add($c, $u);
			next;
		}
		my $n = sysread($fh, my $buf, 1 << 20);
		if (!$n)
		{
			drop($fh);
			next;
		}
		if (my $c = $client{ fileno $fh })
		{
			# a reply: hold it back
			push @{ $queue{ fileno $c } }, [ time + $delay, $buf ];
		}
		else
		{
			# a request: on to Redis (held back first, if asked to)
			my $u = $peer{ fileno $fh } or next;
			push @{ $pending{ fileno $u } }, [ time + $request_delay, $buf ];
		}
	}
	# pass on the requests and replies that are due
	$now = time;
	pass_on(\%pending, \%usock, $now);
	pass_on(\%queue, \%sock, $now);
}

# Write the chunks of each queue in %$queues that are due by $now to its socket
sub pass_on
{
	my ($queues, $socks, $now) = @_;
	for my $fd (keys %$queues)
	{
		my $q = $queues->{$fd};
		my $s = $socks->{$fd} or next;
		while (@$q && $q->[0][0] <= $now)
		{
			my (undef, $bytes) = @{ shift @$q };
			my $off = 0;
			while ($off < length $bytes)
			{
				my $w = syswrite($s, $bytes, length($bytes) - $off, $off);
				last unless defined $w;
				$off += $w;
			}
		}
	}
	return;
}
