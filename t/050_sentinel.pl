# redsem through Redis Sentinel: a real primary, a replica and three
# sentinels on loopback.  redsem finds the primary through the sentinels,
# follows a failover (SENTINEL FAILOVER, and a SIGKILL of the primary) under
# a concurrent load, and never lets more than the limit in at once with
# redsem.grant_replicas = 1 - counted independently of redsem, from the
# periods the sessions themselves log.  Two of the four rounds (each way,
# with the option on and off) run unless REDSEM_FAILOVER_ROUNDS says others
# (RedsemTest::Failover::rounds), and the figures (over-admissions, seconds
# without a grant) are printed; bench/failover.sh collects them.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use RedsemTest;
use Test::More;
use Time::HiRes qw(time usleep);

my $LIMIT = 2;
my $SESSIONS = 6;
my $ROUND_S = $ENV{REDSEM_FAILOVER_ROUND_S} // 18;
my $TRIGGER_AFTER_S = 2;
# replicas of the primary: two, as docs/deployment.md recommends with
# redsem.grant_replicas = 1 (bench/failover.sh also runs 1)
my $NREPLICAS = $ENV{REDSEM_SENTINEL_REPLICAS} // 2;

###########################################################################
note "a primary, $NREPLICAS replica(s) and three sentinels on loopback";

# (a replica resynchronises at once: no diskless-sync delay)
my @fast = ('repl-diskless-sync-delay 0');
my $primary = RedsemTest::TcpServer->new(name => 'redis_a', conf => [@fast]);
my @replicas = map {
	RedsemTest::TcpServer->new(name => 'redis_' . chr(ord('a') + $_),
		conf => [ @fast, 'replicaof 127.0.0.1 ' . $primary->port ])
} 1 .. $NREPLICAS;
my $replica = $replicas[0];
my @data = ($primary, @replicas);

# key => value of a flat "key\nvalue\n..." reply of redis-cli
sub pairs
{
	my ($out) = @_;
	my @l = split /\n/, ($out // '');
	my %h;
	while (@l >= 2) { my $k = shift @l; $h{$k} = shift @l; }
	return \%h;
}

# INFO replication of a server, as a hash
sub replication
{
	my ($srv) = @_;
	my %h = map { /^(\w+):(.*?)\r?$/ ? ($1 => $2) : () } split /\n/, ($srv->cli('INFO', 'replication') // '');
	return \%h;
}

# The data server that is the primary now, with all its replicas online and
# in sync (undef while there is none)
sub current_primary
{
	foreach my $srv (@data)
	{
		next unless $srv->pid;
		my $r = replication($srv);
		next unless ($r->{role} // '') eq 'master';
		my $online = grep { ($r->{"slave$_"} // '') =~ /state=online/ } 0 .. $#data;
		return $srv if $online == $NREPLICAS
		  && !grep { $_ != $srv && (replication($_)->{master_link_status} // '') ne 'up' } @data;
	}
	return undef;
}

ok(wait_until(30, sub { !grep { (replication($_)->{master_link_status} // '') ne 'up' } @replicas }),
	'the replicas are in sync with the primary');

my @sentinels = map {
	RedsemTest::TcpServer->new(
		name => "sentinel$_",
		sentinel => 1,
		conf => [
			'sentinel monitor mymaster 127.0.0.1 ' . $primary->port . ' 2',
			'sentinel down-after-milliseconds mymaster 1000',
			'sentinel failover-timeout mymaster 4000',
			'sentinel parallel-syncs mymaster 1',
		])
} 1 .. 3;

# True once every sentinel agrees on primary $srv with its replicas, and
# knows the two other sentinels
sub sentinels_settled
{
	my ($srv) = @_;
	foreach my $s (@sentinels)
	{
		my $m = pairs($s->cli('SENTINEL', 'master', 'mymaster'));
		return 0 unless ($m->{port} // 0) == $srv->port
		  && ($m->{'num-slaves'} // 0) >= $NREPLICAS
		  && ($m->{'num-other-sentinels'} // 0) == 2
		  && ($m->{flags} // '') eq 'master';
		# a replica listed as down (the one killed, back now) is not ready yet
		my $r = $s->cli('SENTINEL', 'replicas', 'mymaster') // '';
		return 0 if $r =~ /s_down|disconnected/;
	}
	return 1;
}
ok(wait_until(60, sub { sentinels_settled($primary) }),
	'the sentinels monitor the primary and know its replica and each other');

my $sentinel_list = join(',', map { $_->address } @sentinels);
my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->append_conf('postgresql.conf', <<"EOC");
shared_preload_libraries = 'redsem'
redsem.sentinels = '$sentinel_list'
redsem.sentinel_master = 'mymaster'
redsem.host = '127.0.0.1'
redsem.port = 1
max_connections = 40
log_min_messages = warning
EOC
$node->append_conf('postgresql.conf', connection_mode_conf());
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION redsem');

###########################################################################
note 'finding the primary, and the errors when it cannot be found';

is($node->safe_psql('postgres',
		q{SELECT redsem_acquire_xact('where', 1) IS NOT NULL, (SELECT permits_held FROM redsem_semaphore('where'));}),
	't|1', 'a slot is taken through the sentinels (redsem.host points nowhere)');
# scripts run by a server (rejected ones included)
sub script_calls
{
	my ($srv) = @_;
	my $s = $srv->cli('INFO', 'commandstats') // '';
	return $s =~ /cmdstat_fcall:calls=(\d+)/ ? $1 : 0;
}
ok(script_calls($primary) > 0 && script_calls($replica) == 0,
	'the slot is taken on the primary the sentinels name, never on the replica');

# connections the sentinels accepted so far (each count asks each once)
sub sentinel_connections
{
	my $n = 0;
	for my $s (@sentinels)
	{
		my $i = $s->cli('INFO', 'stats') // '';
		$n += $1 if $i =~ /total_connections_received:(\d+)/;
	}
	return $n;
}
my $asked_before = sentinel_connections();
$node->safe_psql('postgres', q{SELECT redsem_acquire_xact('where', 1);}) for 1 .. 10;
my $asked = sentinel_connections() - $asked_before - scalar(@sentinels);
if (broker_mode())
{
	# (the broker found the primary once; it asks again only for a new connection)
	ok($asked <= 1, "behind the broker, 10 new sessions ask the sentinels nothing ($asked connections)");
}
else
{
	ok($asked >= 10, "in direct mode each new session asks a sentinel ($asked connections)");
}

###########################################################################
note 'a reload that changes no redsem setting: connections kept';

my $keep = RedsemTest::Session->new($node, name => 'keep');
$keep->query_ok(q{SELECT redsem_release('keep', redsem_acquire('keep', 1));});
SKIP:
{
	skip 'behind the broker the sentinels are asked every second anyway', 2 if broker_mode();
	# (connections the primary accepted: each count is one of them)
	my $accepted = sub { (($primary->cli('INFO', 'stats') // '') =~ /total_connections_received:(\d+)/)[0] };
	# (the keeper links at one of its first rounds, after asking the
	# sentinels: counted from then, what follows is the reload's doing)
	ok(wait_until(10, sub {
				scalar(grep { /cmd=fcall/ } split /\n/, ($primary->cli('CLIENT', 'LIST') // '')) >= 2;
			}), 'the session and the keeper are linked to the primary');
	my $before = $accepted->();
	$node->safe_psql('postgres', "ALTER SYSTEM SET work_mem = '5MB'; SELECT pg_reload_conf();");
	RedsemTest::sleep_full(1);
	$keep->query_ok(q{SELECT redsem_release('keep', redsem_acquire('keep', 1));});
	is($accepted->() - $before - 1, 0,
		'a reload that changes no redsem setting: no connection is made anew (the session\'s, the keeper\'s)');
	$node->safe_psql('postgres', 'ALTER SYSTEM RESET work_mem; SELECT pg_reload_conf();');
}

note 'a reload that lists the sentinels anew (the same deployment): slots kept';
# (a DBA adding a sentinel to the list, or removing one, changes the
# settings, not the data: t/110 has the other cases)
is($keep->query_ok(q{SELECT redsem_acquire('relist', 1, '2 s') IS NOT NULL;}), 't',
	'a session holds a slot with a 2 s lease');
my $relisted = join(',', reverse map { $_->address } @sentinels[ 1 .. $#sentinels ]);
$node->safe_psql('postgres', "ALTER SYSTEM SET redsem.sentinels = '$relisted'; SELECT pg_reload_conf();");
$keep->query_ok('SELECT 1;');
RedsemTest::sleep_full(5);
is($keep->query_ok(q{SELECT count(*) FROM redsem_held() WHERE keeper_error IS NULL;}), '1',
	'one sentinel left out of the list, the others in another order: the slot is kept alive past its lease');
is($keep->query_ok(q{SELECT redsem_release_all();}), '1', '... and its session releases it');
$node->safe_psql('postgres', 'ALTER SYSTEM RESET redsem.sentinels; SELECT pg_reload_conf();');
$keep->quit;

# the error of $sql under $settings (SET commands), with its SQLSTATE
sub error_of
{
	my ($settings, $sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres',
		"\\set VERBOSITY verbose\n$settings\n$sql", on_error_stop => 1);
	return $err;
}

my $closed = PostgreSQL::Test::Cluster::get_free_port();
like(error_of(qq{SET redsem.sentinels = 'nonsense';}, ''),
	qr/invalid value for parameter "redsem.sentinels".*\n.*Entry 1 is not of the form host:port/,
	'a malformed sentinel list is refused when set');
like(error_of(qq{SET redsem.sentinels = '127.0.0.1:1,[::1:2';}, ''),
	qr/Entry 2 is not of the form/, 'so is a malformed second entry');
like(error_of(qq{SET redsem.sentinel_master = 'other';}, q{SELECT redsem_acquire_xact('x', 1);}),
	qr/ERROR:  08001: could not connect to Redis at primary "other" of redsem\.sentinels\n.*the sentinels do not monitor a primary named "other"/,
	'an unknown primary name is a connection failure (08001) that says so');
like(error_of(qq{SET redsem.sentinels = '127.0.0.1:$closed';}, q{SELECT redsem_acquire_xact('x', 1);}),
	qr/ERROR:  08001: .*\n.*no sentinel of redsem.sentinels named the primary: Connection refused/,
	'no sentinel answering is a connection failure (08001)');
is($node->safe_psql('postgres',
		qq{SET redsem.sentinels = '127.0.0.1:$closed,$sentinel_list'; SELECT redsem_acquire_xact('x', 1) IS NOT NULL;}),
	't', 'a dead sentinel first in the list is passed over');
# a sentinel that accepts connections and never answers (a host that
# froze): the next one still gets its own connect timeout
my $mute = RedsemTest::TcpServer->new(name => 'mute_sentinel');
kill 'STOP', $mute->pid;
is($node->safe_psql('postgres',
		qq{SET redsem.connect_timeout = 400; SET redsem.sentinels = '} . $mute->address . qq{,$sentinel_list'; SELECT redsem_acquire_xact('x', 1) IS NOT NULL;}),
	't', 'a sentinel that does not answer, first in the list, leaves the others their time');
kill 'CONT', $mute->pid;
$mute->stop;
my $pw = $node->basedir . '/sentinel.pw';
PostgreSQL::Test::Utils::append_to_file($pw, "secret\n");
chmod 0644, $pw;
like(error_of(qq{SET redsem.sentinel_password_file = '$pw';}, q{SELECT redsem_acquire_xact('x', 1);}),
	qr/has group or world access/, 'a readable sentinel password file is refused');
chmod 0600, $pw;
like(error_of(qq{SET redsem.sentinel_password_file = '$pw';}, q{SELECT redsem_acquire_xact('x', 1);}),
	qr/28000: .*\n.*sentinel 127\.0\.0\.1:\d+: AUTH: ERR AUTH/, 'a password the sentinels do not expect fails the connection, naming the sentinel');
unlike(slurp_file($node->logfile), qr/secret/, 'the password is in no log line');
my $too_many = $NREPLICAS + 1;
like(error_of(qq{SET redsem.grant_replicas = $too_many; SET redsem.grant_replica_timeout = 100;},
		q{SELECT redsem_acquire_xact('wait2', 1);}),
	qr/08006: Redis at .* did not confirm a grant on its replicas\n.*$NREPLICAS of the $too_many replicas/,
	'a grant that too few replicas acknowledge fails with 08006');
is($node->safe_psql('postgres', q{SELECT permits_held FROM redsem_semaphore('wait2');}), '0',
	'and its slot is given back');
like(error_of(q{SET ROLE pg_monitor;}, q{SET redsem.sentinels = '';}),
	qr/permission denied to set parameter "redsem.sentinels"/,
	'an ordinary role cannot point redsem elsewhere');

###########################################################################
note 'failovers under load, counted independently of redsem';

$node->safe_psql('postgres', <<'EOS');
CREATE TABLE periods (round text, pid int, t0 float8, t1 float8);
CREATE TABLE failures (round text, pid int, at float8, state text, msg text);
CREATE PROCEDURE worker(round text, seconds float8, replicas int,
                        reconnect boolean, wait_s int)
LANGUAGE plpgsql AS $$
DECLARE
  stop float8 := extract(epoch FROM clock_timestamp()) + seconds;
  id text;
  t0 float8;
BEGIN
  PERFORM set_config('redsem.grant_replicas', replicas::text, false);
  WHILE extract(epoch FROM clock_timestamp()) < stop LOOP
    IF reconnect THEN
      -- setting a connection setting makes redsem connect anew, as a new
      -- session would: to the primary the sentinels name now
      PERFORM set_config('redsem.sentinel_master', 'mymaster', false);
    END IF;
    -- a holder whose slot the switch lost is stopped (57014): noted as
    -- "lost", and the round goes on
    BEGIN
      BEGIN
        id := redsem_acquire('fo_' || round, 2, lease => '3 s', wait => make_interval(secs => wait_s));
      EXCEPTION WHEN others THEN
        INSERT INTO failures VALUES (round, pg_backend_pid(),
          extract(epoch FROM clock_timestamp()), SQLSTATE, SQLERRM);
        PERFORM pg_sleep(0.02);
        id := '';
      END;
      IF id IS NULL THEN
        -- no slot within the wait
        INSERT INTO failures VALUES (round, pg_backend_pid(),
          extract(epoch FROM clock_timestamp()), 'wait', 'no slot within ' || wait_s || ' s');
      ELSIF id <> '' THEN
        t0 := extract(epoch FROM clock_timestamp());
        PERFORM pg_sleep(0.005 + random() * 0.01);
        INSERT INTO periods VALUES (round, pg_backend_pid(), t0,
          extract(epoch FROM clock_timestamp()));
        BEGIN
          PERFORM redsem_release('fo_' || round, id);
        EXCEPTION WHEN others THEN
          INSERT INTO failures VALUES (round, pg_backend_pid(),
            extract(epoch FROM clock_timestamp()), SQLSTATE, 'release: ' || SQLERRM);
        END;
      END IF;
    EXCEPTION WHEN query_canceled THEN
      INSERT INTO failures VALUES (round, pg_backend_pid(),
        extract(epoch FROM clock_timestamp()), 'lost', SQLERRM);
    END;
    COMMIT;
  END LOOP;
END $$;
EOS

# The sockets a process holds open (their inode numbers)
sub sockets_of
{
	my ($pid) = @_;
	my @socks;
	opendir(my $dh, "/proc/$pid/fd") or return ();
	foreach my $fd (readdir $dh)
	{
		my $l = readlink("/proc/$pid/fd/$fd") // '';
		push @socks, $1 if $l =~ /^socket:\[(\d+)\]$/;
	}
	closedir $dh;
	return @socks;
}

# Seconds from $since until a fresh session gets the idle semaphore of
# round $label (each try a new connection; calls failing during the switch
# are tried again)
sub fresh_idle_wait
{
	my ($label, $replicas, $since) = @_;
	my $got = wait_until(60, sub {
			my ($rc, $out) = $node->psql('postgres',
				qq{SET redsem.grant_replicas = $replicas;
				   SELECT redsem_acquire_xact('idle_$label', 1, wait => '1 s') IS NOT NULL;});
			return ($out // '') eq 't';
	});
	return defined $got ? time - $since : -1;
}

my @report;
foreach my $round (RedsemTest::Failover::rounds())
{
	my ($how, $replicas) = @$round;
	my $label = "${how}_$replicas";
	my $old;
	# each round uses a key prefix of its own, as a deployment that always
	# ran with its grant_replicas would: grants made before it without
	# waiting for a replica (the checks above, a round with 0) make every
	# later change of primary start a grace (I15; t/083 tests it)
	$node->append_conf('postgresql.conf', "redsem.key_prefix = 'round_$label:'\n");
	$node->reload;
	wait_until(10, sub { $node->safe_psql('postgres', 'SHOW redsem.key_prefix') eq "round_$label:" });
	ok(wait_until(60, sub { $old = current_primary(); defined $old && sentinels_settled($old) }),
		"$label: a primary with an in-sync replica, known to every sentinel");
	my @sessions = map { RedsemTest::Session->new($node, name => "w$_") } 1 .. $SESSIONS;
	# half the sessions keep their connection, half connect anew each time
	my $i = 0;
	# callers wait 10 s; after a SIGKILL, 10 s plus the sentinels' time to
	# see the primary down and elect (issue 48 C: "the same, plus the
	# sentinels' own detection time")
	my $wait_s = $how eq 'kill' ? 12 : 10;
	$_->send(qq{CALL worker('$label', $ROUND_S, $replicas, } . ($i++ % 2 ? 'true' : 'false') . ", $wait_s);")
	  foreach @sessions;
	# the semaphore a fresh session asks for after the switch: used once
	# before it, idle since (with the round's grant_replicas: a grant that
	# waits for no replica just before a failover makes the next primary
	# start a grace, I15)
	$node->safe_psql('postgres', qq{SET redsem.grant_replicas = $replicas;
		SELECT redsem_release('idle_$label', redsem_acquire('idle_$label', 1));});
	# behind the broker: a session that took a slot before the switch and
	# sits idle through it (its link to the broker, as sockets of its process)
	# (with the round's grant_replicas, as the fresh session's: see above)
	my $idle = RedsemTest::Session->new($node, name => 'idle');
	$idle->query_ok(qq{SET redsem.grant_replicas = $replicas;});
	$idle->query_ok(qq{SELECT redsem_acquire_xact('idle_link_$label', 1);});
	my $idle_pid = $idle->query_ok('SELECT pg_backend_pid();');
	my %idle_socks = map { $_ => 1 } sockets_of($idle_pid);
	usleep($TRIGGER_AFTER_S * 1e6);
	my $trigger = time;
	if ($how eq 'failover')
	{
		$sentinels[0]->cli('SENTINEL', 'FAILOVER', 'mymaster');
	}
	else
	{
		$old->kill9;
	}
	my $new;
	ok(wait_until(30, sub { ($new) = grep { $_ != $old && (replication($_)->{role} // '') eq 'master' } @data; defined $new }),
		"$label: a replica becomes the primary");
	ok(wait_until(30, sub { !grep { (pairs($_->cli('SENTINEL', 'master', 'mymaster'))->{port} // 0) != $new->port } @sentinels }),
		"$label: every sentinel names the new primary");
	my $named = time;
	# the killed server comes back now (as a supervisor that restarts it
	# after a pause would): the sentinels turn it into a replica
	$old->start if $how eq 'kill';
	my $fresh = fresh_idle_wait($label, $replicas, $named);
	if (broker_mode() && $how eq 'failover')
	{
		# (the broker asks the sentinels every second: SENTINEL_RECHECK_MS)
		sleep_full(2);
		$idle->query_ok(qq{SELECT redsem_acquire_xact('idle_link_$label', 1);});
		my @new = grep { !$idle_socks{$_} } sockets_of($idle_pid);
		ok(scalar(@new) > 0,
			"$label: the idle session's link was ended at the switch: its next acquire came on a new link (and checks the era, I15)");
	}
	$idle->quit;
	note sprintf('%s: a fresh session got the idle semaphore %.2f s after the sentinels named the new primary', $label, $fresh);
	ok(wait_until(60, sub { my $p = current_primary(); defined $p && sentinels_settled($p) }),
		"$label: the old primary is back, and a primary has in-sync replicas again")
	  if $how eq 'kill';
	my $all_done = 1;
	foreach my $s (@sessions)
	{
		my ($out, $err) = $s->wait_done($ROUND_S + 60);
		$all_done = 0 unless defined $out && ($err // '') eq '';
		$s->quit;
	}
	ok($all_done, "$label: every session ended its round (nothing hung)");

	my $rows = $node->safe_psql('postgres',
		qq{SELECT 'fo', t0, t1 FROM periods WHERE round = '$label';});
	my @periods = map { [ split /\|/ ] } split /\n/, $rows;
	my ($max, $over) = RedsemTest::Failover::sweep(\@periods, $LIMIT);
	my $window = $ROUND_S - $TRIGGER_AFTER_S;
	my $gap = RedsemTest::Failover::longest_gap(\@periods, $trigger, $trigger + $window);
	my $states = $node->safe_psql('postgres',
		qq{SELECT coalesce(string_agg(DISTINCT state, ','), '') FROM failures WHERE round = '$label';});
	my $failed = RedsemTest::Failover::failures($node, $label);
	my $nfail = $failed->{acquires} + $failed->{releases} + $failed->{stopped};
	ok(wait_until(60, sub {
				($node->psql('postgres',
					qq{SET redsem.grant_replicas = $replicas; SELECT redsem_acquire_xact('after_$label', 1) IS NOT NULL;}))[1] eq 't';
			}), "$label: grants resume after the switch");
	like($states, qr/^(08006)?(,?lost)?(,?wait)?$/, "$label: calls during the switch fail with 08006 only, lose a slot, or wait ($nfail failures)");
	if ($replicas)
	{
		is($over, 0, "$label: never more than $LIMIT inside at once (with redsem.grant_replicas = 1)");
		# issue 48 C: with N + 1 replicas, a failover is ridden through
		# within a caller's wait (one replica leaves the new primary without
		# one until the old primary has resynchronised)
		is($failed->{acquires}, 0, "$label: no caller with $wait_s s of wait gets an error or no slot ($NREPLICAS replicas)")
		  if $NREPLICAS >= 2;
	}
	note $node->safe_psql('postgres',
		qq{SELECT state, left(msg, 200), count(*), round(min(at - $trigger)::numeric, 2), round(max(at - $trigger)::numeric, 2)
		   FROM failures WHERE round = '$label' GROUP BY 1, 2;});
	push @report, RedsemTest::Failover::report_line("$how/$NREPLICAS", $replicas,
		scalar(@periods), $max, $over, $gap, $window, $failed, $fresh);
	note $report[-1];
}

RedsemTest::Failover::publish(@report);

node_log_is_clean($node, 'no crash in the server log');
$node->stop;
done_testing();
