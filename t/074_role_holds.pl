
# 074_role_holds.pl - one role cannot fill the hold table for the other
# ordinary roles (issue 48, E4): redsem.max_holds_per_role bounds the
# entries of the server's hold table one login role takes, over all its
# sessions (53400, its own message, nothing left in Redis or in the
# table), so that another ordinary role still gets slots.  Its default is
# a quarter of redsem.max_tracked_holds; only a superuser sets it (per
# role with ALTER ROLE ... SET); superusers and members of redsem_admin are
# not bounded by it; the counts survive a crash-restart.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

# 64 entries, 8 reserved: ordinary roles share 56; each role may take a
# quarter of 64, 16
my $redis = RedsemTest::Redis->new;
my $node = create_node('role_holds', $redis, <<'EOC');
redsem.max_tracked_holds = 64
redsem.reserved_holds = 8
restart_after_crash = on
EOC
$node->safe_psql('postgres', q{
CREATE ROLE rolea LOGIN;
CREATE ROLE roleb LOGIN;
CREATE ROLE adm LOGIN;
GRANT redsem_admin TO adm;
});

# How many holders Redis has for a semaphore
sub holders
{
	my ($name) = @_;
	return $node->safe_psql('postgres', qq{SELECT count(*) FROM redsem_holders('$name');});
}

# How many entries of the server's hold table are in use
sub entries
{
	return $node->safe_psql('postgres', q{SELECT count(*) FROM redsem_server_holds();});
}

my $bound_error = qr/ERROR:  53400: role "rolea" already holds or waits for 16 redsem slots on this server\n.*DETAIL:  redsem.max_holds_per_role allows 16 per role on this server\. Slots still being given back [^\n]*\n.*HINT:  Release slots in the role's sessions with redsem_release or redsem_release_all; a superuser can change the bound for a role with ALTER ROLE \.\.\. SET redsem\.max_holds_per_role\./s;

###########################################################################
note 'the setting: its default, and who may change it';

my @a = map { RedsemTest::Session->new($node, name => "a$_", user => 'rolea') } 1 .. 5;
is($a[0]->query_ok(q{SHOW redsem.max_holds_per_role;}), '-1',
	'the default is -1 (a quarter of redsem.max_tracked_holds)');
is($node->safe_psql('postgres', q{SELECT context FROM pg_settings WHERE name = 'redsem.max_holds_per_role';}),
	'superuser', 'a superuser setting');
my ($out, $err) = $a[0]->query(q{SET redsem.max_holds_per_role = 1000;});
like($err, qr/permission denied to set parameter "redsem.max_holds_per_role"/,
	'an ordinary role cannot raise its own bound');
($out, $err) = $a[0]->query(q{ALTER ROLE rolea SET redsem.max_holds_per_role = 1000;});
like($err, qr/permission denied/, 'not with ALTER ROLE either');
($out, $err) = $a[0]->query(q{SET redsem.max_holds_per_role = 0;});
like($err, qr/permission denied to set parameter/, 'nor turn it off');
is($a[0]->query_ok(q{SHOW redsem.max_holds_per_role;}), '-1', 'it is unchanged');

###########################################################################
note 'one role fills its bound over several sessions; everybody else goes on';

for my $i (0 .. 3)
{
	is($a[$i]->query_ok(qq{SELECT count(redsem_acquire('a${i}_' || i, 1, '60 s')) FROM generate_series(1, 4) i;}),
		'4', "session $i of rolea takes 4 slots");
}
is(entries(), '16', 'the role has 16 entries of the table');
($out, $err) = $a[4]->query(q{SELECT redsem_acquire('a17', 1, '60 s');});
like($err, $bound_error, 'a fifth session takes the 17th: 53400, naming the setting');
is(holders('a17'), '0', 'nothing of it in Redis');
is(scalar($redis->scan_keys('redsem:{a17}*')), 0, 'not even a key');
is(entries(), '16', 'nor in the table');
($out, $err) = $a[0]->query(q{BEGIN; SELECT redsem_acquire_xact('a17x', 1); COMMIT;});
like($err, qr/53400: role "rolea" already holds/, 'transaction-scoped slots count too');
($out, $err) = $a[0]->query(q{SELECT redsem_acquire('a17w', 1, '60 s', wait => '10 s');});
like($err, qr/53400: role "rolea" already holds/, 'and so do places in line');
is(holders('a17x') + holders('a17w'), 0, 'none of them in Redis');
is($a[4]->query_ok(q{SELECT count(*) FROM redsem_held();}), '0', 'the refused session holds nothing');

my $b = RedsemTest::Session->new($node, name => 'b', user => 'roleb');
is($b->query_ok(q{SELECT count(redsem_acquire('b' || i, 1, '60 s')) FROM generate_series(1, 16) i;}), '16',
	'another ordinary role takes its own 16');
($out, $err) = $b->query(q{SELECT redsem_acquire('b17', 1, '60 s');});
like($err, qr/53400: role "roleb" already holds or waits for 16 redsem slots/, 'and is bounded the same');
is($b->query_ok(q{SELECT redsem_release_all();}), '16', 'roleb lets go');

my $adm = RedsemTest::Session->new($node, name => 'adm', user => 'adm');
is($adm->query_ok(q{SELECT count(redsem_acquire('m' || i, 1, '60 s')) FROM generate_series(1, 20) i;}), '20',
	'a member of redsem_admin is not bounded by it');
is($adm->query_ok(q{SELECT redsem_release_all();}), '20', 'and lets go');
is($node->safe_psql('postgres', q{SELECT count(redsem_acquire('su' || i, 1, '60 s')) FROM generate_series(1, 20) i;}),
	'20', 'nor is a superuser');
ok(wait_until(10, sub { entries() == 16 }), 'the superuser session ended: its slots went back');

###########################################################################
note 'a role allowed more; the shared part of the table still ends at the reserve';

$node->safe_psql('postgres', q{ALTER ROLE roleb SET redsem.max_holds_per_role = 0;});
$b->quit;
$b = RedsemTest::Session->new($node, name => 'b', user => 'roleb');
is($b->query_ok(q{SHOW redsem.max_holds_per_role;}), '0', 'roleb has no per-role bound');
is($b->query_ok(q{SELECT count(redsem_acquire('b' || i, 1, '60 s')) FROM generate_series(1, 40) i;}), '40',
	'it takes the other 40 of the 56 entries ordinary roles share (the refusals leaked none)');
($out, $err) = $b->query(q{SELECT redsem_acquire('b41', 1, '60 s');});
like($err, qr/53400: too many redsem holds on this server\n.*DETAIL:  The last 8 of the 64/s,
	'the 41st meets the reserve');
is($b->query_ok(q{SELECT redsem_release_all();}), '40', 'roleb lets go');

$node->safe_psql('postgres', q{ALTER ROLE rolea SET redsem.max_holds_per_role = 20;});
my $a6 = RedsemTest::Session->new($node, name => 'a6', user => 'rolea');
is($a6->query_ok(q{SELECT count(redsem_acquire('a6_' || i, 1, '60 s')) FROM generate_series(1, 4) i;}), '4',
	'ALTER ROLE ... SET gives the role 20: a new session takes 4 more');
($out, $err) = $a6->query(q{SELECT redsem_acquire('a21', 1, '60 s');});
like($err, qr/53400: role "rolea" already holds or waits for 20 redsem slots on this server\n.*DETAIL:  redsem.max_holds_per_role allows 20 per role/s,
	'the 21st is refused');

###########################################################################
note 'the role gets its entries back when its sessions end';

$a6->quit;
$a[0]->quit;
ok(wait_until(10, sub { entries() == 12 }), 'two sessions of rolea ended: 12 entries left');
is($a[4]->query_ok(q{SELECT count(redsem_acquire('a4_' || i, 1, '60 s')) FROM generate_series(1, 4) i;}), '4',
	'another session of the role takes the 4 that went back');
($out, $err) = $a[4]->query(q{SELECT redsem_acquire('a17', 1, '60 s');});
like($err, $bound_error, 'and is at the bound again');

###########################################################################
note 'a session\'s own releases whose replies are not read yet do not refuse its next acquire';

# Behind a pooler the next transaction on a server connection comes as soon
# as the last one committed; its releases, sent at COMMIT without waiting,
# count until their replies are read (helper-155: 197 of 800 transactions
# refused under PgBouncer with a bound of 4 and 4 server connections).  Here
# Redis is stopped across the COMMIT, so the replies cannot be in when the
# next acquire starts: it reads them (once Redis answers) instead of
# refusing.
$node->safe_psql('postgres', q{CREATE ROLE rolec LOGIN; ALTER ROLE rolec SET redsem.max_holds_per_role = 2;});
my $rb = RedsemTest::Session->new($node, name => 'rb', user => 'rolec');
$rb->query_ok(q{BEGIN; SELECT redsem_acquire_xact('rb_1', 5), redsem_acquire_xact('rb_2', 5);});
$redis->freeze;
$rb->query_ok(q{COMMIT;});
$rb->send(q{BEGIN; SELECT redsem_acquire_xact('rb_3', 5) IS NOT NULL; COMMIT;});
RedsemTest::sleep_full(0.3);
$redis->thaw;
my @rr = $rb->wait_done(10);
is($rr[0] // '', 't', 'the acquire after the COMMIT succeeds (the bound is 2)')
  or diag('stderr: ' . ($rr[1] // 'no end'));
ok(wait_until(10, sub { holders('rb_1') == 0 && holders('rb_2') == 0 && holders('rb_3') == 0 }),
	'and all three slots went back');
$rb->quit;


###########################################################################
note 'after a crash-restart the counts are those of the table';

$node->safe_psql('postgres', q{ALTER ROLE rolea RESET redsem.max_holds_per_role;});
kill 'KILL', $a[1]->backend_pid;
$_->quit foreach (@a[1 .. 4], $b, $adm);
ok(wait_until(60, sub {
	my ($ok) = eval { $node->safe_psql('postgres', q{SELECT 1;}) };
	defined $ok && $ok eq '1' }), 'the server restarted after a backend crash');
ok(wait_until(30, sub { my $n = eval { entries() }; defined $n && $n == 0 }),
	'the keeper released the holds of the dead sessions');
my $a7 = RedsemTest::Session->new($node, name => 'a7', user => 'rolea');
is($a7->query_ok(q{SELECT count(redsem_acquire('a7_' || i, 1, '60 s')) FROM generate_series(1, 16) i;}), '16',
	'the role takes 16 again');
($out, $err) = $a7->query(q{SELECT redsem_acquire('a17', 1, '60 s');});
like($err, $bound_error, 'and not a 17th');
$a7->quit;

$node->stop;
$redis->stop;
done_testing();
