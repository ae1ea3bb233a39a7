
# 095_queue_fleet_races.pl - statement queues defined in Redis, under the
# races and faults the review of fa3df54 found (issue 49): two changes at
# once (the cap must end as the definition says), a change racing a drop
# (no cap left behind), min_cost written the same whatever the session's
# extra_float_digits, 64 queues of the longest definitions, a direct
# writer's garbage (logged once, not flooding), a WRONGTYPE hash
# (redsem_set_limit succeeds or changes nothing), a copy that missed a
# drop (the newest copy among the servers up wins), a crash-restart while
# Redis is away, redsem.queues reloaded twice between two statements, and
# an empty application_name.  Server A reaches Redis through a proxy that
# widens the windows.

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

# Server A reaches Redis through a proxy that, while $flag exists, holds
# back the set_limit of semaphores queue:race* by 1.5 s (a slow network,
# a descheduled backend): the gap between storing a definition and
# setting its cap, widened
my $flag = PostgreSQL::Test::Utils::tempdir_short() . '/delay';
my $proxy = RedsemTest::Proxy->new($redis, sub {
		my @cmd = @_;
		return "-ERR review: Redis unreachable\r\n" if -e "$flag.down" && grep({ defined && /^queues_(get|poll|restore)$/ } @cmd);
		if (-e $flag && grep({ defined && $_ eq 'set_limit' } @cmd) && grep({ defined && /queue:race/ } @cmd))
		{
			Time::HiRes::sleep(1.5);
		}
		return undef;
	});
my $a = create_node('rev_a', $proxy);
my $b = create_node('rev_b', $redis, "redsem.queues = 'other: active_statements=9'\nrestart_after_crash = on\n");
foreach my $n ($a, $b)
{
	$n->safe_psql('postgres', q{CREATE ROLE mallory LOGIN; CREATE ROLE analyst LOGIN;});
}
my ($ret, $out, $err);

sub def_of { my $v = $redis->cli('HGET', 'redsem:{queues}', $_[0]); return (defined $v && $v ne '') ? $v : '(none)'; }
sub limit_of { return $b->safe_psql('postgres', "SELECT coalesce(redsem_limit('queue:$_[0]')::text, '(none)')"); }

# --- 1. two alters at once: the definition and the cap disagree for good ---
$a->safe_psql('postgres', "SELECT redsem_create_queue('race', 'active_statements=2')");
open(my $fh, '>', $flag) or die; close $fh;
my $sa = RedsemTest::Session->new($a, name => 'alter5');
$sa->send("SELECT redsem_alter_queue('race', 'active_statements=5');");
usleep(400_000);    # A has stored active_statements=5; its cap is on the way
is($b->safe_psql('postgres', "SELECT redsem_alter_queue('race', 'active_statements=10')"),
	'active_statements=10 min_cost=0 on_redis_error=fail utility=off', 'B changes the cap to 10 meanwhile');
$sa->wait_done(10);
unlink $flag;
note "race: definition '" . def_of('race') . "', stored limit " . limit_of('race');
my $def_active = (def_of('race') =~ /active_statements=(\d+)/)[0];
is(limit_of('race'), $def_active, "1. the cap (stored limit) is the definition's active_statements ($def_active)");
sleep_full(2);
is($b->safe_psql('postgres', "SELECT active_statements || '/' || cap FROM redsem_queues WHERE name = 'race'"),
	"$def_active/$def_active", '1. redsem_queues shows active_statements and cap agreeing (after the keepers read)');

# --- 1b. alter while the queue is dropped: a stored limit outlives the queue ---
$a->safe_psql('postgres', "SELECT redsem_create_queue('race2', 'active_statements=2')");
open($fh, '>', $flag) or die; close $fh;
$sa->send("SELECT redsem_alter_queue('race2', 'active_statements=7');");
usleep(400_000);
is($b->safe_psql('postgres', "SELECT redsem_drop_queue('race2')"), 't', 'B drops race2 meanwhile');
$sa->wait_done(10);
unlink $flag;
is(def_of('race2'), '(none)', 'race2 is dropped');
is(limit_of('race2'), '(none)', '1b. and its cap went with it');

# --- 2. the text stored depends on the session's extra_float_digits ---
($out) = $b->safe_psql('postgres', "SET extra_float_digits = -15; SELECT redsem_create_queue('fl', 'active_statements=1 min_cost=123456.789')");
note "stored: $out";
like(def_of('fl'), qr/min_cost=123456\.789 /, '2. min_cost is stored as given, whatever extra_float_digits');
$b->safe_psql('postgres', "SET extra_float_digits = -15; SELECT redsem_alter_queue('fl', 'max_wait=1s')");
like(def_of('fl'), qr/min_cost=123456\.789 /, '2. an alter of another option keeps min_cost');
$b->safe_psql('postgres', "SELECT redsem_drop_queue('fl')");

# --- 3. ordinary roles ---
($ret, $out, $err) = $b->psql('postgres', "SELECT redsem_set_limit('queue:race', 1)", extra_params => [ '-U', 'mallory' ]);
like($err, qr/permission denied/, 'mallory cannot set a queue cap');
($ret, $out, $err) = $b->psql('postgres', "SELECT redsem_drop_queue('race')", extra_params => [ '-U', 'mallory' ]);
like($err, qr/permission denied/, 'nor drop a queue');
($ret, $out, $err) = $b->psql('postgres', "SET redsem.key_prefix = 'x:'", extra_params => [ '-U', 'mallory' ]);
like($err, qr/permission denied/, 'nor move the key prefix');
($ret, $out, $err) = $b->psql('postgres', "SELECT redsem_acquire('queue:race')", extra_params => [ '-U', 'mallory' ]);
like($err, qr/permission denied/, 'nor take a queue slot');
is($b->safe_psql('postgres', "SELECT count(*) FROM redsem_queues", extra_params => [ '-U', 'mallory' ]) > 0, 1,
	'mallory reads redsem_queues');

# --- 4. 64 queues with the longest options: the published text holds them all ---
my $apps = join('|', ('app' . ('x' x 58) . '*') x 4) . '|abcdefghij';
$apps = substr($apps, 0, 255);
my $prio = ('p' x 250) . ':-10';
$prio = ('p' x (255 - 4)) . ':-10' if length($prio) < 255;
$prio = substr($prio, 0, 251) . ':-10';
note 'apps ' . length($apps) . ', prio ' . length($prio);
my $long = "active_statements=1000000 min_cost=1.7976931348623157e308 max_wait=24d on_redis_error=run utility=on application_name=$apps application_priority=$prio";
my @made;
for my $i (1 .. 64)
{
	my $name = sprintf('q%02d', $i) . ('n' x 60);
	($ret, $out, $err) = $b->psql('postgres', "SELECT redsem_create_queue('$name', '$long')");
	push @made, $name if $ret == 0;
	last if $ret != 0;
}
note 'created ' . scalar(@made) . ' more queues; last error: ' . ($err // '');
($ret, $out, $err) = $b->psql('postgres', "SELECT redsem_create_queue('one_too_many', 'active_statements=1')");
like($err, qr/too many statement queues/, 'the 65th is refused');
ok(defined wait_until(5, sub { $a->safe_psql('postgres', "SELECT count(*) FROM redsem_queues WHERE defined_in = 'redis'") == 64 }),
	'4. every fleet queue reaches the other server (text not cut)')
  or diag($a->safe_psql('postgres', "SELECT count(*) FROM redsem_queues WHERE defined_in = 'redis'"));
ok(defined wait_until(5, sub { $b->safe_psql('postgres', "SELECT count(*) FROM redsem_queues WHERE defined_in = 'redis'") == 64 }),
	'B applies the 64 fleet queues too');
ok(defined wait_until(5, sub { slurp_file($b->logfile) =~ /redsem.queues defines statement queues that are not applied: other/ }),
	"4. B's own redsem.queues queue 'other', with no room beside 64 fleet queues, is refused loudly");
note 'B log says about other: ' . join(' | ', grep { /other/ } split /\n/, slurp_file($b->logfile));
$b->safe_psql('postgres', "SELECT redsem_drop_queue('$_')") foreach @made;

# --- 5. a direct writer: many bad fields, then a WRONGTYPE ---
my $log_at = -s $a->logfile;
$redis->cli('HSET', 'redsem:{queues}', map { (sprintf('bad%02d', $_), 'active_statements=zero') } 1 .. 70);
sleep_full(5);
my $bad_lines = () = substr(slurp_file($a->logfile), $log_at) =~ /in Redis (is|are) not valid/g;
is($bad_lines, 1, "5. bad definitions are logged once, not at every read ($bad_lines lines in 5 s)");
like(substr(slurp_file($a->logfile), $log_at), qr/the definitions of 70 statement queues in Redis are not valid \("bad/,
	'naming how many and the first of them');
$redis->cli('HDEL', 'redsem:{queues}', map { sprintf('bad%02d', $_) } 1 .. 70);

my $saved = def_of('race');
$redis->cli('DEL', 'redsem:{queues}');
$redis->cli('SET', 'redsem:{queues}', 'not a hash');
sleep_full(2);
is($b->safe_psql('postgres', "SELECT count(*) FROM redsem_queues WHERE name = 'race'"), '1',
	'a WRONGTYPE hash: the last definitions read stay in effect');
my $before = limit_of('race');
($ret, $out, $err) = $b->psql('postgres', "SELECT redsem_set_limit('queue:race', 3)");
note "set_limit under WRONGTYPE: ret $ret err $err";
is(limit_of('race') eq '3' ? 'changed' : 'unchanged', $ret == 0 ? 'changed' : 'unchanged',
	"5. redsem_set_limit('queue:race', 3) either succeeds or changes nothing (limit before $before)");
($ret, $out, $err) = $b->psql('postgres', "SELECT redsem_set_limit('queue:unrelated', 3)");
is($ret, 0, "5. redsem_set_limit on a queue-named semaphore that is no fleet queue is not broken by a bad hash") or diag($err);
$redis->cli('DEL', 'redsem:{queues}');
ok(defined wait_until(5, sub { def_of('race') ne '(none)' }), 'after DEL a keeper restores its copy');

# --- 6. a copy that missed a drop: the newest copy among the servers up wins ---
$b->safe_psql('postgres', "SELECT redsem_create_queue('zombie', 'active_statements=1')");
ok(defined wait_until(5, sub { slurp_file($a->data_dir . '/redsem_queues.cache') =~ /zombie: /
			  && slurp_file($b->data_dir . '/redsem_queues.cache') =~ /zombie: / }), 'A and B have zombie in their copies');
open($fh, '>', "$flag.down") or die; close $fh;     # A cannot read the definitions for a while
$b->safe_psql('postgres', "SELECT redsem_drop_queue('zombie')");
ok(defined wait_until(5, sub { slurp_file($b->data_dir . '/redsem_queues.cache') !~ /zombie: / }), 'B\'s copy has it dropped');
$redis->stop; $redis->start; $redis->end_grace;   # Redis restarts empty
unlink "$flag.down";
ok(defined wait_until(5, sub { def_of('race') ne '(none)' }), 'a keeper stores its copy back');
sleep_full(2);
is(def_of('zombie'), '(none)', '6. a queue dropped while one server could not read Redis stays dropped after Redis forgets (the newer copy wins)');

# crash-restart while Redis is away: the queues come from the copy again
ok(defined wait_until(5, sub { $b->safe_psql('postgres', "SELECT count(*) FROM redsem_queues WHERE name = 'race'") eq '1' }), 'B applies race');
$redis->stop;
my $victim = RedsemTest::Session->new($b, name => 'victim');
kill 'KILL', $victim->backend_pid;
sleep_full(2);
ok(defined wait_until(30, sub {
			my ($r, $o) = eval { $b->psql('postgres', "SELECT defined_in FROM redsem_queues WHERE name = 'race'") };
			defined $r && $r == 0 && $o eq 'redis' }),
	'6. after a crash-restart with Redis away the fleet queue still applies (copy re-read)');
$redis->start;
$redis->end_grace;

# --- 6b. redsem.queues reloaded twice between two statements of a session ---
my $s = RedsemTest::Session->new($b, name => 'aba');
my $q = "SELECT active_statements FROM redsem_queues WHERE name = 'other';";
is($s->query_ok($q), '9', 'other: 9 to begin with');
my $stale = 0;
for my $round (1 .. 6)
{
	for my $v (5, 3)
	{
		my $val = $v + 10 * $round;
		$b->append_conf('postgresql.conf', "redsem.queues = 'other: active_statements=$val'\n");
		$b->reload;
		usleep(300_000);
		$s->query_ok("SHOW redsem.queues;");    # the backend reloads; SHOW reads no queue
	}
	my $want = 3 + 10 * $round;
	my $got = $s->query_ok($q);
	note "round $round: redsem.queues says $want, redsem_queues shows $got";
	$stale++ if $got ne $want;
}
is($stale, 0, '6b. after two reloads the session applies the redsem.queues in effect (not one two reloads old)');
$b->append_conf('postgresql.conf', "redsem.queues = 'other: active_statements=9'\n");
$b->reload;

# --- 7. redsem.queues: application_name= may be empty ---
$b->append_conf('postgresql.conf', "redsem.queues = 'other: active_statements=9 application_name= utility=on; more: active_statements=1 application_name=;'\n");
$b->reload;
ok(defined wait_until(5, sub { $b->safe_psql('postgres', "SELECT string_agg(name || '/' || utility || '/' || coalesce(application_name, '-'), ',' ORDER BY name) FROM redsem_queues WHERE defined_in = 'redsem.queues'") eq 'more/false/-,other/true/-' }),
	'empty application_name in redsem.queues parses, the options after it too')
  or diag($b->safe_psql('postgres', "SELECT string_agg(name || '/' || utility || '/' || coalesce(application_name, '-'), ',' ORDER BY name) FROM redsem_queues"));

$proxy->stop;
$_->stop foreach ($a, $b);
done_testing();
