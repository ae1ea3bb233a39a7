
# 106_sentinel_password_rotation.pl - a DBA rotates the sentinels' password
# (redsem.sentinel_password_file, then ACL SETUSER on the sentinel) while
# sessions are linked.  Behind the broker, a target asks its sentinels where
# the primary is once a second with the password its links' headers carried:
# refused, the broker says so once and ends the target's links, so that each
# backend links again with what its file says now (before this, the asks
# failed silently every second for as long as the sessions stayed, and the
# broker's check that the primary had not moved was dead).  Every session is
# served throughout, in either connection mode.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;

my $OLD = 'Sentinel-Old-58k';
my $NEW = 'Sentinel-New-27w';

my $primary = RedsemTest::TcpServer->new(name => 'srot_primary');
my $sentinel = RedsemTest::TcpServer->new(
	name => 'srot_sentinel',
	sentinel => 1,
	conf => [ 'sentinel monitor mymaster 127.0.0.1 ' . $primary->port . ' 1' ]);
ok(defined wait_until(30, sub {
			($sentinel->cli('SENTINEL', 'get-master-addr-by-name', 'mymaster') // '') =~ /\b\Q${\ $primary->port}\E\b/
		}), 'the sentinel monitors the primary');
is($sentinel->cli('ACL', 'SETUSER', 'default', 'resetpass', ">$OLD"), 'OK', 'the sentinel asks for a password');

# The sentinel's cli, with the password in force
my $sentinel_pw = $OLD;
sub sentinel_cli { return $sentinel->cli('--no-auth-warning', '-a', $sentinel_pw, @_); }
# Error replies the sentinel has sent (a refused AUTH is one)
sub sentinel_errors
{
	my ($n) = (sentinel_cli('INFO', 'stats') // '') =~ /total_error_replies:(\d+)/;
	return $n // -1;
}

my $dir = PostgreSQL::Test::Utils::tempdir_short();
my $pwfile = "$dir/sentinel.password";
# (write_password_file: a rename, never half written)
sub write_password { write_password_file($pwfile, $_[0]); return; }
write_password($OLD);

my $node = PostgreSQL::Test::Cluster->new('srot');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'redsem'
redsem.sentinels = '" . $sentinel->address . "'
redsem.sentinel_master = 'mymaster'
redsem.sentinel_password_file = '$pwfile'
redsem.host = '127.0.0.1'
redsem.port = 1
max_connections = 30
log_min_messages = warning
" . connection_mode_conf());
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION redsem');
my $log_start = -s $node->logfile;

my $a = RedsemTest::Session->new($node, name => 'a');
my $idle = RedsemTest::Session->new($node, name => 'idle');
is($a->query_ok(q{SELECT redsem_release('srot', redsem_acquire('srot', 1));}), 't',
	'a takes and gives back a slot through the sentinel, with the old password');
$idle->query_ok(q{SELECT count(*) FROM redsem_holders('srot');});

###########################################################################
note 'the sentinels\' password rotated: file first, then the sentinel';

write_password($NEW);
is(sentinel_cli('ACL', 'SETUSER', 'default', 'resetpass', ">$NEW"), 'OK', 'the sentinel now takes only the new password');
$sentinel_pw = $NEW;

SKIP:
{
	skip 'the broker asks the sentinels again each second; a session in direct mode asks at each new connection', 2
	  unless RedsemTest::broker_mode();
	ok(defined wait_until(10, sub {
				slurp_file($node->logfile, $log_start) =~ /the sentinels refused a target's password/
			}), 'the broker says once that the sentinels refused the password its links carried');
	my $before = sentinel_errors();
	RedsemTest::sleep_full(3);
	is(sentinel_errors(), $before, '... and asks with it no more (3 s: no refused AUTH)');
}
my ($out, $err) = $a->query(q{SELECT redsem_release('srot', redsem_acquire('srot', 1));});
is("$out|$err", 't|', 'a, linked before the rotation, is served');
($out, $err) = $idle->query(q{SELECT redsem_release('srot', redsem_acquire('srot', 1));});
is("$out|$err", 't|', 'so is a session that made no call since');
my $c = RedsemTest::Session->new($node, name => 'c');
is($c->query_ok(q{SELECT redsem_acquire('srot_wait', 1, '30 s') IS NOT NULL;}), 't', 'a new session holds srot_wait');
$a->send(q{SELECT redsem_acquire('srot_wait', 1, '30 s', wait => '10 s') IS NOT NULL;});
RedsemTest::sleep_full(1);
$c->query_ok(q{SELECT redsem_release_all();});
($out, $err) = $a->wait_done(20);
is("$out|$err", 't|', 'a waits in line and gets the slot');
$a->query_ok(q{SELECT redsem_release_all();});

###########################################################################
note 'the sentinel\'s password changed, the file not: backends do not link again at every ask';

# (the broker's asks keep being refused; its links are ended once, and then
# no more often than every 30 s, not each second: each new link makes the
# next acquire check the primary's era, INFO replication inside the script)
my $THIRD = 'Sentinel-Third-9z';
is(sentinel_cli('ACL', 'SETUSER', 'default', 'resetpass', ">$THIRD"), 'OK', 'the sentinel takes another password, which no file has');
$sentinel_pw = $THIRD;
RedsemTest::sleep_full(2);
$primary->cli('CONFIG', 'RESETSTAT');
($out, $err) = $a->query(q{DO $$ BEGIN FOR i IN 1..30 LOOP
	PERFORM redsem_release('srot', redsem_acquire('srot', 1)); PERFORM pg_sleep(0.2); END LOOP; END $$;
	SELECT 'done';});
is("$out|$err", 'done|', 'a keeps being served for 6 s meanwhile (its data connection works)');
my ($era_checks) = ($primary->cli('INFO', 'commandstats') // '') =~ /cmdstat_info:calls=(\d+)/;
note "era checks while the asks were refused: " . ($era_checks // 0);
cmp_ok($era_checks // 0, '<=', 5, '... linking again once or so, not at every ask (that was 9 here)');
is(sentinel_cli('ACL', 'SETUSER', 'default', 'resetpass', ">$NEW"), 'OK', 'the sentinel takes the file\'s password again');
$sentinel_pw = $NEW;

unlike(slurp_file($node->logfile, $log_start), qr/\Q$OLD\E|\Q$NEW\E|\Q$THIRD\E/, 'no password is in the server log');
$_->quit for ($a, $idle, $c);
node_log_is_clean($node);
$node->stop;
$sentinel->stop;
$primary->stop;
done_testing();
