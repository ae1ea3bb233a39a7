
# 027_session_limits.pl - what one session can take, and how a session is
# emptied for the next client: redsem.max_holds_per_session bounds the
# slots and places in line of one session (53400, its own message); the
# last redsem.reserved_holds entries of the server's table are kept for
# superusers, members of redsem_admin and statement queues, so a role that
# fills the rest stops nobody else; DISCARD ALL (a pooler's
# server_reset_query) gives back every slot of the session, as it does
# advisory locks.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $redis = RedsemTest::Redis->new;
my $node = create_node('limits', $redis, <<'EOC');
redsem.max_tracked_holds = 64
redsem.reserved_holds = 8
redsem.queues = 'q: active_statements=5'
EOC
$node->safe_psql('postgres', q{
CREATE ROLE greedy LOGIN;
CREATE ROLE greedy2 LOGIN;
CREATE ROLE helper LOGIN;
CREATE ROLE queued LOGIN;
ALTER ROLE queued SET redsem.queue = 'q';
GRANT redsem_admin TO helper;
ALTER ROLE greedy2 SET redsem.max_holds_per_session = 100;
ALTER ROLE greedy2 SET redsem.max_holds_per_role = 0;
});

sub holders
{
	my ($name) = @_;
	return $node->safe_psql('postgres', qq{SELECT count(*) FROM redsem_holders('$name');});
}

###########################################################################
note 'redsem.max_holds_per_session';

my $g = RedsemTest::Session->new($node, name => 'greedy', user => 'greedy');
is($g->query_ok(q{SHOW redsem.max_holds_per_session;}), '1000', 'the default is 1000');
my ($out, $err) = $g->query(q{SET redsem.max_holds_per_session = 5000;});
like($err, qr/permission denied to set parameter "redsem.max_holds_per_session"/, 'an ordinary role cannot raise it');
$node->safe_psql('postgres', q{ALTER ROLE greedy SET redsem.max_holds_per_session = 10;});
$g->quit;
$g = RedsemTest::Session->new($node, name => 'greedy', user => 'greedy');
is($g->query_ok(q{SELECT count(redsem_acquire('s' || i, 1, '60 s')) FROM generate_series(1, 10) i;}), '10',
	'a role limited to 10 takes 10 slots');
($out, $err) = $g->query(q{SELECT redsem_acquire('s11', 1, '60 s');});
like($err, qr/ERROR:  53400: this session already holds or waits for 10 redsem slots\n.*DETAIL:  redsem.max_holds_per_session allows 10\.\n.*HINT:  Release slots with redsem_release/s,
	'the 11th: 53400, saying which limit and what to do');
is(holders('s11'), '0', 'and nothing of it in Redis');
($out, $err) = $g->query(q{BEGIN; SELECT redsem_acquire_xact('x', 1); COMMIT;});
like($err, qr/53400/, 'transaction-scoped slots count too');
is($g->query_ok(q{SELECT redsem_release_all();}), '10', 'released, the session has room again');
is($g->query_ok(q{SELECT redsem_acquire('s11', 1, '60 s') IS NOT NULL;}), 't', 'and takes a slot');
$g->query_ok(q{SELECT redsem_release_all();});

###########################################################################
note 'redsem.reserved_holds: one role fills the table, others still get in';

# 64 entries, 8 reserved: ordinary roles together may take 56 (greedy2
# has no per-role bound: t/074 covers redsem.max_holds_per_role)
my $g2 = RedsemTest::Session->new($node, name => 'greedy2', user => 'greedy2');
is($g2->query_ok(q{SELECT count(redsem_acquire('r' || i, 1, '60 s')) FROM generate_series(1, 56) i;}), '56',
	'a role allowed 100 per session takes 56 slots');
($out, $err) = $g2->query(q{SELECT redsem_acquire('r57', 1, '60 s');});
like($err, qr/ERROR:  53400: too many redsem holds on this server\n.*DETAIL:  The last 8 of the 64 holds the keeper can track \(redsem.reserved_holds\) are kept for superusers, members of redsem_admin and statement queues\./s,
	'the 57th: 53400, the rest is reserved');
my $other = RedsemTest::Session->new($node, name => 'other', user => 'greedy');
($out, $err) = $other->query(q{SELECT redsem_acquire('o1', 1, '60 s');});
like($err, qr/53400: too many redsem holds/, 'another ordinary role is refused too');
is($node->safe_psql('postgres', q{SELECT redsem_release('su', redsem_acquire('su', 1));}), 't',
	'a superuser still gets a slot');
my $helper = RedsemTest::Session->new($node, name => 'helper', user => 'helper');
is($helper->query_ok(q{SELECT redsem_release('adm', redsem_acquire('adm', 1));}), 't',
	'so does a member of redsem_admin');
my $q = RedsemTest::Session->new($node, name => 'queued', user => 'queued');
is($q->query_ok(q{SELECT 'queued statement runs';}), 'queued statement runs',
	'and a statement of a queued role takes its queue slot');
is($g2->query_ok(q{SELECT redsem_release_all();}), '56', 'the greedy role lets go');
is($other->query_ok(q{SELECT redsem_release('o1', redsem_acquire('o1', 1));}), 't', 'and the others get in again');
$_->quit foreach ($g2, $other, $helper, $q);

###########################################################################
note 'DISCARD ALL gives back everything the session holds';

my $d = RedsemTest::Session->new($node, name => 'discard');
$d->query_ok(q{SELECT redsem_acquire('d1', 1, '60 s'), redsem_acquire('d2', 3, '60 s', permits => 2), pg_advisory_lock(42);});
is(holders('d1') + holders('d2'), 2, 'a session holds two slots (and an advisory lock)');
$d->query_ok(q{DISCARD ALL;});
is(holders('d1') + holders('d2'), 0, 'after DISCARD ALL, Redis has neither');
is($d->query_ok(q{SELECT count(*) FROM redsem_held();}), '0', 'the session holds nothing');
is($node->safe_psql('postgres', q{SELECT redsem_release('d1', redsem_acquire('d1', 1));}), 't',
	'another session takes the slot at once');
($out, $err) = $d->query(q{BEGIN; SELECT redsem_acquire_xact('d3', 1) IS NOT NULL; DISCARD ALL;});
like($err, qr/DISCARD ALL cannot run inside a transaction block/, 'DISCARD ALL inside a transaction fails as always');
$d->query_ok(q{ROLLBACK;});
is(holders('d3'), 0, 'and the rollback gives the transaction slot back');
$d->query_ok(q{SELECT redsem_acquire('d4', 1, '60 s');});
$d->query_ok(q{DISCARD PLANS; DISCARD TEMP;});
is(holders('d4'), 1, 'other DISCARDs keep the slots');
$redis->freeze;
($out, $err) = $d->query(q{SET redsem.command_timeout = '300ms'; DISCARD ALL;});
$redis->thaw;
like($err, qr/WARNING:  08006: DISCARD ALL could not release 1 redsem slots/, 'with Redis frozen, DISCARD ALL warns');
unlike($err, qr/ERROR/, 'but does not fail');
ok(wait_until(10, sub { holders('d4') == 0 }), 'and the keeper releases the slot');
$d->quit;

$node->stop;
node_log_is_clean($node);
$redis->stop;
done_testing();
