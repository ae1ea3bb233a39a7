
# 097_queue_fleet_rollback.pl - statement queues defined in Redis when
# Redis goes back to older data (issue 49, found by the third review of
# the change): a change from a server without the newer copy waits for it
# to be stored back instead of being undone; after FLUSHALL with every
# keeper cut off, the copy with more changes counted wins, and the server
# that stores it says what it replaced; the 3 s wait ends with
# statement_timeout; a failing restore does not spin; a long
# redsem.queue_poll_interval still reads; a copy of another prefix does not
# hold up changes under a new one.
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
my $flag = PostgreSQL::Test::Utils::tempdir_short() . '/flag';
my $count = "$flag.count";
my $proxy = RedsemTest::Proxy->new($redis, sub {
		my @cmd = @_;
		if (grep({ defined && /^queues_restore$/ } @cmd))
		{
			open(my $c, '>>', $count); print $c "r\n"; close $c;
		}
		if (grep({ defined && /^queues_poll$/ } @cmd))
		{
			open(my $c, '>>', $count); print $c "p\n"; close $c;
		}
		# keepers cut off: no poll, no restore (SQL functions go through)
		return "-ERR review: cut off\r\n"
		  if -e "$flag.nopoll" && grep({ defined && /^queues_(poll|restore)$/ } @cmd);
		return "-ERR review: no restore\r\n"
		  if -e "$flag.norestore" && grep({ defined && /^queues_restore$/ } @cmd);
		return undef;
	});
my $rsock = $redis->socket;
my $a = create_node('r3_a', $proxy, "max_connections = 30\n");
my $b = create_node('r3_b', $proxy, "max_connections = 30\n");
my $c = RedsemTest::start_node('r3_c', "redsem.unix_socket = '$rsock'\n");
my ($ret, $out, $err);

sub def_of { my $v = $redis->cli('HGET', 'redsem:{queues}', $_[0]); return (defined $v && $v ne '') ? $v : '(none)'; }
sub ver { return $redis->cli('HGET', 'redsem:{queues}', '#') // '(none)'; }
sub copy_text { my ($n) = @_; return eval { slurp_file($n->data_dir . '/redsem_queues.cache') } // ''; }
sub touchf { open(my $fh, '>', $_[0]) or die; close $fh; }
sub counts { my $t = eval { slurp_file($count) } // ''; my $r = () = $t =~ /^r$/mg; my $p = () = $t =~ /^p$/mg; unlink $count; return ($p, $r); }
sub cap_of { my ($q) = @_; return $a->safe_psql('postgres', "SELECT redsem_limit('queue:$q')"); }

# ---------- 1. Redis goes back (snapshot / failover), '~' = 1 ----------
$a->safe_psql('postgres', "SELECT redsem_create_queue('q1', 'active_statements=2')");
$a->safe_psql('postgres', "SELECT redsem_create_queue('q2', 'active_statements=3')");
RedsemTest::sleep_full(2);
my $resp = RedsemTest::RESP->new($redis->socket);
my $dump = $resp->cmd('DUMP', 'redsem:{queues}');
my $v_old = ver();
$a->safe_psql('postgres', "SELECT redsem_alter_queue('q1', 'active_statements=5')");
$a->safe_psql('postgres', "SELECT redsem_create_queue('q3', 'active_statements=4')");
ok(defined RedsemTest::wait_until(5, sub { copy_text($a) =~ /q3:/ && copy_text($b) =~ /q3:/ }), 'copies have q3');
note "version before $v_old, now " . ver();
touchf("$flag.nopoll");
usleep(300_000);
$resp->cmd('RESTORE', 'redsem:{queues}', '0', $dump, 'REPLACE');
note 'after RESTORE: ' . join(' ', $redis->cli('HGETALL', 'redsem:{queues}'));
my $t0 = time;
($ret, $out, $err) = $c->psql('postgres', "SELECT redsem_alter_queue('q2', 'active_statements=7')");
note sprintf("1. alter q2 from C on rolled-back Redis: ret %d in %.2f s, out '%s' err '%s'", $ret, time - $t0, $out, $err);
note 'Redis then: ' . join(' ', $redis->cli('HGETALL', 'redsem:{queues}'));
note 'cap q2 then: ' . cap_of('q2');
unlink "$flag.nopoll";
RedsemTest::sleep_full(3);
note 'Redis 3 s later: ' . join(' ', $redis->cli('HGETALL', 'redsem:{queues}'));
note 'A log: ' . join("\n", grep { /lost the statement|q2/ } split /\n/, slurp_file($a->logfile));
is($ret == 0 ? (def_of('q2') =~ /active_statements=7/ ? 'kept' : 'LOST') : 'refused', $ret == 0 ? 'kept' : 'refused',
	'1. an alter that succeeded on a rolled-back Redis is not silently undone (docs: it waits)');
note 'cap q2 after 3 s: ' . cap_of('q2') . ' def ' . def_of('q2');
# 1c. same, without cutting the keepers off: RESTORE then alter from C at once
$dump = $resp->cmd('DUMP', 'redsem:{queues}');
$a->safe_psql('postgres', "SELECT redsem_alter_queue('q1', 'active_statements=12')");
ok(defined RedsemTest::wait_until(5, sub { copy_text($b) =~ /q1: active_statements=12/ }), 'B has q1=12');
$resp->cmd('RESTORE', 'redsem:{queues}', '0', $dump, 'REPLACE');
($ret, $out, $err) = $c->psql('postgres', "SELECT redsem_create_queue('q4', 'active_statements=2')");
note "1c. create q4 from C right after RESTORE: ret $ret";
RedsemTest::sleep_full(3);
is(def_of('q4') eq '(none)' ? 'LOST' : 'kept', $ret == 0 ? 'kept' : 'LOST', '1c. a create that succeeded right after Redis went back stays');

# 1b. the same without blocking the keepers: RESTORE, then alter at once
RedsemTest::sleep_full(1);
$dump = $resp->cmd('DUMP', 'redsem:{queues}');
$a->safe_psql('postgres', "SELECT redsem_alter_queue('q1', 'active_statements=6')");
$a->safe_psql('postgres', "SELECT redsem_alter_queue('q1', 'active_statements=8')");
ok(defined RedsemTest::wait_until(5, sub { copy_text($b) =~ /q1: active_statements=8/ }), 'B has q1=8');
$resp->cmd('RESTORE', 'redsem:{queues}', '0', $dump, 'REPLACE');
($ret, $out, $err) = $b->psql('postgres', "SELECT redsem_alter_queue('q3', 'active_statements=11')");
note "1b. alter q3 right after RESTORE: ret $ret err '$err'";
RedsemTest::sleep_full(3);
note "1b. q3 now: " . def_of('q3') . ', cap ' . cap_of('q3');

# ---------- 2. FLUSHALL while every keeper is cut off; changes from C;
# the keepers come back much later ----------
RedsemTest::sleep_full(2);
my $vcopy = ver();
touchf("$flag.nopoll");
usleep(300_000);
$redis->cli('FLUSHALL');
RedsemTest::sleep_full(12);	# the servers' entries expire (10 s)
($ret, $out, $err) = $c->psql('postgres', "SELECT redsem_create_queue('fresh1', 'active_statements=2')");
note "2. create fresh1 on C 12 s after FLUSHALL: ret $ret err '$err'";
$c->psql('postgres', "SELECT redsem_create_queue('fresh2', 'active_statements=2')");
note "2. Redis: " . join(' ', $redis->cli('HGETALL', 'redsem:{queues}')) . " (copies at $vcopy)";
RedsemTest::sleep_full(5);
unlink "$flag.nopoll";
RedsemTest::sleep_full(3);
note "2. Redis after the keepers came back: " . join(' ', $redis->cli('HGETALL', 'redsem:{queues}'));
# (which set survives is decided by the changes counted, as the docs say;
# the server that stores its copy says what it replaced)
ok(defined RedsemTest::wait_until(5, sub {
			(slurp_file($a->logfile) . slurp_file($b->logfile)) =~
			  /Redis held older statement queue definitions than this server's copy.*\n.*DETAIL:  Definitions it replaced or removed: .*"fresh1"/ }),
	'2. the copy with more changes counted wins, and the server that stored it names what it replaced');
note '2. cap of queue:fresh1 now: ' . $c->safe_psql('postgres', "SELECT redsem_limit('queue:fresh1')");
note '2. A log: ' . join("\n", grep { /lost the statement/ } split /\n/, slurp_file($a->logfile));

# ---------- 3. the 3 s wait: statement_timeout, cancel; keeper cost ----------
RedsemTest::sleep_full(2);
touchf("$flag.norestore");
usleep(300_000);
$redis->cli('FLUSHALL');
RedsemTest::sleep_full(2);
counts();
$t0 = time;
($ret, $out, $err) = $c->psql('postgres', "SELECT redsem_create_queue('w1', 'active_statements=2')");
note sprintf("3. create on C while a copy cannot be stored back: ret %d in %.2f s err '%s'", $ret, time - $t0, $err);
$t0 = time;
($ret, $out, $err) = $c->psql('postgres', "SET statement_timeout = 500; SELECT redsem_create_queue('w1', 'active_statements=2')");
my $el = time - $t0;
note sprintf("3. with statement_timeout 500: ret %d in %.2f s err '%s'", $ret, $el, $err);
# (a new psql and backend and its first Redis connect are in $el; a wait
# not cut would last its 3 s: QUEUE_RESTORE_WAIT_MS)
cmp_ok($el, '<', 2.5, '3. statement_timeout ends the wait');
counts();
RedsemTest::sleep_full(5);
my ($p, $r) = counts();
note "3. in 5 s with a failing restore, 2 keepers: $p polls, $r restores";
cmp_ok($r, '<=', 20, '3. a failing restore does not make the keepers spin');
unlink "$flag.norestore";
RedsemTest::sleep_full(3);

# ---------- 4. redsem.queue_poll_interval = 30min (documented: up to 1 h) ----------
my $e = RedsemTest::start_node('r3_e', "shared_preload_libraries = 'redsem'\nredsem.unix_socket = '$rsock'\nredsem.queue_poll_interval = '30min'\n");
RedsemTest::sleep_full(3);
my $elog = slurp_file($e->logfile);
note '4. E log: ' . join("\n", grep { /statement queue|redsem/ } split /\n/, $elog);
is($e->safe_psql('postgres', "SELECT count(*) FROM redsem_queues WHERE defined_in = 'redis'"),
	$a->safe_psql('postgres', "SELECT count(*) FROM redsem_queues WHERE defined_in = 'redis'"),
	'4. a server with queue_poll_interval = 30min applies the fleet queues');
is($a->safe_psql('postgres', "SELECT count(*) FROM redsem_queue_servers() WHERE cluster_name = 'r3_e'"), '1',
	'4. and is listed');

# ---------- 5. a server whose copy is of another prefix ----------
$b->append_conf('postgresql.conf', "redsem.key_prefix = 'fresh:'\nredsem.queue_poll_interval = '10min'\n");
$b->reload;
RedsemTest::sleep_full(3);
note '5. fresh:{queues}:servers: ' . join(' | ', $redis->cli('HGETALL', 'fresh:{queues}:servers'));
$t0 = time;
($ret, $out, $err) = $c->psql('postgres', "SET redsem.key_prefix = 'fresh:'; SELECT redsem_create_queue('n1', 'active_statements=2')");
note sprintf("5. first create under a fresh prefix: ret %d in %.2f s err '%s'", $ret, time - $t0, $err);
is($ret, 0, '5. the first queue under a new prefix can be created');

$proxy->stop;
$_->stop foreach ($a, $b, $c, $e);
done_testing();
