
# 096_queue_fleet_forget.pl - statement queues defined in Redis when
# Redis forgets or goes back (issue 49, found by the second review of the
# change): an empty set of definitions after FLUSHALL, a change from a
# server without a copy, a Redis restored from an older snapshot (the
# newest copy wins back), a server with many queues of its own (its
# self-description is cut, its reads go on), statistics rows of queues
# under many key prefixes (bounded), redsem_queue_servers for ordinary
# roles (refused), the servers' cluster_name, and the documented ACL.
#
# Servers A and B reach Redis through one proxy that refuses the
# queues_* index operations while $flag.down exists (their keepers then
# cannot store their copies back); C does not preload redsem; D defines
# many local-only queues with long names.

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
my $proxy = RedsemTest::Proxy->new($redis, sub {
		my @cmd = @_;
		return "-ERR review: Redis unreachable\r\n"
		  if -e "$flag.down" && grep({ defined && /^queue(s_get|s_poll|s_restore|_put|_drop)$/ } @cmd);
		return undef;
	});
my $rsock = $redis->socket;
my $a = create_node('r2_a', $proxy, "max_connections = 30\n");
my $b = create_node('r2_b', $proxy, "max_connections = 30\n");
my ($ret, $out, $err);

sub def_of { my $v = $redis->cli('HGET', 'redsem:{queues}', $_[0]); return (defined $v && $v ne '') ? $v : '(none)'; }
sub since { my ($node, $at) = @_; return substr(slurp_file($node->logfile), $at); }

# --- 1. every queue dropped, then Redis forgets: the empty copy cannot be
# stored back (queues_restore wants at least one pair) ---
$b->safe_psql('postgres', "SELECT redsem_create_queue('e1', 'active_statements=1')");
$b->safe_psql('postgres', "SELECT redsem_drop_queue('e1')");
sub copy_version { my ($n) = @_; my $t = eval { slurp_file($n->data_dir . '/redsem_queues.cache') } // ''; return ($t =~ /^[0-9a-f]+ (\d+)$/m)[0] // 0; }
ok(defined RedsemTest::wait_until(5, sub { copy_version($a) > 0 && copy_version($b) > 0 }),
	'A and B have an empty copy of version > 0 (e1 created and dropped)');
note 'A copy: ' . slurp_file($a->data_dir . '/redsem_queues.cache');
my $at_a = -s $a->logfile;
$redis->cli('FLUSHALL');
RedsemTest::sleep_full(4);
my $log = since($a, $at_a);
my $lines = () = $log =~ /could not read the statement queue definitions/g;
note "A log after FLUSHALL (4 s):\n$log";
is($lines, 0, '1. an empty copy after FLUSHALL: the keeper does not fail every second');
($ret, $out, $err) = $a->psql('postgres', "SELECT redsem_create_queue('e2', 'active_statements=1')");
note "create on A after FLUSHALL: ret $ret out $out err $err";
is($ret, 0, '1. redsem_create_queue works after Redis forgot an empty set of definitions');
note 'Redis: ' . join(' ', $redis->cli('HGETALL', 'redsem:{queues}'));
($ret, $out, $err) = $b->psql('postgres', "SELECT redsem_drop_queue('e2', true)");
is($ret, 0, '1. and so does redsem_drop_queue') or diag($err);
RedsemTest::sleep_full(2);

# --- 2. a change from a server with no copy (no preload) after Redis
# forgot hides every other server's copy ---
my $c = RedsemTest::start_node('r2_c', "redsem.unix_socket = '$rsock'\n");
$b->safe_psql('postgres', "SELECT redsem_create_queue('keep1', 'active_statements=2')");
$b->safe_psql('postgres', "SELECT redsem_create_queue('keep2', 'active_statements=3')");
ok(defined RedsemTest::wait_until(5, sub { slurp_file($a->data_dir . '/redsem_queues.cache') =~ /keep2:/ }), 'A\'s copy has keep1, keep2');
open(my $fh, '>', "$flag.down") or die; close $fh;
usleep(300_000);
$redis->cli('FLUSHALL');
($ret, $out, $err) = $c->psql('postgres', "SELECT redsem_drop_queue('nothing_here', true)");
note "C (no preload) drop if_exists after FLUSHALL: ret $ret out '$out' err $err";
unlink "$flag.down";
# (the keepers store their copy back within a few seconds; a slow machine
# is given ten)
RedsemTest::wait_until(10, sub { def_of('keep1') ne '(none)' });
RedsemTest::sleep_full(1);		# (and it stays)
note 'Redis now: ' . join(' ', $redis->cli('HGETALL', 'redsem:{queues}'));
isnt(def_of('keep1'), '(none)', '2. a no-op drop (if_exists) from a server without a copy does not hide the fleet\'s copies');
ok(defined RedsemTest::wait_until(10, sub { $a->safe_psql('postgres', "SELECT count(*) FROM redsem_queues WHERE name LIKE 'keep%'") eq '2' }),
	'2. A still applies keep1 and keep2');
# put them back for what follows
$b->safe_psql('postgres', "SELECT redsem_create_queue('keep1', 'active_statements=2')") if def_of('keep1') eq '(none)';

# --- 3. Redis restored from an older snapshot: '~' = 1, '#' lower than
# every copy's ---
RedsemTest::sleep_full(2);
my $resp = RedsemTest::RESP->new($redis->socket);
my $dump = $resp->cmd('DUMP', 'redsem:{queues}');
my $v_old = $redis->cli('HGET', 'redsem:{queues}', '#');
$b->safe_psql('postgres', "SELECT redsem_alter_queue('keep1', 'active_statements=9')");
$b->safe_psql('postgres', "SELECT redsem_create_queue('keep3', 'active_statements=4')");
ok(defined RedsemTest::wait_until(5, sub { slurp_file($a->data_dir . '/redsem_queues.cache') =~ /keep3:/ }), 'A\'s copy has keep3');
my $restored = $resp->cmd('RESTORE', 'redsem:{queues}', '0', $dump, 'REPLACE');
note 'RESTORE: ' . ($restored // $@) . ", version then $v_old, copies at " . $redis->cli('HGET', 'redsem:{queues}', '#');
RedsemTest::wait_until(10, sub { def_of('keep3') ne '(none)' });
RedsemTest::sleep_full(1);		# (and it stays)
note 'Redis then: ' . join(' ', $redis->cli('HGETALL', 'redsem:{queues}'));
note 'A copy now: ' . slurp_file($a->data_dir . '/redsem_queues.cache');
isnt(def_of('keep3'), '(none)', '3. a Redis gone back in time (older \'#\', \'~\' = 1) does not silently drop keep3 on every server');

# --- 4. many local-only queues with long names: the keeper's queues_poll
# value exceeds 2048 bytes ---
my $many = join('; ', map { sprintf('l%02d', $_) . ('x' x 57) . ': active_statements=1' } 1 .. 36);
my $d = create_node('r2_d', $proxy, "max_connections = 30\nredsem.queues = '$many'\nredsem.max_tracked_semaphores = 16\n");
my $at_d = -s $d->logfile;
ok(defined RedsemTest::wait_until(10, sub {
			$a->safe_psql('postgres', "SELECT count(*) FROM redsem_queue_servers() WHERE queues_of_its_own[1] LIKE 'l01%'") eq '1' }),
	'4. D is listed by redsem_queue_servers()');
note 'D log: ' . since($d, $at_d);
RedsemTest::wait_until(10, sub { $d->safe_psql('postgres', "SELECT count(*) FROM redsem_queues WHERE defined_in = 'redis'") eq
	  $a->safe_psql('postgres', "SELECT count(*) FROM redsem_queues WHERE defined_in = 'redis'") });
is($d->safe_psql('postgres', "SELECT count(*) FROM redsem_queues WHERE defined_in = 'redis'"),
	$a->safe_psql('postgres', "SELECT count(*) FROM redsem_queues WHERE defined_in = 'redis'"),
	'4. D applies the fleet queues (its own long list does not stop its keeper reading them)');
$b->safe_psql('postgres', "SELECT redsem_create_queue('after_d', 'active_statements=1')");
ok(defined RedsemTest::wait_until(5, sub { $d->safe_psql('postgres', "SELECT count(*) FROM redsem_queues WHERE name = 'after_d'") eq '1' }),
	'4. a queue created after D started reaches D');

# --- 5. statistics: queue entries are reserved per (prefix, name) ---
my @sql = map { "SET redsem.key_prefix = 'p$_:'; SELECT redsem_acquire('queue:l01" . ('x' x 57) . "', 1) IS NOT NULL; SELECT redsem_release_all();" } 1 .. 120;
($ret, $out, $err) = $d->psql('postgres', join("\n", @sql));
note "acquires under 120 prefixes: ret $ret err " . substr($err // '', 0, 300);
my $rows = $d->safe_psql('postgres', "SELECT count(*) FROM redsem_stats");
note "redsem_stats rows with max_tracked_semaphores = 4 and 36 queues: $rows";
cmp_ok($rows, '<=', 16 + 64 + 1, '5. redsem_stats stays within max_tracked_semaphores + the queues\' reserved room');

# --- 6. ordinary roles ---
$a->safe_psql('postgres', 'CREATE ROLE mallory LOGIN');
($ret, $out, $err) = $a->psql('postgres', "SELECT server, cluster_name FROM redsem_queue_servers()", extra_params => [ '-U', 'mallory' ]);
like($err, qr/permission denied for function redsem_queue_servers/, '6. an ordinary role cannot list the servers (it names hosts)');
($ret, $out, $err) = $a->psql('postgres', "SELECT redsem_acquire('\@x', 1)", extra_params => [ '-U', 'mallory' ]);
note "mallory acquires '\@x': ret $ret $err";

# --- 7. the servers' list: cluster_name as set (the test sets it on the command line) ---
ok(defined RedsemTest::wait_until(10, sub {
			$b->safe_psql('postgres', "SELECT count(*) FROM redsem_queue_servers() WHERE cluster_name = 'r2_a' AND NOT standby") eq '1' }),
	'7. A is listed with its cluster_name');

# --- 8. the Redis ACL of docs/deployment.md ---
my $dep = slurp_file("$FindBin::RealBin/../docs/deployment.md");
my ($acl_text) = $dep =~ /^ {4}ACL SETUSER redsem on (.*?)\n\n/ms;
my @acl = grep { /^\+/ } split /\s+/, ($acl_text // '');
note 'ACL of docs/deployment.md: ' . join(' ', @acl);
$redis->cli('ACL', 'SETUSER', 'rs_doc', 'on', '>Doc-S3cret', 'resetkeys', '~redsem:*', 'resetchannels', '-@all', @acl);
my $pwf = PostgreSQL::Test::Utils::tempdir_short() . '/doc.pw';
PostgreSQL::Test::Utils::append_to_file($pwf, "Doc-S3cret\n");
chmod 0600, $pwf;
($ret, $out, $err) = $b->psql('postgres', qq{SET redsem."user" = 'rs_doc'; SET redsem.password_file = '$pwf'; SELECT redsem_create_queue('aclq', 'active_statements=2');});
note "create as the documented ACL user: ret $ret err $err";
note 'Redis after: aclq = ' . def_of('aclq') . ', # = ' . ($redis->cli('HGET', 'redsem:{queues}', '#') // '');
is($ret, 0, '8. the documented ACL lets redsem_create_queue run');
is(($ret == 0) ? 'stored' : def_of('aclq') eq '(none)' ? 'nothing' : 'stored', ($ret == 0) ? 'stored' : 'nothing',
	'8. a create that fails leaves nothing stored');

$proxy->stop;
$_->stop foreach ($a, $b, $c, $d);
done_testing();
