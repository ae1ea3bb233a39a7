
# 135_reply_cap.pl - a reply that claims an array of 2^31 elements
# (helper-163).  hiredis makes an array's element slots as its header
# claims and frees them one by one: a hostile or broken Redis that sent
# such a header held a backend for 6 s per level of nesting (42 s for 7
# levels), out of reach of cancel, and in broker mode the broker itself,
# so that every session of the server, whatever Redis it used, failed
# meanwhile.  Replies may now claim at most 2^22 elements per array: the
# call fails at once, saying so.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time);

my $redis = RedsemTest::Redis->new;
# a Redis in front of the real one that answers any call naming {evil*}
# with nested array headers of 2^31 elements, then nothing
my $evil = RedsemTest::Proxy->new($redis, sub {
	return ('*2147483647' . "\r\n") x 7 . ":1\r\n" if grep { /\{evil/ } @_;
	return "-REDSEMBROKER 99+ spoofed\r\n" if grep { /\{spoof/ } @_;
	return ("*1\r\n" x 100000) . ":1\r\n" if grep { /\{deep/ } @_;
	return undef;
});
my $node = create_node('replycap', $redis, "redsem.command_timeout = 3000\n");
my $bad = RedsemTest::Session->new($node, name => 'bad');
my $good = RedsemTest::Session->new($node, name => 'good');
is($good->query_ok(q{SELECT redsem_release('fine', redsem_acquire('fine', 2));}), 't', 'a call to the real Redis is served');

my $t0 = time;
my (undef, $err) = $bad->query(qq{SET redsem.unix_socket = '@{[ $evil->socket ]}'; SELECT redsem_acquire('evil', 2); RESET redsem.unix_socket;}, 60);
my $secs = time - $t0;
like($err, qr/ERROR:  08006: .*\n.*(array of more than 4194304 elements|Server closed the connection)/,
	'a reply claiming 2^31 elements fails the call (08006)');
like($err, qr/array of more than 4194304 elements/, '... saying why') unless broker_mode();
cmp_ok($secs, '<', broker_mode() ? 5 : 1.5, sprintf('... without a stall (%.2f s)', $secs));

# arrays nested 100,000 deep (helper-165: hiredis 1.x has no bound of its
# own, and freeing such a reply recurses; 10^6 levels overflowed the stack).
# (Each case in a session of its own: the release of the failed acquire
# above, which names {evil}, may go first on the next call of its session
# to that address, and fail it with the evil reply: once in sid, CI of
# fe173c6)
my $deep = RedsemTest::Session->new($node, name => 'deep');
$t0 = time;
(undef, $err) = $deep->query(qq{SET redsem.unix_socket = '@{[ $evil->socket ]}'; SELECT redsem_acquire('deep', 2); RESET redsem.unix_socket;}, 60);
$secs = time - $t0;
like($err, qr/ERROR:  08006: .*\n.*(nested|Server closed the connection)/, 'arrays nested 100,000 deep fail the call (08006)');
like($err, qr/nested more than 7 deep|depth > 7/, '... saying why') unless broker_mode();
cmp_ok($secs, '<', broker_mode() ? 5 : 1.5, sprintf('... without a stall (%.2f s)', $secs));

# an error reply of Redis's that looks like the broker's own words is
# Redis's error in both modes (helper-163: broker mode took it for the
# broker's, 08001 "could not connect")
my $spoof = RedsemTest::Session->new($node, name => 'spoof');
(undef, $err) = $spoof->query(qq{SET redsem.unix_socket = '@{[ $evil->socket ]}'; SELECT redsem_acquire('spoof', 2); RESET redsem.unix_socket;}, 60);
unlike($err, qr/08001|could not connect/, 'an error reply that begins like the broker\'s is not taken for the broker\'s');
like($err, qr/REDSEMBROKER 99\+ spoofed/, '... and is shown as Redis said it');

# the server's other sessions were served meanwhile, and are now
my $served = 0;
$t0 = time;
for (1 .. 10)
{
	my ($out) = $good->query(q{SELECT redsem_release('fine', redsem_acquire('fine', 2));}, 30);
	$served++ if $out eq 't';
}
is($served, 10, sprintf('another session, on the real Redis, is served at once: 10 of 10 calls (%.2f s)', time - $t0));
is($bad->query_ok(q{SELECT redsem_release('fine', redsem_acquire('fine', 2));}), 't',
	'and so is the session that met the bad reply, once back on the real Redis');
$_->quit for ($bad, $good, $deep, $spoof);
node_log_is_clean($node);
$node->stop;
$evil->stop;
done_testing();
