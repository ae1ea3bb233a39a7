
# 118_limits_remembered.pl - a stored limit that Redis forgets (a restart
# without persistence, FLUSHALL) comes back without an administrator
# (I18 in src/redsem.lua, src/limits_seen.c).
#
# Each server remembers the stored limits its callers were told, with the
# generation of Redis's data it knew then.  A caller that passes no limit
# and finds none stored stores the remembered one again when the
# generation is another (Redis forgot), never when it is the same (an
# administrator removed the limit).  Two servers share one Redis: "adm"
# stores the limits, "use" only takes slots.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $redis = RedsemTest::Redis->new;
my $adm = create_node('adm', $redis);
my $use = create_node('use', $redis);
$_->safe_psql('postgres', 'CREATE ROLE plain LOGIN') for ($adm, $use);

# A slot of $sem taken under its stored limit and given back, by a role
# without any redsem privilege, waiting out a grace (leases of 2 s):
# (stdout, stderr)
sub take
{
	my ($node, $sem) = @_;
	my (undef, $out, $err) = $node->psql('postgres',
		"SELECT redsem_release('$sem', redsem_acquire('$sem', lease => '2 s', wait => '10 s'))",
		extra_params => [ '-U', 'plain' ]);
	return ($out, $err);
}

sub stored { return $adm->safe_psql('postgres', "SELECT coalesce(redsem_limit('$_[0]')::text, 'none')"); }

sub restored_line
{
	my ($sem, $limit) = @_;
	return qr/LOG:  redsem: semaphore "$sem" had no stored limit when Redis came back; a caller on this server, which saw it last, stored it again at $limit\n.*DETAIL:  Redis forgot it \(a restart without persistence, or FLUSHALL\)\./;
}

###########################################################################
note 'a Redis restarted without persistence: the limit comes back';

$adm->safe_psql('postgres', "SELECT redsem_set_limit('rl', 2)");
is((take($use, 'rl'))[0], 't', 'use: a slot of "rl" under the stored limit (2)');
$redis->stop;
$redis->start;
is(stored('rl'), 'none', 'the restarted Redis has no limit of "rl"');
my ($out, $err) = take($use, 'rl');
is($err, '', 'use: the next caller that leaves the limit out gets no 22023');
is($out, 't', '... and its slot (after the grace)');
is(stored('rl'), '2', 'the limit is stored again, as it was');
like(slurp_file($use->logfile), restored_line('rl', 2), 'use: the server log says who stored it again, and why');

###########################################################################
note 'changed on another server, then forgotten: the latest seen comes back';

$adm->safe_psql('postgres', "SELECT redsem_set_limit('rl', 3)");
is((take($use, 'rl'))[0], 't', 'use: a slot under the new limit (3)');
$redis->cli('FLUSHALL');
is((take($use, 'rl'))[0], 't', 'use: after FLUSHALL, a slot again');
is(stored('rl'), '3', 'the limit stored again is the latest the server was told');

###########################################################################
note 'an administrator removal is never undone';

$adm->safe_psql('postgres', "SELECT redsem_set_limit('rl', NULL)");
($out, $err) = take($use, 'rl');
like($err, qr/semaphore "rl" has no stored limit/, 'use: removed by an administrator: 22023');
is(stored('rl'), 'none', 'and it is not stored again');
$redis->cli('FLUSHALL');
($out, $err) = take($use, 'rl');
like($err, qr/semaphore "rl" has no stored limit/, 'use: forgotten with it: no limit after a FLUSHALL either');
is(stored('rl'), 'none', 'still none');

###########################################################################
note 'only what a server saw comes back; a caller that passes a limit stores none';

is($adm->safe_psql('postgres', "SELECT redsem_release('warm', redsem_acquire('warm', 1, wait => '10 s'))"), 't',
	'adm: a slot of another semaphore (its server now knows the generation)');
$adm->safe_psql('postgres', "SELECT redsem_set_limit('by_adm', 4); SELECT redsem_set_limit('unseen', 5);");
is($use->safe_psql('postgres', "SELECT redsem_release('passed', redsem_acquire('passed', 6, wait => '10 s'))"), 't',
	'use: a slot of a semaphore without a stored limit, passing one');
$redis->cli('FLUSHALL');
($out, $err) = take($use, 'unseen');
like($err, qr/semaphore "unseen" has no stored limit/, 'use: a limit this server never saw does not come back here');
is((take($adm, 'by_adm'))[0], 't', 'adm: the server that stored a limit remembers it too');
is(stored('by_adm'), '4', '... and stores it again');
is(stored('passed'), 'none', 'a limit a caller passed is never stored');
($out, $err) = take($adm, 'unseen');
is($out, 't', 'adm: "unseen", stored there, comes back there');

node_log_is_clean($_) for ($adm, $use);
$_->stop for ($adm, $use);
$redis->stop;
done_testing();
