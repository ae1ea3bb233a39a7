
# 105_password_rotation.pl - a DBA rotates Redis's password while sessions
# hold slots: the new password is written to redsem.password_file, Redis is
# told (CONFIG SET requirepass) and its old connections are cut (CLIENT KILL,
# or a restart).  Nothing is lost: the keeper keeps the leases alive with the
# new password, the sessions' next calls use it (behind the broker too: a
# link's header carries the password its backend read, so a link still
# naming the old one must not pin a backend to it), and no message or log
# line shows either password.  Runs in the connection mode the environment
# asks for; .ci/run runs it in both.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use File::Basename ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $OLD = 'Old-Secret-71x';
my $NEW = 'New-Secret-93q';
my $redis = RedsemTest::Redis->new;
my $dir = File::Basename::dirname($redis->socket);
my $pwfile = "$dir/redis.password";

# (write_password_file: a rename, never half written)
sub write_password { write_password_file($pwfile, $_[0]); return; }
write_password($OLD);
$redis->cli('CONFIG', 'SET', 'requirepass', $OLD);
$redis->{password} = $OLD;

my $node = create_node('rotate', $redis, "redsem.password_file = '$pwfile'\n");
my $log_start = -s $node->logfile;

# The DBA's rotation: file first, then Redis, then the old connections cut
sub rotate
{
	my ($to, $cut) = @_;
	write_password($to);
	$redis->cli('CONFIG', 'SET', 'requirepass', $to);
	$redis->{password} = $to;
	$redis->cli('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes') if $cut;
}

my $a = RedsemTest::Session->new($node, name => 'a');
my $b = RedsemTest::Session->new($node, name => 'b');
my $idle = RedsemTest::Session->new($node, name => 'idle');
my $aid = $a->query_ok(q{SELECT redsem_acquire('rot', 2, '3 s');});
ok(length($aid) > 0, 'a holds a slot of rot (limit 2, a 3 s lease) with the old password');
is($b->query_ok(q{SELECT redsem_release('rot_b', redsem_acquire('rot_b', 1));}), 't',
	'b took and gave back a slot (its link is up)');
# (idle's link is up too, and it makes no call until after the rotation)
$idle->query_ok(q{SELECT count(*) FROM redsem_holders('rot_i');});

###########################################################################
note 'rotated, old connections cut: the leases live on, every session is served';

rotate($NEW, 1);
sleep 5;
is($a->query_ok(q{SELECT kept_alive AND lease_expires_at > clock_timestamp() FROM redsem_held();}), 't',
	"5 s later a's 3 s lease is still kept alive (the keeper reconnected with the new password)");
is($redis->cli('ZCARD', 'redsem:{rot}:owner'), '1', '... and Redis still counts it');
is($b->query_ok(q{SELECT redsem_acquire('rot', 2, '3 s') IS NOT NULL;}), 't',
	'b, linked before the rotation, takes the second slot');
is($b->query_ok(q{SELECT redsem_acquire('rot', 2, '3 s') IS NULL;}), 't',
	'... and a third is refused: the cap holds');
my ($out, $err) = $idle->query(q{SELECT redsem_release('rot_i', redsem_acquire('rot_i', 1));});
is("$out|$err", 't|', 'a session whose last call was before the rotation is served');
is($a->query_ok(qq{SELECT redsem_release('rot', '$aid');}), 't', "a gives its slot back: it was never lost");
is($b->query_ok(q{SELECT redsem_release_all();}), '1', 'b gives its slot back');
my $c = RedsemTest::Session->new($node, name => 'c');
is($c->query_ok(q{SELECT redsem_release('rot_c', redsem_acquire('rot_c', 1));}), 't',
	'a new session is served with the new password');

###########################################################################
note 'rotated, old connections left: new connections use the new password';

rotate($OLD, 0);
# a connection nobody had yet: another database, a target of its own behind the broker
$c->query_ok(q{SET redsem.database = 2;});
($out, $err) = $c->query(q{SELECT redsem_release('rot_d', redsem_acquire('rot_d', 1));});
is("$out|$err", 't|', 'a session on another database is served (a new connection, the new password)');
$c->query_ok(q{RESET redsem.database;});
($out, $err) = $a->query(q{SELECT redsem_release('rot_e', redsem_acquire('rot_e', 1));});
is("$out|$err", 't|', 'a session on the old connection is still served');

# a wait needs a connection of its own behind the broker (a wait pool's), opened
# now: a's link was made with the password rotated away (behind the broker its
# header carries it), so the broker's open with it is refused, and a links again
# with the file's; in direct mode the wait is on a's own connection
my $h = RedsemTest::Session->new($node, name => 'h');
is($h->query_ok(q{SELECT redsem_acquire('rot_wait', 1, '30 s') IS NOT NULL;}), 't',
	'h, a new session, holds the only slot of rot_wait');
$a->send(q{SELECT redsem_acquire('rot_wait', 1, '30 s', wait => '10 s') IS NOT NULL;});
RedsemTest::sleep_full(1);
$h->query_ok(q{SELECT redsem_release_all();});
($out, $err) = $a->wait_done(20);
is("$out|$err", 't|', 'a, linked before the rotation, waits in line and gets the slot (no 28P01)');
$a->query_ok(q{SELECT redsem_release_all();});
$h->quit;

###########################################################################
note 'a wrong password in the file: a clear error, then served once it is right';

write_password('not-the-password');
$redis->cli('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
($out, $err) = $a->query(q{SELECT redsem_acquire('rot_w', 1);});
like($err, qr/ERROR:  28P01: Redis at .* did not accept redsem's password/,
	'a wrong password in the file: 28P01');
is($redis->cli('EXISTS', 'redsem:{rot_w}:owner'), '0', '... and nothing was taken');
write_password($OLD);
($out, $err) = $a->query(q{SELECT redsem_release('rot_w', redsem_acquire('rot_w', 1));});
is("$out|$err", 't|', 'the file mended: the same session is served at its next call');

###########################################################################
note 'no password anywhere in the log';

my $log = slurp_file($node->logfile, $log_start);
unlike($log, qr/\Q$OLD\E|\Q$NEW\E|not-the-password/, 'neither password appears in the server log');

$_->quit for ($a, $b, $idle, $c);
node_log_is_clean($node);
$node->stop;
$redis->stop;
done_testing();
