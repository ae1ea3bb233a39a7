
# 121_role_user_keeper.pl - a role given its own Redis user (ALTER ROLE
# ... SET redsem.user) whose keys the server's own Redis user cannot reach
# (from helper-141's review).  The keeper keeps every session's slots alive
# under the server's settings, so such a slot is not kept and is lost once
# its lease is over (docs/deployment.md, Redis ACL); the holder is told
# why, with the keeper's own failure (NOPERM), instead of only that Redis
# had not confirmed its lease.

use strict;
use warnings FATAL => 'all';

use File::Basename ();
use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $redis = RedsemTest::Redis->new;
my $alicefile = File::Basename::dirname($redis->socket) . '/alice.password';
write_password_file($alicefile, 'Alice-Secret-5521');
$redis->cli('ACL', 'SETUSER', 'alice', 'on', '>Alice-Secret-5521', '~redsem:*', '+@all');
# the server's own user (default) reaches only the m_* semaphores and the shared keys
$redis->cli('ACL', 'SETUSER', 'default', 'resetkeys', '~redsem:gen*', '~redsem:index*',
	'~redsem:{queues}*', '~redsem:{m_*');

my $node = create_node('roleuser', $redis);
$node->safe_psql('postgres', qq{
CREATE ROLE alice LOGIN;
ALTER ROLE alice SET redsem."user" = 'alice';
ALTER ROLE alice SET redsem.password_file = '$alicefile';
});
my $al = RedsemTest::Session->new($node, name => 'alice', user => 'alice');
my ($id) = $al->query(q{SELECT redsem_acquire('a_k', 5, '3 s');});
like($id, qr/^[0-9a-f]{16}\./, 'alice takes a slot as Redis user alice');
# what redsem_held() says meanwhile, then the error at the statement after
# the lease is over
my ($out, $err, $said) = ('', '', '');
wait_until(15, sub {
	($out, $err) = $al->query(q{SELECT coalesce(keeper_error, '') FROM redsem_held();});
	$said = $out if $out ne '';
	return $err ne '';
});
like($said, qr/NOPERM/, "redsem_held() says why the keeper does not keep it ($said)");
# (a cancel that lands outside the executor's hooks, in the planning or
# between a statement's phases, comes as the bare cancel: the session is told
# at its next statement)
if ($err =~ /57014: canceling statement due to user request/)
{
	note 'the keeper\'s cancel came outside the executor; the next statement tells';
	(undef, $err) = $al->query(q{SELECT 1;});
}
like($err, qr/the slot of semaphore "a_k" was lost.*DETAIL:.*The keeper's last try to refresh it failed: .*NOPERM/s,
	'once its lease is over the holder is told, with the keeper\'s failure');
unlike($err . slurp_file($node->logfile), qr/Alice-Secret/, 'no password in the error or the log');
$al->quit;
ok(node_log_is_clean($node), 'server log without crash');
$node->stop;
$redis->stop;
done_testing();
