
# 110_reload_same_data.pl - connection settings that change without
# changing the Redis data they reach keep every slot alive.
#
# The keeper keeps alive the slots taken under the connection settings in
# force; a slot taken under others used to be left to its lease's end, and
# its holder stopped there.  A DBA adding a sentinel to redsem.sentinels,
# naming another node of a Cluster as the seed, or writing a host's name for
# its address changes the settings, not the data.  Now the keeper looks for
# such a slot, once, on the Redis the new settings name: its id is unique,
# so finding it there means it lives there, and it is kept from then on.
# Here the same Redis is reached through a symbolic link to its socket; a
# second Redis stands for settings that name other data (nothing of the
# slot there: it ends with its lease, and the look leaves no key behind).

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $redis = RedsemTest::Redis->new;
my $other = RedsemTest::Redis->new;
my $node = create_node('samedata', $redis);
my $link = PostgreSQL::Test::Utils::tempdir_short() . '/same.sock';
symlink($redis->socket, $link) or die "cannot link $link: $!";

# Point the server's sessions at $socket, and wait until a new session uses it
sub use_socket
{
	my ($socket) = @_;
	$node->safe_psql('postgres', "ALTER SYSTEM SET redsem.unix_socket = '$socket'; SELECT pg_reload_conf();");
	ok(wait_until(10, sub { $node->safe_psql('postgres', 'SHOW redsem.unix_socket') eq $socket }),
		"the server reloaded with redsem.unix_socket = $socket");
}

my $log_at = -s $node->logfile;
my $s = RedsemTest::Session->new($node, name => 'holder');
my $sd_id = $s->query_ok(q{SELECT redsem_acquire('sd', 1, '4 s');});
ok($sd_id ne '', 'a session holds a slot with a 4 s lease');
use_socket($link);
$s->query_ok('SELECT 1;');		# (the session reloads too)
RedsemTest::sleep_full(8);
is(scalar(holders_of($redis, 'sd')), 1, 'the same Redis through another path: the hold is kept alive past its lease');
is($s->query_ok(q{SELECT count(*) FROM redsem_held() WHERE keeper_error IS NULL;}), '1', '... with no keeper error');
like(substr(slurp_file($node->logfile), $log_at),
	qr/redsem keeper found 1 slot taken under other connection settings than its own on the Redis its own settings name/,
	'... and the keeper says why');
# (a lease made longer than any asked for is counted in the generation
# first, I15: this server had seen none under the new settings)
is($s->query_ok(qq{SELECT redsem_refresh('sd', '$sd_id', '1 hour');}), 't', '... its session lengthens its lease under the new settings');
my $lmax = (split /:/, ($redis->cli('GET', 'redsem:gen') // ''))[1] // 0;
cmp_ok($lmax, '>=', 3600000, '... which the generation counts first (its longest lease)');
is($s->query_ok(q{SELECT redsem_release_all();}), '1', '... and its session releases it');
is(scalar(holders_of($redis, 'sd')), 0, '... in Redis');

# a slot whose session ends before the keeper found it: released at once,
# not left to its lease of a minute
my $e = RedsemTest::Session->new($node, name => 'ender');
is($e->query_ok(q{SELECT redsem_acquire('sd2', 1, '60 s') IS NOT NULL;}), 't', 'a session holds a slot with a 60 s lease');
use_socket($redis->socket);
$e->query_ok('SELECT 1;');
$e->quit;
ok(wait_until(10, sub { holders_of($redis, 'sd2') == 0 }),
	'its session ends after the settings changed: the slot is given back at once');

# settings that name other data: nothing of the slot is found, nothing is left there
my $o = RedsemTest::Session->new($node, name => 'moved');
is($o->query_ok(q{SELECT redsem_acquire('sd3', 1, '4 s') IS NOT NULL;}), 't', 'a session holds a slot with a 4 s lease');
use_socket($other->socket);
ok(wait_until(3, sub {
			$o->query_ok(q{SELECT keeper_error FROM redsem_held() WHERE name = 'sd3';}) =~ /other Redis connection settings/ }),
	'settings that name another Redis: the keeper does not keep the slot alive, and says why');
RedsemTest::sleep_full(4);
is(join(' ', $other->scan_keys('*sd3*')), '', '... and looking for it on the other Redis left no key of its semaphore there');
$o->query('SELECT 1;');
$o->quit;

$s->quit;
$node->stop;
node_log_is_clean($node);
$other->stop;
$redis->stop;
done_testing();
