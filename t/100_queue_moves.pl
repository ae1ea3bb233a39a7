
# 100_queue_moves.pl - statement queues through a DBA's routine changes
# (found by a review of routine changes under load):
#
# - ALTER ROLE ... SET redsem.queue right after redsem_create_queue finds
#   the queue defined on this server (the function waits for its keeper to
#   read the definitions), with no "not defined" warning;
# - a server pointed at another key prefix (or Redis) with no definitions
#   takes its queues along, storing its copy there, instead of dropping them
#   and running their statements uncapped.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $redis = RedsemTest::Redis->new;
my $node = create_node('moves', $redis);
$node->safe_psql('postgres', q{
CREATE ROLE analyst LOGIN;
GRANT EXECUTE ON FUNCTION pg_sleep(float8) TO analyst;
});

###########################################################################
note 'a queue named right after it is created';

my ($ret, $out, $err) = $node->psql('postgres', q{
SELECT redsem_create_queue('mv', 'active_statements=1');
ALTER ROLE analyst SET redsem.queue = 'mv';});
is($ret, 0, 'create, then ALTER ROLE');
unlike($err, qr/not defined/, 'no "not defined" warning: this server applies the queue when the create returns');
is($node->safe_psql('postgres', q{SELECT defined_in FROM redsem_queues WHERE name = 'mv'}), 'redis',
	'redsem_queues shows it at once');

###########################################################################
note 'a session with a prefix of its own is no move';

($ret, $out, $err) = $node->psql('postgres', q{SET redsem.key_prefix = 'own:';
SELECT redsem_create_queue('oq', 'active_statements=1');});
is($ret, 0, 'a create under a session\'s own prefix');
is(join(',', grep { !/^[~#@]/ } sort split /\n/, scalar $redis->cli('HKEYS', 'own:{queues}')), 'oq',
	'stores that queue alone there: the server\'s queues are not copied along');

###########################################################################
note 'the server moves to another key prefix';

$node->safe_psql('postgres', q{ALTER SYSTEM SET redsem.key_prefix = 'moved:'; SELECT pg_reload_conf();});
ok(wait_until(20, sub { ($redis->cli('HGET', 'moved:{queues}', 'mv') // '') =~ /active_statements=1/ }),
	'its keeper stores its copy under the new prefix, which had none');
ok(wait_until(10, sub { slurp_file($node->logfile) =~ /the Redis or key prefix now in use had no statement queue definitions; this server stored there its copy of 1 queue/ }),
	'and says so');
is($redis->cli('HGET', 'moved:{queues}', '#'), '0',
	'as of no change counted there: a copy of that prefix\'s own servers replaces it');
unlike(slurp_file($node->logfile), qr/statement queue "mv" dropped for every server/, 'it never says the queue was dropped');
is($node->safe_psql('postgres', q{SHOW redsem.key_prefix}), 'moved:', 'the new prefix is in use');

# the cap holds under the new prefix: one statement runs, the next waits
my $s1 = RedsemTest::Session->new($node, name => 's1', user => 'analyst');
my $s2 = RedsemTest::Session->new($node, name => 's2', user => 'analyst');
$s1->send('SELECT pg_sleep(3);');
ok(wait_until(10, sub { ($redis->cli('ZCARD', 'moved:{queue:mv}:owner') // 0) == 1 }), 'a statement holds the queue slot under the new prefix');
$s2->send('SELECT pg_sleep(0.1);');
ok(wait_until(10, sub { ($redis->cli('ZCARD', 'moved:{queue:mv}:waiting') // 0) == 1 }), 'the next one waits: the cap holds');
$s1->wait_done(30);
my (undef, $err2) = $s2->wait_done(30);
is($err2, '', 'and runs once the first is done');
$_->quit foreach ($s1, $s2);

node_log_is_clean($node, 'no crash in the server log');
$node->stop;
$redis->stop;
done_testing();
