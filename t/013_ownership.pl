
# 013_ownership.pl - slots are owned.  Only the session that took a slot
# releases or refreshes it (the keeper refreshes it on its behalf); other
# roles see the holders but not their ids; administrators (superusers and
# members of redsem_admin) see every id and can force-release a stuck slot.
#
# Roles: alice holds, mallory is an ordinary role trying to free or pin
# alice's slot, dba is a member of redsem_admin.

use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $redis = RedsemTest::Redis->new;
my $node = create_node('own', $redis);
$node->safe_psql('postgres', q{
	CREATE ROLE alice LOGIN;
	CREATE ROLE mallory LOGIN;
	CREATE ROLE dba LOGIN IN ROLE redsem_admin;
	CREATE ROLE watcher LOGIN IN ROLE pg_monitor;
});
my $alice = RedsemTest::Session->new($node, name => 'alice', user => 'alice');
my $mallory = RedsemTest::Session->new($node, name => 'mallory', user => 'mallory');
my $dba = RedsemTest::Session->new($node, name => 'dba', user => 'dba');
my $su = RedsemTest::Session->new($node, name => 'superuser');

# alice holds the only slot, with a 3 s lease the keeper refreshes
my $id = $alice->query_ok(q{SELECT redsem_acquire('own', 1, '3 s');});
like($id, qr/^[0-9a-f]{16}\./, 'alice holds the only slot of "own"');
my $deadline = sub { $redis->cli('ZSCORE', 'redsem:{own}:timeout', $id) // 0 };

###########################################################################
note 'an ordinary role sees the holder, not its id';

is($mallory->query_ok(q{SELECT position, state, id IS NULL, username FROM redsem_holders('own');}),
	'1|holding|t|alice', 'mallory sees that alice holds, without the id');
is($alice->query_ok(q{SELECT id FROM redsem_holders('own');}), $id,
	'alice sees her own id');
is($dba->query_ok(q{SELECT id FROM redsem_holders('own');}), $id,
	'a member of redsem_admin sees it');
is($su->query_ok(q{SELECT id FROM redsem_holders('own');}), $id, 'so does a superuser');

# the server names a host and port: shown as pg_stat_activity shows client_addr
my $server = $su->query_ok(q{SELECT server FROM redsem_holders('own');});
isnt($server, '', 'a superuser sees which server holds');
is($mallory->query_ok(q{SELECT server IS NULL, pid IS NOT NULL FROM redsem_holders('own');}),
	't|t', 'mallory does not see which server (nor does redsem_queue_servers() let her)');
is($alice->query_ok(q{SELECT server FROM redsem_holders('own');}), $server,
	'alice sees the server of her own slot');
my $alice2 = RedsemTest::Session->new($node, name => 'alice2', user => 'alice');
is($alice2->query_ok(q{SELECT server IS NULL FROM redsem_holders('own');}), 't',
	'... another session of hers does not (the slot is the session\'s)');
$alice2->quit;
is($dba->query_ok(q{SELECT server FROM redsem_holders('own');}), $server,
	'a member of redsem_admin sees it');
my $watcher = RedsemTest::Session->new($node, name => 'watcher', user => 'watcher');
is($watcher->query_ok(q{SELECT server, id IS NULL FROM redsem_holders('own');}), "$server|t",
	'a member of pg_monitor sees it (pg_read_all_stats), not the id');
$watcher->quit;

###########################################################################
note 'nobody but alice can release or refresh it, even knowing the id';

my ($out, $err) = $mallory->query(qq{SELECT redsem_release('own', '$id');});
is($out, 'f', 'mallory: redsem_release of alice\'s id returns false');
like($err, qr/WARNING:  01000: this session holds no such slot of semaphore "own"/,
	'... with a WARNING');
my $before = $deadline->();
($out, $err) = $mallory->query(qq{SELECT redsem_refresh('own', '$id', '1 hour');});
is($out, 'f', 'mallory: redsem_refresh of alice\'s id for an hour returns false');
cmp_ok($deadline->() - $before, '<', 10_000, '... and the lease was not extended');
($out, $err) = $mallory->query(qq{SELECT redsem_force_release('own', '$id');});
like($err, qr/ERROR:  42501: permission denied to force-release a slot of a redsem semaphore\n(.*\n)*HINT:  An administrator can run: GRANT redsem_admin TO mallory;/,
	'mallory may not force-release, and is told how to get the right');
is($redis->zcard('own', 'owner'), 1, '... alice still holds her slot');
($out, $err) = $mallory->query(qq{SELECT redsem_stats_reset();});
like($err, qr/ERROR:  42501: permission denied to reset redsem statistics/,
	'nor reset the statistics');
($out, $err) = $su->query(qq{SELECT redsem_release('own', '$id');});
is($out, 'f', 'even a superuser\'s redsem_release does not free another session\'s slot');
like($err, qr/redsem_force_release/, '... it points to redsem_force_release');
is($mallory->query_ok(q{SELECT redsem_acquire('own', 1, '60 s') IS NULL;}), 't',
	'mallory still cannot get in');

###########################################################################
note 'the keeper refreshes it on alice\'s behalf';

$before = $deadline->();
sleep 4;
cmp_ok($deadline->(), '>', $before, 'after 4 s the keeper has refreshed alice\'s 3 s lease');
is($mallory->query_ok(q{SELECT redsem_acquire('own', 1, '60 s') IS NULL;}), 't',
	'mallory still cannot get in');
is($alice->query_ok(q{SELECT kept_alive, keeper_error IS NULL FROM redsem_held();}), 't|t',
	'alice\'s redsem_held(): kept alive');

###########################################################################
note 'an administrator force-releases a stuck slot';

my $off = -s $node->logfile;
is($dba->query_ok(qq{SELECT redsem_force_release('own', '$id');}), 't',
	'dba force-releases alice\'s slot: it was live');
ok(defined wait_until(10, sub { slurp_file($node->logfile, $off) =~
		/slot "\Q$id\E" of semaphore "own" force-released by role "dba"/ }),
	'the server log says who force-released what');
is($dba->query_ok(qq{SELECT redsem_force_release('own', '$id');}), 'f',
	'a second force-release returns false');
ok(defined wait_until(30, sub {
	slurp_file($node->logfile, $off) =~ /redsem keeper found the slot of semaphore "own" held by process \d+ force-released/ }),
	'the keeper finds alice\'s slot force-released');
# (alice may still run under it: it counts until she gives it back)
is($mallory->query_ok(q{SELECT redsem_acquire('own', 1, '60 s') IS NULL;}), 't',
	'mallory cannot get in yet: the slot counts until alice gives it back');
is($redis->zcard('own', 'owner'), 1, '... Redis still counts alice');
($out, $err) = $alice->query(q{SELECT count(*) FROM redsem_held();});
like($err, qr/ERROR:  57014: the slot of semaphore "own" was lost\nDETAIL:  An administrator force-released it/,
	'alice\'s next statement is told, saying an administrator force-released it (not that its lease ran out)');
like(slurp_file($node->logfile, $off), qr/redsem keeper found the slot of semaphore "own" held by process \d+ force-released by an administrator/,
	'and so does the keeper\'s log line');
my $m = $mallory->query_ok(q{SELECT redsem_acquire('own', 1, '60 s', '10 s');});
like($m, qr/^[0-9a-f]{16}\./, 'now mallory gets the slot');
is($redis->cli('HEXISTS', 'redsem:{own}:state', "f:$id"), '0', 'the mark that told it is gone');
is($alice->query_ok(qq{SELECT redsem_release('own', '$id');}), 'f',
	'alice\'s own release returns false, without a WARNING: it was hers');
is($mallory->query_ok(qq{SELECT redsem_release('own', '$m');}), 't', 'mallory releases hers');
# (a holder on the server that force-releases is stopped at once: the
# keeper refreshes it then, not at its next refresh, 20 s later)
my $long = $alice->query_ok(q{SELECT redsem_acquire('own_long', 1, '60 s');});
$off = -s $node->logfile;
my $forced_at = time;
$dba->query_ok(qq{SELECT redsem_force_release('own_long', '$long');});
ok(defined wait_until(10, sub { slurp_file($node->logfile, $off) =~
		/redsem keeper found the slot of semaphore "own_long" held by process \d+ force-released by an administrator/ }),
	'a 60 s slot force-released on its holder\'s server: its keeper finds it at once');
cmp_ok(time - $forced_at, '<', 5, '... well before its next refresh (20 s)');
($out, $err) = $alice->query(qq{SELECT redsem_refresh('own_long', '$long');});
like($err, qr/ERROR:  57014: the slot of semaphore "own_long" was lost\nDETAIL:  An administrator force-released it/,
	'its holder is told why');
($out, $err) = $alice->query(qq{SELECT redsem_refresh('own_long', '$long');});
is($out, 'f', 'and the slot cannot be refreshed: the session gave it up');
ok(defined wait_until(10, sub { $redis->zcard('own_long', 'owner') == 0 }),
	'... and it is gone from Redis (the keeper released what the session gave up)');

###########################################################################
note 'a holder force-released from another server runs beside nobody';

# Another server's redsem_force_release is the script's forced release,
# without this server's keeper being told: the holder's keeper learns it at
# its next refresh (a third of the 3 s lease).  Until the holder has
# stopped and given its slot back, the waiter behind it is not let in.
my $runner = RedsemTest::Session->new($node, name => 'runner', user => 'alice');
$runner->send(q{BEGIN; SELECT redsem_acquire_xact('own_far', 1, '3 s') IS NOT NULL; SELECT pg_sleep(60); COMMIT;});
ok(defined wait_until(10, sub { $redis->zcard('own_far', 'owner') == 1 }), 'a statement runs under the only slot of "own_far"');
$mallory->send(q{SELECT redsem_acquire('own_far', 1, '3 s', '30 s') IS NOT NULL, extract(epoch FROM clock_timestamp());});
ok(defined wait_until(10, sub { $redis->zcard('own_far', 'waiting') == 1 }), 'mallory waits behind it');
my ($far) = split /\n/, ($redis->cli('ZRANGE', 'redsem:{own_far}:owner', '0', '0') // '');
my ($lib) = RedsemTest::redsem_library();
$off = -s $node->logfile;
is($redis->cli('FCALL', $lib, '1', 'redsem:{own_far}:owner', 'release', $far, 'forced'), '1',
	'another server force-releases the running holder');
usleep(300_000);
# (read at one instant: its keeper may already have refreshed, stopped it
# and handed the slot on, 1|0; two holders, 2|0, would be the breach)
like($redis->owner_waiting('own_far'), qr/^(?:2\|1|1\|0)$/,
	'... which still counts: mallory still waits, unless the holder was stopped already');
($out, $err) = $mallory->wait_done(15);
like("$out|$err", qr/^t\|[0-9.]+\|$/, 'mallory gets the slot once the holder is stopped');
my ($granted) = ($out // '') =~ /\|([0-9.]+)/;
($out, $err) = $runner->wait_done(10);
like($err, qr/ERROR:  57014: the slot of semaphore "own_far" was lost\nDETAIL:  An administrator force-released it/,
	'the holder was told, with the reason');
# (the error is logged before its transaction aborts and gives the slot back)
my ($told) = slurp_file($node->logfile, $off) =~
  /^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \S+) \[\d+\] .*ERROR:  (?:57014: )?the slot of semaphore "own_far" was lost/m;
ok(defined $told, 'the holder\'s error is in the server log');
my $told_epoch = $node->safe_psql('postgres', "SELECT extract(epoch FROM '$told'::timestamptz)");
cmp_ok($told_epoch, '<=', $granted // 0, '... stamped before mallory was granted the slot: they never ran together');
is($mallory->query_ok(q{SELECT redsem_release_all();}), '1', 'mallory gives that slot back');

# A holder's own redsem_refresh may learn it first (its keeper refreshes a
# 60 s lease only every 20 s): it is stopped as when the keeper learns it,
# and the slot given back, long before its lease would run out.
my $self = $alice->query_ok(q{SELECT redsem_acquire('own_self', 1, '60 s');});
is($redis->cli('FCALL', $lib, '1', 'redsem:{own_self}:owner', 'release', $self, 'forced'), '1',
	'another server force-releases alice\'s 60 s slot');
($out, $err) = $alice->query(qq{SELECT redsem_refresh('own_self', '$self');});
like($err, qr/NOTICE:  00000: slot \Q$self\E of redsem semaphore "own_self" was force-released by an administrator/,
	'alice\'s own refresh learns it, with a NOTICE saying so');
# (it returns false, and the keeper, woken, cancels that statement if it
# still runs, or the next one is told)
my $refresh_out = $out;
my $stop_told = $err =~ /ERROR/ ? $err : ($alice->query(q{SELECT 1;}))[1];
like($stop_told, qr/ERROR:  57014: the slot of semaphore "own_self" was lost\nDETAIL:  An administrator force-released it/,
	'alice is stopped, as when the keeper finds it');
ok($refresh_out eq 'f' || $err =~ /ERROR/, '... her refresh having returned false (or been cancelled)');
ok(defined wait_until(10, sub { $redis->zcard('own_self', 'owner') == 0 }),
	'and the slot is given back then, not when its lease runs out');
is($alice->query_ok(qq{SELECT redsem_release('own_self', '$self');}), 'f',
	'her own release of it then returns false, without a WARNING');

###########################################################################
note 'a slot of a server that is gone: holder_gone frees it at once';

# Another server holds a 60 s slot and stops without giving it back (as if
# it crashed): Redis keeps it until its lease runs out.  The forced release
# still counts it (its holder might run); holder_gone, the administrator's
# word that it does not, frees it at once.
{
	my $other = create_node('own_gone', $redis);
	my $gh = RedsemTest::Session->new($other, name => 'gone_holder');
	my $gid = $gh->query_ok(q{SELECT redsem_acquire('own_gone', 1, '60 s');});
	$other->stop('immediate');
	eval { $gh->quit; };
	$mallory->send(q{SELECT redsem_acquire('own_gone', 1, '3 s', '30 s') IS NOT NULL;});
	ok(defined wait_until(10, sub { $redis->zcard('own_gone', 'waiting') == 1 }), 'mallory waits behind a slot of a server that is gone');
	is($dba->query_ok(qq{SELECT redsem_force_release('own_gone', '$gid');}), 't', 'dba force-releases it');
	usleep(1_000_000);
	is($redis->zcard('own_gone', 'waiting'), 1, '... which still counts (its holder might run): mallory still waits');
	$off = -s $node->logfile;
	my $t0 = time;
	is($dba->query_ok(qq{SELECT redsem_force_release('own_gone', '$gid', holder_gone => true);}), 't',
		'dba says its holder is gone');
	($out, $err) = $mallory->wait_done(15);
	is("$out|$err", 't|', 'mallory gets the slot');
	cmp_ok(time - $t0, '<', 3, '... at once, not when the 60 s lease runs out');
	like(slurp_file($node->logfile, $off), qr/slot "\Q$gid\E" of semaphore "own_gone" force-released by role "dba", its holder said to be gone: freed at once/,
		'the server log says so');
	is($mallory->query_ok(q{SELECT redsem_release_all();}), '1', 'mallory gives it back');

	# a holder of this server is not gone: refused, and nothing changes
	my $here = $alice->query_ok(q{SELECT redsem_acquire('own_here', 1, '60 s');});
	($out, $err) = $dba->query(qq{SELECT redsem_force_release('own_here', '$here', holder_gone => true);});
	like($err, qr/ERROR:  55006: the holder of slot "\Q$here\E" of semaphore "own_here" runs on this server\nDETAIL:  It is process \d+; .*\nHINT:  Leave holder_gone out to have it stopped first, or end it with pg_terminate_backend\(\d+\)/,
		'holder_gone for a holder that runs on this server is refused, naming its process');
	is($redis->cli('HGET', 'redsem:{own_here}:state', "f:$here") // '', '', '... its slot is not marked force-released');
	is($alice->query_ok(qq{SELECT redsem_release('own_here', '$here');}), 't', '... and is still alice\'s to give back');
}

###########################################################################
note 'a waiting place is owned too';

$id = $alice->query_ok(q{SELECT redsem_acquire('own2', 1, '60 s');});
$mallory->send(q{SELECT redsem_acquire('own2', 1, '60 s', '60 s') IS NOT NULL;});
ok(defined wait_until(30, sub { $redis->zcard('own2', 'waiting') == 1 }), 'mallory waits in line');
my ($wid) = split /\n/, ($redis->cli('ZRANGE', 'redsem:{own2}:waiting', '0', '-1') // '');
($out, $err) = $alice->query(qq{SELECT redsem_release('own2', '$wid');});
is($out, 'f', 'alice cannot take mallory\'s place in line out of it');
is($redis->zcard('own2', 'waiting'), 1, 'mallory is still in line');
is($alice->query_ok(qq{SELECT redsem_release('own2', '$id');}), 't', 'alice releases her slot');
($out, $err) = $mallory->wait_done(30);
is("$out|$err", 't|', 'and mallory, next in line, gets it');
is($mallory->query_ok(q{SELECT redsem_release_all();}), '1', 'mallory releases it');

###########################################################################
note 'an administrator removes a waiter from the line: it is told at once, and does not queue again';

{
	# (helper-129: the place was gone, nothing was logged, and the waiter
	# queued again at the back of the line, its wait running on)
	$id = $alice->query_ok(q{SELECT redsem_acquire('own3', 1, '60 s');});
	$mallory->send(q{SELECT redsem_acquire('own3', 1, '60 s', '60 s') IS NOT NULL;});
	ok(defined wait_until(30, sub { $redis->zcard('own3', 'waiting') == 1 }), 'mallory waits first in line');
	my $behind = RedsemTest::Session->new($node, name => 'behind', user => 'alice');
	$behind->send(q{SELECT redsem_acquire('own3', 1, '60 s', '60 s') IS NOT NULL;});
	ok(defined wait_until(30, sub { $redis->zcard('own3', 'waiting') == 2 }), 'another session waits behind her');
	my ($mid) = split /\n/, ($redis->cli('ZRANGE', 'redsem:{own3}:waiting', '0', '-1') // '');
	my $off = -s $node->logfile;
	my $t0 = time;
	is($dba->query_ok(qq{SELECT redsem_force_release('own3', '$mid');}), 'f', 'dba removes mallory\'s place: false (no slot)');
	($out, $err) = $mallory->wait_done(15);
	like($err, qr/ERROR:  57014: canceling the wait for semaphore "own3": an administrator removed this session from its line/,
		'mallory is told, with 57014');
	cmp_ok(time - $t0, '<', 3, '... at once');
	is($redis->zcard('own3', 'waiting'), 1, 'she did not queue again: one waiter left');
	like(slurp_file($node->logfile, $off), qr/place in line "\Q$mid\E" of semaphore "own3" given up by role "dba"/,
		'the server log says who removed her');
	is($alice->query_ok(qq{SELECT redsem_release('own3', '$id');}), 't', 'alice releases');
	($out, $err) = $behind->wait_done(30);
	is("$out|$err", 't|', 'and the session behind gets the slot');
	$behind->query_ok(q{SELECT redsem_release_all();});
	$behind->quit;
	is(scalar(grep { /removed/ } $redis->scan_keys('redsem:{own3}*')), 0, 'no marker is left in Redis');
}

$_->quit foreach ($alice, $mallory, $dba, $su);
node_log_is_clean($node);
$node->stop;
$redis->stop;
done_testing();
